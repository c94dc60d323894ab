/* The sandboxes' DNS resolver (nodeagent/dns_proxy.c, dns_proxy_msg.c) against a fake upstream
 * resolver on 127.0.0.1 (a thread answering with packets ldns builds) and a silent one, with
 * "sandboxes" listening on other 127.0.0.x addresses: policy decisions, the addresses handed to
 * the callback, CNAME chains, TTLs, truncation, hostile queries and replies, a flood of one
 * sandbox next to another's lookups, removal with queries in flight, timeouts and every cap.
 * Then the message functions alone, on packets made here.
 *
 * Owns: the sockets and threads it starts, and one temporary file (resolv.conf) it removes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ldns/ldns.h>

#include "dns_proxy.h"
#include "dns_proxy_msg.h"
#include "netpolicy.h"
#include "util.h"

/* --- a fake upstream resolver ----------------------------------------------------------- */

#define FAKE_DELAYED_MAX 64
#define FAKE_NAMES_MAX   64
#define FAKE_HELD_MAX    16

typedef struct fake_delayed {
        int64_t at_ms;
        struct sockaddr_storage to;
        socklen_t to_len;
        uint8_t *wire;
        size_t len;
} fake_delayed;

typedef struct fake_dns {
        int udp, tcp, stop;
        struct sockaddr_storage addr;
        bool silent; /* reads queries, answers none */
        pthread_t thread;
        pthread_mutex_t lock;
        struct {
                char name[256];
                unsigned n;
        } asked[FAKE_NAMES_MAX];
        size_t n_asked;
        fake_delayed delayed[FAKE_DELAYED_MAX];
        size_t n_delayed;
        int held[FAKE_HELD_MAX]; /* a silent fake's TCP connections */
        size_t n_held;
} fake_dns;

static int64_t now_ms(void)
{
        return cs_now_monotonic_ms();
}

static void sleep_ms(int ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

        nanosleep(&ts, NULL);
}

/* A port free for both UDP and TCP on addr (in network byte order). */
static uint16_t free_port(const char *addr)
{
        for (int tries = 0; tries < 50; tries++) {
                struct sockaddr_in sin = { .sin_family = AF_INET };
                socklen_t len = sizeof(sin);
                int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                bool ok;

                inet_pton(AF_INET, addr, &sin.sin_addr);
                ok = bind(u, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
                     getsockname(u, (struct sockaddr *)&sin, &len) == 0 &&
                     bind(t, (struct sockaddr *)&sin, sizeof(sin)) == 0;
                close(u);
                close(t);
                if (ok)
                        return sin.sin_port;
        }
        fail_msg("no free port on %s", addr);
        return 0;
}

static struct sockaddr_in sin_of(const char *addr, uint16_t port)
{
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = port };

        assert_int_equal(inet_pton(AF_INET, addr, &sin.sin_addr), 1);
        return sin;
}

static void lower(char *s)
{
        for (; *s; s++) {
                if (*s >= 'A' && *s <= 'Z')
                        *s = (char)(*s - 'A' + 'a');
        }
}

static void rr_add(ldns_pkt *pkt, const char *text)
{
        ldns_rr *rr = NULL;

        assert_int_equal(ldns_rr_new_frm_str(&rr, text, 0, NULL, NULL), LDNS_STATUS_OK);
        assert_true(ldns_pkt_push_rr(pkt, LDNS_SECTION_ANSWER, rr));
}

static uint8_t *pkt_wire(const ldns_pkt *pkt, size_t *len)
{
        uint8_t *wire = NULL;

        assert_int_equal(ldns_pkt2wire(&wire, pkt, len), LDNS_STATUS_OK);
        return wire;
}

/* A reply to query carrying its question, rcode and the records of name (see below). */
static ldns_pkt *reply_new(const ldns_pkt *query, uint8_t rcode)
{
        ldns_pkt *r = ldns_pkt_new();

        ldns_pkt_set_id(r, ldns_pkt_id(query));
        ldns_pkt_set_qr(r, true);
        ldns_pkt_set_rd(r, ldns_pkt_rd(query));
        ldns_pkt_set_ra(r, true);
        ldns_pkt_set_rcode(r, rcode);
        if (ldns_pkt_qdcount(query) > 0)
                ldns_pkt_push_rr(r, LDNS_SECTION_QUESTION,
                                 ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(query), 0)));
        if (ldns_pkt_edns(query))
                ldns_pkt_set_edns_udp_size(r, 1232);
        return r;
}

/* The fake's zone: what each name answers. Sets *delay_ms, or *drop for no answer. */
static ldns_pkt *fake_answer(const ldns_pkt *query, const char *name, ldns_rr_type type,
                             int *delay_ms, bool *drop)
{
        ldns_pkt *r;
        char text[512];

        if (strcmp(name, "never.test") == 0) {
                *drop = true;
                return NULL;
        }
        if (strcmp(name, "servfail.test") == 0)
                return reply_new(query, LDNS_RCODE_SERVFAIL);
        r = reply_new(query, LDNS_RCODE_NOERROR);
        if (strcmp(name, "allowed.test") == 0 || strcmp(name, "slow.test") == 0 ||
            strcmp(name, "open-only.test") == 0) {
                if (name[0] == 's')
                        *delay_ms = 300;
                if (type == LDNS_RR_TYPE_AAAA) {
                        snprintf(text, sizeof(text), "%s. 3600 IN AAAA 2001:db8::1", name);
                        rr_add(r, text);
                } else {
                        snprintf(text, sizeof(text), "%s. 5 IN A 192.0.2.1", name);
                        rr_add(r, text);
                        snprintf(text, sizeof(text), "%s. 100 IN A 192.0.2.2", name);
                        rr_add(r, text);
                }
        } else if (strcmp(name, "www.wild.test") == 0) {
                rr_add(r, "www.wild.test. 300 IN CNAME cdn.other.net.");
                rr_add(r, "evil.other.net. 300 IN A 203.0.113.9");
                rr_add(r, "edge.other.net. 60 IN A 198.51.100.7");
                rr_add(r, "cdn.other.net. 300 IN CNAME edge.other.net.");
        } else if (strcmp(name, "loopy.wild.test") == 0) {
                rr_add(r, "loopy.wild.test. 300 IN CNAME a.loop.net.");
                rr_add(r, "a.loop.net. 300 IN CNAME b.loop.net.");
                rr_add(r, "b.loop.net. 300 IN CNAME a.loop.net.");
                rr_add(r, "b.loop.net. 300 IN A 198.51.100.8");
        } else if (strcmp(name, "long.test") == 0) {
                rr_add(r, "long.test. 864000 IN A 192.0.2.50");
        } else if (strcmp(name, "big.test") == 0) {
                for (int i = 0; i < 20; i++) {
                        snprintf(text, sizeof(text),
                                 "big.test. 60 IN TXT \"%02d "
                                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"",
                                 i);
                        rr_add(r, text);
                }
        } else if (strcmp(name, "many.test") == 0) {
                for (int i = 0; i < 100; i++) {
                        snprintf(text, sizeof(text), "many.test. 60 IN A 10.1.%d.%d", i / 250,
                                 i % 250 + 1);
                        rr_add(r, text);
                }
        } else if (strcmp(name, "spoof.test") == 0) {
                rr_add(r, "spoof.test. 60 IN A 192.0.2.99");
        } else {
                ldns_pkt_set_rcode(r, LDNS_RCODE_NXDOMAIN);
        }
        return r;
}

static void fake_note(fake_dns *f, const char *name)
{
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_asked; i++) {
                if (strcmp(f->asked[i].name, name) == 0) {
                        f->asked[i].n++;
                        pthread_mutex_unlock(&f->lock);
                        return;
                }
        }
        if (f->n_asked < FAKE_NAMES_MAX) {
                snprintf(f->asked[f->n_asked].name, sizeof(f->asked[0].name), "%s", name);
                f->asked[f->n_asked++].n = 1;
        }
        pthread_mutex_unlock(&f->lock);
}

static unsigned fake_asked(fake_dns *f, const char *name)
{
        unsigned n = 0;

        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_asked; i++) {
                if (strcmp(f->asked[i].name, name) == 0)
                        n = f->asked[i].n;
        }
        pthread_mutex_unlock(&f->lock);
        return n;
}

/* A reply whose answer's owner is a compression pointer to itself. */
static uint8_t *loop_reply(const ldns_pkt *query, size_t *len)
{
        ldns_pkt *r = reply_new(query, LDNS_RCODE_NOERROR);
        size_t n;
        uint8_t *wire = pkt_wire(r, &n), *out = malloc(n + 16);

        ldns_pkt_free(r);
        memcpy(out, wire, n);
        free(wire);
        out[7] = 1; /* ANCOUNT */
        out[n] = (uint8_t)(0xc0 | (n >> 8));
        out[n + 1] = (uint8_t)n;
        memcpy(out + n + 2, "\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04", 14);
        *len = n + 16;
        return out;
}

