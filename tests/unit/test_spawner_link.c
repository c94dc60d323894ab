/* Unit tests of the agent's side of compute.spawner.v1 (spawner_link.c, spawner_exec.c)
 * against a fake spawner: a thread that connects to the sandbox's socket like compute-init
 * and speaks the protocol, honestly or not. Owns its temporary directory, its sockets and
 * its threads; touches nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "spawn_frame.h"
#include "spawner_exec.h"
#include "spawner_link.h"
#include "util.h"

/* --- the fake spawner ------------------------------------------------------------------ */

typedef enum fake_mode {
        FAKE_NORMAL,       /* Started, stdout, stderr, Exited 3 with rusage */
        FAKE_FLOW,         /* FLOW_BYTES of stdout, as credit allows */
        FAKE_SIGNALS,      /* Started, then waits for signals; SIGKILL ends it */
        FAKE_GARBAGE,      /* a frame that does not decode */
        FAKE_HUGE_PREFIX,  /* a prefix announcing 4 GiB */
        FAKE_OVER_CREDIT,  /* more output than the credit without waiting for more */
        FAKE_UNKNOWN_EXEC, /* output for an exec it was not asked to run */
        FAKE_STRAY_START,  /* Started for an exec it was not asked to run */
        FAKE_SILENT,       /* never answers */
        FAKE_DISCONNECT,   /* Started, some output, then closes the connection */
        FAKE_TINY,         /* TINY_FRAMES one-byte outputs, alternating streams */
} fake_mode;

#define TINY_FRAMES 100000

#define FLOW_BYTES (8u << 20)

typedef struct fake {
        char path[256];
        fake_mode mode;
        pthread_t thread;
        int fd;
        /* what it saw */
        int signals[8];
        int n_signals;
        uint64_t max_outstanding; /* the most it was owed at once by the agent's credit */
        bool over_credit;         /* it would have had to send beyond the credit */
        bool saw_eof;
        atomic_bool sent_all; /* FAKE_TINY: every frame is written */
} fake;

static void fake_send(int fd, spawn_spawner_frame *f)
{
        size_t len = 0;
        uint8_t *buf = spawn_encode_spawner(f, &len);
        size_t off = 0;

        assert_non_null(buf);
        while (off < len) {
                ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
                if (n <= 0)
                        break;
                off += (size_t)n;
        }
        free(buf);
}

static void fake_hello(int fd)
{
        Compute__Spawner__V1__Hello h = COMPUTE__SPAWNER__V1__HELLO__INIT;
        spawn_spawner_frame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;

        h.protocol = SPAWN_PROTOCOL;
        h.version = "fake";
        h.pid = 1;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO;
        f.hello = &h;
        fake_send(fd, &f);
}

static void fake_started(int fd, uint64_t id)
{
        Compute__Spawner__V1__Started s = COMPUTE__SPAWNER__V1__STARTED__INIT;
        spawn_spawner_frame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;

        s.pid = 42;
        f.exec_id = id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED;
        f.started = &s;
        fake_send(fd, &f);
}

static void fake_output(int fd, uint64_t id, int stream, const void *data, size_t len)
{
        Compute__Spawner__V1__Output o = COMPUTE__SPAWNER__V1__OUTPUT__INIT;
        spawn_spawner_frame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;

        o.stream = (uint32_t)stream;
        o.data = (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)data };
        f.exec_id = id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT;
        f.output = &o;
        fake_send(fd, &f);
}

static void fake_exited(int fd, uint64_t id, int code, int sig)
{
        Compute__Spawner__V1__Exited x = COMPUTE__SPAWNER__V1__EXITED__INIT;
        spawn_spawner_frame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;

        x.exit_code = code;
        x.signal = sig;
        x.user_us = 1500000;
        x.system_us = 500000;
        f.exec_id = id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED;
        f.exited = &x;
        fake_send(fd, &f);
}

