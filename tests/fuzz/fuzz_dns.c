/* Fuzz target: the sandboxes' DNS resolver's messages (nodeagent/dns_proxy_msg.c), the code
 * every byte from a sandbox and from upstream goes through in the proxy's loop (dns_proxy.c
 * only moves bytes between sockets and these functions).
 *
 * Each input is, in turn:
 *   - a query from a sandbox with an ALLOWLIST policy (names, a wildcard) and with an OPEN
 *     one (dns_msg_query);
 *   - an upstream reply (dns_msg_reply) to the question it carries itself (the input with QR
 *     cleared and only its question section, as a query; a fixed question if that fails),
 *     sent with the id it carries, so that the checks past the id and the question are
 *     reached; over UDP (the question's size) and over TCP, collecting addresses and not.
 *
 * Beyond "no crash, no leak": a forwarded question is one the policy allows and the query for
 * upstream is that question alone, id 0; every message made parses again with ldns, is a
 * response with the sandbox's id (or a query, for upstream) and fits its transport; addresses
 * handed over are at most DNS_PROXY_ADDRS_MAX, AF_INET or AF_INET6, their TTLs within
 * [DNS_PROXY_TTL_FLOOR_S, DNS_PROXY_TTL_CAP_S], and the answer's TTLs at most the cap.
 *
 * Owns: this file. Touches nothing outside the process. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <ldns/ldns.h>

#include "dns_proxy_msg.h"
#include "error.h"
#include "netpolicy.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cs_netpolicy allow, open_policy;
static dns_question fixed; /* allowed.test A, EDNS 1232 */

#define CHECK(cond)                                                                                \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "fuzz_dns: %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        static const char *const domains[] = { "allowed.test", "*.wild.test", "example.com",
                                               "a-b.c-d.example.org" };
        static const uint8_t query[] = { 0x42, 0x42, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
                                         0x00, 0x00, 0x01, 0x07, 'a',  'l',  'l',  'o',  'w',
                                         'e',  'd',  0x04, 't',  'e',  's',  't',  0x00, 0x00,
                                         0x01, 0x00, 0x01, 0x00, 0x00, 0x29, 0x04, 0xd0, 0x00,
                                         0x00, 0x00, 0x00, 0x00, 0x00 };
        cs_error *err = NULL;
        dns_out out;

        (void)argc;
        (void)argv;
        if (cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, domains, ARRAY_SIZE(domains), NULL, 0, &allow,
                               &err) < 0 ||
            cs_netpolicy_parse(CS_EGRESS_OPEN, NULL, 0, NULL, 0, &open_policy, &err) < 0) {
                fprintf(stderr, "fuzz_dns: policy: %s\n", err->msg);
                abort();
        }
        CHECK(dns_msg_query(query, sizeof(query), &allow, &fixed, &out) == DNS_FORWARD);
        free(out.wire);
        return 0;
}

/* out parses, and is a response with id (or, for upstream, a query with id 0). */
static ldns_pkt *check_message(const dns_out *out, bool response, uint16_t id, size_t max)
{
        ldns_pkt *pkt = NULL;

        CHECK(out->wire && out->len >= LDNS_HEADER_SIZE && out->len <= max);
        CHECK(ldns_wire2pkt(&pkt, out->wire, out->len) == LDNS_STATUS_OK);
        CHECK(ldns_pkt_qr(pkt) == response);
        CHECK(ldns_pkt_id(pkt) == id);
        return pkt;
}

