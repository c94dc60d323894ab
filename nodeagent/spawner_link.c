/* compute.spawner.v1, the agent's side: see spawner_link.h. */
#include "spawner_link.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "spawn_frame.h"
#include "util.h"

typedef enum obj_type {
        OBJ_WAKE,
        OBJ_LISTEN,
        OBJ_CONN,
} obj_type;

/* An exec's queued output. The data of each stream is copied into that stream's buffer (so
 * a frame costs its bytes, not a decoded message: a spawner sending one-byte frames cannot
 * make the agent hold more than the credit), and the order of the streams is kept as runs
 * (stream, bytes), consecutive frames of one stream making one run. At most SPAWN_MAX_RUNS
 * runs are kept: a spawner alternating streams beyond that has its bytes added to the last
 * run of their stream (the order between stdout and stderr is then approximate, as it is
 * between two pipes anyway). */
#define SPAWN_MAX_RUNS 256

typedef struct stream_buf {
        uint8_t *p;
        size_t off, len, cap; /* queued bytes are p[off, len) */
} stream_buf;

typedef struct run {
        int stream; /* 1, 2 */
        size_t len;
} run;

struct spawn_exec {
        spawn_exec *next; /* in the link's list */
        spawn_link *l;    /* referenced */
        uint64_t id;
        int evfd;
        int pid;
        uint64_t credit; /* bytes the spawner may still send */
        bool has_stdin, tty;
        uint64_t stdin_credit; /* stdin bytes we may still send (the spawner's window) */
        stream_buf bufs[2];
        run runs[SPAWN_MAX_RUNS]; /* a ring: first_run, n_runs */
        size_t first_run, n_runs;
        size_t queued;
        uint8_t *out; /* the output last handed out (at most SPAWN_EVENT_MAX bytes) */
        bool exited, exit_delivered, failed, ended, poked;
        spawn_exited x;
        char why[160];
        pthread_cond_t cond; /* with the manager's lock: done or poked */
};

typedef struct endpoint endpoint;

struct spawn_link {
        obj_type type;
        spawn_mgr *m;
        endpoint *ep; /* whose live or newest connection this is; NULL once replaced */
        int fd;       /* closed with the last reference */
        int refs;
        bool polled; /* in the epoll set: the manager's reference */
        bool hello, broken;
        spawn_reader rd;
        pthread_mutex_t wlock; /* one writer at a time */
        spawn_exec *execs;
        size_t n_execs;
        uint64_t next_id;
};

struct endpoint {
        obj_type type;
        endpoint *next;
        char *key, *sock;
        int fd;
        spawn_link *conn;
        int64_t last_log; /* monotonic ms of the last warning */
        int64_t born;     /* monotonic ms */
        bool ever;        /* a spawner said Hello here */
};

struct spawn_mgr {
        pthread_mutex_t lock;
        pthread_cond_t hello; /* a spawner said Hello (CLOCK_MONOTONIC) */
        obj_type wake_type;   /* the wake eventfd's tag in the epoll set */
        int epfd, wakefd;
        endpoint *eps;
        endpoint *dead; /* forgotten: their listeners are closed by the thread */
        bool stopping;
        pthread_t thread;
        bool running;
        spawn_log_fn log;
};

/* --- helpers --------------------------------------------------------------------------- */

static void wake(int fd)
{
        uint64_t one = 1;

        if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
                return; /* an eventfd write fails only when the counter is full: awake */
}

static void drain(int fd)
{
        uint64_t v;

        while (read(fd, &v, sizeof(v)) > 0)
                ;
}

/* A warning about a sandbox's spawner, at most one per SPAWN_LOG_INTERVAL_MS per sandbox.
 * Called with the lock held: the hook only writes a log line. */