/* The next agent frame (blocking); NULL at EOF. */
static spawn_agent_frame *fake_read(int fd, spawn_reader *rd)
{
        for (;;) {
                const uint8_t *p;
                const char *why = NULL;
                size_t n;
                int r = spawn_reader_next(rd, &p, &n, &why);

                if (r > 0) {
                        spawn_agent_frame *f = spawn_decode_agent(p, n, &why);
                        assert_non_null(f);
                        return f;
                }
                assert_int_equal(r, 0);
                if (spawn_reader_fill(rd, fd) <= 0)
                        return NULL;
        }
}

static void fake_flow(fake *fk, int fd, spawn_reader *rd, uint64_t id, uint64_t credit)
{
        static uint8_t chunk[SPAWN_MAX_DATA];
        uint64_t sent = 0;

        memset(chunk, 'x', sizeof(chunk));
        fk->max_outstanding = credit;
        while (sent < FLOW_BYTES) {
                size_t n = sizeof(chunk);
                if (credit == 0) {
                        spawn_agent_frame *f = fake_read(fd, rd);
                        if (!f)
                                return;
                        if (f->kind_case == COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT)
                                credit += f->credit->bytes;
                        if (credit > fk->max_outstanding)
                                fk->max_outstanding = credit;
                        spawn_agent_frame_free(f);
                        continue;
                }
                if (n > credit)
                        n = credit;
                if (n > FLOW_BYTES - sent)
                        n = FLOW_BYTES - sent;
                fake_output(fd, id, 1, chunk, n);
                credit -= n;
                sent += n;
        }
        fake_exited(fd, id, 0, 0);
}

static void fake_serve(fake *fk, int fd)
{
        spawn_reader rd;
        spawn_agent_frame *f;

        spawn_reader_init(&rd, SPAWN_MAX_AGENT_FRAME);
        fake_hello(fd);
        while ((f = fake_read(fd, &rd))) {
                uint64_t id = f->exec_id;

                if (f->kind_case == COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL) {
                        if (fk->n_signals < 8)
                                fk->signals[fk->n_signals++] = f->signal->signo;
                        if (f->signal->signo == SIGKILL && fk->mode == FAKE_SIGNALS)
                                fake_exited(fd, id, -1, SIGKILL);
                }
                if (f->kind_case != COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START) {
                        spawn_agent_frame_free(f);
                        continue;
                }
                switch (fk->mode) {
                case FAKE_NORMAL:
                        fake_started(fd, id);
                        fake_output(fd, id, 1, "hello\n", 6);
                        fake_output(fd, id, 2, "oops\n", 5);
                        fake_exited(fd, id, 3, 0);
                        break;
                case FAKE_FLOW:
                        fake_started(fd, id);
                        fake_flow(fk, fd, &rd, id, f->start->credit);
                        break;
                case FAKE_SIGNALS:
                        fake_started(fd, id);
                        break;
                case FAKE_GARBAGE: {
                        static const uint8_t bad[] = { 0,    0,    0,    6,    0xff,
                                                       0xff, 0xff, 0xff, 0xff, 0xff };
                        fake_started(fd, id);
                        send(fd, bad, sizeof(bad), MSG_NOSIGNAL);
                        break;
                }
                case FAKE_HUGE_PREFIX: {
                        static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0xff, 1, 2, 3 };
                        send(fd, huge, sizeof(huge), MSG_NOSIGNAL);
                        break;
                }
                case FAKE_OVER_CREDIT: {
                        static uint8_t chunk[SPAWN_MAX_DATA];
                        fake_started(fd, id);
                        for (uint64_t sent = 0; sent <= f->start->credit; sent += sizeof(chunk))
                                fake_output(fd, id, 1, chunk, sizeof(chunk));
                        fk->over_credit = true;
                        break;
                }
                case FAKE_UNKNOWN_EXEC:
                        fake_started(fd, id);
                        fake_output(fd, id + 1000, 1, "x", 1);
                        break;
                case FAKE_STRAY_START:
                        fake_started(fd, id + 77);
                        break;
                case FAKE_SILENT:
                        break;
                case FAKE_TINY:
                        fake_started(fd, id);
                        for (int i = 0; i < TINY_FRAMES; i++)
                                fake_output(fd, id, 1 + i % 2, i % 2 ? "e" : "o", 1);
                        atomic_store(&fk->sent_all, true);
                        fake_exited(fd, id, 0, 0);
                        break;
                case FAKE_DISCONNECT:
                        fake_started(fd, id);
                        fake_output(fd, id, 1, "partial", 7);
                        usleep(100 * 1000);
                        shutdown(fd, SHUT_RDWR);
                        break;
                }
                spawn_agent_frame_free(f);
        }
        fk->saw_eof = true;
        spawn_reader_free(&rd);
}