static void udp_send(int fd, const struct sockaddr_storage *to, socklen_t to_len,
                     const uint8_t *wire, size_t len)
{
        (void)sendto(fd, wire, len, 0, (const struct sockaddr *)to, to_len);
}

/* The fake's answer to one query, as wire (NULL for none). udp_max: 0 over TCP. */
static uint8_t *fake_reply_wire(fake_dns *f, const uint8_t *q, size_t qlen, size_t udp_max,
                                int *delay_ms, size_t *len)
{
        ldns_pkt *query = NULL, *r;
        const ldns_rr *qrr;
        char *name;
        bool drop = false;
        uint8_t *wire = NULL;

        if (ldns_wire2pkt(&query, q, qlen) != LDNS_STATUS_OK || ldns_pkt_qdcount(query) != 1) {
                ldns_pkt_free(query);
                return NULL;
        }
        qrr = ldns_rr_list_rr(ldns_pkt_question(query), 0);
        name = ldns_rdf2str(ldns_rr_owner(qrr));
        name[strlen(name) - 1] = '\0';
        lower(name);
        fake_note(f, name);
        if (strcmp(name, "loop.test") == 0) {
                wire = loop_reply(query, len);
        } else if (strcmp(name, "huge.test") == 0) {
                /* 64 KiB: a header that answers, then compression pointers everywhere. */
                *len = 65535;
                wire = malloc(*len);
                memset(wire, 0xc0, *len);
                memcpy(wire, q, 12);
                wire[2] |= 0x80;
        } else if ((r = fake_answer(query, name, ldns_rr_get_type(qrr), delay_ms, &drop))) {
                wire = pkt_wire(r, len);
                if (udp_max &&
                    *len > (ldns_pkt_edns(query) ? ldns_pkt_edns_udp_size(query) : 512)) {
                        ldns_rr_list_deep_free(ldns_pkt_answer(r));
                        ldns_pkt_set_answer(r, ldns_rr_list_new());
                        ldns_pkt_set_ancount(r, 0);
                        ldns_pkt_set_tc(r, true);
                        free(wire);
                        wire = pkt_wire(r, len);
                }
                ldns_pkt_free(r);
        }
        free(name);
        ldns_pkt_free(query);
        return wire;
}

static void fake_udp(fake_dns *f)
{
        uint8_t buf[65536];
        struct sockaddr_storage from;
        socklen_t from_len = sizeof(from);
        ssize_t n = recvfrom(f->udp, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from,
                             &from_len);
        int delay = 0;
        size_t len = 0;
        uint8_t *wire;

        if (n <= 0 || f->silent)
                return;
        wire = fake_reply_wire(f, buf, (size_t)n, 512, &delay, &len);
        if (!wire)
                return;
        if (n >= 18 && memcmp(buf + 12, "\x05spoof", 6) == 0) {
                /* First a reply with the wrong id, then one about another name, both with
                 * another address; then the real one. */
                ldns_pkt *bad = NULL;
                uint8_t *w;
                size_t wl;

                assert_int_equal(ldns_wire2pkt(&bad, wire, len), LDNS_STATUS_OK);
                ldns_rr_list_deep_free(ldns_pkt_answer(bad));
                ldns_pkt_set_answer(bad, ldns_rr_list_new());
                ldns_pkt_set_ancount(bad, 0);
                rr_add(bad, "spoof.test. 60 IN A 6.6.6.6");
                ldns_pkt_set_id(bad, (uint16_t)(ldns_pkt_id(bad) ^ 0x5a5a));
                w = pkt_wire(bad, &wl);
                udp_send(f->udp, &from, from_len, w, wl);
                free(w);
                ldns_pkt_set_id(bad, (uint16_t)(ldns_pkt_id(bad) ^ 0x5a5a));
                ldns_rdf_deep_free(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(bad), 0)));
                ldns_rr_set_owner(ldns_rr_list_rr(ldns_pkt_question(bad), 0),
                                  ldns_dname_new_frm_str("spoof.tesu."));
                w = pkt_wire(bad, &wl);
                udp_send(f->udp, &from, from_len, w, wl);
                free(w);
                ldns_pkt_free(bad);
        }
        if (delay > 0 && f->n_delayed < FAKE_DELAYED_MAX) {
                fake_delayed *d = &f->delayed[f->n_delayed++];

                d->at_ms = now_ms() + delay;
                d->to = from;
                d->to_len = from_len;
                d->wire = wire;
                d->len = len;
                return;
        }
        udp_send(f->udp, &from, from_len, wire, len);
        free(wire);
}

/* One TCP client: one query, one answer (the proxy asks once per connection), after the
 * name's delay. A silent fake keeps the connection open and says nothing. */
static void fake_tcp(fake_dns *f)
{
        int c = accept4(f->tcp, NULL, NULL, SOCK_CLOEXEC);
        struct timeval tv = { .tv_sec = 2 };
        uint8_t lenbuf[2], *q, *wire, hdr[2];
        int delay = 0;
        size_t qlen, len = 0;

        if (c < 0)
                return;
        if (f->silent) {
                if (f->n_held < FAKE_HELD_MAX)
                        f->held[f->n_held++] = c;
                else
                        close(c);
                return;
        }
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (cs_read_full(c, lenbuf, 2) != 2) {
                close(c);
                return;
        }
        qlen = (size_t)lenbuf[0] << 8 | lenbuf[1];
        q = malloc(qlen);
        if (cs_read_full(c, q, qlen) == (ssize_t)qlen &&
            (wire = fake_reply_wire(f, q, qlen, 0, &delay, &len))) {
                if (delay > 0)
                        sleep_ms(delay);
                hdr[0] = (uint8_t)(len >> 8);
                hdr[1] = (uint8_t)len;
                (void)cs_write_all(c, hdr, 2);
                (void)cs_write_all(c, wire, len);
                free(wire);
        }
        free(q);
        close(c);
}

static void *fake_main(void *arg)
{
        fake_dns *f = arg;

        for (;;) {
                struct pollfd pfd[3] = { { .fd = f->udp, .events = POLLIN },
                                         { .fd = f->tcp, .events = POLLIN },
                                         { .fd = f->stop, .events = POLLIN } };
                int timeout = -1;
                int64_t now = now_ms();

                for (size_t i = 0; i < f->n_delayed; i++) {
                        int64_t left = f->delayed[i].at_ms - now;

                        if (timeout < 0 || left < timeout)
                                timeout = left < 0 ? 0 : (int)left;
                }
                poll(pfd, 3, timeout);
                if (pfd[2].revents)
                        break;
                if (pfd[0].revents)
                        fake_udp(f);
                if (pfd[1].revents)
                        fake_tcp(f);
                now = now_ms();
                for (size_t i = 0; i < f->n_delayed;) {
                        fake_delayed *d = &f->delayed[i];

                        if (d->at_ms > now) {
                                i++;
                                continue;
                        }
                        udp_send(f->udp, &d->to, d->to_len, d->wire, d->len);
                        free(d->wire);
                        *d = f->delayed[--f->n_delayed];
                }
        }
        for (size_t i = 0; i < f->n_delayed; i++)
                free(f->delayed[i].wire);
        for (size_t i = 0; i < f->n_held; i++)
                close(f->held[i]);
        return NULL;
}

static fake_dns *fake_start(bool silent)
{
        fake_dns *f = calloc(1, sizeof(*f));
        struct sockaddr_in sin = sin_of("127.0.0.1", free_port("127.0.0.1"));

        f->silent = silent;
        f->udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        f->tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        f->stop = eventfd(0, EFD_CLOEXEC);
        assert_int_equal(bind(f->udp, (struct sockaddr *)&sin, sizeof(sin)), 0);
        assert_int_equal(bind(f->tcp, (struct sockaddr *)&sin, sizeof(sin)), 0);
        assert_int_equal(listen(f->tcp, 64), 0);
        memcpy(&f->addr, &sin, sizeof(sin));
        pthread_mutex_init(&f->lock, NULL);
        assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
        return f;
}

static void fake_stop(fake_dns *f)
{
        uint64_t one = 1;

        assert_int_equal(write(f->stop, &one, sizeof(one)), sizeof(one));
        pthread_join(f->thread, NULL);
        close(f->udp);
        close(f->tcp);
        close(f->stop);
        pthread_mutex_destroy(&f->lock);
        free(f);
}

/* --- what the proxy allowed ------------------------------------------------------------- */

#define LOG_MAX 1024

