/* The sandboxes' DNS resolver: see dns_proxy.h. Owns its thread, its epoll instance and every
 * socket it opens (each sandbox's listeners and TCP connections, one socket per upstream
 * attempt); the messages themselves are dns_proxy_msg.c's.
 *
 * The loop's state (sandboxes, connections, queries, timers) belongs to the proxy's thread
 * alone. Other threads reach it only through commands (dns_proxy_add/remove), which the loop
 * runs at the top of a turn, between two epoll batches: nothing is freed there while an event
 * still points at it. Inside a batch, a connection or query that ends is only marked dead (its
 * fd closed) and freed once the batch is done, so that a later event of the same batch finds
 * it dead instead of freed. */
#include "dns_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dns_proxy_msg.h"
#include "util.h"

/* Datagrams read from one sandbox's UDP socket per loop turn: a flood waits for its next turn
 * (and overflows its own socket buffer) while the other sandboxes are served in between. */
#define DNS_PROXY_UDP_BURST 16
/* Connections accepted from one sandbox's listener per turn. */
#define DNS_PROXY_ACCEPT_BURST 4
/* Datagrams read from one upstream socket per turn (a bad one does not end the attempt). */
#define DNS_PROXY_UPSTREAM_BURST 4
/* Bytes waiting to be written to one TCP connection: two full-size answers; a client that
 * lets more pile up is closed. */
#define DNS_PROXY_TCP_WBUF_MAX   (2 * (DNS_MSG_TCP_MAX + 2))
#define DNS_PROXY_EVENTS         64
#define DNS_PROXY_LISTEN_BACKLOG 16
/* A resolv.conf larger than this is not one. */
#define DNS_RESOLV_CONF_MAX (64 * 1024)

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define STAT_INC(p, field)              __atomic_fetch_add(&(p)->stats.field, 1, __ATOMIC_RELAXED)

/* --- intrusive lists -------------------------------------------------------------------- */

typedef struct dlink {
        struct dlink *prev, *next;
} dlink;

static void dlink_init(dlink *l)
{
        l->prev = l->next = l;
}

static bool dlink_empty(const dlink *l)
{
        return l->next == l;
}

static void dlink_append(dlink *head, dlink *l)
{
        l->prev = head->prev;
        l->next = head;
        head->prev->next = l;
        head->prev = l;
}

static void dlink_remove(dlink *l)
{
        l->prev->next = l->next;
        l->next->prev = l->prev;
        dlink_init(l);
}

/* --- state ------------------------------------------------------------------------------ */

/* What an epoll event points at. */
typedef enum handle_kind {
        H_WAKE,     /* the eventfd that announces commands */
        H_UDP,      /* a sandbox's UDP socket (dns_sandbox.udp) */
        H_LISTEN,   /* a sandbox's TCP listener (dns_sandbox.listen) */
        H_CONN,     /* a sandbox's TCP connection (dns_conn) */
        H_UPSTREAM, /* a query's upstream socket (dns_query) */
} handle_kind;

typedef struct handle {
        handle_kind kind;
        int fd;
        bool dead; /* ended in this batch: its events are ignored */
        struct handle *next_dead;
} handle;

typedef struct dns_sandbox {
        dlink link; /* dns_proxy.sandboxes */
        char *key;
        cs_netpolicy policy;
        handle udp, listen;
        dlink conns; /* dns_conn.sb_link */
        size_t n_conns;
        dlink queries; /* dns_query.sb_link */
        size_t n_queries;
        int64_t tokens; /* thousandths of a query */
        int64_t refilled_ms;
} dns_sandbox;

typedef struct dns_conn {
        handle h;
        dns_sandbox *sb;
        dlink sb_link;
        dlink timer_link; /* dns_proxy.conn_timers, by deadline */
        int64_t deadline;
        size_t pending; /* queries whose answer comes here */
        bool eof;       /* the client is done sending: close once the answers are out */
        uint32_t events;
        uint8_t rbuf[2 + DNS_MSG_QUERY_MAX];
        size_t rlen;
        uint8_t *wbuf;
        size_t wlen, woff, wcap;
} dns_conn;

typedef struct dns_query {
        handle h; /* the current attempt's socket; fd -1 between attempts */
        dns_sandbox *sb;
        dlink sb_link;
        dlink timer_link; /* dns_proxy.query_timers, by deadline */
        int64_t deadline;
        dns_question q;
        uint8_t *wire;   /* a 2-byte length (for TCP), then the query for upstream */
        size_t wire_len; /* of the query, without the length */
        uint16_t up_id;  /* the current attempt's id */
        size_t attempts; /* upstreams tried: the current one is upstreams[attempts - 1] */
        bool tcp;        /* the sandbox's transport, and so upstream's */
        struct sockaddr_storage client; /* UDP: where the answer goes */
        socklen_t client_len;
        dns_conn *conn; /* TCP: where the answer goes */
        dns_out last;   /* a SERVFAIL or REFUSED reply, sent if no other upstream does better */
        /* TCP upstream: bytes of wire sent, then the reply's length and body. */
        bool connecting;
        size_t woff;
        uint8_t lenbuf[2];
        size_t lgot;
        uint8_t *rbuf;
        size_t rlen, rgot;
} dns_query;

typedef enum cmd_op {
        CMD_ADD,
        CMD_REMOVE,
} cmd_op;

/* A request of another thread, on its stack until done. */
typedef struct dns_cmd {
        cmd_op op;
        dns_sandbox *sb; /* CMD_ADD: the loop's if rc is 0 */
        const char *key; /* CMD_REMOVE */
        int rc;          /* 0 or -errno */
        bool done;
        struct dns_cmd *next;
} dns_cmd;