static void check_query(const uint8_t *data, size_t size, const cs_netpolicy *policy)
{
        dns_question q = { 0 };
        dns_out out = { 0 };
        ldns_pkt *pkt;
        const ldns_rr *qrr;

        switch (dns_msg_query(data, size, policy, &q, &out)) {
        case DNS_DROP:
                CHECK(!out.wire);
                return;
        case DNS_ANSWER:
                pkt = check_message(&out, true, ldns_read_uint16(data), DNS_MSG_UDP_PLAIN);
                CHECK(out.rcode != LDNS_RCODE_NOERROR);
                ldns_pkt_free(pkt);
                free(out.wire);
                return;
        case DNS_FORWARD:
                break;
        }
        CHECK(q.qname && q.id == ldns_read_uint16(data));
        CHECK(q.udp_max >= DNS_MSG_UDP_PLAIN && q.udp_max <= DNS_MSG_UDP_MAX);
        if (policy->egress == CS_EGRESS_ALLOWLIST)
                CHECK(cs_netpolicy_domain_allowed(policy, q.name));
        pkt = check_message(&out, false, 0, DNS_MSG_UDP_PLAIN);
        CHECK(ldns_pkt_qdcount(pkt) == 1 && ldns_pkt_ancount(pkt) == 0 &&
              ldns_pkt_nscount(pkt) == 0 && ldns_pkt_arcount(pkt) == 0);
        qrr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        CHECK(ldns_dname_compare(ldns_rr_owner(qrr), q.qname) == 0);
        CHECK(ldns_rr_get_type(qrr) == q.qtype && ldns_rr_get_class(qrr) == LDNS_RR_CLASS_IN);
        CHECK(ldns_pkt_edns(pkt) == q.edns);
        ldns_pkt_free(pkt);
        free(out.wire);
        dns_question_clear(&q);
}

static void check_reply(const uint8_t *data, size_t size, const dns_question *q, size_t max,
                        bool collect)
{
        dns_addr addrs[DNS_PROXY_ADDRS_MAX];
        dns_out out = { 0 };
        size_t n = 99;
        ldns_pkt *pkt;
        ldns_rr_list *ans;

        switch (dns_msg_reply(data, size, ldns_read_uint16(data), q, max, collect, addrs, &n,
                              &out)) {
        case DNS_REPLY_BAD:
                CHECK(!out.wire && n == 0);
                return;
        case DNS_REPLY_RETRY:
        case DNS_REPLY_FORWARD:
                break;
        }
        CHECK(n <= DNS_PROXY_ADDRS_MAX && (collect || n == 0));
        for (size_t i = 0; i < n; i++) {
                CHECK(addrs[i].family == AF_INET || addrs[i].family == AF_INET6);
                CHECK(addrs[i].ttl_s >= DNS_PROXY_TTL_FLOOR_S &&
                      addrs[i].ttl_s <= DNS_PROXY_TTL_CAP_S);
        }
        pkt = check_message(&out, true, q->id, max);
        ans = ldns_pkt_answer(pkt);
        for (size_t i = 0; ans && i < ldns_rr_list_rr_count(ans); i++)
                CHECK(ldns_rr_ttl(ldns_rr_list_rr(ans, i)) <= DNS_PROXY_TTL_CAP_S);
        ldns_pkt_free(pkt);
        free(out.wire);
}

/* The question data carries, read as a query: QR cleared, only the question counted. */
static bool own_question(const uint8_t *data, size_t size, dns_question *ret)
{
        uint8_t copy[DNS_MSG_QUERY_MAX];
        size_t len = size < sizeof(copy) ? size : sizeof(copy);
        dns_out out = { 0 };

        memcpy(copy, data, len);
        copy[2] &= 0x7f;
        memset(copy + 6, 0, 6);
        if (dns_msg_query(copy, len, &open_policy, ret, &out) != DNS_FORWARD) {
                free(out.wire);
                return false;
        }
        free(out.wire);
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        dns_question q = { 0 };
        const dns_question *use = &fixed;

        check_query(data, size, &allow);
        check_query(data, size, &open_policy);
        if (size < LDNS_HEADER_SIZE)
                return 0;
        if (own_question(data, size, &q))
                use = &q;
        check_reply(data, size, use, use->udp_max, true);
        check_reply(data, size, use, DNS_MSG_TCP_MAX, (data[size - 1] & 1) != 0);
        dns_question_clear(&q);
        return 0;
}