static void warn_locked(spawn_mgr *m, endpoint *ep, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void warn_locked(spawn_mgr *m, endpoint *ep, const char *fmt, ...)
{
        int64_t now = cs_now_monotonic_ms();
        char msg[320];
        va_list ap;

        if (!m->log || (ep && ep->last_log && now - ep->last_log < SPAWN_LOG_INTERVAL_MS))
                return;
        if (ep)
                ep->last_log = now;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        m->log(true, ep ? ep->key : NULL, msg);
}

/* --- links and execs ------------------------------------------------------------------- */

static spawn_link *link_ref_locked(spawn_link *l)
{
        l->refs++;
        return l;
}

static void link_free(spawn_link *l)
{
        close(l->fd);
        spawn_reader_free(&l->rd);
        pthread_mutex_destroy(&l->wlock);
        free(l);
}

/* Drops a reference under the lock; the last one frees the link (its fd left the epoll set
 * before: the set's reference goes last, from the manager's thread). */
static void link_unref_locked(spawn_link *l)
{
        if (--l->refs == 0)
                link_free(l);
}

static void chunks_free(spawn_exec *e)
{
        for (int i = 0; i < 2; i++) {
                free(e->bufs[i].p);
                e->bufs[i] = (stream_buf){ 0 };
        }
        e->first_run = e->n_runs = 0;
        e->queued = 0;
        free(e->out);
        e->out = NULL;
}

static void queue_output(spawn_exec *e, int stream, const uint8_t *data, size_t n)
{
        stream_buf *b = &e->bufs[stream - 1];
        run *last = e->n_runs ? &e->runs[(e->first_run + e->n_runs - 1) % SPAWN_MAX_RUNS] : NULL;

        if (b->off && b->len + n > b->cap) {
                memmove(b->p, b->p + b->off, b->len - b->off);
                b->len -= b->off;
                b->off = 0;
        }
        if (b->len + n > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + n)
                        cap *= 2;
                uint8_t *np = realloc(b->p, cap);
                if (!np)
                        abort(); /* as cs_xmalloc: out of memory ends the agent */
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, data, n);
        b->len += n;
        e->queued += n;
        if (last && last->stream == stream) {
                last->len += n;
                return;
        }
        if (e->n_runs < SPAWN_MAX_RUNS) {
                e->runs[(e->first_run + e->n_runs++) % SPAWN_MAX_RUNS] =
                        (run){ .stream = stream, .len = n };
                return;
        }
        for (size_t i = e->n_runs; i-- > 0;) {
                run *r = &e->runs[(e->first_run + i) % SPAWN_MAX_RUNS];
                if (r->stream == stream) {
                        r->len += n;
                        return;
                }
        }
}

/* Takes up to SPAWN_EVENT_MAX bytes of the first run into e->out. Returns its stream. */
static int dequeue_output(spawn_exec *e, size_t *ret_len)
{
        run *r = &e->runs[e->first_run];
        stream_buf *b = &e->bufs[r->stream - 1];
        size_t n = r->len < SPAWN_EVENT_MAX ? r->len : SPAWN_EVENT_MAX;
        int stream = r->stream;

        e->out = cs_xmalloc(n);
        memcpy(e->out, b->p + b->off, n);
        b->off += n;
        if (b->off == b->len)
                b->off = b->len = 0;
        r->len -= n;
        if (r->len == 0) {
                e->first_run = (e->first_run + 1) % SPAWN_MAX_RUNS;
                e->n_runs--;
        }
        e->queued -= n;
        *ret_len = n;
        return stream;
}

static void exec_free_locked(spawn_exec *e)
{
        spawn_link *l = e->l;

        for (spawn_exec **p = &l->execs; *p; p = &(*p)->next) {
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        }
        l->n_execs--;
        chunks_free(e);
        close(e->evfd);
        pthread_cond_destroy(&e->cond);
        free(e);
        link_unref_locked(l);
}

static void exec_notify_locked(spawn_exec *e)
{
        wake(e->evfd);
        pthread_cond_broadcast(&e->cond);
}

static spawn_exec *exec_find_locked(spawn_link *l, uint64_t id)
{
        for (spawn_exec *e = l->execs; e; e = e->next) {
                if (e->id == id)
                        return e;
        }
        return NULL;
}

/* Ends a connection: its execs fail (those the caller gave up on go), the socket is shut
 * down both ways (the spawner sees EOF and kills its execs; the manager's thread sees it
 * readable and takes it out of the epoll set). */