struct dns_proxy {
        struct sockaddr_storage upstreams[DNS_PROXY_UPSTREAMS_MAX];
        size_t n_upstreams;
        dns_proxy_limits lim;
        dns_allow_fn fn;
        void *data;
        int epfd;
        handle wake;
        pthread_t thread;
        bool running;

        pthread_mutex_t lock; /* cmds, stop, dns_cmd.done */
        pthread_cond_t cond;
        dns_cmd *cmds, **cmds_tail;
        bool stop;

        /* The loop's own. */
        dlink sandboxes;
        dlink conn_timers, query_timers;
        size_t n_queries;
        handle *dead;
        dns_proxy_stats stats; /* written by the loop, read by dns_proxy_get_stats */
        uint8_t buf[DNS_MSG_TCP_MAX + 1];
};

static void conn_update(dns_proxy *p, dns_conn *c);

/* --- handles ---------------------------------------------------------------------------- */

static int ep_set(dns_proxy *p, int op, handle *h, uint32_t events)
{
        struct epoll_event ev = { .events = events, .data.ptr = h };

        return epoll_ctl(p->epfd, op, h->fd, &ev);
}

/* Takes h's fd out of epoll and closes it. The removal is explicit: a close takes an fd out
 * of epoll only when no other descriptor refers to the same open file, and a process the
 * agent is starting holds a copy of every descriptor until its exec (proc.c closes them in
 * the child): an event for a freed handle came back then (ASan, e2e.network's DNS flood). */
static void handle_unwatch(dns_proxy *p, handle *h)
{
        if (h->fd >= 0) {
                epoll_ctl(p->epfd, EPOLL_CTL_DEL, h->fd, NULL);
                close(h->fd);
        }
        h->fd = -1;
}

/* Unwatches h and frees its object after the batch. */
static void handle_bury(dns_proxy *p, handle *h)
{
        handle_unwatch(p, h);
        h->dead = true;
        h->next_dead = p->dead;
        p->dead = h;
}

static void conn_free(dns_conn *c)
{
        free(c->wbuf);
        free(c);
}

static void query_free(dns_query *qr)
{
        dns_question_clear(&qr->q);
        free(qr->wire);
        free(qr->last.wire);
        free(qr->rbuf);
        free(qr);
}

static void graveyard_free(dns_proxy *p)
{
        while (p->dead) {
                handle *h = p->dead;

                p->dead = h->next_dead;
                if (h->kind == H_CONN)
                        conn_free(container_of(h, dns_conn, h));
                else if (h->kind == H_UPSTREAM)
                        query_free(container_of(h, dns_query, h));
        }
}

/* --- answers to the sandbox ------------------------------------------------------------- */

static void conn_close(dns_proxy *p, dns_conn *c);

static void conn_touch(dns_proxy *p, dns_conn *c, int64_t now)
{
        c->deadline = now + p->lim.tcp_idle_ms;
        dlink_remove(&c->timer_link);
        dlink_append(&p->conn_timers, &c->timer_link);
}

static void conn_flush(dns_proxy *p, dns_conn *c, int64_t now)
{
        while (c->woff < c->wlen) {
                ssize_t n = send(c->h.fd, c->wbuf + c->woff, c->wlen - c->woff,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                break;
                        conn_close(p, c);
                        return;
                }
                c->woff += (size_t)n;
                conn_touch(p, c, now);
        }
        if (c->woff == c->wlen)
                c->woff = c->wlen = 0;
        conn_update(p, c);
}

/* Queues one message (its length prefixed) for c and writes what the socket takes now. */
static void conn_queue(dns_proxy *p, dns_conn *c, const uint8_t *wire, size_t len, int64_t now)
{
        size_t need;

        if (c->h.dead)
                return;
        if (c->wlen - c->woff + 2 + len > DNS_PROXY_TCP_WBUF_MAX) {
                /* The client does not read its answers. */
                conn_close(p, c);
                return;
        }
        if (c->woff > 0) {
                memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
                c->wlen -= c->woff;
                c->woff = 0;
        }
        need = c->wlen + 2 + len;
        if (need > c->wcap) {
                size_t cap = c->wcap * 2 > need ? c->wcap * 2 : need;
                uint8_t *buf;

                if (cap > DNS_PROXY_TCP_WBUF_MAX)
                        cap = DNS_PROXY_TCP_WBUF_MAX;
                buf = cs_xmalloc(cap);
                if (c->wlen > 0)
                        memcpy(buf, c->wbuf, c->wlen);
                free(c->wbuf);
                c->wbuf = buf;
                c->wcap = cap;
        }
        ldns_write_uint16(c->wbuf + c->wlen, (uint16_t)len);
        memcpy(c->wbuf + c->wlen + 2, wire, len);
        c->wlen += 2 + len;
        conn_flush(p, c, now);
}

/* Sends an answer to the sandbox: to from over UDP, or on conn. */
static void client_send(dns_proxy *p, dns_sandbox *sb, const struct sockaddr_storage *from,
                        socklen_t from_len, dns_conn *conn, const dns_out *out, int64_t now)
{
        if (conn)
                conn_queue(p, conn, out->wire, out->len, now);
        else
                /* A full socket buffer loses the answer, as the network could: the client
                 * asks again. */
                (void)sendto(sb->udp.fd, out->wire, out->len, MSG_DONTWAIT | MSG_NOSIGNAL,
                             (const struct sockaddr *)from, from_len);
}

/* --- queries upstream ------------------------------------------------------------------- */

