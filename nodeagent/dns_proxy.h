/* The node agent's DNS resolver for sandboxes: each sandbox's /etc/resolv.conf names
 * an address of the host side of its veth, where this proxy answers. Names the sandbox's policy
 * allows are asked of the upstream resolvers, and the addresses of the answer are handed to the
 * agent (dns_allow_fn), which puts them in the sandbox's nftables set before the sandbox sees
 * them; other names get REFUSED without any upstream query.
 *
 * One thread serves every sandbox with epoll over non-blocking sockets. Everything a sandbox
 * sends is hostile input, parsed with ldns (dns_proxy_msg.c); what it may cost is bounded per
 * sandbox (dns_proxy_limits), so that a sandbox flooding its resolver with garbage or
 * queries delays only its own lookups, and the agent's memory stays bounded whatever arrives.
 *
 * No protobuf and no sandbox registry here: the agent calls dns_proxy_add when it has made a
 * sandbox's network and dns_proxy_remove before it takes that network down. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "error.h"
#include "netpolicy.h"

/* Upstream resolvers a proxy asks, in order (a query tries each at most once). */
#define DNS_PROXY_UPSTREAMS_MAX 8
/* Bytes of a sandbox key (the agent's sandbox id), without its NUL. */
#define DNS_PROXY_KEY_MAX 128
/* The TTL handed to dns_allow_fn: the record's, raised to the floor (a set entry that outlives
 * a short TTL costs nothing, one that dies before the sandbox's own cache does breaks its
 * connections) and cut to the cap (the answer the sandbox gets has its TTLs cut to the cap as
 * well, so no cache of the sandbox's keeps an address longer than its set entry). */
#define DNS_PROXY_TTL_FLOOR_S 30
#define DNS_PROXY_TTL_CAP_S   86400
/* Addresses of one answer handed over (and left in the answer the sandbox gets): the A/AAAA
 * records past it are taken out of that answer. */
#define DNS_PROXY_ADDRS_MAX 64
/* CNAME records followed from the asked name through an answer section. */
#define DNS_PROXY_CNAME_MAX 16

typedef struct dns_proxy dns_proxy;

/* One address of an allowed answer. */
typedef struct dns_addr {
        int family;       /* AF_INET or AF_INET6 */
        uint8_t addr[16]; /* network byte order; 4 bytes used for AF_INET */
        uint32_t ttl_s;   /* DNS_PROXY_TTL_FLOOR_S..DNS_PROXY_TTL_CAP_S */
} dns_addr;

/* Called on the proxy's thread with every address of an allowed answer of an ALLOWLIST
 * sandbox: the A and AAAA records of the asked name in the answer section, following the
 * CNAME chain that starts at the asked name (DNS_PROXY_CNAME_MAX hops; the chain's targets
 * need not be allowed names themselves: they are what the allowed name resolves to). Only
 * addresses the proxy parsed itself; each once (the longest TTL if repeated). Not called for
 * answers without addresses, nor for OPEN sandboxes (their traffic is not filtered by
 * address).
 *
 * One call per answer, with all its addresses (n >= 1), rather than one per address: the agent
 * can then make one nftables transaction of them. The call comes before the answer is sent to
 * the sandbox, so the addresses are allowed by the time the sandbox can use them; it must
 * refresh the timeout of an address already in the set. key and name (the asked name, lower
 * case, no trailing dot) and addrs are borrowed for the call. Returning -1 sends the sandbox
 * SERVFAIL instead of the answer (the addresses could not be allowed).
 *
 * The callback runs on the thread that serves every sandbox: the time it takes is every
 * sandbox's latency, so it must be quick (a netlink message, not a process to spawn), and it
 * must not call dns_proxy_add/remove/free. The addresses are the answer's, whatever they
 * are (a name may resolve to 127.0.0.1 or a link-local address): the always-denied ranges
 * must be enforced before the set, or by the callback. */
typedef int (*dns_allow_fn)(void *data, const char *key, const char *name, const dns_addr *addrs,
                            size_t n);

/* The bounds of a proxy; 0 in a field means its default (DNS_PROXY_DEFAULT_*). */
typedef struct dns_proxy_limits {
        uint32_t upstream_timeout_ms; /* one attempt at one upstream */
        uint32_t max_inflight;        /* upstream queries per sandbox; past it, SERVFAIL */
        uint32_t max_inflight_total;  /* upstream queries of all sandboxes: one fd each, which
                                       * the agent's RLIMIT_NOFILE must leave room for */
        uint32_t rate_qps;            /* queries per second per sandbox (token bucket)... */
        uint32_t burst;               /* ...holding this many; past it, queries are dropped */
        uint32_t max_tcp_conns;       /* TCP connections per sandbox; past it, closed at once */
        uint32_t tcp_idle_ms;         /* a TCP connection with no query and no reply pending */
} dns_proxy_limits;

#define DNS_PROXY_DEFAULT_UPSTREAM_TIMEOUT_MS 2000
#define DNS_PROXY_DEFAULT_MAX_INFLIGHT        32
#define DNS_PROXY_DEFAULT_MAX_INFLIGHT_TOTAL  1024
#define DNS_PROXY_DEFAULT_RATE_QPS            200
#define DNS_PROXY_DEFAULT_BURST               400
#define DNS_PROXY_DEFAULT_MAX_TCP_CONNS       8
#define DNS_PROXY_DEFAULT_TCP_IDLE_MS         5000