typedef struct allow_entry {
        char key[64];
        char name[256];
        dns_addr a;
} allow_entry;

typedef struct allow_log {
        pthread_mutex_t lock;
        allow_entry e[LOG_MAX];
        size_t n;
        size_t calls;
        bool fail; /* the callback fails */
} allow_log;

static allow_log alog = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int record_allow(void *data, const char *key, const char *name, const dns_addr *addrs,
                        size_t n)
{
        allow_log *l = data;
        int r;

        pthread_mutex_lock(&l->lock);
        l->calls++;
        for (size_t i = 0; i < n && l->n < LOG_MAX; i++) {
                allow_entry *e = &l->e[l->n++];

                snprintf(e->key, sizeof(e->key), "%s", key);
                snprintf(e->name, sizeof(e->name), "%s", name);
                e->a = addrs[i];
        }
        r = l->fail ? -1 : 0;
        pthread_mutex_unlock(&l->lock);
        return r;
}

static void log_reset(void)
{
        pthread_mutex_lock(&alog.lock);
        alog.n = alog.calls = 0;
        alog.fail = false;
        pthread_mutex_unlock(&alog.lock);
}

/* The TTL allowed for address text of key, or -1 if it was not allowed. */
static long log_find(const char *key, const char *text)
{
        uint8_t addr[16];
        int family = strchr(text, ':') ? AF_INET6 : AF_INET;
        long ttl = -1;

        assert_int_equal(inet_pton(family, text, addr), 1);
        pthread_mutex_lock(&alog.lock);
        for (size_t i = 0; i < alog.n; i++) {
                const allow_entry *e = &alog.e[i];

                if (strcmp(e->key, key) == 0 && e->a.family == family &&
                    memcmp(e->a.addr, addr, family == AF_INET ? 4 : 16) == 0)
                        ttl = e->a.ttl_s;
        }
        pthread_mutex_unlock(&alog.lock);
        return ttl;
}

static size_t log_count(const char *key)
{
        size_t n = 0;

        pthread_mutex_lock(&alog.lock);
        for (size_t i = 0; i < alog.n; i++)
                n += strcmp(alog.e[i].key, key) == 0;
        pthread_mutex_unlock(&alog.lock);
        return n;
}

/* --- a client --------------------------------------------------------------------------- */

static uint8_t *query_wire(const char *name, ldns_rr_type type, uint16_t edns_size, uint16_t id,
                           size_t *len)
{
        ldns_pkt *q = NULL;
        uint8_t *wire;

        assert_int_equal(ldns_pkt_query_new_frm_str(&q, name, type, LDNS_RR_CLASS_IN, LDNS_RD),
                         LDNS_STATUS_OK);
        ldns_pkt_set_id(q, id);
        if (edns_size)
                ldns_pkt_set_edns_udp_size(q, edns_size);
        wire = pkt_wire(q, len);
        ldns_pkt_free(q);
        return wire;
}

static int udp_client(void)
{
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        return fd;
}

/* Waits up to timeout_ms for a datagram on fd; its length, or -1. */
static ssize_t udp_wait(int fd, uint8_t *buf, size_t max, int timeout_ms)
{
        struct pollfd pfd = { .fd = fd, .events = POLLIN };

        if (poll(&pfd, 1, timeout_ms) != 1)
                return -1;
        return recv(fd, buf, max, 0);
}

/* Sends wire to srv over UDP and parses the answer (NULL if none within timeout_ms). */
static ldns_pkt *udp_exchange(const struct sockaddr_in *srv, const uint8_t *wire, size_t len,
                              int timeout_ms)
{
        int fd = udp_client();
        uint8_t buf[65536];
        ldns_pkt *r = NULL;
        ssize_t n;

        assert_int_equal(sendto(fd, wire, len, 0, (const struct sockaddr *)srv, sizeof(*srv)),
                         (ssize_t)len);
        n = udp_wait(fd, buf, sizeof(buf), timeout_ms);
        close(fd);
        if (n < 0)
                return NULL;
        assert_int_equal(ldns_wire2pkt(&r, buf, (size_t)n), LDNS_STATUS_OK);
        if (len >= 2)
                assert_int_equal(ldns_pkt_id(r), ldns_read_uint16(wire));
        return r;
}

static int tcp_connect(const struct sockaddr_in *srv)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct timeval tv = { .tv_sec = 3 };

        assert_int_equal(connect(fd, (const struct sockaddr *)srv, sizeof(*srv)), 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return fd;
}

static void tcp_send_msg(int fd, const uint8_t *wire, size_t len)
{
        uint8_t hdr[2] = { (uint8_t)(len >> 8), (uint8_t)len };

        assert_int_equal(cs_write_all(fd, hdr, 2), 0);
        assert_int_equal(cs_write_all(fd, wire, len), 0);
}

static ldns_pkt *tcp_read_msg(int fd)
{
        uint8_t hdr[2], *buf;
        ldns_pkt *r = NULL;
        size_t len;

        if (cs_read_full(fd, hdr, 2) != 2)
                return NULL;
        len = (size_t)hdr[0] << 8 | hdr[1];
        buf = malloc(len);
        assert_int_equal(cs_read_full(fd, buf, len), (ssize_t)len);
        assert_int_equal(ldns_wire2pkt(&r, buf, len), LDNS_STATUS_OK);
        free(buf);
        return r;
}

static ldns_pkt *ask(const struct sockaddr_in *srv, bool tcp, const char *name, ldns_rr_type type,
                     uint16_t edns_size)
{
        uint16_t id = (uint16_t)random();
        size_t len;
        uint8_t *wire = query_wire(name, type, edns_size, id, &len);
        ldns_pkt *r;

        if (tcp) {
                int fd = tcp_connect(srv);

                tcp_send_msg(fd, wire, len);
                r = tcp_read_msg(fd);
                close(fd);
                if (r)
                        assert_int_equal(ldns_pkt_id(r), id);
        } else {
                r = udp_exchange(srv, wire, len, 3000);
        }
        free(wire);
        return r;
}

static size_t count_type(const ldns_pkt *r, ldns_rr_type t)
{
        size_t n = 0;

        for (size_t i = 0; i < ldns_rr_list_rr_count(ldns_pkt_answer(r)); i++)
                n += ldns_rr_get_type(ldns_rr_list_rr(ldns_pkt_answer(r), i)) == t;
        return n;
}

/* --- fixtures --------------------------------------------------------------------------- */

typedef struct env {
        fake_dns *up, *hole;
        dns_proxy *proxy; /* upstream: up; timeout 300 ms */
        struct sockaddr_in sb1, sb2, open;
        cs_netpolicy allow, allow_open;
} env;

static env E;

static const char *const allowed_names[] = { "allowed.test",  "*.wild.test", "long.test",
                                             "big.test",      "many.test",   "slow.test",
                                             "never.test",    "spoof.test",  "loop.test",
                                             "servfail.test", "huge.test" };

static void sandbox_add(dns_proxy *p, const char *key, const struct sockaddr_in *at,
                        const cs_netpolicy *pol)
{
        cs_error *err = NULL;

        if (dns_proxy_add(p, key, (const struct sockaddr *)at, sizeof(*at), NULL, pol, &err) < 0)
                fail_msg("dns_proxy_add %s: %s", key, err->msg);
}

static int group_setup(void **state)
{
        cs_error *err = NULL;
        dns_proxy_limits lim = { .upstream_timeout_ms = 300 };

        (void)state;
        srandom((unsigned)getpid());
        E.up = fake_start(false);
        E.hole = fake_start(true);
        if (cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, allowed_names, ARRAY_SIZE(allowed_names), NULL,
                               0, &E.allow, &err) < 0 ||
            cs_netpolicy_parse(CS_EGRESS_OPEN, NULL, 0, NULL, 0, &E.allow_open, &err) < 0)
                fail_msg("policy: %s", err->msg);
        if (dns_proxy_new(&E.up->addr, 1, &lim, record_allow, &alog, &E.proxy, &err) < 0)
                fail_msg("dns_proxy_new: %s", err->msg);
        E.sb1 = sin_of("127.0.0.2", free_port("127.0.0.2"));
        E.sb2 = sin_of("127.0.0.3", free_port("127.0.0.3"));
        E.open = sin_of("127.0.0.4", free_port("127.0.0.4"));
        sandbox_add(E.proxy, "sb1", &E.sb1, &E.allow);
        sandbox_add(E.proxy, "sb2", &E.sb2, &E.allow);
        sandbox_add(E.proxy, "open", &E.open, &E.allow_open);
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        dns_proxy_free(E.proxy);
        fake_stop(E.up);
        fake_stop(E.hole);
        cs_netpolicy_clear(&E.allow);
        cs_netpolicy_clear(&E.allow_open);
        return 0;
}