static void link_break_locked(spawn_link *l, bool warn, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void link_break_locked(spawn_link *l, bool warn, const char *fmt, ...)
{
        char why[160];
        va_list ap;

        if (l->broken)
                return;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        l->broken = true;
        shutdown(l->fd, SHUT_RDWR);
        for (spawn_exec *e = l->execs, *next; e; e = next) {
                next = e->next;
                if (e->exited)
                        continue;
                e->failed = true;
                snprintf(e->why, sizeof(e->why), "%s", why);
                if (e->ended)
                        exec_free_locked(e); /* may not drop the last reference: polled */
                else
                        exec_notify_locked(e);
        }
        if (l->ep) {
                if (warn)
                        warn_locked(l->m, l->ep, "spawner connection dropped: %s", why);
                else if (l->m->log)
                        l->m->log(false, l->ep->key, why);
                if (l->ep->conn == l)
                        l->ep->conn = NULL;
                l->ep = NULL;
        }
}

/* --- frames from the spawner ----------------------------------------------------------- */

static void on_hello_locked(spawn_link *l, const Compute__Spawner__V1__Hello *h)
{
        char msg[200];

        l->hello = true;
        if (l->ep)
                l->ep->ever = true;
        pthread_cond_broadcast(&l->m->hello);
        if (l->m->log && l->ep) {
                snprintf(msg, sizeof(msg),
                         "spawner connected (compute-init %s, pid %d, %u exec(s) of a previous "
                         "connection still ending)",
                         h->version, h->pid, h->running);
                l->m->log(false, l->ep->key, msg);
        }
}

/* Routes one decoded frame; takes f. Returns false (and breaks the link) on a protocol
 * error. */
static bool route_locked(spawn_link *l, spawn_spawner_frame *f)
{
        spawn_exec *e = NULL;
        const char *bad = NULL;

        if (f->kind_case == COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO) {
                if (l->hello)
                        bad = "a second hello";
                else
                        on_hello_locked(l, f->hello);
                goto done;
        }
        if (!l->hello) {
                bad = "a frame before hello";
                goto done;
        }
        if (f->kind_case == COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_PONG)
                goto done;
        e = exec_find_locked(l, f->exec_id);
        if (!e || e->exited) {
                bad = "a frame for an exec it was not asked to run or that has ended";
                goto done;
        }
        switch (f->kind_case) {
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED:
                if (e->pid)
                        bad = "a second started for one exec";
                else
                        e->pid = f->started->pid;
                break;
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT: {
                size_t n = f->output->data.len;

                if (n > e->credit) {
                        bad = "output beyond the exec's credit";
                        break;
                }
                e->credit -= n;
                if (e->ended || e->failed)
                        break; /* nobody reads it any more */
                queue_output(e, (int)f->output->stream, f->output->data.data, n);
                exec_notify_locked(e);
                break;
        }
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STDIN_CREDIT:
                if (!e->has_stdin)
                        bad = "stdin credit for an exec without stdin";
                else if (e->stdin_credit + f->stdin_credit->bytes > SPAWN_STDIN_WINDOW)
                        bad = "stdin credit beyond the window";
                else
                        e->stdin_credit += f->stdin_credit->bytes;
                pthread_cond_broadcast(&e->cond);
                break;
        case COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED: {
                const Compute__Spawner__V1__Exited *x = f->exited;

                e->exited = true;
                e->x = (spawn_exited){ .exit_code = x->exit_code,
                                       .signal = x->signal,
                                       .core_dumped = x->core_dumped,
                                       .user_us = x->user_us,
                                       .system_us = x->system_us,
                                       .max_rss_kib = x->max_rss_kib };
                snprintf(e->x.start_error, sizeof(e->x.start_error), "%s", x->start_error);
                if (e->ended)
                        exec_free_locked(e);
                else
                        exec_notify_locked(e);
                break;
        }
        default:
                bad = "an unexpected frame";
                break;
        }
done:
        spawn_spawner_frame_free(f);
        if (bad) {
                link_break_locked(l, true, "protocol error: the spawner sent %s", bad);
                return false;
        }
        return true;
}

/* Reads one readiness of the connection may do before the others get their turn. Every
 * whole frame read is routed before returning: the socket's readiness (level-triggered) says
 * nothing of frames already in the reader's buffer. */
#define LINK_READS_PER_TURN 8

static void link_read_locked(spawn_link *l)
{
        for (int reads = 0; !l->broken;) {
                const uint8_t *p;
                const char *why = NULL;
                size_t n;
                int r = spawn_reader_next(&l->rd, &p, &n, &why);
                ssize_t got;

                if (r < 0) {
                        link_break_locked(l, true, "protocol error: %s", why);
                        return;
                }
                if (r > 0) {
                        spawn_spawner_frame *f = spawn_decode_spawner(p, n, &why);

                        if (!f) {
                                link_break_locked(l, true, "protocol error: %s", why);
                                return;
                        }
                        route_locked(l, f);
                        continue;
                }
                if (reads++ == LINK_READS_PER_TURN)
                        return; /* more comes with the next readiness */
                got = spawn_reader_fill(&l->rd, l->fd);
                if (got == 0) {
                        link_break_locked(l, !l->hello || l->n_execs > 0,
                                          "the spawner closed its connection");
                        return;
                }
                if (got < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        link_break_locked(l, true, "cannot read from the spawner: %s",
                                          strerror(errno));
                        return;
                }
        }
}

/* Takes a broken link out of the epoll set and drops the set's reference. */
static void link_unpoll_locked(spawn_mgr *m, spawn_link *l)
{
        if (!l->polled)
                return;
        epoll_ctl(m->epfd, EPOLL_CTL_DEL, l->fd, NULL);
        l->polled = false;
        link_unref_locked(l);
}

/* --- endpoints ------------------------------------------------------------------------- */

static void accept_locked(spawn_mgr *m, endpoint *ep)
{
        for (;;) {
                int fd = accept4(ep->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                struct epoll_event ev = { .events = EPOLLIN };
                spawn_link *l;

                if (fd < 0)
                        return;
                l = cs_xcalloc(1, sizeof(*l));
                l->type = OBJ_CONN;
                l->m = m;
                l->fd = fd;
                l->refs = 1;
                l->next_id = 1;
                spawn_reader_init(&l->rd, SPAWN_MAX_SPAWNER_FRAME);
                pthread_mutex_init(&l->wlock, NULL);
                ev.data.ptr = l;
                if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        warn_locked(m, ep, "cannot watch a spawner connection: %s",
                                    strerror(errno));
                        link_unref_locked(l);
                        continue;
                }
                l->polled = true;
                /* One connection per sandbox: a new one means the spawner was restarted. */
                if (ep->conn)
                        link_break_locked(ep->conn, false, "the spawner connected again");
                l->ep = ep;
                ep->conn = l;
        }
}

static endpoint *ep_find_locked(spawn_mgr *m, const char *key)
{
        for (endpoint *ep = m->eps; ep; ep = ep->next) {
                if (strcmp(ep->key, key) == 0)
                        return ep;
        }
        return NULL;
}

/* Unlists ep and hands it to the thread, which closes its listener. */
static void ep_retire_locked(spawn_mgr *m, endpoint *ep)
{
        for (endpoint **p = &m->eps; *p; p = &(*p)->next) {
                if (*p == ep) {
                        *p = ep->next;
                        break;
                }
        }
        if (ep->conn)
                link_break_locked(ep->conn, false, "the sandbox's spawner endpoint was closed");
        /* Now, not in the thread: a new endpoint of the same path may be bound next. */
        unlink(ep->sock);
        ep->next = m->dead;
        m->dead = ep;
        wake(m->wakefd);
}

static void dead_reap_locked(spawn_mgr *m)
{
        while (m->dead) {
                endpoint *ep = m->dead;
                m->dead = ep->next;
                epoll_ctl(m->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
                close(ep->fd);
                free(ep->key);
                free(ep->sock);
                free(ep);
        }
}

static void *mgr_main(void *arg)
{
        spawn_mgr *m = arg;
        struct epoll_event evs[32];

        for (;;) {
                int n = epoll_wait(m->epfd, evs, ARRAY_SIZE(evs), -1);

                pthread_mutex_lock(&m->lock);
                if (m->stopping) {
                        pthread_mutex_unlock(&m->lock);
                        return NULL;
                }
                for (int i = 0; i < n; i++) {
                        obj_type *t = evs[i].data.ptr;

                        if (*t == OBJ_WAKE) {
                                drain(m->wakefd);
                        } else if (*t == OBJ_LISTEN) {
                                endpoint *ep = (endpoint *)t;
                                bool live = false;
                                for (endpoint *x = m->eps; x && !live; x = x->next)
                                        live = x == ep;
                                if (live)
                                        accept_locked(m, ep);
                        } else {
                                spawn_link *l = (spawn_link *)t;
                                if (!l->broken)
                                        link_read_locked(l);
                                if (l->broken)
                                        link_unpoll_locked(m, l);
                        }
                }
                /* Last: an event of this batch may name an endpoint retired meanwhile. */
                dead_reap_locked(m);
                pthread_mutex_unlock(&m->lock);
        }
}

spawn_mgr *spawn_mgr_new(spawn_log_fn log, cs_error **err)
{
        spawn_mgr *m = cs_xcalloc(1, sizeof(*m));
        struct epoll_event ev = { .events = EPOLLIN };

        pthread_mutex_init(&m->lock, NULL);
        cs_cond_init_monotonic(&m->hello);
        m->log = log;
        m->wake_type = OBJ_WAKE;
        m->epfd = epoll_create1(EPOLL_CLOEXEC);
        m->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ev.data.ptr = &m->wake_type;
        if (m->epfd < 0 || m->wakefd < 0 || epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->wakefd, &ev) < 0) {
                cs_error_errno(err, errno, "cannot set up the spawner connections");
                spawn_mgr_free(m);
                return NULL;
        }
        if (pthread_create(&m->thread, NULL, mgr_main, m) != 0) {
                cs_error_errno(err, errno, "cannot start the spawner connections' thread");
                spawn_mgr_free(m);
                return NULL;
        }
        m->running = true;
        return m;
}

void spawn_mgr_free(spawn_mgr *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        pthread_mutex_unlock(&m->lock);
        if (m->running) {
                wake(m->wakefd);
                pthread_join(m->thread, NULL);
        }
        pthread_mutex_lock(&m->lock);
        while (m->eps) {
                endpoint *ep = m->eps;
                spawn_link *l = ep->conn;

                ep_retire_locked(m, ep);
                if (l)
                        link_unpoll_locked(m, l);
        }
        dead_reap_locked(m);
        pthread_mutex_unlock(&m->lock);
        /* Connections replaced earlier and not yet seen closed by the thread. */
        {
                struct epoll_event evs[32];
                int n;

                while (m->epfd >= 0 && (n = epoll_wait(m->epfd, evs, ARRAY_SIZE(evs), 0)) > 0) {
                        bool progress = false;
                        for (int i = 0; i < n; i++) {
                                obj_type *t = evs[i].data.ptr;
                                if (*t == OBJ_CONN) {
                                        spawn_link *l = (spawn_link *)t;
                                        link_break_locked(l, false, "the agent is stopping");
                                        link_unpoll_locked(m, l);
                                        progress = true;
                                } else {
                                        drain(m->wakefd);
                                }
                        }
                        if (!progress)
                                break;
                }
        }
        if (m->epfd >= 0)
                close(m->epfd);
        if (m->wakefd >= 0)
                close(m->wakefd);
        pthread_cond_destroy(&m->hello);
        pthread_mutex_destroy(&m->lock);
        free(m);
}

int spawn_mgr_listen(spawn_mgr *m, const char *key, const char *dir, cs_error **err)
{
        _cleanup_free_ char *sock = cs_xasprintf("%s/" SPAWN_SOCKET_NAME, dir);
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        struct epoll_event ev = { .events = EPOLLIN };
        struct stat st;
        endpoint *ep, *old;
        _cleanup_close_ int dfd = -1;
        int fd;

        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot make the spawner directory");
        /* Ours and only ours: the sandbox reaches it through a bind mount, nobody else. */
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "the spawner directory is not a directory of the agent");
        if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700) < 0)
                return cs_error_errno(err, errno, "cannot make the spawner directory private");
        /* A socket path holds 107 bytes: a longer one (a deep --state-dir) is reached through
         * the directory's fd. */
        if (strlen(sock) < sizeof(addr.sun_path)) {
                memcpy(addr.sun_path, sock, strlen(sock) + 1);
        } else {
                dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd < 0)
                        return cs_error_errno(err, errno, "cannot open the spawner directory");
                snprintf(addr.sun_path, sizeof(addr.sun_path), "/proc/self/fd/%d/%s", dfd,
                         SPAWN_SOCKET_NAME);
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return cs_error_errno(err, errno, "cannot make the spawner socket");
        pthread_mutex_lock(&m->lock);
        old = ep_find_locked(m, key);
        if (old)
                ep_retire_locked(m, old);
        unlink(sock); /* a previous life's */
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, 4) < 0) {
                int e = errno;
                pthread_mutex_unlock(&m->lock);
                close(fd);
                return cs_error_errno(err, e, "cannot listen on the spawner socket");
        }
        ep = cs_xcalloc(1, sizeof(*ep));
        ep->type = OBJ_LISTEN;
        ep->key = cs_xstrdup(key);
        ep->sock = TAKE_PTR(sock);
        ep->fd = fd;
        ep->born = cs_now_monotonic_ms();
        ev.data.ptr = ep;
        if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int e = errno;
                unlink(ep->sock);
                ep->next = m->dead;
                m->dead = ep;
                pthread_mutex_unlock(&m->lock);
                return cs_error_errno(err, e, "cannot watch the spawner socket");
        }
        ep->next = m->eps;
        m->eps = ep;
        pthread_mutex_unlock(&m->lock);
        return 0;
}

