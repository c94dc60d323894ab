/* The DNS messages of the sandboxes' resolver (dns_proxy.h), internal to it: what to do with a
 * query from a sandbox, whether an upstream reply answers it, and which addresses it allows.
 * Pure functions over bytes (ldns parses and writes every message; nothing here reads DNS by
 * hand), so that the unit tests and the fuzz target (tests/fuzz/fuzz_dns.c) run exactly the
 * code the proxy's loop runs, without sockets. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ldns/ldns.h>

#include "dns_proxy.h"
#include "netpolicy.h"

/* Bytes of a query from a sandbox, over either transport: a question and an OPT record need
 * far less, and the cap bounds what ldns spends on one (compression pointers included). */
#define DNS_MSG_QUERY_MAX 1232
/* A UDP reply: 512 bytes without EDNS; with it, the client's size, at most 1232 (the size
 * that needs no fragments, DNS flag day 2020). Larger replies go as truncated (TC). */
#define DNS_MSG_UDP_PLAIN 512
#define DNS_MSG_UDP_MAX   1232
/* A message over TCP (its 2-byte length prefix). */
#define DNS_MSG_TCP_MAX 65535
/* Bytes of a name's text, lower case, without the trailing dot. */
#define DNS_MSG_NAME_MAX 253

/* The question of a query the proxy forwards, as the sandbox asked it. */
typedef struct dns_question {
        uint16_t id;                     /* the sandbox's id, put back on the reply */
        ldns_rdf *qname;                 /* owned: the name as asked (its case kept) */
        char name[DNS_MSG_NAME_MAX + 1]; /* lower case, no trailing dot */
        ldns_rr_type qtype;
        bool rd, cd, ad;
        bool edns; /* the query had an OPT record: the reply gets one */
        bool do_bit;
        uint16_t udp_max; /* the largest UDP reply the sandbox takes */
} dns_question;

void dns_question_clear(dns_question *q);

typedef enum dns_action {
        DNS_DROP,    /* not worth an answer (no DNS header, or a response) */
        DNS_ANSWER,  /* the proxy's own answer is in out: REFUSED, NOTIMP, FORMERR, BADVERS */
        DNS_FORWARD, /* ask upstream: the question is in *ret_q, the query to send in out */
} dns_action;

/* A message the proxy made, the caller frees wire (malloc). */
typedef struct dns_out {
        uint8_t *wire;
        size_t len;
        uint8_t rcode; /* its rcode (DNS_ANSWER; the upper bits of an extended one dropped) */
} dns_out;

/* Decides about query wire[0..len) from a sandbox with that policy. DNS_FORWARD fills *ret_q
 * (the caller clears it) and out with the query to send upstream: made anew from the question
 * (the sandbox's other records, options and flags go nowhere), EDNS only if the sandbox used it
 * (its DO bit and its size up to DNS_MSG_UDP_MAX), id 0 (the caller stamps a random one).
 * DNS_ANSWER fills out with the answer to send back. On DNS_DROP (and memory failures inside
 * ldns, also DNS_DROP) nothing is to be freed. */
dns_action dns_msg_query(const uint8_t *wire, size_t len, const cs_netpolicy *policy,
                         dns_question *ret_q, dns_out *out);

/* The proxy's own answer to q: rcode (SERVFAIL) with q's question. -1 if ldns fails (memory). */
int dns_msg_error(const dns_question *q, uint8_t rcode, dns_out *out);

typedef enum dns_reply_action {
        DNS_REPLY_BAD,     /* not a reply to this query (id, question) or does not parse */
        DNS_REPLY_RETRY,   /* SERVFAIL or REFUSED: the next upstream may do better; out holds it */
        DNS_REPLY_FORWARD, /* out holds the answer for the sandbox, addrs what it allows */
} dns_reply_action;

/* Checks upstream reply wire[0..len) against the query it should answer (q, and up_id, the id
 * the attempt was sent with) and makes the answer for the sandbox in out: its id put back, TSIG
 * dropped, answer TTLs cut to DNS_PROXY_TTL_CAP_S, and no more than max bytes (a UDP answer
 * that is larger goes as its header and question with TC set; a TCP one as SERVFAIL). When
 * collect is true and the reply is NOERROR, the addresses of q's name (dns_allow_fn) go to
 * addrs[0..*ret_n) (DNS_PROXY_ADDRS_MAX); the answer then holds no A/AAAA record of that chain
 * that is not among them (those past the cap are taken out; a truncated answer holds none and
 * *ret_n is 0). */
dns_reply_action dns_msg_reply(const uint8_t *wire, size_t len, uint16_t up_id,
                               const dns_question *q, size_t max, bool collect,
                               dns_addr addrs[static DNS_PROXY_ADDRS_MAX], size_t *ret_n,
                               dns_out *out);