static void *fake_main(void *arg)
{
        fake *fk = arg;
        struct sockaddr_un a = { .sun_family = AF_UNIX };

        memcpy(a.sun_path, fk->path, strnlen(fk->path, sizeof(a.sun_path) - 1));
        fk->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        for (int i = 0; i < 200 && connect(fk->fd, (struct sockaddr *)&a, sizeof(a)) < 0; i++)
                usleep(10 * 1000);
        fake_serve(fk, fk->fd);
        return NULL;
}

static void fake_start(fake *fk, const char *dir, fake_mode mode)
{
        memset(fk, 0, sizeof(*fk));
        snprintf(fk->path, sizeof(fk->path), "%s/" SPAWN_SOCKET_NAME, dir);
        fk->mode = mode;
        assert_int_equal(pthread_create(&fk->thread, NULL, fake_main, fk), 0);
}

static void fake_stop(fake *fk)
{
        shutdown(fk->fd, SHUT_RDWR);
        pthread_join(fk->thread, NULL);
        close(fk->fd);
}

/* --- fixture --------------------------------------------------------------------------- */

typedef struct fixture {
        char dir[64], dir1[128], dir2[128];
        spawn_mgr *m;
} fixture;

static int warnings;
static char last_warning[400];

static void test_log(bool warn, const char *key, const char *msg)
{
        if (warn) {
                __atomic_add_fetch(&warnings, 1, __ATOMIC_SEQ_CST);
                snprintf(last_warning, sizeof(last_warning), "%s: %s", key ? key : "-", msg);
        }
}

static int setup(void **state)
{
        fixture *fx = cs_xcalloc(1, sizeof(*fx));
        cs_error *err = NULL;

        snprintf(fx->dir, sizeof(fx->dir), "/tmp/test-spawner-XXXXXX");
        assert_non_null(mkdtemp(fx->dir));
        snprintf(fx->dir1, sizeof(fx->dir1), "%s/sb1", fx->dir);
        snprintf(fx->dir2, sizeof(fx->dir2), "%s/sb2", fx->dir);
        warnings = 0;
        fx->m = spawn_mgr_new(test_log, &err);
        assert_non_null(fx->m);
        assert_int_equal(spawn_mgr_listen(fx->m, "sb1", fx->dir1, &err), 0);
        assert_int_equal(spawn_mgr_listen(fx->m, "sb2", fx->dir2, &err), 0);
        *state = fx;
        return 0;
}

static int teardown(void **state)
{
        fixture *fx = *state;
        char cmd[128];

        spawn_mgr_free(fx->m);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", fx->dir);
        assert_int_equal(system(cmd), 0);
        free(fx);
        return 0;
}

/* The live link of key, waiting for the fake's Hello. */
static spawn_link *wait_link(spawn_mgr *m, const char *key)
{
        for (int i = 0; i < 500; i++) {
                spawn_link *l = spawn_mgr_link(m, key);
                if (l)
                        return l;
                usleep(10 * 1000);
        }
        fail_msg("no link for %s", key);
        return NULL;
}