static socklen_t sockaddr_len(const struct sockaddr_storage *ss)
{
        return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* Ends qr: it leaves its sandbox and timers, its socket closes, and it is freed after the
 * batch. Its connection, if any, may close if it was waiting for this answer only. */
static void query_end(dns_proxy *p, dns_query *qr)
{
        dns_conn *c = qr->conn;

        if (qr->h.dead)
                return;
        dlink_remove(&qr->sb_link);
        dlink_remove(&qr->timer_link);
        qr->sb->n_queries--;
        p->n_queries--;
        qr->conn = NULL;
        handle_bury(p, &qr->h);
        if (c) {
                c->pending--;
                conn_update(p, c);
        }
}

static void query_send(dns_proxy *p, dns_query *qr, const dns_out *out, int64_t now)
{
        if (qr->tcp && !qr->conn)
                return;
        client_send(p, qr->sb, &qr->client, qr->client_len, qr->conn, out, now);
}

/* No upstream answered better: the last SERVFAIL or REFUSED one got, else SERVFAIL. */
static void query_fail(dns_proxy *p, dns_query *qr, int64_t now)
{
        dns_out out;

        if (qr->last.wire) {
                query_send(p, qr, &qr->last, now);
        } else if (dns_msg_error(&qr->q, LDNS_RCODE_SERVFAIL, &out) == 0) {
                STAT_INC(p, servfail);
                query_send(p, qr, &out, now);
                free(out.wire);
        }
        query_end(p, qr);
}

/* Opens the socket of attempt qr->attempts (connected to its upstream, a fresh id) and sends
 * the query, or starts connecting. -1 if the upstream cannot be tried now. */
static int upstream_open(dns_proxy *p, dns_query *qr)
{
        const struct sockaddr_storage *up = &p->upstreams[qr->attempts - 1];
        _cleanup_close_ int fd = -1;
        uint16_t id;

        fd = socket(up->ss_family,
                    (qr->tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
                return -1;
        qr->up_id = id;
        ldns_write_uint16(qr->wire + 2, id);
        /* Connected, a UDP socket gets datagrams from the upstream's address and port only,
         * at a source port the kernel chose at random. */
        if (connect(fd, (const struct sockaddr *)up, sockaddr_len(up)) < 0 &&
            !(qr->tcp && errno == EINPROGRESS))
                return -1;
        if (!qr->tcp && send(fd, qr->wire + 2, qr->wire_len, MSG_DONTWAIT | MSG_NOSIGNAL) !=
                                (ssize_t)qr->wire_len)
                return -1;
        qr->connecting = qr->tcp;
        qr->woff = qr->lgot = qr->rlen = qr->rgot = 0;
        free(qr->rbuf);
        qr->rbuf = NULL;
        qr->h.fd = fd;
        if (ep_set(p, EPOLL_CTL_ADD, &qr->h, qr->tcp ? EPOLLOUT : EPOLLIN) < 0) {
                qr->h.fd = -1;
                return -1;
        }
        TAKE_FD(fd);
        STAT_INC(p, forwarded);
        return 0;
}

/* Moves qr to its next upstream (closing the current attempt's socket); past the last one,
 * the query fails. */
static void query_attempt(dns_proxy *p, dns_query *qr, int64_t now)
{
        handle_unwatch(p, &qr->h);
        while (qr->attempts < p->n_upstreams) {
                qr->attempts++;
                if (upstream_open(p, qr) == 0) {
                        qr->deadline = now + p->lim.upstream_timeout_ms;
                        dlink_remove(&qr->timer_link);
                        dlink_append(&p->query_timers, &qr->timer_link);
                        return;
                }
        }
        query_fail(p, qr, now);
}

/* An upstream reply for qr. false if it is not one (the attempt goes on over UDP). */
static bool query_reply(dns_proxy *p, dns_query *qr, const uint8_t *wire, size_t len, int64_t now)
{
        dns_addr addrs[DNS_PROXY_ADDRS_MAX];
        bool collect = qr->sb->policy.egress == CS_EGRESS_ALLOWLIST;
        size_t n = 0;
        dns_out out;

        switch (dns_msg_reply(wire, len, qr->up_id, &qr->q,
                              qr->tcp ? DNS_MSG_TCP_MAX : qr->q.udp_max, collect, addrs, &n,
                              &out)) {
        case DNS_REPLY_BAD:
                STAT_INC(p, upstream_bad);
                return false;
        case DNS_REPLY_RETRY:
                if (qr->attempts < p->n_upstreams) {
                        free(qr->last.wire);
                        qr->last = out;
                        query_attempt(p, qr, now);
                        return true;
                }
                break;
        case DNS_REPLY_FORWARD:
                break;
        }
        if (n > 0 && p->fn && p->fn(p->data, qr->sb->key, qr->q.name, addrs, n) < 0) {
                /* The addresses could not be allowed: an answer would only lead to drops. */
                free(out.wire);
                if (dns_msg_error(&qr->q, LDNS_RCODE_SERVFAIL, &out) < 0)
                        out = (dns_out){ 0 };
                STAT_INC(p, servfail);
        }
        if (out.wire)
                query_send(p, qr, &out, now);
        free(out.wire);
        query_end(p, qr);
        return true;
}

static void upstream_udp_event(dns_proxy *p, dns_query *qr, int64_t now)
{
        for (int i = 0; i < DNS_PROXY_UPSTREAM_BURST; i++) {
                ssize_t n = recv(qr->h.fd, p->buf, sizeof(p->buf), MSG_DONTWAIT | MSG_TRUNC);

                if (n < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                                return;
                        /* ECONNREFUSED (ICMP) and the like: this upstream is no use. */
                        query_attempt(p, qr, now);
                        return;
                }
                if ((size_t)n > sizeof(p->buf)) {
                        STAT_INC(p, upstream_bad);
                        continue;
                }
                if (query_reply(p, qr, p->buf, (size_t)n, now))
                        return;
        }
}

/* Reads what the socket has of the reply's length and body: 1 once complete, 0 for more to
 * come, -1 if the connection failed or ended early. */
static int upstream_tcp_read(dns_query *qr)
{
        for (;;) {
                uint8_t *dst = qr->lgot < 2 ? qr->lenbuf + qr->lgot : qr->rbuf + qr->rgot;
                size_t want = qr->lgot < 2 ? 2 - qr->lgot : qr->rlen - qr->rgot;
                ssize_t n = recv(qr->h.fd, dst, want, MSG_DONTWAIT);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
                if (n == 0)
                        return -1;
                if (qr->lgot < 2) {
                        qr->lgot += (size_t)n;
                        if (qr->lgot < 2)
                                continue;
                        qr->rlen = ldns_read_uint16(qr->lenbuf);
                        if (qr->rlen < LDNS_HEADER_SIZE)
                                return -1;
                        qr->rbuf = cs_xmalloc(qr->rlen);
                        continue;
                }
                qr->rgot += (size_t)n;
                if (qr->rgot == qr->rlen)
                        return 1;
        }
}

/* Writes what the socket takes of the query: 1 once all of it is out, 0 for more to come, -1
 * if the connection failed. */
static int upstream_tcp_write(dns_query *qr)
{
        size_t total = 2 + qr->wire_len;

        while (qr->woff < total) {
                ssize_t n = send(qr->h.fd, qr->wire + qr->woff, total - qr->woff,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
                qr->woff += (size_t)n;
        }
        return 1;
}

static void upstream_tcp_event(dns_proxy *p, dns_query *qr, uint32_t events, int64_t now)
{
        int r;

        if (qr->connecting) {
                int e = 0;
                socklen_t elen = sizeof(e);

                if (getsockopt(qr->h.fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0 || e != 0)
                        goto next;
                qr->connecting = false;
        }
        if (qr->woff < 2 + qr->wire_len) {
                r = upstream_tcp_write(qr);
                if (r < 0 || (r > 0 && ep_set(p, EPOLL_CTL_MOD, &qr->h, EPOLLIN) < 0))
                        goto next;
                return;
        }
        if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return;
        r = upstream_tcp_read(qr);
        if (r == 0)
                return;
        /* One reply per connection: one that does not answer ends this attempt. */
        if (r > 0 && query_reply(p, qr, qr->rbuf, qr->rlen, now))
                return;
next:
        query_attempt(p, qr, now);
}

/* --- queries from the sandbox ----------------------------------------------------------- */

static bool bucket_take(const dns_proxy *p, dns_sandbox *sb, int64_t now)
{
        int64_t cap = (int64_t)p->lim.burst * 1000;

        if (now > sb->refilled_ms) {
                sb->tokens += (now - sb->refilled_ms) * (int64_t)p->lim.rate_qps;
                if (sb->tokens > cap)
                        sb->tokens = cap;
                sb->refilled_ms = now;
        }
        if (sb->tokens < 1000)
                return false;
        sb->tokens -= 1000;
        return true;
}

static dns_query *query_new(dns_proxy *p, dns_sandbox *sb, dns_question *q, dns_out *out,
                            const struct sockaddr_storage *from, socklen_t from_len, dns_conn *conn)
{
        dns_query *qr = cs_xcalloc(1, sizeof(*qr));

        qr->h = (handle){ .kind = H_UPSTREAM, .fd = -1 };
        qr->sb = sb;
        dlink_init(&qr->timer_link);
        dlink_append(&sb->queries, &qr->sb_link);
        sb->n_queries++;
        p->n_queries++;
        qr->q = *q;
        *q = (dns_question){ 0 };
        qr->wire = cs_xmalloc(2 + out->len);
        ldns_write_uint16(qr->wire, (uint16_t)out->len);
        memcpy(qr->wire + 2, out->wire, out->len);
        qr->wire_len = out->len;
        free(out->wire);
        *out = (dns_out){ 0 };
        qr->tcp = conn != NULL;
        qr->conn = conn;
        if (conn)
                conn->pending++;
        else {
                memcpy(&qr->client, from, from_len);
                qr->client_len = from_len;
        }
        return qr;
}

/* One query from sb (from over UDP, or on conn). */
static void sandbox_query(dns_proxy *p, dns_sandbox *sb, const uint8_t *wire, size_t len,
                          const struct sockaddr_storage *from, socklen_t from_len, dns_conn *conn,
                          int64_t now)
{
        dns_question q = { 0 };
        dns_out out, err;

        STAT_INC(p, queries);
        if (!bucket_take(p, sb, now)) {
                STAT_INC(p, dropped);
                return;
        }
        switch (dns_msg_query(wire, len, &sb->policy, &q, &out)) {
        case DNS_DROP:
                STAT_INC(p, dropped);
                return;
        case DNS_ANSWER:
                STAT_INC(p, refused);
                client_send(p, sb, from, from_len, conn, &out, now);
                free(out.wire);
                return;
        case DNS_FORWARD:
                break;
        }
        if (sb->n_queries >= p->lim.max_inflight || p->n_queries >= p->lim.max_inflight_total) {
                STAT_INC(p, servfail);
                if (dns_msg_error(&q, LDNS_RCODE_SERVFAIL, &err) == 0) {
                        client_send(p, sb, from, from_len, conn, &err, now);
                        free(err.wire);
                }
                free(out.wire);
                dns_question_clear(&q);
                return;
        }
        query_attempt(p, query_new(p, sb, &q, &out, from, from_len, conn), now);
}

static void udp_event(dns_proxy *p, dns_sandbox *sb, int64_t now)
{
        for (int i = 0; i < DNS_PROXY_UDP_BURST; i++) {
                struct sockaddr_storage from;
                socklen_t from_len = sizeof(from);
                ssize_t n = recvfrom(sb->udp.fd, p->buf, DNS_MSG_QUERY_MAX + 1,
                                     MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from, &from_len);

                if (n < 0)
                        return;
                if ((size_t)n > DNS_MSG_QUERY_MAX) {
                        STAT_INC(p, queries);
                        STAT_INC(p, dropped);
                        continue;
                }
                sandbox_query(p, sb, p->buf, (size_t)n, &from, from_len, NULL, now);
        }
}

/* --- TCP connections -------------------------------------------------------------------- */

static void conn_close(dns_proxy *p, dns_conn *c)
{
        dlink *l, *next;

        if (c->h.dead)
                return;
        dlink_remove(&c->sb_link);
        dlink_remove(&c->timer_link);
        c->sb->n_conns--;
        /* Its queries go with it: no one is left to answer, and they hold the sandbox's
         * budget. */
        for (l = c->sb->queries.next; l != &c->sb->queries; l = next) {
                dns_query *qr = container_of(l, dns_query, sb_link);

                next = l->next;
                if (qr->conn == c) {
                        qr->conn = NULL;
                        query_end(p, qr);
                }
        }
        handle_bury(p, &c->h);
}

/* Closes c once the client is done and has its answers; otherwise sets the events it waits
 * for. */
static void conn_update(dns_proxy *p, dns_conn *c)
{
        uint32_t events;

        if (c->h.dead)
                return;
        if (c->eof && c->pending == 0 && c->woff == c->wlen) {
                conn_close(p, c);
                return;
        }
        events = (c->eof ? 0 : EPOLLIN) | (c->woff < c->wlen ? EPOLLOUT : 0);
        if (events != c->events) {
                if (ep_set(p, EPOLL_CTL_MOD, &c->h, events) < 0) {
                        conn_close(p, c);
                        return;
                }
                c->events = events;
        }
}

static void conn_read(dns_proxy *p, dns_conn *c, int64_t now)
{
        ssize_t n = recv(c->h.fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen, MSG_DONTWAIT);

        if (n == 0) {
                c->eof = true;
                conn_update(p, c);
                return;
        }
        if (n < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                        conn_close(p, c);
                return;
        }
        c->rlen += (size_t)n;
        while (!c->h.dead && c->rlen >= 2) {
                size_t mlen = ldns_read_uint16(c->rbuf);

                if (mlen == 0 || mlen > DNS_MSG_QUERY_MAX) {
                        /* No query is that long: not a DNS client, or not one to serve. */
                        STAT_INC(p, queries);
                        STAT_INC(p, dropped);
                        conn_close(p, c);
                        return;
                }
                if (c->rlen < 2 + mlen)
                        return;
                conn_touch(p, c, now);
                sandbox_query(p, c->sb, c->rbuf + 2, mlen, NULL, 0, c, now);
                memmove(c->rbuf, c->rbuf + 2 + mlen, c->rlen - 2 - mlen);
                c->rlen -= 2 + mlen;
        }
}

static void conn_event(dns_proxy *p, dns_conn *c, uint32_t events, int64_t now)
{
        if (events & EPOLLERR) {
                conn_close(p, c);
                return;
        }
        if (events & EPOLLOUT)
                conn_flush(p, c, now);
        if (!c->h.dead && !c->eof && (events & (EPOLLIN | EPOLLHUP)))
                conn_read(p, c, now);
        /* Both directions shut: no answer can go out any more. */
        if (!c->h.dead && (events & EPOLLHUP))
                conn_close(p, c);
}

static void listen_event(dns_proxy *p, dns_sandbox *sb, int64_t now)
{
        for (int i = 0; i < DNS_PROXY_ACCEPT_BURST; i++) {
                int fd = accept4(sb->listen.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                dns_conn *c;

                if (fd < 0)
                        return;
                if (sb->n_conns >= p->lim.max_tcp_conns) {
                        /* Closed at once rather than left in the backlog: the client learns
                         * now, and the sandbox's slow connections cost it alone. */
                        close(fd);
                        STAT_INC(p, tcp_refused);
                        continue;
                }
                c = cs_xcalloc(1, sizeof(*c));
                c->h = (handle){ .kind = H_CONN, .fd = fd };
                c->sb = sb;
                c->events = EPOLLIN;
                if (ep_set(p, EPOLL_CTL_ADD, &c->h, c->events) < 0) {
                        close(fd);
                        free(c);
                        continue;
                }
                dlink_append(&sb->conns, &c->sb_link);
                sb->n_conns++;
                dlink_init(&c->timer_link);
                conn_touch(p, c, now);
        }
}

/* --- the loop --------------------------------------------------------------------------- */

static void event_run(dns_proxy *p, handle *h, uint32_t events, int64_t now)
{
        uint64_t v;

        if (h->dead)
                return;
        switch (h->kind) {
        case H_WAKE:
                (void)!read(h->fd, &v, sizeof(v));
                break;
        case H_UDP:
                udp_event(p, container_of(h, dns_sandbox, udp), now);
                break;
        case H_LISTEN:
                listen_event(p, container_of(h, dns_sandbox, listen), now);
                break;
        case H_CONN:
                conn_event(p, container_of(h, dns_conn, h), events, now);
                break;
        case H_UPSTREAM: {
                dns_query *qr = container_of(h, dns_query, h);

                if (qr->tcp)
                        upstream_tcp_event(p, qr, events, now);
                else
                        upstream_udp_event(p, qr, now);
                break;
        }
        }
}

static void timers_run(dns_proxy *p, int64_t now)
{
        while (!dlink_empty(&p->query_timers)) {
                dns_query *qr = container_of(p->query_timers.next, dns_query, timer_link);

                if (qr->deadline > now)
                        break;
                STAT_INC(p, upstream_timeouts);
                /* Either moves it to the end of the list, later, or ends it. */
                query_attempt(p, qr, now);
        }
        while (!dlink_empty(&p->conn_timers)) {
                dns_conn *c = container_of(p->conn_timers.next, dns_conn, timer_link);

                if (c->deadline > now)
                        break;
                /* Waiting for upstream is not idling; not reading its answers is. */
                if (c->pending > 0 && c->woff == c->wlen)
                        conn_touch(p, c, now);
                else
                        conn_close(p, c);
        }
}

/* epoll_wait's timeout: until the first deadline. */
static int timers_next(const dns_proxy *p, int64_t now)
{
        int64_t next = INT64_MAX;

        if (!dlink_empty(&p->query_timers))
                next = container_of(p->query_timers.next, dns_query, timer_link)->deadline;
        if (!dlink_empty(&p->conn_timers)) {
                int64_t c = container_of(p->conn_timers.next, dns_conn, timer_link)->deadline;

                if (c < next)
                        next = c;
        }
        if (next == INT64_MAX)
                return -1;
        return next <= now ? 0 : next - now > 60000 ? 60000 : (int)(next - now);
}

static dns_sandbox *sandbox_find(dns_proxy *p, const char *key)
{
        for (dlink *l = p->sandboxes.next; l != &p->sandboxes; l = l->next) {
                dns_sandbox *sb = container_of(l, dns_sandbox, link);

                if (strcmp(sb->key, key) == 0)
                        return sb;
        }
        return NULL;
}

/* Frees sb, open sockets or not (the caller's thread before CMD_ADD, or the loop's). */
static void sandbox_free(dns_sandbox *sb)
{
        if (!sb)
                return;
        if (sb->udp.fd >= 0)
                close(sb->udp.fd);
        if (sb->listen.fd >= 0)
                close(sb->listen.fd);
        cs_netpolicy_clear(&sb->policy);
        free(sb->key);
        free(sb);
}

/* Ends everything of sb's and frees it; between batches only. */
static void sandbox_destroy(dns_proxy *p, dns_sandbox *sb)
{
        while (!dlink_empty(&sb->queries))
                query_end(p, container_of(sb->queries.next, dns_query, sb_link));
        while (!dlink_empty(&sb->conns))
                conn_close(p, container_of(sb->conns.next, dns_conn, sb_link));
        graveyard_free(p);
        dlink_remove(&sb->link);
        handle_unwatch(p, &sb->udp);
        handle_unwatch(p, &sb->listen);
        sandbox_free(sb);
}

static int sandbox_attach(dns_proxy *p, dns_sandbox *sb)
{
        if (sandbox_find(p, sb->key))
                return -EEXIST;
        if (ep_set(p, EPOLL_CTL_ADD, &sb->udp, EPOLLIN) < 0)
                return -errno;
        if (ep_set(p, EPOLL_CTL_ADD, &sb->listen, EPOLLIN) < 0) {
                int e = errno;

                epoll_ctl(p->epfd, EPOLL_CTL_DEL, sb->udp.fd, NULL);
                return -e;
        }
        sb->refilled_ms = cs_now_monotonic_ms();
        dlink_append(&p->sandboxes, &sb->link);
        return 0;
}

/* Runs the commands queued so far and tells their callers. true once the proxy stops. */
static bool commands_run(dns_proxy *p)
{
        dns_cmd *list, *next;
        bool stop;

        pthread_mutex_lock(&p->lock);
        list = p->cmds;
        p->cmds = NULL;
        p->cmds_tail = &p->cmds;
        stop = p->stop;
        pthread_mutex_unlock(&p->lock);
        for (dns_cmd *c = list; c; c = c->next) {
                if (c->op == CMD_ADD) {
                        c->rc = sandbox_attach(p, c->sb);
                } else {
                        dns_sandbox *sb = sandbox_find(p, c->key);

                        if (sb)
                                sandbox_destroy(p, sb);
                        c->rc = 0;
                }
        }
        pthread_mutex_lock(&p->lock);
        for (dns_cmd *c = list; c; c = next) {
                /* Once done, c is its caller's again (and may be gone). */
                next = c->next;
                c->done = true;
        }
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        return stop;
}

static void *loop_main(void *arg)
{
        dns_proxy *p = arg;
        struct epoll_event evs[DNS_PROXY_EVENTS];

        while (!commands_run(p)) {
                int n = epoll_wait(p->epfd, evs, DNS_PROXY_EVENTS,
                                   timers_next(p, cs_now_monotonic_ms()));
                int64_t now = cs_now_monotonic_ms();

                for (int i = 0; i < n; i++)
                        event_run(p, evs[i].data.ptr, evs[i].events, now);
                timers_run(p, now);
                graveyard_free(p);
        }
        return NULL;
}

/* --- the interface ---------------------------------------------------------------------- */

static void proxy_wake(dns_proxy *p)
{
        uint64_t one = 1;

        (void)!write(p->wake.fd, &one, sizeof(one));
}

static void command_submit(dns_proxy *p, dns_cmd *cmd)
{
        pthread_mutex_lock(&p->lock);
        cmd->next = NULL;
        cmd->done = false;
        *p->cmds_tail = cmd;
        p->cmds_tail = &cmd->next;
        proxy_wake(p);
        while (!cmd->done)
                pthread_cond_wait(&p->cond, &p->lock);
        pthread_mutex_unlock(&p->lock);
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;

        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;

                inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
                port = ntohs(in->sin_port);
                snprintf(buf, len, "%s:%u", host, port);
        } else {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;

                inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                port = ntohs(in6->sin6_port);
                snprintf(buf, len, "[%s]:%u", host, port);
        }
}

static int listen_socket(int type, const struct sockaddr *addr, socklen_t len, const char *ifname,
                         cs_error **err)
{
        _cleanup_close_ int fd = socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        const char *what = type == SOCK_STREAM ? "tcp" : "udp";
        char text[INET6_ADDRSTRLEN + 16];
        int one = 1;

        addr_text(addr, text, sizeof(text));
        if (fd < 0)
                return cs_error_errno(err, errno, "dns proxy: %s socket", what);
        if (addr->sa_family == AF_INET6 &&
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
                return cs_error_errno(err, errno, "dns proxy: IPV6_V6ONLY");
        /* TCP only: a listener of a sandbox just removed may have connections in TIME_WAIT.
         * For UDP the option would let a second socket share the address. */
        if (type == SOCK_STREAM && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
                return cs_error_errno(err, errno, "dns proxy: SO_REUSEADDR");
        if (ifname &&
            setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname, (socklen_t)strlen(ifname)) < 0)
                return cs_error_errno(err, errno, "dns proxy: bind to device %s", ifname);
        if (bind(fd, addr, len) < 0)
                return cs_error_errno(err, errno, "dns proxy: bind %s %s", what, text);
        if (type == SOCK_STREAM && listen(fd, DNS_PROXY_LISTEN_BACKLOG) < 0)
                return cs_error_errno(err, errno, "dns proxy: listen %s", text);
        return TAKE_FD(fd);
}

static bool sockaddr_valid(const struct sockaddr *sa, socklen_t len)
{
        if (sa->sa_family == AF_INET)
                return len >= sizeof(struct sockaddr_in);
        if (sa->sa_family == AF_INET6)
                return len >= sizeof(struct sockaddr_in6);
        return false;
}

int dns_proxy_add(dns_proxy *p, const char *key, const struct sockaddr *listen, socklen_t len,
                  const char *ifname, const cs_netpolicy *policy, cs_error **err)
{
        dns_cmd cmd = { .op = CMD_ADD };
        dns_sandbox *sb;

        if (cs_isempty(key) || strlen(key) > DNS_PROXY_KEY_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "dns proxy: a sandbox key of 1..%d bytes", DNS_PROXY_KEY_MAX);
        if (!listen || !sockaddr_valid(listen, len) || !policy)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "dns proxy: an IPv4 or IPv6 address and a policy");
        if (pthread_equal(pthread_self(), p->thread))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "dns proxy: dns_proxy_add from the proxy's thread");
        sb = cs_xcalloc(1, sizeof(*sb));
        sb->key = cs_xstrdup(key);
        cs_netpolicy_copy(&sb->policy, policy);
        sb->udp = (handle){ .kind = H_UDP, .fd = -1 };
        sb->listen = (handle){ .kind = H_LISTEN, .fd = -1 };
        dlink_init(&sb->link);
        dlink_init(&sb->conns);
        dlink_init(&sb->queries);
        sb->tokens = (int64_t)p->lim.burst * 1000;
        sb->udp.fd = listen_socket(SOCK_DGRAM, listen, len, ifname, err);
        if (sb->udp.fd >= 0)
                sb->listen.fd = listen_socket(SOCK_STREAM, listen, len, ifname, err);
        if (sb->listen.fd < 0) {
                sandbox_free(sb);
                return -1;
        }
        cmd.sb = sb;
        command_submit(p, &cmd);
        if (cmd.rc < 0) {
                sandbox_free(sb);
                if (cmd.rc == -EEXIST)
                        return cs_error_set(err, GRPC_STATUS_ALREADY_EXISTS,
                                            "dns proxy: sandbox %s is served already", key);
                return cs_error_errno(err, -cmd.rc, "dns proxy: epoll");
        }
        return 0;
}

void dns_proxy_remove(dns_proxy *p, const char *key)
{
        dns_cmd cmd = { .op = CMD_REMOVE, .key = key };

        if (!p || !key)
                return;
        /* It would wait for itself for ever: a bug of the caller's, as the header says. */
        if (pthread_equal(pthread_self(), p->thread))
                abort();
        command_submit(p, &cmd);
}

void dns_proxy_get_stats(dns_proxy *p, dns_proxy_stats *ret)
{
        const dns_proxy_stats *s = &p->stats;

        *ret = (dns_proxy_stats){
                .queries = __atomic_load_n(&s->queries, __ATOMIC_RELAXED),
                .forwarded = __atomic_load_n(&s->forwarded, __ATOMIC_RELAXED),
                .refused = __atomic_load_n(&s->refused, __ATOMIC_RELAXED),
                .dropped = __atomic_load_n(&s->dropped, __ATOMIC_RELAXED),
                .servfail = __atomic_load_n(&s->servfail, __ATOMIC_RELAXED),
                .upstream_timeouts = __atomic_load_n(&s->upstream_timeouts, __ATOMIC_RELAXED),
                .upstream_bad = __atomic_load_n(&s->upstream_bad, __ATOMIC_RELAXED),
                .tcp_refused = __atomic_load_n(&s->tcp_refused, __ATOMIC_RELAXED),
        };
}

static uint32_t limit_or(uint32_t v, uint32_t dflt)
{
        return v ? v : dflt;
}

int dns_proxy_new(const struct sockaddr_storage *upstreams, size_t n,
                  const dns_proxy_limits *limits, dns_allow_fn fn, void *data, dns_proxy **ret,
                  cs_error **err)
{
        const dns_proxy_limits none = { 0 };
        const dns_proxy_limits *l = limits ? limits : &none;
        dns_proxy *p;
        sigset_t all, old;
        int r;

        if (n == 0 || n > DNS_PROXY_UPSTREAMS_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "dns proxy: 1..%d upstream resolvers", DNS_PROXY_UPSTREAMS_MAX);
        for (size_t i = 0; i < n; i++) {
                const struct sockaddr *sa = (const struct sockaddr *)&upstreams[i];

                if (!sockaddr_valid(sa, sizeof(upstreams[i])) ||
                    (sa->sa_family == AF_INET
                             ? ((const struct sockaddr_in *)(const void *)sa)->sin_port
                             : ((const struct sockaddr_in6 *)(const void *)sa)->sin6_port) == 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "dns proxy: upstream %zu is not an address and port",
                                            i);
        }
        p = cs_xcalloc(1, sizeof(*p));
        memcpy(p->upstreams, upstreams, n * sizeof(*upstreams));
        p->n_upstreams = n;
        p->lim = (dns_proxy_limits){
                .upstream_timeout_ms =
                        limit_or(l->upstream_timeout_ms, DNS_PROXY_DEFAULT_UPSTREAM_TIMEOUT_MS),
                .max_inflight = limit_or(l->max_inflight, DNS_PROXY_DEFAULT_MAX_INFLIGHT),
                .max_inflight_total =
                        limit_or(l->max_inflight_total, DNS_PROXY_DEFAULT_MAX_INFLIGHT_TOTAL),
                .rate_qps = limit_or(l->rate_qps, DNS_PROXY_DEFAULT_RATE_QPS),
                .burst = limit_or(l->burst, DNS_PROXY_DEFAULT_BURST),
                .max_tcp_conns = limit_or(l->max_tcp_conns, DNS_PROXY_DEFAULT_MAX_TCP_CONNS),
                .tcp_idle_ms = limit_or(l->tcp_idle_ms, DNS_PROXY_DEFAULT_TCP_IDLE_MS),
        };
        p->fn = fn;
        p->data = data;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        p->cmds_tail = &p->cmds;
        dlink_init(&p->sandboxes);
        dlink_init(&p->conn_timers);
        dlink_init(&p->query_timers);
        p->wake = (handle){ .kind = H_WAKE, .fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) };
        p->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (p->wake.fd < 0 || p->epfd < 0 || ep_set(p, EPOLL_CTL_ADD, &p->wake, EPOLLIN) < 0) {
                cs_error_errno(err, errno, "dns proxy: epoll");
                dns_proxy_free(p);
                return -1;
        }
        /* The thread takes no signal: they are the agent's main thread's to handle. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = pthread_create(&p->thread, NULL, loop_main, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                cs_error_errno(err, r, "dns proxy: thread");
                dns_proxy_free(p);
                return -1;
        }
        p->running = true;
        pthread_setname_np(p->thread, "dns-proxy");
        *ret = p;
        return 0;
}

void dns_proxy_free(dns_proxy *p)
{
        if (!p)
                return;
        if (p->running) {
                pthread_mutex_lock(&p->lock);
                p->stop = true;
                proxy_wake(p);
                pthread_mutex_unlock(&p->lock);
                pthread_join(p->thread, NULL);
        }
        while (!dlink_empty(&p->sandboxes))
                sandbox_destroy(p, container_of(p->sandboxes.next, dns_sandbox, link));
        graveyard_free(p);
        if (p->epfd >= 0)
                close(p->epfd);
        if (p->wake.fd >= 0)
                close(p->wake.fd);
        pthread_cond_destroy(&p->cond);
        pthread_mutex_destroy(&p->lock);
        free(p);
}

/* --- resolv.conf ------------------------------------------------------------------------ */

static int nameserver_parse(const char *text, struct sockaddr_storage *ret)
{
        const struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                                        .ai_family = AF_UNSPEC,
                                        .ai_socktype = SOCK_DGRAM };
        struct addrinfo *ai = NULL;
        int r = -1;

        /* getaddrinfo, numeric only: IPv6 scopes ("%eth0") included. */
        if (getaddrinfo(text, "53", &hints, &ai) != 0)
                return -1;
        if (ai && ai->ai_addrlen <= sizeof(*ret) &&
            (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)) {
                memset(ret, 0, sizeof(*ret));
                memcpy(ret, ai->ai_addr, ai->ai_addrlen);
                r = 0;
        }
        freeaddrinfo(ai);
        return r;
}

int dns_read_resolv_conf(const char *path, struct sockaddr_storage *ret, size_t max, size_t *ret_n,
                         cs_error **err)
{
        _cleanup_free_ char *text = NULL;
        char *save = NULL;
        size_t n = 0;

        if (cs_read_file(path, DNS_RESOLV_CONF_MAX, &text, NULL, NULL) < 0)
                return cs_error_errno(err, errno, "dns: read %s", path);
        for (char *line = strtok_r(text, "\n", &save); line && n < max;
             line = strtok_r(NULL, "\n", &save)) {
                char *lsave = NULL;
                const char *word = strtok_r(line, " \t\r", &lsave);
                const char *value;

                /* Comments ('#', ';') and the other options have no "nameserver" first. */
                if (!word || strcmp(word, "nameserver") != 0)
                        continue;
                value = strtok_r(NULL, " \t\r", &lsave);
                if (value && nameserver_parse(value, &ret[n]) == 0)
                        n++;
        }
        if (n == 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "dns: no nameserver in %s", path);
        *ret_n = n;
        return 0;
}