void spawn_mgr_forget(spawn_mgr *m, const char *key)
{
        endpoint *ep;

        pthread_mutex_lock(&m->lock);
        ep = ep_find_locked(m, key);
        if (ep)
                ep_retire_locked(m, ep);
        pthread_mutex_unlock(&m->lock);
}

void spawn_mgr_status(spawn_mgr *m, const char *key, bool *ret_listening, bool *ret_connected)
{
        endpoint *ep;

        pthread_mutex_lock(&m->lock);
        ep = ep_find_locked(m, key);
        *ret_listening = ep != NULL;
        *ret_connected = ep && ep->conn && ep->conn->hello && !ep->conn->broken;
        pthread_mutex_unlock(&m->lock);
}

spawn_link *spawn_mgr_link(spawn_mgr *m, const char *key)
{
        spawn_link *l = NULL;
        endpoint *ep;

        pthread_mutex_lock(&m->lock);
        ep = ep_find_locked(m, key);
        if (ep && ep->conn && ep->conn->hello && !ep->conn->broken)
                l = link_ref_locked(ep->conn);
        pthread_mutex_unlock(&m->lock);
        return l;
}

spawn_link *spawn_mgr_link_wait(spawn_mgr *m, const char *key, int64_t first_ms)
{
        spawn_link *l = NULL;
        endpoint *ep;

        pthread_mutex_lock(&m->lock);
        for (;;) {
                int64_t until;

                ep = ep_find_locked(m, key);
                if (ep && ep->conn && ep->conn->hello && !ep->conn->broken) {
                        l = link_ref_locked(ep->conn);
                        break;
                }
                if (!ep || ep->ever || m->stopping)
                        break;
                until = ep->born + first_ms;
                if (cs_now_monotonic_ms() >= until)
                        break;
                cs_cond_wait_until(&m->hello, &m->lock, until);
        }
        pthread_mutex_unlock(&m->lock);
        return l;
}