/* --- sinks ----------------------------------------------------------------------------- */

typedef struct collect {
        char out[256], err[256];
        size_t n_out, n_err;
        uint64_t total, total_out, total_err;
        int delay_ms; /* a slow client */
        int first_delay_ms;
        /* The first call waits for it (at most 20 s): a slow client while the frames arrive,
         * however slow the machine is to send them. */
        const atomic_bool *first_wait;
        int calls;
} collect;

static int collect_write(void *userdata, int stream, const uint8_t *data, size_t len,
                         cs_error **err)
{
        collect *c = userdata;

        (void)err;
        if (c->calls == 0 && c->first_wait)
                for (int i = 0; i < 2000 && !atomic_load(c->first_wait); i++)
                        usleep(10 * 1000);
        if (c->calls++ == 0 && c->first_delay_ms)
                usleep((useconds_t)c->first_delay_ms * 1000);
        if (c->delay_ms)
                usleep((useconds_t)c->delay_ms * 1000);
        c->total += len;
        if (stream == 1)
                c->total_out += len;
        else
                c->total_err += len;
        if (stream == 1 && c->n_out + len < sizeof(c->out)) {
                memcpy(c->out + c->n_out, data, len);
                c->n_out += len;
        } else if (stream == 2 && c->n_err + len < sizeof(c->err)) {
                memcpy(c->err + c->n_err, data, len);
                c->n_err += len;
        }
        return 0;
}

static char *argv_true[] = { "/bin/true", NULL };
static char *env_none[] = { "PATH=/bin", NULL };

static int run(spawn_link *l, collect *c, int cancel_fd, int64_t timeout_ms, int64_t grace_ms,
               spawn_run_result *res, cs_error **err)
{
        exec_sink sink = { .write = collect_write, .userdata = c, .cancel_fd = cancel_fd };
        spawn_run_spec spec = { .argv = argv_true,
                                .env = env_none,
                                .cwd = "/",
                                .deadline = cs_now_monotonic_ms() + timeout_ms,
                                .grace_ms = grace_ms };

        return spawn_run(l, &spec, &sink, res, err);
}

/* --- tests ----------------------------------------------------------------------------- */

static void test_normal_exec(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        collect c = { 0 };
        spawn_run_result res;
        cs_error *err = NULL;

        fake_start(&fk, fx->dir1, FAKE_NORMAL);
        l = wait_link(fx->m, "sb1");
        assert_int_equal(run(l, &c, -1, 10000, 1000, &res, &err), 1);
        assert_memory_equal(c.out, "hello\n", 6);
        assert_memory_equal(c.err, "oops\n", 5);
        assert_int_equal(res.exited.exit_code, 3);
        assert_int_equal(res.exited.user_us + res.exited.system_us, 2000000);
        assert_int_equal(res.stop, SPAWN_STOP_NONE);
        /* Many in a row on one connection: ids never reused, nothing left behind. */
        for (int i = 0; i < 50; i++) {
                collect c2 = { 0 };
                assert_int_equal(run(l, &c2, -1, 10000, 1000, &res, &err), 1);
                assert_int_equal(res.exited.exit_code, 3);
        }
        spawn_link_unref(l);
        fake_stop(&fk);
        assert_int_equal(warnings, 0);
}

static void test_flow_control(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        collect c = { .delay_ms = 1 };
        spawn_run_result res;
        cs_error *err = NULL;

        fake_start(&fk, fx->dir1, FAKE_FLOW);
        l = wait_link(fx->m, "sb1");
        assert_int_equal(run(l, &c, -1, 60000, 1000, &res, &err), 1);
        assert_int_equal(c.total, FLOW_BYTES);
        assert_int_equal(res.exited.exit_code, 0);
        /* The spawner was never owed more than the window: the agent's queue for the exec
         * (what it received and had not handed on) is bounded by it. The slow sink (1 ms a
         * chunk) paced the whole stream. */
        assert_true(fk.max_outstanding <= SPAWN_EXEC_WINDOW);
        assert_true(c.calls >= (int)(FLOW_BYTES / SPAWN_EVENT_MAX));
        spawn_link_unref(l);
        fake_stop(&fk);
}