static int test_setup(void **state)
{
        (void)state;
        log_reset();
        return 0;
}

/* --- through the proxy ------------------------------------------------------------------ */

static void test_allowed_answered_and_allowed(void **state)
{
        ldns_pkt *r;

        (void)state;
        r = ask(&E.sb1, false, "allowed.test.", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        assert_true(ldns_pkt_qr(r));
        assert_int_equal(count_type(r, LDNS_RR_TYPE_A), 2);
        /* The sandbox gets the records' own TTLs; the set, the floored ones. */
        assert_int_equal(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(r), 0)), 5);
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb1", "192.0.2.1"), DNS_PROXY_TTL_FLOOR_S);
        assert_int_equal(log_find("sb1", "192.0.2.2"), 100);
        assert_int_equal(log_count("sb2"), 0);
        pthread_mutex_lock(&alog.lock);
        assert_int_equal(alog.calls, 1); /* one call per answer */
        assert_string_equal(alog.e[0].name, "allowed.test");
        pthread_mutex_unlock(&alog.lock);

        /* AAAA over TCP, the name in another case. */
        r = ask(&E.sb2, true, "ALLOWED.Test", LDNS_RR_TYPE_AAAA, 0);
        assert_non_null(r);
        assert_int_equal(count_type(r, LDNS_RR_TYPE_AAAA), 1);
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb2", "2001:db8::1"), 3600);
}

static void test_denied_refused_without_upstream(void **state)
{
        const char *denied[] = { "denied.test", "xallowed.test", "sub.allowed.test",
                                 "wild.test",   "test",          "allowed.test.evil" };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(denied); i++) {
                ldns_pkt *r = ask(&E.sb1, i % 2, denied[i], LDNS_RR_TYPE_A, 0);

                assert_non_null(r);
                assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
                assert_int_equal(ldns_pkt_ancount(r), 0);
                assert_int_equal(ldns_pkt_qdcount(r), 1);
                ldns_pkt_free(r);
                assert_int_equal(fake_asked(E.up, denied[i]), 0);
        }
        assert_int_equal(log_count("sb1"), 0);
}

static void test_wildcard_and_cname_chain(void **state)
{
        ldns_pkt *r;

        (void)state;
        /* *.wild.test: www.wild.test, whose chain leads outside the allowed names. */
        r = ask(&E.sb1, false, "www.wild.test", LDNS_RR_TYPE_A, 1232);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        assert_true(ldns_pkt_edns(r));
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb1", "198.51.100.7"), 60);
        /* In the answer but not on the chain. */
        assert_int_equal(log_find("sb1", "203.0.113.9"), -1);
        assert_int_equal(log_count("sb1"), 1);

        /* A CNAME loop ends the chain; its address is on it. */
        r = ask(&E.sb1, true, "loopy.wild.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb1", "198.51.100.8"), 300);
}

static void test_ttl_capped(void **state)
{
        ldns_pkt *r;

        (void)state;
        r = ask(&E.sb1, false, "long.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(r), 0)), DNS_PROXY_TTL_CAP_S);
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb1", "192.0.2.50"), DNS_PROXY_TTL_CAP_S);
}

static void test_open_forwards_all_without_callback(void **state)
{
        ldns_pkt *r;

        (void)state;
        r = ask(&E.open, false, "open-only.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(count_type(r, LDNS_RR_TYPE_A), 2);
        ldns_pkt_free(r);
        r = ask(&E.open, true, "nowhere.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        ldns_pkt_free(r);
        assert_int_equal(fake_asked(E.up, "nowhere.test"), 1);
        assert_int_equal(log_count("open"), 0);
}

static void test_truncated_then_tcp(void **state)
{
        ldns_pkt *r;

        (void)state;
        /* No EDNS: 512 bytes; the upstream truncates, the sandbox gets TC as it is. */
        r = ask(&E.sb1, false, "big.test", LDNS_RR_TYPE_TXT, 0);
        assert_non_null(r);
        assert_true(ldns_pkt_tc(r));
        assert_int_equal(ldns_pkt_ancount(r), 0);
        ldns_pkt_free(r);
        r = ask(&E.sb1, true, "big.test", LDNS_RR_TYPE_TXT, 0);
        assert_non_null(r);
        assert_false(ldns_pkt_tc(r));
        assert_int_equal(count_type(r, LDNS_RR_TYPE_TXT), 20);
        ldns_pkt_free(r);
}

static void test_addresses_capped(void **state)
{
        ldns_pkt *r;

        (void)state;
        r = ask(&E.sb1, true, "many.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(count_type(r, LDNS_RR_TYPE_A), DNS_PROXY_ADDRS_MAX);
        ldns_pkt_free(r);
        assert_int_equal(log_count("sb1"), DNS_PROXY_ADDRS_MAX);
        assert_int_equal(log_find("sb1", "10.1.0.1"), 60);
        assert_int_equal(log_find("sb1", "10.1.0.100"), -1);
}

static void expect_rcode(const struct sockaddr_in *srv, const uint8_t *wire, size_t len, int rcode)
{
        ldns_pkt *r = udp_exchange(srv, wire, len, 2000);

        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), rcode);
        ldns_pkt_free(r);
}

static void expect_silence(const struct sockaddr_in *srv, const uint8_t *wire, size_t len)
{
        ldns_pkt *r = udp_exchange(srv, wire, len, 200);

        assert_null(r);
}

static void test_bad_queries(void **state)
{
        ldns_pkt *q = NULL;
        uint8_t *wire;
        size_t len;

        (void)state;
        /* Another opcode: NOTIMP. */
        wire = query_wire("allowed.test", LDNS_RR_TYPE_A, 0, 7, &len);
        wire[2] |= LDNS_PACKET_NOTIFY << 3;
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_NOTIMPL);
        /* A response: not answered. */
        wire[2] = 0x80 | 0x01;
        expect_silence(&E.sb1, wire, len);
        /* No question; two questions: FORMERR. */
        wire[2] = 0x01;
        wire[5] = 0;
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_FORMERR);
        wire[5] = 2;
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_FORMERR);
        /* Cut in the middle of the question: FORMERR (the header parses). */
        wire[5] = 1;
        expect_rcode(&E.sb1, wire, len - 3, LDNS_RCODE_FORMERR);
        /* Not even a header. */
        expect_silence(&E.sb1, wire, 11);
        free(wire);

        /* Class CH: REFUSED; AXFR: REFUSED; a meta type: NOTIMP. */
        assert_int_equal(ldns_pkt_query_new_frm_str(&q, "allowed.test", LDNS_RR_TYPE_TXT,
                                                    LDNS_RR_CLASS_CH, LDNS_RD),
                         LDNS_STATUS_OK);
        wire = pkt_wire(q, &len);
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_REFUSED);
        free(wire);
        ldns_pkt_free(q);
        wire = query_wire("allowed.test", LDNS_RR_TYPE_AXFR, 0, 9, &len);
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_REFUSED);
        free(wire);
        wire = query_wire("allowed.test", LDNS_RR_TYPE_TSIG, 0, 9, &len);
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_NOTIMPL);
        free(wire);

        /* EDNS version 1: BADVERS (16: 1 in the OPT record, 0 in the header). */
        wire = query_wire("allowed.test", LDNS_RR_TYPE_A, 1232, 10, &len);
        assert_int_equal(wire[len - 11 + 6], 0); /* the OPT's version byte */
        wire[len - 11 + 6] = 1;
        {
                ldns_pkt *r = udp_exchange(&E.sb1, wire, len, 2000);

                assert_non_null(r);
                assert_int_equal(ldns_pkt_get_rcode(r), 0);
                assert_int_equal(ldns_pkt_edns_extended_rcode(r), 1);
                ldns_pkt_free(r);
        }
        free(wire);

        /* A dot inside a label spells "allowed.test" as text but is not that name. */
        wire = query_wire("allowed\\.test", LDNS_RR_TYPE_A, 0, 11, &len);
        expect_rcode(&E.sb1, wire, len, LDNS_RCODE_REFUSED);
        free(wire);
        assert_int_equal(log_count("sb1"), 0);
}

/* A query whose name is a compression pointer to itself. */
static uint8_t *loop_query(size_t *len)
{
        static const uint8_t q[] = { 0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
                                     0x00, 0x00, 0x00, 0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01 };
        uint8_t *w = malloc(sizeof(q));

        memcpy(w, q, sizeof(q));
        *len = sizeof(q);
        return w;
}