void spawn_link_unref(spawn_link *l)
{
        spawn_mgr *m;

        if (!l)
                return;
        m = l->m;
        pthread_mutex_lock(&m->lock);
        link_unref_locked(l);
        pthread_mutex_unlock(&m->lock);
}

void spawn_link_break(spawn_link *l, const char *why)
{
        pthread_mutex_lock(&l->m->lock);
        link_break_locked(l, true, "%s", why);
        pthread_mutex_unlock(&l->m->lock);
}

/* --- writing --------------------------------------------------------------------------- */

/* Writes a whole frame within SPAWN_WRITE_TIMEOUT_MS; a failure breaks the link. *sent tells
 * whether any byte left. */
static int link_write(spawn_link *l, const spawn_agent_frame *f, bool *sent, cs_error **err)
{
        size_t len = 0, off = 0;
        _cleanup_free_ uint8_t *buf = spawn_encode_agent(f, &len);
        int64_t until = cs_now_monotonic_ms() + SPAWN_WRITE_TIMEOUT_MS;
        const char *why = NULL;
        int e = 0;

        *sent = false;
        if (!buf)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "the command does not fit in a spawner frame");
        pthread_mutex_lock(&l->wlock);
        while (off < len && !why) {
                ssize_t n;
                bool broken;

                pthread_mutex_lock(&l->m->lock);
                broken = l->broken;
                pthread_mutex_unlock(&l->m->lock);
                if (broken) {
                        why = "the connection is closed";
                        break;
                }
                n = send(l->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                        off += (size_t)n;
                        *sent = true;
                } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                        struct pollfd pf = { .fd = l->fd, .events = POLLOUT };
                        int64_t left = until - cs_now_monotonic_ms();
                        if (left <= 0)
                                why = "the spawner stopped reading";
                        else
                                poll(&pf, 1, left > 100 ? 100 : (int)left);
                } else {
                        e = errno;
                        why = "cannot write to the spawner";
                }
        }
        pthread_mutex_unlock(&l->wlock);
        if (!why)
                return 0;
        pthread_mutex_lock(&l->m->lock);
        if (e)
                link_break_locked(l, true, "%s: %s", why, strerror(e));
        else
                link_break_locked(l, true, "%s", why);
        pthread_mutex_unlock(&l->m->lock);
        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                            "the sandbox's spawner connection broke: %s", why);
}