/* A hundred thousand one-byte frames, alternating streams, while the client is slow: the
 * agent holds their bytes (within the credit), not a message per frame, and delivers all. */
static void test_tiny_frames(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        collect c = { .first_wait = &fk.sent_all };
        spawn_run_result res;
        cs_error *err = NULL;

        fake_start(&fk, fx->dir1, FAKE_TINY);
        l = wait_link(fx->m, "sb1");
        if (run(l, &c, -1, 60000, 1000, &res, &err) != 1)
                fail_msg("%s (%s)", err->msg, last_warning);
        assert_int_equal(c.total_out, TINY_FRAMES / 2);
        assert_int_equal(c.total_err, TINY_FRAMES / 2);
        assert_int_equal(res.exited.exit_code, 0);
        /* Coalesced: far fewer sink calls than frames. */
        assert_true(c.calls < TINY_FRAMES / 10);
        spawn_link_unref(l);
        fake_stop(&fk);
        assert_int_equal(warnings, 0);
}

static void test_timeout_signals(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        collect c = { 0 };
        spawn_run_result res;
        cs_error *err = NULL;
        int64_t t0 = cs_now_monotonic_ms(), took;

        fake_start(&fk, fx->dir1, FAKE_SIGNALS);
        l = wait_link(fx->m, "sb1");
        assert_int_equal(run(l, &c, -1, 200, 300, &res, &err), 1);
        took = cs_now_monotonic_ms() - t0;
        assert_int_equal(res.stop, SPAWN_STOP_TIMEOUT);
        assert_int_equal(res.last_sig, SIGKILL);
        assert_int_equal(res.exited.signal, SIGKILL);
        assert_int_equal(fk.n_signals, 2);
        assert_int_equal(fk.signals[0], SIGTERM);
        assert_int_equal(fk.signals[1], SIGKILL);
        assert_true(took >= 500);
        spawn_link_unref(l);
        fake_stop(&fk);
}

static void test_cancel_signals(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        collect c = { 0 };
        spawn_run_result res;
        cs_error *err = NULL;
        int cancel = eventfd(1, EFD_CLOEXEC); /* cancelled from the start */

        fake_start(&fk, fx->dir1, FAKE_SIGNALS);
        l = wait_link(fx->m, "sb1");
        assert_int_equal(run(l, &c, cancel, 60000, 200, &res, &err), 1);
        assert_int_equal(res.stop, SPAWN_STOP_CANCEL);
        assert_int_equal(fk.n_signals, 2);
        assert_int_equal(fk.signals[0], SIGTERM);
        assert_int_equal(fk.signals[1], SIGKILL);
        close(cancel);
        spawn_link_unref(l);
        fake_stop(&fk);
}

/* A hostile spawner on sb1: its exec fails with a clear error, sb1 has no link any more
 * (fallback), the warning names the cause; sb2's honest spawner serves on. */