/* Starts a proxy and its thread. upstreams[0..n) (1..DNS_PROXY_UPSTREAMS_MAX, IPv4 or IPv6
 * with a port; copied) are asked in order: an attempt that times out, fails or gets SERVFAIL or
 * REFUSED goes to the next one; when all have been tried the sandbox gets the last reply, or
 * SERVFAIL. A sandbox asking over UDP is asked for over UDP (a truncated reply goes back as it
 * is, and the sandbox asks again over TCP); one asking over TCP, over TCP. Every attempt has
 * a socket of its own (a random source port, connected: the kernel drops datagrams from any
 * other address) and a fresh random id from getrandom, and a reply counts only if its id and
 * question match. limits may be NULL (the defaults); fn may be NULL (no sandbox is
 * ALLOWLIST, or the tests). The caller frees *ret with dns_proxy_free. */
int dns_proxy_new(const struct sockaddr_storage *upstreams, size_t n,
                  const dns_proxy_limits *limits, dns_allow_fn fn, void *data, dns_proxy **ret,
                  cs_error **err);

/* Serves one sandbox: UDP and TCP on listen (e.g. 10.77.0.1:53, an address of the host side
 * of its veth), with its policy (copied): ALLOWLIST forwards the names the policy allows
 * (cs_netpolicy_domain_allowed, on the name lower-cased without its trailing dot) and refuses
 * others, including any name no policy entry can spell (a byte other than letters, digits,
 * '-' and '_' in a label); OPEN forwards every name; NONE and UNSPECIFIED (which the agent
 * resolves before) refuse every name. Only standard queries with one question of class IN,
 * and nothing else but an OPT record, are forwarded: another opcode gets NOTIMP, another class
 * or a zone transfer REFUSED, a meta type NOTIMP, an EDNS version other than 0 BADVERS, a
 * query that parses badly FORMERR (and one without even a header, or a response, nothing).
 * A query over DNS_MSG_QUERY_MAX (1232) bytes is dropped, or its TCP connection closed.
 * What the proxy forwards is the question alone, made anew: the sandbox's flags but RD, CD
 * and AD, its options and other records reach no upstream. Answers go back with the
 * sandbox's id, TTLs cut to DNS_PROXY_TTL_CAP_S, upstream's EDNS options dropped, no larger
 * than the sandbox's UDP size (else truncated, TC) or 65535 bytes over TCP.
 *
 * ifname, when not NULL, binds both sockets to that interface (SO_BINDTODEVICE): queries
 * reach them only through it. Without it any host interface can reach listen (Linux accepts
 * a packet for any local address on any interface), and another sandbox could spend this
 * sandbox's budget: the agent then needs its input rules to keep each veth to its own address.
 *
 * key (1..DNS_PROXY_KEY_MAX bytes, copied) names the sandbox to dns_allow_fn and
 * dns_proxy_remove. ALREADY_EXISTS for a key served already; the bind's error (e.g. address
 * in use) as cs_error_errno. Callable from any thread but the proxy's. */
int dns_proxy_add(dns_proxy *p, const char *key, const struct sockaddr *listen, socklen_t len,
                  const char *ifname, const cs_netpolicy *policy, cs_error **err);

/* Stops serving key: its sockets are closed, its queries in flight abandoned. Once it returns,
 * dns_allow_fn is not called for key any more (the agent may delete its set). An unknown key
 * is a no-op. Callable from any thread but the proxy's (there it aborts: it would wait for
 * itself for ever). */
void dns_proxy_remove(dns_proxy *p, const char *key);

/* Counters since dns_proxy_new, over all sandboxes (for the agent's metrics). */
typedef struct dns_proxy_stats {
        uint64_t queries;   /* read from sandboxes */
        uint64_t forwarded; /* sent upstream */
        uint64_t refused;   /* answered by the proxy: REFUSED, NOTIMP, FORMERR */
        uint64_t dropped;   /* unanswered: no DNS header, over the size cap or the rate */
        uint64_t servfail;  /* answered SERVFAIL by the proxy (no upstream answered, caps) */
        uint64_t upstream_timeouts; /* attempts that timed out */
        uint64_t upstream_bad;      /* upstream replies that failed the checks (ignored) */
        uint64_t tcp_refused;       /* connections closed over the cap */
} dns_proxy_stats;
void dns_proxy_get_stats(dns_proxy *p, dns_proxy_stats *ret);

/* Stops the thread and frees everything; NULL is a no-op. No other call may be running. */
void dns_proxy_free(dns_proxy *p);

/* The nameservers of a resolv.conf file (path), at most max of them in ret[0..*ret_n), port 53:
 * IPv4 and IPv6 (a scope, "fe80::1%eth0", kept), in the file's order; lines that do not parse
 * are skipped, as the C library skips them. FAILED_PRECONDITION when the file names none (the
 * C library would then ask 127.0.0.1: not a choice to make silently for sandboxes). */
int dns_read_resolv_conf(const char *path, struct sockaddr_storage *ret, size_t max, size_t *ret_n,
                         cs_error **err);