/* --- execs ----------------------------------------------------------------------------- */

int spawn_exec_start(spawn_link *l, char *const *argv, char *const *env, const char *cwd,
                     uint32_t credit, spawn_exec **ret, bool *ret_sent, cs_error **err)
{
        return spawn_exec_start_input(l, argv, env, cwd, credit, NULL, ret, ret_sent, err);
}

int spawn_exec_start_input(spawn_link *l, char *const *argv, char *const *env, const char *cwd,
                           uint32_t credit, const spawn_input *in, spawn_exec **ret, bool *ret_sent,
                           cs_error **err)
{
        Compute__Spawner__V1__Start start = COMPUTE__SPAWNER__V1__START__INIT;
        spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        spawn_mgr *m = l->m;
        spawn_exec *e;
        const char *bad;
        size_t n_argv = 0, n_env = 0;

        *ret_sent = false;
        while (argv[n_argv])
                n_argv++;
        while (env[n_env])
                n_env++;
        start.argv = (char **)argv;
        start.n_argv = n_argv;
        start.env = (char **)env;
        start.n_env = n_env;
        start.cwd = (char *)cwd;
        start.credit = credit;
        if (in) {
                start.stdin = in->stdin;
                start.tty = in->tty;
                start.rows = in->tty ? in->rows : 0;
                start.cols = in->tty ? in->cols : 0;
        }
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START;
        f.start = &start;
        f.exec_id = 1; /* checked with a placeholder id; the real one is taken below */
        bad = spawn_check_agent(&f);
        if (bad)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s", bad);

        e = cs_xcalloc(1, sizeof(*e));
        e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (e->evfd < 0) {
                int x = errno;
                free(e);
                return cs_error_errno(err, x, "cannot make an exec's eventfd");
        }
        cs_cond_init_monotonic(&e->cond);
        e->credit = credit;
        e->has_stdin = start.stdin || start.tty;
        e->tty = start.tty;
        e->stdin_credit = e->has_stdin ? SPAWN_STDIN_WINDOW : 0;

        pthread_mutex_lock(&m->lock);
        if (l->broken || l->n_execs >= SPAWN_MAX_EXECS) {
                bool broken = l->broken;
                pthread_mutex_unlock(&m->lock);
                close(e->evfd);
                pthread_cond_destroy(&e->cond);
                free(e);
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                    broken ? "the sandbox's spawner connection is closed"
                                           : "too many execs open on the sandbox's spawner");
        }
        e->l = link_ref_locked(l);
        e->id = l->next_id++;
        e->next = l->execs;
        l->execs = e;
        l->n_execs++;
        pthread_mutex_unlock(&m->lock);

        f.exec_id = e->id;
        if (link_write(l, &f, ret_sent, err) < 0) {
                pthread_mutex_lock(&m->lock);
                e->ended = true;
                if (e->exited || e->failed)
                        exec_free_locked(e);
                else
                        e->failed = true; /* cannot happen: a write failure breaks the link */
                pthread_mutex_unlock(&m->lock);
                return -1;
        }
        *ret = e;
        return 0;
}