static void hostile(fixture *fx, fake_mode mode, const char *expect, int64_t timeout_ms,
                    int first_delay_ms)
{
        fake bad, good;
        spawn_link *l1, *l2;
        collect c = { .first_delay_ms = first_delay_ms };
        spawn_run_result res;
        cs_error *err = NULL;
        int r;

        fake_start(&bad, fx->dir1, mode);
        fake_start(&good, fx->dir2, FAKE_NORMAL);
        l1 = wait_link(fx->m, "sb1");
        l2 = wait_link(fx->m, "sb2");
        r = run(l1, &c, -1, timeout_ms, 200, &res, &err);
        assert_int_equal(r, -1);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, "spawner went away"));
        cs_error_freep(&err);
        assert_true(warnings >= 1);
        if (!strstr(last_warning, expect))
                fail_msg("warning '%s' does not say '%s'", last_warning, expect);
        assert_null(spawn_mgr_link(fx->m, "sb1"));
        {
                collect c2 = { 0 };
                assert_int_equal(run(l2, &c2, -1, 10000, 200, &res, &err), 1);
                assert_int_equal(res.exited.exit_code, 3);
        }
        spawn_link_unref(l1);
        spawn_link_unref(l2);
        fake_stop(&bad);
        fake_stop(&good);
        assert_true(bad.saw_eof);
}

static void test_garbage(void **state)
{
        hostile(*state, FAKE_GARBAGE, "does not decode", 10000, 0);
}

static void test_huge_prefix(void **state)
{
        hostile(*state, FAKE_HUGE_PREFIX, "frame larger", 10000, 0);
}

static void test_over_credit(void **state)
{
        /* The sink holds the first chunk: no credit goes back while the rest arrives. */
        hostile(*state, FAKE_OVER_CREDIT, "beyond the exec's credit", 10000, 500);
}

static void test_unknown_exec(void **state)
{
        hostile(*state, FAKE_UNKNOWN_EXEC, "not asked to run", 10000, 0);
}

static void test_stray_start(void **state)
{
        hostile(*state, FAKE_STRAY_START, "not asked to run", 10000, 0);
}

static void test_disconnect(void **state)
{
        hostile(*state, FAKE_DISCONNECT, "closed its connection", 10000, 0);
}

/* Never answering: the call ends at its deadline + the grace + SPAWN_KILL_SETTLE_MS. */
static void test_silent(void **state)
{
        int64_t t0 = cs_now_monotonic_ms(), took;

        hostile(*state, FAKE_SILENT, "did not report an exec's end", 300, 0);
        took = cs_now_monotonic_ms() - t0;
        assert_true(took < 300 + 200 + SPAWN_KILL_SETTLE_MS + 3000);
}

/* After a broken connection, the spawner's next connection (and Hello) serves again; a
 * connection replaced by a newer one fails the execs on it. */
static void test_reconnect(void **state)
{
        fixture *fx = *state;
        fake a, b;
        spawn_link *l;
        collect c = { 0 };
        spawn_run_result res;
        cs_error *err = NULL;

        fake_start(&a, fx->dir1, FAKE_SIGNALS);
        l = wait_link(fx->m, "sb1");
        fake_start(&b, fx->dir1, FAKE_NORMAL);
        /* a's link is replaced as soon as b connects: wait for b's Hello to be the link. */
        for (int i = 0; i < 500; i++) {
                spawn_link *x = spawn_mgr_link(fx->m, "sb1");
                bool replaced = x && x != l;
                spawn_link_unref(x);
                if (replaced)
                        break;
                usleep(10 * 1000);
        }
        assert_int_equal(run(l, &c, -1, 10000, 200, &res, &err), 0); /* nothing sent */
        assert_non_null(err);
        cs_error_freep(&err);
        spawn_link_unref(l);
        l = wait_link(fx->m, "sb1");
        assert_int_equal(run(l, &c, -1, 10000, 200, &res, &err), 1);
        assert_int_equal(res.exited.exit_code, 3);
        spawn_link_unref(l);
        fake_stop(&a);
        fake_stop(&b);
        assert_true(a.saw_eof);
}