static void expect_still_answering(void)
{
        ldns_pkt *r = ask(&E.sb1, false, "allowed.test", LDNS_RR_TYPE_A, 0);

        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        ldns_pkt_free(r);
        r = ask(&E.sb2, true, "allowed.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        ldns_pkt_free(r);
}

static void test_hostile_queries(void **state)
{
        int fd = udp_client(), t;
        uint8_t *big = malloc(65535), buf[16];
        uint8_t *wire;
        size_t len;

        (void)state;
        /* Garbage datagrams of every size up to the largest, on the "hostile" sandbox sb1. */
        for (int i = 0; i < 3000; i++) {
                size_t n = (size_t)(random() % 1400) + 1;

                for (size_t j = 0; j < n; j++)
                        big[j] = (uint8_t)random();
                big[2] &= 0x7f; /* a query, so that it goes deeper */
                (void)sendto(fd, big, n, 0, (struct sockaddr *)&E.sb1, sizeof(E.sb1));
                if (i % 100 == 0)
                        sleep_ms(1);
        }
        memset(big, 0xc0, 65535);
        (void)sendto(fd, big, 65507, 0, (struct sockaddr *)&E.sb1, sizeof(E.sb1));
        wire = loop_query(&len);
        expect_rcode(&E.sb2, wire, len, LDNS_RCODE_FORMERR);
        free(wire);
        close(fd);

        /* 64 KiB over TCP: the connection is closed; sb1 goes on over UDP and TCP. */
        t = tcp_connect(&E.sb1);
        big[0] = big[1] = 0xff;
        (void)cs_write_all(t, big, 65535);
        assert_true(cs_read_full(t, buf, sizeof(buf)) <= 0);
        close(t);
        /* A partial message, then nothing: buffered, and closed when idle. */
        t = tcp_connect(&E.sb1);
        (void)cs_write_all(t, "\x00\x40\x12\x34", 4);
        close(t);
        free(big);

        sleep_ms(300); /* sb1's token bucket refills */
        expect_still_answering();
}

static void test_hostile_upstream(void **state)
{
        dns_proxy_stats before, after;
        ldns_pkt *r;

        (void)state;
        dns_proxy_get_stats(E.proxy, &before);
        /* Spoofed replies (wrong id, wrong question) first: the real one wins. */
        r = ask(&E.sb1, false, "spoof.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(count_type(r, LDNS_RR_TYPE_A), 1);
        ldns_pkt_free(r);
        assert_int_equal(log_find("sb1", "192.0.2.99"), 60);
        assert_int_equal(log_find("sb1", "6.6.6.6"), -1);

        /* A reply with a compression loop is no reply: SERVFAIL once the attempt times out. */
        r = ask(&E.sb1, false, "loop.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        ldns_pkt_free(r);
        dns_proxy_get_stats(E.proxy, &after);
        assert_true(after.upstream_bad >= before.upstream_bad + 3);
        assert_true(after.upstream_timeouts >= before.upstream_timeouts + 1);

        /* 64 KiB of garbage over TCP: read whole, refused, SERVFAIL. */
        r = ask(&E.sb1, true, "huge.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        ldns_pkt_free(r);

        /* SERVFAIL from the only upstream goes back as it is. */
        r = ask(&E.sb1, true, "servfail.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        ldns_pkt_free(r);
        assert_int_equal(log_count("sb1"), 1);
}

/* The process's resident set (the proxy, the fakes and the test together). */
static long rss_kib(void)
{
        long pages = 0, resident = 0;
        FILE *f = fopen("/proc/self/statm", "re");

        if (f) {
                if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
                        resident = 0;
                fclose(f);
        }
        return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct flood_arg {
        struct sockaddr_in to;
        int ms;
        unsigned sent;
} flood_arg;

/* ~10000 queries a second for arg->ms: allowed names, denied ones and garbage. */
static void *flood_main(void *arg)
{
        flood_arg *a = arg;
        int fd = udp_client();
        size_t l1, l2;
        uint8_t *w1 = query_wire("allowed.test", LDNS_RR_TYPE_A, 0, 1, &l1);
        uint8_t *w2 = query_wire("denied.test", LDNS_RR_TYPE_A, 0, 2, &l2);
        uint8_t junk[300];
        int64_t end = now_ms() + a->ms;

        fcntl(fd, F_SETFL, O_NONBLOCK);
        while (now_ms() < end) {
                for (int i = 0; i < 100; i++) {
                        uint8_t drain[2048];

                        switch (i % 3) {
                        case 0:
                                (void)sendto(fd, w1, l1, 0, (struct sockaddr *)&a->to,
                                             sizeof(a->to));
                                break;
                        case 1:
                                (void)sendto(fd, w2, l2, 0, (struct sockaddr *)&a->to,
                                             sizeof(a->to));
                                break;
                        default:
                                for (size_t j = 0; j < sizeof(junk); j++)
                                        junk[j] = (uint8_t)random();
                                (void)sendto(fd, junk, sizeof(junk), 0, (struct sockaddr *)&a->to,
                                             sizeof(a->to));
                        }
                        a->sent++;
                        while (recv(fd, drain, sizeof(drain), MSG_DONTWAIT) > 0)
                                ;
                }
                sleep_ms(10);
        }
        free(w1);
        free(w2);
        close(fd);
        return NULL;
}

static void test_flood_costs_its_sandbox_only(void **state)
{
        struct sockaddr_in at = sin_of("127.0.0.5", free_port("127.0.0.5"));
        flood_arg fa = { .to = at, .ms = 5000 };
        long rss0, rss1;
        dns_proxy_stats before, st;
        pthread_t th;
        int64_t worst = 0, end;
        unsigned lookups = 0;

        (void)state;
        sandbox_add(E.proxy, "flood", &at, &E.allow);
        dns_proxy_get_stats(E.proxy, &before);
        assert_int_equal(pthread_create(&th, NULL, flood_main, &fa), 0);
        sleep_ms(200);
        rss0 = rss_kib();
        end = now_ms() + 4500;
        while (now_ms() < end) {
                int64_t t0 = now_ms();
                ldns_pkt *r = ask(&E.sb2, lookups % 2, "allowed.test", LDNS_RR_TYPE_A, 0);
                int64_t took = now_ms() - t0;

                assert_non_null(r);
                assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
                ldns_pkt_free(r);
                if (took > worst)
                        worst = took;
                lookups++;
                sleep_ms(20);
        }
        pthread_join(th, NULL);
        rss1 = rss_kib();
        dns_proxy_get_stats(E.proxy, &st);
        print_message("flood: %u sent, %u lookups of another sandbox, worst %" PRId64
                      " ms; dropped %" PRIu64 "; RSS %ld -> %ld KiB\n",
                      fa.sent, lookups, worst, st.dropped - before.dropped, rss0, rss1);
        assert_true(fa.sent > 20000); /* ~10000 a second, less on a loaded machine */
#ifndef __SANITIZE_ADDRESS__
        /* ASan's quarantine holds freed memory for a while: only the plain build can tell. */
        assert_true(rss1 - rss0 < 16 * 1024);
#endif
        assert_true(lookups > 50);
        assert_true(worst < 500);
        /* Over its rate (200/s, 400 at once): most of what was read was dropped. */
        assert_true(st.dropped - before.dropped > 5000);
        dns_proxy_remove(E.proxy, "flood");
}

static void test_remove_with_queries_in_flight(void **state)
{
        struct sockaddr_in at = sin_of("127.0.0.6", free_port("127.0.0.6"));
        int fd = udp_client(), t;
        size_t len;
        uint8_t *wire = query_wire("slow.test", LDNS_RR_TYPE_A, 0, 77, &len), buf[512];

        (void)state;
        sandbox_add(E.proxy, "gone", &at, &E.allow);
        for (int i = 0; i < 5; i++)
                assert_int_equal(sendto(fd, wire, len, 0, (struct sockaddr *)&at, sizeof(at)),
                                 (ssize_t)len);
        t = tcp_connect(&at);
        tcp_send_msg(t, wire, len);
        sleep_ms(80);
        dns_proxy_remove(E.proxy, "gone");
        /* The fake answers 300 ms after it was asked: nothing comes, nothing is allowed. */
        sleep_ms(400);
        assert_int_equal(udp_wait(fd, buf, sizeof(buf), 10), -1);
        assert_true(cs_read_full(t, buf, 2) <= 0);
        assert_int_equal(log_count("gone"), 0);
        close(t);
        /* The same key and address again. */
        sandbox_add(E.proxy, "gone", &at, &E.allow);
        {
                ldns_pkt *r = ask(&at, false, "allowed.test", LDNS_RR_TYPE_A, 0);

                assert_non_null(r);
                ldns_pkt_free(r);
        }
        dns_proxy_remove(E.proxy, "gone");
        dns_proxy_remove(E.proxy, "gone"); /* unknown now: a no-op */
        free(wire);
        close(fd);
}

static void test_timeouts_next_upstream(void **state)
{
        struct sockaddr_storage ups[2] = { E.hole->addr, E.up->addr };
        dns_proxy_limits lim = { .upstream_timeout_ms = 200 };
        struct sockaddr_in at = sin_of("127.0.0.7", free_port("127.0.0.7"));
        dns_proxy *p = NULL;
        cs_error *err = NULL;
        int64_t t0;
        ldns_pkt *r;

        (void)state;
        assert_int_equal(dns_proxy_new(ups, 2, &lim, record_allow, &alog, &p, &err), 0);
        sandbox_add(p, "t", &at, &E.allow);
        for (int tcp = 0; tcp < 2; tcp++) {
                t0 = now_ms();
                r = ask(&at, tcp, "allowed.test", LDNS_RR_TYPE_A, 0);
                assert_non_null(r);
                assert_int_equal(count_type(r, LDNS_RR_TYPE_A), 2);
                assert_true(now_ms() - t0 >= 190);
                ldns_pkt_free(r);
        }
        /* Neither answers: SERVFAIL after both attempts. */
        t0 = now_ms();
        r = ask(&at, false, "never.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        assert_true(now_ms() - t0 >= 390);
        ldns_pkt_free(r);
        dns_proxy_free(p);

        /* An upstream with nothing listening (ICMP port unreachable): the next one at once. */
        {
                struct sockaddr_in dead = sin_of("127.0.0.1", free_port("127.0.0.1"));
                struct sockaddr_storage ups2[2];

                memcpy(&ups2[0], &dead, sizeof(dead));
                ups2[1] = E.up->addr;
                lim.upstream_timeout_ms = 5000;
                assert_int_equal(dns_proxy_new(ups2, 2, &lim, NULL, NULL, &p, &err), 0);
                sandbox_add(p, "t", &at, &E.allow);
                t0 = now_ms();
                r = ask(&at, false, "allowed.test", LDNS_RR_TYPE_A, 0);
                assert_non_null(r);
                assert_true(now_ms() - t0 < 2000);
                ldns_pkt_free(r);
                r = ask(&at, true, "allowed.test", LDNS_RR_TYPE_A, 0);
                assert_non_null(r);
                ldns_pkt_free(r);
                dns_proxy_free(p);
        }
}

static void test_caps(void **state)
{
        dns_proxy_limits lim = { .max_inflight = 4,
                                 .rate_qps = 20,
                                 .burst = 20,
                                 .max_tcp_conns = 2,
                                 .tcp_idle_ms = 300 };
        struct sockaddr_in at = sin_of("127.0.0.8", free_port("127.0.0.8"));
        dns_proxy *p = NULL;
        cs_error *err = NULL;
        int fd = udp_client(), answers = 0, servfails = 0, c1, c2, c3;
        uint8_t buf[2048];
        uint8_t *wire;
        size_t len;
        ldns_pkt *r;

        (void)state;
        assert_int_equal(dns_proxy_new(&E.up->addr, 1, &lim, record_allow, &alog, &p, &err), 0);
        sandbox_add(p, "c", &at, &E.allow);

        /* In flight: 4 at most, the others SERVFAIL at once. */
        for (int i = 0; i < 10; i++) {
                wire = query_wire("slow.test", LDNS_RR_TYPE_A, 0, (uint16_t)i, &len);
                (void)sendto(fd, wire, len, 0, (struct sockaddr *)&at, sizeof(at));
                free(wire);
        }
        for (;;) {
                ssize_t n = udp_wait(fd, buf, sizeof(buf), 1000);

                if (n < 0)
                        break;
                assert_int_equal(ldns_wire2pkt(&r, buf, (size_t)n), LDNS_STATUS_OK);
                if (ldns_pkt_get_rcode(r) == LDNS_RCODE_SERVFAIL)
                        servfails++;
                else
                        answers++;
                ldns_pkt_free(r);
        }
        assert_int_equal(answers, 4);
        assert_int_equal(servfails, 6);

        /* The rate: 20 a second, 20 at once (10 spent above, refilled since). */
        sleep_ms(1100);
        wire = query_wire("denied.test", LDNS_RR_TYPE_A, 0, 5, &len);
        for (int i = 0; i < 60; i++)
                (void)sendto(fd, wire, len, 0, (struct sockaddr *)&at, sizeof(at));
        free(wire);
        answers = 0;
        while (udp_wait(fd, buf, sizeof(buf), 300) > 0)
                answers++;
        assert_true(answers >= 20 && answers <= 26);

        /* TCP: 2 connections; a third is closed at once; an idle one after 300 ms. */
        sleep_ms(1100);
        c1 = tcp_connect(&at);
        c2 = tcp_connect(&at);
        sleep_ms(50);
        c3 = tcp_connect(&at);
        assert_true(cs_read_full(c3, buf, 2) <= 0);
        close(c3);
        /* Pipelined: two queries in one write, two answers. */
        {
                size_t l1, l2;
                uint8_t *w1 = query_wire("allowed.test", LDNS_RR_TYPE_A, 0, 1, &l1);
                uint8_t *w2 = query_wire("denied.test", LDNS_RR_TYPE_A, 0, 2, &l2);
                uint8_t *both = malloc(4 + l1 + l2);
                ldns_pkt *a, *b;

                both[0] = (uint8_t)(l1 >> 8);
                both[1] = (uint8_t)l1;
                memcpy(both + 2, w1, l1);
                both[2 + l1] = (uint8_t)(l2 >> 8);
                both[3 + l1] = (uint8_t)l2;
                memcpy(both + 4 + l1, w2, l2);
                assert_int_equal(cs_write_all(c2, both, 4 + l1 + l2), 0);
                a = tcp_read_msg(c2);
                b = tcp_read_msg(c2);
                assert_non_null(a);
                assert_non_null(b);
                /* The local REFUSED comes first; the forwarded one after. */
                assert_int_equal(ldns_pkt_id(a), 2);
                assert_int_equal(ldns_pkt_id(b), 1);
                ldns_pkt_free(a);
                ldns_pkt_free(b);
                free(w1);
                free(w2);
                free(both);
        }
        {
                int64_t t0 = now_ms();

                assert_true(cs_read_full(c1, buf, 2) <= 0);
                assert_true(now_ms() - t0 >= 150);
        }
        close(c1);
        close(c2);
        {
                dns_proxy_stats st;

                dns_proxy_get_stats(p, &st);
                assert_true(st.tcp_refused >= 1);
                assert_true(st.servfail >= 6);
        }
        dns_proxy_free(p);
        close(fd);
}

/* A socket the proxy closed while another descriptor still refers to it (a process the agent
 * is starting holds a copy of every descriptor until its exec): the close leaves it in epoll
 * unless the proxy takes it out first, and its next event then names a freed handle (a
 * use-after-free under ASan). Here the copies are the test's own dups, taken while the
 * proxy's end of a TCP connection is open; the proxy closes it (idle), and the client sends
 * another query into the still-open socket. */
#define FDS_SCANNED 1024 /* descriptors below it: the test's, the proxy's and the fakes' */

static void test_closed_socket_with_a_copy(void **state)
{
        dns_proxy_limits lim = { .tcp_idle_ms = 200 };
        struct sockaddr_in at = sin_of("127.0.0.10", free_port("127.0.0.10"));
        bool before[FDS_SCANNED] = { false };
        int originals[FDS_SCANNED], copies[FDS_SCANNED], n_copies = 0, c;
        dns_proxy *p = NULL;
        cs_error *err = NULL;
        uint8_t *wire, byte;
        ssize_t got;
        size_t len;
        ldns_pkt *r;

        (void)state;
        assert_int_equal(dns_proxy_new(&E.up->addr, 1, &lim, record_allow, &alog, &p, &err), 0);
        sandbox_add(p, "copy", &at, &E.allow);
        for (int fd = 0; fd < FDS_SCANNED; fd++)
                before[fd] = fcntl(fd, F_GETFD) >= 0;
        c = tcp_connect(&at);
        wire = query_wire("allowed.test", LDNS_RR_TYPE_A, 0, 7, &len);
        tcp_send_msg(c, wire, len);
        r = tcp_read_msg(c);
        assert_non_null(r);
        ldns_pkt_free(r);
        /* The proxy's end of c is among the descriptors opened since (the client's own and
         * any upstream socket are copied too: harmless). */
        for (int fd = 0; fd < FDS_SCANNED; fd++)
                if (!before[fd] && fd != c && fcntl(fd, F_GETFD) >= 0) {
                        originals[n_copies] = fd;
                        copies[n_copies] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
                        assert_true(copies[n_copies++] >= 0);
                }
        assert_true(n_copies >= 1);
        /* Idle: the proxy closes its end (its descriptor goes; the copies keep the socket). */
        for (int64_t end = now_ms() + 10000; now_ms() < end; sleep_ms(50)) {
                int still_open = 0;

                for (int i = 0; i < n_copies; i++)
                        still_open += fcntl(originals[i], F_GETFD) >= 0;
                if (still_open == 0)
                        break;
        }
        tcp_send_msg(c, wire, len);
        sleep_ms(300); /* the event, if the socket is still watched */
        for (int i = 0; i < n_copies; i++)
                close(copies[i]);
        /* The connection ends without an answer to the query sent after the close (reset:
         * the socket was closed with that query unread), and the proxy still serves. */
        got = read(c, &byte, 1);
        if (got != 0 && !(got < 0 && errno == ECONNRESET))
                fail_msg("after the close: read %zd (%s)", got, got < 0 ? strerror(errno) : "data");
        close(c);
        r = ask(&at, true, "allowed.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        ldns_pkt_free(r);
        free(wire);
        dns_proxy_free(p);
}

static void test_callback_failure_servfail(void **state)
{
        ldns_pkt *r;

        (void)state;
        pthread_mutex_lock(&alog.lock);
        alog.fail = true;
        pthread_mutex_unlock(&alog.lock);
        r = ask(&E.sb1, false, "allowed.test", LDNS_RR_TYPE_A, 0);
        assert_non_null(r);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        assert_int_equal(ldns_pkt_ancount(r), 0);
        ldns_pkt_free(r);
        log_reset();
}

static void test_add_errors(void **state)
{
        struct sockaddr_in at = sin_of("127.0.0.9", free_port("127.0.0.9"));
        char key[DNS_PROXY_KEY_MAX + 2];
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(dns_proxy_add(E.proxy, "sb1", (struct sockaddr *)&at, sizeof(at), NULL,
                                       &E.allow, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_ALREADY_EXISTS);
        cs_error_freep(&err);
        /* sb2's address, for another key: the bind fails. */
        assert_int_equal(dns_proxy_add(E.proxy, "other", (struct sockaddr *)&E.sb2, sizeof(E.sb2),
                                       NULL, &E.allow, &err),
                         -1);
        assert_non_null(strstr(err->msg, "bind"));
        cs_error_freep(&err);
        memset(key, 'k', sizeof(key) - 1);
        key[sizeof(key) - 1] = '\0';
        assert_int_equal(dns_proxy_add(E.proxy, key, (struct sockaddr *)&at, sizeof(at), NULL,
                                       &E.allow, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_freep(&err);
        /* Bound to an interface (loopback: allowed unprivileged on recent kernels). */
        if (dns_proxy_add(E.proxy, "lo", (struct sockaddr *)&at, sizeof(at), "lo", &E.allow,
                          &err) == 0) {
                ldns_pkt *r = ask(&at, false, "denied.test", LDNS_RR_TYPE_A, 0);

                assert_non_null(r);
                assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
                ldns_pkt_free(r);
                dns_proxy_remove(E.proxy, "lo");
        } else {
                print_message("SO_BINDTODEVICE not allowed here: %s\n", err->msg);
                cs_error_freep(&err);
        }
        /* still serving */
        expect_still_answering();
}

static void test_new_errors(void **state)
{
        struct sockaddr_storage none = { 0 };
        dns_proxy *p = NULL;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(dns_proxy_new(&none, 1, NULL, NULL, NULL, &p, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_freep(&err);
        assert_int_equal(dns_proxy_new(&E.up->addr, 0, NULL, NULL, NULL, &p, &err), -1);
        cs_error_freep(&err);
        dns_proxy_free(NULL);
}

static void test_resolv_conf(void **state)
{
        char path[] = "/tmp/test_dns_resolv_XXXXXX";
        int fd = mkstemp(path);
        const char text[] = "# generated\n"
                            "search example.com\n"
                            "nameserver 10.0.0.2\n"
                            "; another comment\n"
                            "nameserver   fe80::1%lo  # trailing\n"
                            "nameserver not-an-address\n"
                            "nameserver\n"
                            "options edns0\n"
                            "nameserver 2001:db8::53\n"
                            "nameserver 10.0.0.3\n";
        struct sockaddr_storage ns[4];
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)&ns[0];
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)&ns[1];
        char buf[INET6_ADDRSTRLEN];
        cs_error *err = NULL;
        size_t n = 0;

        (void)state;
        assert_true(fd >= 0);
        assert_int_equal(cs_write_all(fd, text, sizeof(text) - 1), 0);
        close(fd);
        assert_int_equal(dns_read_resolv_conf(path, ns, 3, &n, &err), 0);
        assert_int_equal(n, 3);
        assert_int_equal(ns[0].ss_family, AF_INET);
        assert_string_equal(inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)), "10.0.0.2");
        assert_int_equal(ntohs(in->sin_port), 53);
        assert_int_equal(ns[1].ss_family, AF_INET6);
        assert_string_equal(inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)), "fe80::1");
        assert_true(in6->sin6_scope_id != 0);
        assert_int_equal(ns[2].ss_family, AF_INET6);

        fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_int_equal(cs_write_all(fd, "search x\n", 9), 0);
        close(fd);
        assert_int_equal(dns_read_resolv_conf(path, ns, 3, &n, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_FAILED_PRECONDITION);
        cs_error_freep(&err);
        unlink(path);
        assert_int_equal(dns_read_resolv_conf(path, ns, 3, &n, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        cs_error_freep(&err);
}

/* --- the message functions alone -------------------------------------------------------- */

static dns_action msg_query(const char *name, ldns_rr_type t, const cs_netpolicy *pol,
                            dns_question *q, dns_out *out)
{
        size_t len;
        uint8_t *wire = query_wire(name, t, 4096, 0x4242, &len);
        dns_action a = dns_msg_query(wire, len, pol, q, out);

        free(wire);
        return a;
}

static void test_msg_query(void **state)
{
        dns_question q = { 0 };
        dns_out out;
        ldns_pkt *up = NULL;

        (void)state;
        assert_int_equal(msg_query("Allowed.TEST.", LDNS_RR_TYPE_A, &E.allow, &q, &out),
                         DNS_FORWARD);
        assert_string_equal(q.name, "allowed.test");
        assert_int_equal(q.id, 0x4242);
        assert_true(q.edns);
        assert_int_equal(q.udp_max, DNS_MSG_UDP_MAX);
        /* Upstream's query: made anew, id 0, EDNS cut to 1232. */
        assert_int_equal(ldns_wire2pkt(&up, out.wire, out.len), LDNS_STATUS_OK);
        assert_int_equal(ldns_pkt_id(up), 0);
        assert_int_equal(ldns_pkt_edns_udp_size(up), DNS_MSG_UDP_MAX);
        assert_true(ldns_pkt_rd(up));
        ldns_pkt_free(up);
        free(out.wire);
        dns_question_clear(&q);

        assert_int_equal(msg_query("x.allowed.test", LDNS_RR_TYPE_A, &E.allow, &q, &out),
                         DNS_ANSWER);
        assert_int_equal(out.rcode, LDNS_RCODE_REFUSED);
        free(out.wire);
        /* No policy, NONE: refused. */
        assert_int_equal(msg_query("allowed.test", LDNS_RR_TYPE_A, NULL, &q, &out), DNS_ANSWER);
        assert_int_equal(out.rcode, LDNS_RCODE_REFUSED);
        free(out.wire);
        {
                cs_netpolicy none = { .egress = CS_EGRESS_NONE };

                assert_int_equal(msg_query("allowed.test", LDNS_RR_TYPE_A, &none, &q, &out),
                                 DNS_ANSWER);
                assert_int_equal(out.rcode, LDNS_RCODE_REFUSED);
                free(out.wire);
        }
        /* The root: refused when listing, forwarded when open. */
        assert_int_equal(msg_query(".", LDNS_RR_TYPE_NS, &E.allow, &q, &out), DNS_ANSWER);
        free(out.wire);
        assert_int_equal(msg_query(".", LDNS_RR_TYPE_NS, &E.allow_open, &q, &out), DNS_FORWARD);
        assert_string_equal(q.name, "");
        free(out.wire);
        dns_question_clear(&q);
}

/* A reply to q from upstream, sent with id, holding records (text) and rcode. */
static uint8_t *msg_reply_wire(const dns_question *q, uint16_t id, uint8_t rcode,
                               const char *const *records, size_t n, size_t *len)
{
        ldns_pkt *r = ldns_pkt_new();
        ldns_rr *qrr = ldns_rr_new();
        uint8_t *wire;

        ldns_rr_set_owner(qrr, ldns_rdf_clone(q->qname));
        ldns_rr_set_type(qrr, q->qtype);
        ldns_rr_set_class(qrr, LDNS_RR_CLASS_IN);
        ldns_rr_set_question(qrr, true);
        ldns_pkt_push_rr(r, LDNS_SECTION_QUESTION, qrr);
        ldns_pkt_set_id(r, id);
        ldns_pkt_set_qr(r, true);
        ldns_pkt_set_rcode(r, rcode);
        for (size_t i = 0; i < n; i++)
                rr_add(r, records[i]);
        wire = pkt_wire(r, len);
        ldns_pkt_free(r);
        return wire;
}

static void test_msg_reply(void **state)
{
        static const char *const recs[] = { "allowed.test. 10 IN A 192.0.2.1",
                                            "allowed.test. 20 IN A 192.0.2.1",
                                            "allowed.test. 99999999 IN AAAA 2001:db8::9",
                                            "other.test. 10 IN A 192.0.2.3" };
        dns_addr addrs[DNS_PROXY_ADDRS_MAX];
        dns_question q = { 0 };
        dns_out out;
        size_t len, n;
        uint8_t *wire;
        ldns_pkt *r = NULL;

        (void)state;
        assert_int_equal(msg_query("allowed.test", LDNS_RR_TYPE_A, &E.allow, &q, &out),
                         DNS_FORWARD);
        free(out.wire);
        wire = msg_reply_wire(&q, 0x1111, LDNS_RCODE_NOERROR, recs, ARRAY_SIZE(recs), &len);
        /* Another id: not ours. */
        assert_int_equal(dns_msg_reply(wire, len, 0x1112, &q, 1232, true, addrs, &n, &out),
                         DNS_REPLY_BAD);
        assert_int_equal(dns_msg_reply(wire, len, 0x1111, &q, 1232, true, addrs, &n, &out),
                         DNS_REPLY_FORWARD);
        /* The repeated address once, with the longer TTL; the AAAA capped; not other.test. */
        assert_int_equal(n, 2);
        assert_int_equal(addrs[0].family, AF_INET);
        assert_int_equal(addrs[0].ttl_s, DNS_PROXY_TTL_FLOOR_S);
        assert_int_equal(addrs[1].family, AF_INET6);
        assert_int_equal(addrs[1].ttl_s, DNS_PROXY_TTL_CAP_S);
        assert_int_equal(ldns_wire2pkt(&r, out.wire, out.len), LDNS_STATUS_OK);
        assert_int_equal(ldns_pkt_id(r), 0x4242);
        assert_int_equal(ldns_pkt_ancount(r), 4);
        ldns_pkt_free(r);
        free(out.wire);
        /* Not collecting (OPEN): no addresses. */
        assert_int_equal(dns_msg_reply(wire, len, 0x1111, &q, 1232, false, addrs, &n, &out),
                         DNS_REPLY_FORWARD);
        assert_int_equal(n, 0);
        free(out.wire);
        /* Too large for the client's UDP size: TC, no records, no addresses. */
        assert_int_equal(dns_msg_reply(wire, len, 0x1111, &q, 60, true, addrs, &n, &out),
                         DNS_REPLY_FORWARD);
        assert_int_equal(n, 0);
        assert_int_equal(ldns_wire2pkt(&r, out.wire, out.len), LDNS_STATUS_OK);
        assert_true(ldns_pkt_tc(r));
        assert_int_equal(ldns_pkt_ancount(r), 0);
        ldns_pkt_free(r);
        free(out.wire);
        /* Cut short: not a reply. */
        assert_int_equal(dns_msg_reply(wire, len - 1, 0x1111, &q, 1232, true, addrs, &n, &out),
                         DNS_REPLY_BAD);
        free(wire);

        wire = msg_reply_wire(&q, 0x1111, LDNS_RCODE_SERVFAIL, NULL, 0, &len);
        assert_int_equal(dns_msg_reply(wire, len, 0x1111, &q, 1232, true, addrs, &n, &out),
                         DNS_REPLY_RETRY);
        free(out.wire);
        free(wire);
        dns_question_clear(&q);
}

/* Two TSIG records in the additional section. ldns 1.8.3's ldns_wire2pkt lowers ARCOUNT as it
 * meets a TSIG, inside the loop that counts to ARCOUNT, and keeps only the last TSIG without
 * freeing the ones before: TSIG, A, TSIG with ARCOUNT 5 parses "fine" and leaks the first
 * (640 bytes a message, measured). Under ASan, a regression here is a leak report. */
static void test_msg_two_tsigs(void **state)
{
        /* Owner root, TSIG, ANY, TTL 0, 17 bytes: algorithm ".", time, fudge, no MAC, the
         * original id, no error, no other data. */
        static const uint8_t tsig[] = { 0x00, 0x00, 0xfa, 0x00, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00,
                                        0x11, 0x00, 0x00, 0x00, 0x65, 0x00, 0x00, 0x00, 0x01, 0x2c,
                                        0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00 };
        static const uint8_t a[] = { 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00,
                                     0x3c, 0x00, 0x04, 0x01, 0x02, 0x03, 0x04 };
        dns_addr addrs[DNS_PROXY_ADDRS_MAX];
        dns_question q = { 0 };
        dns_out out;
        uint8_t *base, *wire;
        size_t len, blen, n;
        ldns_pkt *r = NULL;

        (void)state;
        assert_int_equal(msg_query("allowed.test", LDNS_RR_TYPE_A, &E.allow, &q, &out),
                         DNS_FORWARD);
        free(out.wire);
        base = msg_reply_wire(&q, 9, LDNS_RCODE_NOERROR, NULL, 0, &blen);
        len = blen + 2 * sizeof(tsig) + sizeof(a);
        wire = malloc(len);
        memcpy(wire, base, blen);
        memcpy(wire + blen, tsig, sizeof(tsig));
        memcpy(wire + blen + sizeof(tsig), a, sizeof(a));
        memcpy(wire + blen + sizeof(tsig) + sizeof(a), tsig, sizeof(tsig));
        free(base);
        /* One TSIG parses (the message is well formed). */
        wire[11] = 1;
        assert_int_equal(ldns_wire2pkt(&r, wire, blen + sizeof(tsig)), LDNS_STATUS_OK);
        assert_non_null(ldns_pkt_tsig(r));
        ldns_pkt_free(r);
        /* Both, with the count that makes ldns meet the second: refused, nothing lost. */
        wire[11] = 5;
        for (int i = 0; i < 1000; i++)
                assert_int_equal(dns_msg_reply(wire, len, 9, &q, 1232, true, addrs, &n, &out),
                                 DNS_REPLY_BAD);
        wire[11] = 3;
        assert_int_equal(dns_msg_reply(wire, len, 9, &q, 1232, true, addrs, &n, &out),
                         DNS_REPLY_BAD);
        /* As a query too (FORMERR: a query holds an OPT at most). */
        wire[2] &= 0x7f;
        wire[11] = 5;
        assert_int_equal(dns_msg_query(wire, len, &E.allow, &q, &out), DNS_ANSWER);
        assert_int_equal(out.rcode, LDNS_RCODE_FORMERR);
        free(out.wire);
        free(wire);
        dns_question_clear(&q);
}

int main(void)
{
        /* A connection the proxy closed must not end the test when written to. */
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_allowed_answered_and_allowed, test_setup),
                cmocka_unit_test_setup(test_denied_refused_without_upstream, test_setup),
                cmocka_unit_test_setup(test_wildcard_and_cname_chain, test_setup),
                cmocka_unit_test_setup(test_ttl_capped, test_setup),
                cmocka_unit_test_setup(test_open_forwards_all_without_callback, test_setup),
                cmocka_unit_test_setup(test_truncated_then_tcp, test_setup),
                cmocka_unit_test_setup(test_addresses_capped, test_setup),
                cmocka_unit_test_setup(test_bad_queries, test_setup),
                cmocka_unit_test_setup(test_hostile_queries, test_setup),
                cmocka_unit_test_setup(test_hostile_upstream, test_setup),
                cmocka_unit_test_setup(test_flood_costs_its_sandbox_only, test_setup),
                cmocka_unit_test_setup(test_remove_with_queries_in_flight, test_setup),
                cmocka_unit_test_setup(test_timeouts_next_upstream, test_setup),
                cmocka_unit_test_setup(test_caps, test_setup),
                cmocka_unit_test_setup(test_closed_socket_with_a_copy, test_setup),
                cmocka_unit_test_setup(test_callback_failure_servfail, test_setup),
                cmocka_unit_test_setup(test_add_errors, test_setup),
                cmocka_unit_test(test_new_errors),
                cmocka_unit_test(test_resolv_conf),
                cmocka_unit_test(test_msg_query),
                cmocka_unit_test(test_msg_reply),
                cmocka_unit_test(test_msg_two_tsigs),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