int spawn_exec_fd(spawn_exec *e)
{
        return e->evfd;
}

void spawn_exec_next(spawn_exec *e, spawn_event *ev)
{
        spawn_mgr *m = e->l->m;

        drain(e->evfd); /* before looking: a change after this writes it again */
        *ev = (spawn_event){ .kind = SPAWN_EV_NONE };
        pthread_mutex_lock(&m->lock);
        free(e->out);
        e->out = NULL;
        if (e->n_runs) {
                ev->kind = SPAWN_EV_OUTPUT;
                ev->stream = dequeue_output(e, &ev->len);
                ev->data = e->out;
        } else if (e->exited && !e->exit_delivered) {
                e->exit_delivered = true;
                ev->kind = SPAWN_EV_EXITED;
                ev->exited = &e->x;
        } else if (e->failed) {
                ev->kind = SPAWN_EV_FAILED;
                ev->why = e->why;
        }
        pthread_mutex_unlock(&m->lock);
}

int spawn_exec_pid(spawn_exec *e)
{
        int pid;

        pthread_mutex_lock(&e->l->m->lock);
        pid = e->pid;
        pthread_mutex_unlock(&e->l->m->lock);
        return pid;
}

bool spawn_exec_done(spawn_exec *e)
{
        bool done;

        pthread_mutex_lock(&e->l->m->lock);
        done = e->exited || e->failed;
        pthread_mutex_unlock(&e->l->m->lock);
        return done;
}

bool spawn_exec_wait(spawn_exec *e, int64_t until_ms)
{
        spawn_mgr *m = e->l->m;
        bool done;

        pthread_mutex_lock(&m->lock);
        while (!(e->exited || e->failed) && !e->poked && cs_now_monotonic_ms() < until_ms)
                cs_cond_wait_until(&e->cond, &m->lock, until_ms);
        e->poked = false;
        done = e->exited || e->failed;
        pthread_mutex_unlock(&m->lock);
        return done;
}