/* Forgetting a sandbox (destroy) drops its connection and fails its running exec. */
static void test_forget_mid_exec(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;

        fake_start(&fk, fx->dir1, FAKE_SIGNALS);
        l = wait_link(fx->m, "sb1");
        {
                spawn_exec *e = NULL;
                bool sent = false;
                cs_error *err = NULL;
                spawn_event ev;

                assert_int_equal(
                        spawn_exec_start(l, argv_true, env_none, "/", 4096, &e, &sent, &err), 0);
                spawn_mgr_forget(fx->m, "sb1");
                assert_true(spawn_exec_wait(e, cs_now_monotonic_ms() + 5000));
                spawn_exec_next(e, &ev);
                assert_int_equal(ev.kind, SPAWN_EV_FAILED);
                spawn_exec_end(e);
        }
        {
                char sock[200];
                snprintf(sock, sizeof(sock), "%s/" SPAWN_SOCKET_NAME, fx->dir1);
                assert_int_equal(access(sock, F_OK), -1);
        }
        spawn_link_unref(l);
        fake_stop(&fk);
}

/* The first exec of a new endpoint waits for the spawner that is about to connect; an
 * endpoint whose spawner never comes costs that wait once, within its first moments. */
static void test_first_connect_wait(void **state)
{
        fixture *fx = *state;
        fake fk;
        spawn_link *l;
        int64_t t0;

        fake_start(&fk, fx->dir1, FAKE_NORMAL);
        l = spawn_mgr_link_wait(fx->m, "sb1", 5000);
        assert_non_null(l);
        spawn_link_unref(l);
        {
                char dir3[160];
                cs_error *err = NULL;

                snprintf(dir3, sizeof(dir3), "%s/sb3", fx->dir);
                t0 = cs_now_monotonic_ms();
                assert_int_equal(spawn_mgr_listen(fx->m, "sb3", dir3, &err), 0);
        }
        assert_null(spawn_mgr_link_wait(fx->m, "sb3", 300)); /* nobody connects there */
        assert_true(cs_now_monotonic_ms() - t0 >= 300);
        t0 = cs_now_monotonic_ms();
        assert_null(spawn_mgr_link_wait(fx->m, "sb3", 300)); /* past its first moments */
        assert_true(cs_now_monotonic_ms() - t0 < 100);
        assert_null(spawn_mgr_link_wait(fx->m, "no-such", 300));
        fake_stop(&fk);
}

/* A socket directory deeper than a socket path can name (107 bytes) still serves. */
static void test_long_path(void **state)
{
        fixture *fx = *state;
        char dir[300], cwd[256];
        cs_error *err = NULL;
        fake fk;
        spawn_link *l;
        collect c = { 0 };
        spawn_run_result res;

        snprintf(dir, sizeof(dir), "%s/%0120d", fx->dir, 0);
        assert_int_equal(spawn_mgr_listen(fx->m, "deep", dir, &err), 0);
        /* The fake connects by a relative path, from the directory. */
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_int_equal(chdir(dir), 0);
        fake_start(&fk, ".", FAKE_NORMAL);
        l = wait_link(fx->m, "deep");
        assert_int_equal(chdir(cwd), 0);
        assert_int_equal(run(l, &c, -1, 10000, 1000, &res, &err), 1);
        assert_int_equal(res.exited.exit_code, 3);
        spawn_link_unref(l);
        fake_stop(&fk);
        spawn_mgr_forget(fx->m, "deep");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_normal_exec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_flow_control, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tiny_frames, setup, teardown),
                cmocka_unit_test_setup_teardown(test_timeout_signals, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cancel_signals, setup, teardown),
                cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
                cmocka_unit_test_setup_teardown(test_huge_prefix, setup, teardown),
                cmocka_unit_test_setup_teardown(test_over_credit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unknown_exec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stray_start, setup, teardown),
                cmocka_unit_test_setup_teardown(test_disconnect, setup, teardown),
                cmocka_unit_test_setup_teardown(test_silent, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reconnect, setup, teardown),
                cmocka_unit_test_setup_teardown(test_forget_mid_exec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_first_connect_wait, setup, teardown),
                cmocka_unit_test_setup_teardown(test_long_path, setup, teardown),
        };

        signal(SIGPIPE, SIG_IGN);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