void spawn_exec_poke(spawn_exec *e)
{
        pthread_mutex_lock(&e->l->m->lock);
        e->poked = true;
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->l->m->lock);
}

int spawn_exec_credit(spawn_exec *e, uint32_t bytes, cs_error **err)
{
        Compute__Spawner__V1__Credit c = COMPUTE__SPAWNER__V1__CREDIT__INIT;
        spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        bool sent, done;

        pthread_mutex_lock(&e->l->m->lock);
        done = e->exited || e->failed;
        if (!done)
                e->credit += bytes; /* counted before the spawner can use it */
        pthread_mutex_unlock(&e->l->m->lock);
        if (done)
                return 0;
        c.bytes = bytes;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT;
        f.credit = &c;
        return link_write(e->l, &f, &sent, err);
}

/* A Signal frame: to the exec's whole tree, or (foreground, a terminal's exec) to its
 * terminal's foreground process group. */
static int exec_send_signal(spawn_exec *e, int signo, bool foreground, cs_error **err)
{
        Compute__Spawner__V1__Signal s = COMPUTE__SPAWNER__V1__SIGNAL__INIT;
        spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        bool sent;

        if (spawn_exec_done(e))
                return 0;
        s.signo = signo;
        s.foreground = foreground;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL;
        f.signal = &s;
        return link_write(e->l, &f, &sent, err);
}

int spawn_exec_signal(spawn_exec *e, int signo, cs_error **err)
{
        return exec_send_signal(e, signo, false, err);
}

int spawn_exec_signal_fg(spawn_exec *e, int signo, cs_error **err)
{
        return exec_send_signal(e, signo, e->tty, err);
}

int spawn_exec_stdin(spawn_exec *e, const uint8_t *data, size_t len, cs_error **err)
{
        spawn_mgr *m = e->l->m;

        while (len > 0) {
                Compute__Spawner__V1__Stdin in = COMPUTE__SPAWNER__V1__STDIN__INIT;
                spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
                size_t n;
                bool sent;

                pthread_mutex_lock(&m->lock);
                while (!(e->exited || e->failed) && e->stdin_credit == 0)
                        pthread_cond_wait(&e->cond, &m->lock);
                if (e->exited || e->failed) {
                        pthread_mutex_unlock(&m->lock);
                        return 1;
                }
                n = len;
                if (n > e->stdin_credit)
                        n = (size_t)e->stdin_credit;
                if (n > SPAWN_MAX_DATA)
                        n = SPAWN_MAX_DATA;
                e->stdin_credit -= n;
                pthread_mutex_unlock(&m->lock);
                in.data = (ProtobufCBinaryData){ .len = n, .data = (uint8_t *)data };
                f.exec_id = e->id;
                f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_STDIN;
                f.stdin = &in;
                if (link_write(e->l, &f, &sent, err) < 0)
                        return -1;
                data += n;
                len -= n;
        }
        return 0;
}

int spawn_exec_close_stdin(spawn_exec *e, cs_error **err)
{
        Compute__Spawner__V1__CloseStdin c = COMPUTE__SPAWNER__V1__CLOSE_STDIN__INIT;
        spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        bool sent;

        if (spawn_exec_done(e))
                return 0;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CLOSE_STDIN;
        f.close_stdin = &c;
        return link_write(e->l, &f, &sent, err);
}

int spawn_exec_resize(spawn_exec *e, uint32_t rows, uint32_t cols, cs_error **err)
{
        Compute__Spawner__V1__Resize r = COMPUTE__SPAWNER__V1__RESIZE__INIT;
        spawn_agent_frame f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        bool sent;

        if (spawn_exec_done(e))
                return 0;
        r.rows = rows;
        r.cols = cols;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_RESIZE;
        f.resize = &r;
        return link_write(e->l, &f, &sent, err);
}

void spawn_exec_end(spawn_exec *e)
{
        spawn_mgr *m;

        if (!e)
                return;
        m = e->l->m;
        pthread_mutex_lock(&m->lock);
        e->ended = true;
        chunks_free(e);
        if (e->exited || e->failed)
                exec_free_locked(e);
        pthread_mutex_unlock(&m->lock);
}

size_t spawn_exec_queued(spawn_exec *e)
{
        size_t n;

        pthread_mutex_lock(&e->l->m->lock);
        n = e->queued;
        pthread_mutex_unlock(&e->l->m->lock);
        return n;
}
