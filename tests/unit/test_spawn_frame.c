/* compute.spawner.v1 frames (shared/spawn_frame.c): round trips of every kind through the
 * encoder, a real fd and the reader; every field check of both directions; the reader's
 * bounds (a 4 GB prefix, the largest frame and one byte more, truncated frames, many frames
 * in one read, one byte at a time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spawn_frame.h"

typedef Compute__Spawner__V1__AgentFrame AF;
typedef Compute__Spawner__V1__SpawnerFrame SF;

/* A non-blocking socketpair: [0] is read by the reader, [1] written by the test. */
static void pair(int fds[2])
{
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        assert_int_equal(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
}

static void write_all(int fd, const void *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);

                assert_true(w > 0);
                p = (const uint8_t *)p + w;
                n -= (size_t)w;
        }
}

/* Reads until a frame is whole; returns its payload (valid until the next reader call). */
static const uint8_t *next_frame(spawn_reader *r, int fd, size_t *len)
{
        const uint8_t *p;
        const char *why = NULL;

        for (;;) {
                int got = spawn_reader_next(r, &p, len, &why);
                ssize_t n;

                assert_int_not_equal(got, -1);
                if (got == 1)
                        return p;
                n = spawn_reader_fill(r, fd);
                assert_true(n > 0);
        }
}

/* --- round trips ----------------------------------------------------------------------- */

static AF *agent_round_trip(const AF *in)
{
        spawn_reader r;
        const char *why = "unset";
        size_t len, n;
        uint8_t *buf = spawn_encode_agent(in, &len);
        const uint8_t *p;
        int fds[2];
        AF *out;

        assert_non_null(buf);
        assert_null(spawn_check_agent(in));
        pair(fds);
        write_all(fds[1], buf, len);
        spawn_reader_init(&r, SPAWN_MAX_AGENT_FRAME);
        p = next_frame(&r, fds[0], &n);
        assert_int_equal(n, len - SPAWN_PREFIX);
        out = spawn_decode_agent(p, n, &why);
        assert_non_null(out);
        assert_null(why);
        spawn_reader_free(&r);
        free(buf);
        close(fds[0]);
        close(fds[1]);
        return out;
}

static SF *spawner_round_trip(const SF *in)
{
        spawn_reader r;
        const char *why = "unset";
        size_t len, n;
        uint8_t *buf = spawn_encode_spawner(in, &len);
        const uint8_t *p;
        int fds[2];
        SF *out;

        assert_non_null(buf);
        pair(fds);
        write_all(fds[1], buf, len);
        spawn_reader_init(&r, SPAWN_MAX_SPAWNER_FRAME);
        p = next_frame(&r, fds[0], &n);
        out = spawn_decode_spawner(p, n, &why);
        assert_non_null(out);
        assert_null(why);
        spawn_reader_free(&r);
        free(buf);
        close(fds[0]);
        close(fds[1]);
        return out;
}

static void test_agent_round_trips(void **state)
{
        (void)state;
        char *argv[] = { "/bin/sh", "-c", "echo é" }, *env[] = { "A=1", "PATH=/bin", "E=" };
        Compute__Spawner__V1__Start start = COMPUTE__SPAWNER__V1__START__INIT;
        Compute__Spawner__V1__Signal sig = COMPUTE__SPAWNER__V1__SIGNAL__INIT;
        Compute__Spawner__V1__Credit credit = COMPUTE__SPAWNER__V1__CREDIT__INIT;
        Compute__Spawner__V1__Ping ping = COMPUTE__SPAWNER__V1__PING__INIT;
        AF f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT, *out;

        start.n_argv = 3;
        start.argv = argv;
        start.n_env = 3;
        start.env = env;
        start.cwd = "/workspace";
        start.credit = SPAWN_MAX_CREDIT;
        f.exec_id = UINT64_MAX;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START;
        f.start = &start;
        out = agent_round_trip(&f);
        assert_int_equal(out->exec_id, UINT64_MAX);
        assert_int_equal(out->kind_case, COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START);
        assert_int_equal(out->start->n_argv, 3);
        assert_string_equal(out->start->argv[2], "echo é");
        assert_int_equal(out->start->n_env, 3);
        assert_string_equal(out->start->env[2], "E=");
        assert_string_equal(out->start->cwd, "/workspace");
        assert_int_equal(out->start->credit, SPAWN_MAX_CREDIT);
        spawn_agent_frame_free(out);

        f.exec_id = 7;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL;
        f.signal = &sig;
        sig.signo = 64;
        out = agent_round_trip(&f);
        assert_int_equal(out->signal->signo, 64);
        spawn_agent_frame_free(out);

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT;
        f.credit = &credit;
        credit.bytes = 1;
        out = agent_round_trip(&f);
        assert_int_equal(out->credit->bytes, 1);
        spawn_agent_frame_free(out);

        f.exec_id = 0;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING;
        f.ping = &ping;
        ping.nonce = 0x1234567890ull;
        out = agent_round_trip(&f);
        assert_int_equal(out->ping->nonce, 0x1234567890ull);
        spawn_agent_frame_free(out);
}

static void test_spawner_round_trips(void **state)
{
        (void)state;
        static uint8_t data[SPAWN_MAX_DATA];
        Compute__Spawner__V1__Hello hello = COMPUTE__SPAWNER__V1__HELLO__INIT;
        Compute__Spawner__V1__Started started = COMPUTE__SPAWNER__V1__STARTED__INIT;
        Compute__Spawner__V1__Output output = COMPUTE__SPAWNER__V1__OUTPUT__INIT;
        Compute__Spawner__V1__Exited exited = COMPUTE__SPAWNER__V1__EXITED__INIT;
        Compute__Spawner__V1__Pong pong = COMPUTE__SPAWNER__V1__PONG__INIT;
        SF f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT, *out;

        hello.protocol = 1;
        hello.version = "compute-init 1";
        hello.pid = 1;
        hello.running = 3;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO;
        f.hello = &hello;
        out = spawner_round_trip(&f);
        assert_string_equal(out->hello->version, "compute-init 1");
        assert_int_equal(out->hello->running, 3);
        spawn_spawner_frame_free(out);

        f.exec_id = 9;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED;
        f.started = &started;
        started.pid = 42;
        out = spawner_round_trip(&f);
        assert_int_equal(out->started->pid, 42);
        spawn_spawner_frame_free(out);

        /* The largest Output fits the largest spawner frame. */
        memset(data, 'x', sizeof(data));
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT;
        f.output = &output;
        output.stream = 2;
        output.data.data = data;
        output.data.len = sizeof(data);
        out = spawner_round_trip(&f);
        assert_int_equal(out->output->stream, 2);
        assert_int_equal(out->output->data.len, SPAWN_MAX_DATA);
        assert_memory_equal(out->output->data.data, data, SPAWN_MAX_DATA);
        spawn_spawner_frame_free(out);

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED;
        f.exited = &exited;
        exited.exit_code = -1;
        exited.signal = 9;
        exited.core_dumped = 1;
        exited.user_us = 123;
        exited.system_us = 456;
        exited.max_rss_kib = 789;
        out = spawner_round_trip(&f);
        assert_int_equal(out->exited->exit_code, -1);
        assert_int_equal(out->exited->signal, 9);
        assert_true(out->exited->core_dumped);
        assert_int_equal(out->exited->user_us, 123);
        assert_int_equal(out->exited->system_us, 456);
        assert_int_equal(out->exited->max_rss_kib, 789);
        spawn_spawner_frame_free(out);

        exited = (Compute__Spawner__V1__Exited)COMPUTE__SPAWNER__V1__EXITED__INIT;
        exited.exit_code = 127;
        exited.start_error = "nope: command not found";
        out = spawner_round_trip(&f);
        assert_string_equal(out->exited->start_error, "nope: command not found");
        spawn_spawner_frame_free(out);

        f.exec_id = 0;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_PONG;
        f.pong = &pong;
        pong.nonce = 5;
        out = spawner_round_trip(&f);
        assert_int_equal(out->pong->nonce, 5);
        spawn_spawner_frame_free(out);
}

/* --- checks ---------------------------------------------------------------------------- */

/* The check refuses f with `want`, and so does the decoder of its encoding (when it encodes
 * at all: the encoder refuses what is above the frame size). */
static void agent_refused(const AF *f, const char *want)
{
        const char *why = spawn_check_agent(f), *dwhy = NULL;
        uint8_t *buf;
        size_t len;

        assert_non_null(why);
        assert_string_equal(why, want);
        buf = spawn_encode_agent(f, &len);
        if (!buf)
                return;
        assert_null(spawn_decode_agent(buf + SPAWN_PREFIX, len - SPAWN_PREFIX, &dwhy));
        assert_non_null(dwhy);
        free(buf);
}

static void spawner_refused(const SF *f, const char *want)
{
        const char *why = spawn_check_spawner(f), *dwhy = NULL;
        uint8_t *buf;
        size_t len;

        assert_non_null(why);
        assert_string_equal(why, want);
        buf = spawn_encode_spawner(f, &len);
        if (!buf)
                return;
        assert_null(spawn_decode_spawner(buf + SPAWN_PREFIX, len - SPAWN_PREFIX, &dwhy));
        assert_non_null(dwhy);
        free(buf);
}

static void test_agent_checks(void **state)
{
        (void)state;
        char *argv[] = { "true" }, *empty[] = { "" }, *bad_env[] = { "NOEQUALS" },
             *eq_first[] = { "=v" }, *not_utf8[] = { "a\xff" };
        static char *many[SPAWN_MAX_ARGV + 1];
        static char cwd[SPAWN_MAX_CWD + 1];
        Compute__Spawner__V1__Start s = COMPUTE__SPAWNER__V1__START__INIT;
        Compute__Spawner__V1__Signal sig = COMPUTE__SPAWNER__V1__SIGNAL__INIT;
        Compute__Spawner__V1__Credit cr = COMPUTE__SPAWNER__V1__CREDIT__INIT;
        Compute__Spawner__V1__Ping ping = COMPUTE__SPAWNER__V1__PING__INIT;
        AF f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        char *big;

        agent_refused(&f, "frame without a kind");
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING;
        f.ping = &ping;
        f.exec_id = 1;
        agent_refused(&f, "ping with an exec_id");
        f.exec_id = 0;
        assert_null(spawn_check_agent(&f));

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START;
        f.start = &s;
        s.n_argv = 1;
        s.argv = argv;
        s.cwd = "/";
        s.credit = 1;
        agent_refused(&f, "exec frame without an exec_id");
        f.exec_id = 1;
        assert_null(spawn_check_agent(&f));

        s.n_argv = 0;
        agent_refused(&f, "start.argv empty or above 4096 entries");
        s.n_argv = 1;
        s.argv = empty;
        agent_refused(&f, "start.argv empty or above 4096 entries");
        for (size_t i = 0; i <= SPAWN_MAX_ARGV; i++)
                many[i] = "a";
        s.argv = many;
        s.n_argv = SPAWN_MAX_ARGV;
        assert_null(spawn_check_agent(&f));
        s.n_argv = SPAWN_MAX_ARGV + 1;
        agent_refused(&f, "start.argv empty or above 4096 entries");
        s.n_argv = 1;

        s.n_env = SPAWN_MAX_ENV + 1;
        s.env = many;
        agent_refused(&f, "start.env above its cap");
        s.n_env = 1;
        s.env = bad_env;
        agent_refused(&f, "start.env entry is not K=V");
        s.env = eq_first;
        agent_refused(&f, "start.env entry is not K=V");
        s.n_env = 0;

        s.cwd = "relative";
        agent_refused(&f, "start.cwd not an absolute path");
        s.cwd = "";
        agent_refused(&f, "start.cwd not an absolute path");
        memset(cwd, 'a', SPAWN_MAX_CWD);
        cwd[0] = '/';
        s.cwd = cwd;
        agent_refused(&f, "start.cwd not an absolute path");
        s.cwd = "/\xc3";
        agent_refused(&f, "start strings not UTF-8");
        s.cwd = "/";

        s.argv = not_utf8;
        agent_refused(&f, "start strings not UTF-8");
        s.argv = argv;
        s.n_env = 1;
        s.env = (char *[]){ "K=\xed\xa0\x80" }; /* a surrogate */
        agent_refused(&f, "start strings not UTF-8");
        s.n_env = 0;

        /* argv, env and cwd together above 1 MiB: two arguments of 512 KiB. */
        big = malloc(SPAWN_MAX_START_BYTES / 2 + 1);
        assert_non_null(big);
        memset(big, 'b', SPAWN_MAX_START_BYTES / 2);
        big[SPAWN_MAX_START_BYTES / 2] = '\0';
        s.argv = (char *[]){ big, big };
        s.n_argv = 2;
        agent_refused(&f, "start argv, env and cwd above 1 MiB");
        big[SPAWN_MAX_START_BYTES / 2 - 4] = '\0';
        assert_null(spawn_check_agent(&f));
        free(big);
        s.argv = argv;
        s.n_argv = 1;

        s.credit = 0;
        agent_refused(&f, "start.credit outside 1..16 MiB");
        s.credit = SPAWN_MAX_CREDIT + 1;
        agent_refused(&f, "start.credit outside 1..16 MiB");
        s.credit = 1;

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL;
        f.signal = &sig;
        sig.signo = 0;
        agent_refused(&f, "signal.signo outside 1..64");
        sig.signo = 65;
        agent_refused(&f, "signal.signo outside 1..64");
        sig.signo = -9;
        agent_refused(&f, "signal.signo outside 1..64");
        sig.signo = 15;
        assert_null(spawn_check_agent(&f));

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT;
        f.credit = &cr;
        cr.bytes = 0;
        agent_refused(&f, "credit.bytes outside 1..16 MiB");
        cr.bytes = SPAWN_MAX_CREDIT + 1;
        agent_refused(&f, "credit.bytes outside 1..16 MiB");
        cr.bytes = SPAWN_MAX_CREDIT;
        assert_null(spawn_check_agent(&f));
}

static void test_spawner_checks(void **state)
{
        (void)state;
        static uint8_t data[SPAWN_MAX_DATA + 1];
        static char long_text[SPAWN_MAX_START_ERROR + 2];
        Compute__Spawner__V1__Hello h = COMPUTE__SPAWNER__V1__HELLO__INIT;
        Compute__Spawner__V1__Started st = COMPUTE__SPAWNER__V1__STARTED__INIT;
        Compute__Spawner__V1__Output o = COMPUTE__SPAWNER__V1__OUTPUT__INIT;
        Compute__Spawner__V1__Exited e = COMPUTE__SPAWNER__V1__EXITED__INIT;
        Compute__Spawner__V1__Pong pong = COMPUTE__SPAWNER__V1__PONG__INIT;
        SF f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;

        spawner_refused(&f, "frame without a kind");

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO;
        f.hello = &h;
        h.protocol = 1;
        h.version = "v";
        h.pid = 1;
        assert_null(spawn_check_spawner(&f));
        f.exec_id = 3;
        spawner_refused(&f, "hello/pong with an exec_id");
        f.exec_id = 0;
        h.protocol = 2;
        spawner_refused(&f, "hello.protocol is not 1");
        h.protocol = 1;
        memset(long_text, 'v', SPAWN_MAX_VERSION + 1);
        h.version = long_text;
        spawner_refused(&f, "hello.version too long or not UTF-8");
        h.version = "\xff";
        spawner_refused(&f, "hello.version too long or not UTF-8");
        h.version = "v";
        h.pid = 0;
        spawner_refused(&f, "hello.pid not positive");
        h.pid = -5;
        spawner_refused(&f, "hello.pid not positive");

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_PONG;
        f.pong = &pong;
        f.exec_id = 1;
        spawner_refused(&f, "hello/pong with an exec_id");
        f.exec_id = 0;
        assert_null(spawn_check_spawner(&f));

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED;
        f.started = &st;
        st.pid = 10;
        spawner_refused(&f, "exec frame without an exec_id");
        f.exec_id = 1;
        assert_null(spawn_check_spawner(&f));
        st.pid = 0;
        spawner_refused(&f, "started.pid not positive");

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT;
        f.output = &o;
        o.stream = 1;
        o.data.data = data;
        o.data.len = 1;
        assert_null(spawn_check_spawner(&f));
        o.stream = 0;
        spawner_refused(&f, "output.stream is not 1 or 2");
        o.stream = 3;
        spawner_refused(&f, "output.stream is not 1 or 2");
        o.stream = 2;
        o.data.len = 0;
        spawner_refused(&f, "output.data empty or above 64 KiB");
        o.data.len = SPAWN_MAX_DATA + 1;
        spawner_refused(&f, "output.data empty or above 64 KiB");

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED;
        f.exited = &e;
        assert_null(spawn_check_spawner(&f)); /* exit_code 0 */
        e.exit_code = 256;
        spawner_refused(&f, "exited.exit_code outside -1..255");
        e.exit_code = -2;
        spawner_refused(&f, "exited.exit_code outside -1..255");
        e.exit_code = -1;
        e.signal = 65;
        spawner_refused(&f, "exited.signal outside 0..64");
        e.signal = -1;
        spawner_refused(&f, "exited.signal outside 0..64");
        e.signal = 0;
        spawner_refused(&f, "exited needs exactly one of exit_code and signal");
        e.exit_code = 1;
        e.signal = 9;
        spawner_refused(&f, "exited needs exactly one of exit_code and signal");
        e.exit_code = 126;
        e.signal = 0;
        memset(long_text, 'e', SPAWN_MAX_START_ERROR + 1);
        long_text[SPAWN_MAX_START_ERROR + 1] = '\0';
        e.start_error = long_text;
        spawner_refused(&f, "exited.start_error too long or not UTF-8");
        long_text[SPAWN_MAX_START_ERROR] = '\0';
        assert_null(spawn_check_spawner(&f));
        e.start_error = "\xc0\x80"; /* overlong NUL */
        spawner_refused(&f, "exited.start_error too long or not UTF-8");
}

/* The interactive execs' frames (ExecSession): their ranges, both ways, and a round trip. */
static void test_input_frames(void **state)
{
        (void)state;
        static uint8_t data[SPAWN_MAX_DATA + 1];
        char *argv[] = { "sh" };
        Compute__Spawner__V1__Start s = COMPUTE__SPAWNER__V1__START__INIT;
        Compute__Spawner__V1__Stdin in = COMPUTE__SPAWNER__V1__STDIN__INIT;
        Compute__Spawner__V1__CloseStdin cl = COMPUTE__SPAWNER__V1__CLOSE_STDIN__INIT;
        Compute__Spawner__V1__Resize rs = COMPUTE__SPAWNER__V1__RESIZE__INIT;
        Compute__Spawner__V1__StdinCredit sc = COMPUTE__SPAWNER__V1__STDIN_CREDIT__INIT;
        AF f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        SF g = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        AF *back;

        f.exec_id = 7;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START;
        f.start = &s;
        s.n_argv = 1;
        s.argv = argv;
        s.cwd = "/";
        s.credit = 1;
        s.stdin = true;
        assert_null(spawn_check_agent(&f));
        s.rows = 24;
        s.cols = 80;
        agent_refused(&f, "start.rows/cols without tty");
        s.tty = true;
        assert_null(spawn_check_agent(&f));
        back = agent_round_trip(&f);
        assert_true(back->start->tty && back->start->stdin);
        assert_int_equal(back->start->rows, 24);
        assert_int_equal(back->start->cols, 80);
        spawn_agent_frame_free(back);
        s.cols = SPAWN_MAX_TTY_DIM + 1;
        agent_refused(&f, "start.rows/cols above their cap");

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_STDIN;
        f.stdin = &in;
        agent_refused(&f, "stdin.data empty or above 64 KiB");
        in.data = (ProtobufCBinaryData){ .len = SPAWN_MAX_DATA, .data = data };
        assert_null(spawn_check_agent(&f));
        back = agent_round_trip(&f);
        assert_int_equal(back->stdin->data.len, SPAWN_MAX_DATA);
        spawn_agent_frame_free(back);
        in.data.len = SPAWN_MAX_DATA + 1;
        agent_refused(&f, "stdin.data empty or above 64 KiB");

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CLOSE_STDIN;
        f.close_stdin = &cl;
        assert_null(spawn_check_agent(&f));
        back = agent_round_trip(&f);
        assert_int_equal(back->kind_case, COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CLOSE_STDIN);
        spawn_agent_frame_free(back);
        f.exec_id = 0;
        agent_refused(&f, "exec frame without an exec_id");
        f.exec_id = 7;

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_RESIZE;
        f.resize = &rs;
        agent_refused(&f, "resize rows/cols outside 1..4096");
        rs.rows = 1;
        rs.cols = SPAWN_MAX_TTY_DIM;
        assert_null(spawn_check_agent(&f));
        rs.rows = SPAWN_MAX_TTY_DIM + 1;
        agent_refused(&f, "resize rows/cols outside 1..4096");

        g.exec_id = 7;
        g.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STDIN_CREDIT;
        g.stdin_credit = &sc;
        spawner_refused(&g, "stdin_credit.bytes outside 1..256 KiB");
        sc.bytes = SPAWN_STDIN_WINDOW;
        assert_null(spawn_check_spawner(&g));
        sc.bytes = SPAWN_STDIN_WINDOW + 1;
        spawner_refused(&g, "stdin_credit.bytes outside 1..256 KiB");
        sc.bytes = 1;
        g.exec_id = 0;
        spawner_refused(&g, "exec frame without an exec_id");
}

static void test_decode_garbage_and_size(void **state)
{
        (void)state;
        static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0xff };
        const char *why = NULL;
        uint8_t *big = calloc(1, SPAWN_MAX_AGENT_FRAME + 1);

        assert_null(spawn_decode_agent(garbage, sizeof(garbage), &why));
        assert_string_equal(why, "frame does not decode");
        why = NULL;
        assert_null(spawn_decode_spawner(garbage, sizeof(garbage), &why));
        assert_string_equal(why, "frame does not decode");
        /* Empty bytes decode to a frame with no kind. */
        why = NULL;
        assert_null(spawn_decode_agent(garbage, 0, &why));
        assert_string_equal(why, "frame without a kind");
        /* Above the direction's maximum: refused before unpacking. */
        assert_non_null(big);
        why = NULL;
        assert_null(spawn_decode_agent(big, SPAWN_MAX_AGENT_FRAME + 1, &why));
        assert_string_equal(why, "frame larger than the protocol allows");
        why = NULL;
        assert_null(spawn_decode_spawner(big, SPAWN_MAX_SPAWNER_FRAME + 1, &why));
        assert_string_equal(why, "frame larger than the protocol allows");
        free(big);
}

/* Fields the protocol does not define are refused, at the top and in the kind; so is field
 * number 0, which protobuf-c would keep as an unknown field (found by fuzz_spawn_frame). */
static void test_unknown_fields_refused(void **state)
{
        (void)state;
        /* Ping{nonce 1}, then field 15 (varint 1) at the top. */
        static const uint8_t top[] = { 0x2a, 0x02, 0x08, 0x01, 0x78, 0x01 };
        /* Ping{nonce 1, field 9 = 1}. */
        static const uint8_t inner[] = { 0x2a, 0x04, 0x08, 0x01, 0x48, 0x01 };
        /* exec_id 1, Exited{user_us 10, then a field-0 tag written as 0x80 0x00, varint 0}. */
        static const uint8_t zero[] = { 0x08, 0x01, 0x2a, 0x05, 0x20, 0x0a, 0x80, 0x00, 0x00 };
        static const uint8_t ok[] = { 0x2a, 0x02, 0x08, 0x01 };
        const char *why = NULL;
        spawn_agent_frame *f;

        assert_null(spawn_decode_agent(top, sizeof(top), &why));
        assert_string_equal(why, "frame with unknown fields");
        why = NULL;
        assert_null(spawn_decode_agent(inner, sizeof(inner), &why));
        assert_string_equal(why, "frame with unknown fields");
        why = NULL;
        assert_null(spawn_decode_spawner(zero, sizeof(zero), &why));
        assert_non_null(why);
        f = spawn_decode_agent(ok, sizeof(ok), &why);
        assert_non_null(f);
        assert_int_equal(f->ping->nonce, 1);
        spawn_agent_frame_free(f);
}

static void test_encode_refuses_oversize(void **state)
{
        (void)state;
        static uint8_t data[SPAWN_MAX_SPAWNER_FRAME];
        Compute__Spawner__V1__Output o = COMPUTE__SPAWNER__V1__OUTPUT__INIT;
        SF f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        size_t len = 0;

        f.exec_id = 1;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT;
        f.output = &o;
        o.stream = 1;
        o.data.data = data;
        o.data.len = sizeof(data);
        assert_null(spawn_encode_spawner(&f, &len));
}

/* --- the reader ------------------------------------------------------------------------ */

static void test_reader_4gb_prefix(void **state)
{
        (void)state;
        static const uint8_t prefix[] = { 0xff, 0xff, 0xff, 0xff, 'x', 'y' };
        spawn_reader r;
        const uint8_t *p;
        const char *why = NULL;
        size_t n;
        int fds[2];

        pair(fds);
        write_all(fds[1], prefix, sizeof(prefix));
        spawn_reader_init(&r, SPAWN_MAX_AGENT_FRAME);
        assert_true(spawn_reader_fill(&r, fds[0]) > 0);
        assert_int_equal(spawn_reader_next(&r, &p, &n, &why), -1);
        assert_string_equal(why, "frame larger than the protocol allows");
        /* Nothing more is read, nothing allocated for it. */
        errno = 0;
        assert_int_equal(spawn_reader_fill(&r, fds[0]), -1);
        assert_int_equal(errno, EAGAIN);
        assert_true(r.cap <= 4096);
        spawn_reader_free(&r);
        close(fds[0]);
        close(fds[1]);
}

/* A frame of exactly max_frame bytes is read; one byte more is refused. */
static void test_reader_max_frame(void **state)
{
        (void)state;
        const size_t max = 100000;
        uint8_t *buf = calloc(1, SPAWN_PREFIX + max + 1);
        spawn_reader r;
        const uint8_t *p;
        const char *why = NULL;
        size_t n, sent = 0;
        int fds[2];

        assert_non_null(buf);
        buf[1] = (uint8_t)(max >> 16);
        buf[2] = (uint8_t)(max >> 8);
        buf[3] = (uint8_t)max;
        buf[SPAWN_PREFIX + max - 1] = 0xaa;
        pair(fds);
        spawn_reader_init(&r, max);
        /* Feed it in pieces (the socket buffer holds less than the frame). */
        for (int got = 0; got != 1;) {
                ssize_t w = sent < SPAWN_PREFIX + max
                                    ? write(fds[1], buf + sent, SPAWN_PREFIX + max - sent)
                                    : 0;

                if (w > 0)
                        sent += (size_t)w;
                while ((got = spawn_reader_next(&r, &p, &n, &why)) == 0 &&
                       spawn_reader_fill(&r, fds[0]) > 0)
                        ;
                assert_int_not_equal(got, -1);
        }
        assert_int_equal(sent, SPAWN_PREFIX + max);
        assert_int_equal(n, max);
        assert_int_equal(p[max - 1], 0xaa);
        assert_true(r.cap <= SPAWN_PREFIX + max);

        buf[3] = (uint8_t)(max + 1);
        write_all(fds[1], buf, SPAWN_PREFIX);
        assert_true(spawn_reader_fill(&r, fds[0]) > 0);
        assert_int_equal(spawn_reader_next(&r, &p, &n, &why), -1);
        spawn_reader_free(&r);
        free(buf);
        close(fds[0]);
        close(fds[1]);
}

static uint8_t *ping_frame(uint64_t nonce, size_t *len)
{
        Compute__Spawner__V1__Ping ping = COMPUTE__SPAWNER__V1__PING__INIT;
        AF f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;

        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING;
        f.ping = &ping;
        ping.nonce = nonce;
        return spawn_encode_agent(&f, len);
}

static uint64_t nonce_of(const uint8_t *p, size_t n)
{
        const char *why;
        AF *f = spawn_decode_agent(p, n, &why);
        uint64_t nonce;

        assert_non_null(f);
        assert_int_equal(f->kind_case, COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING);
        nonce = f->ping->nonce;
        spawn_agent_frame_free(f);
        return nonce;
}

static void test_reader_several_frames_in_one_read(void **state)
{
        (void)state;
        uint8_t all[1024];
        size_t total = 0, len, n;
        spawn_reader r;
        const uint8_t *p;
        const char *why = NULL;
        int fds[2];

        for (uint64_t i = 1; i <= 5; i++) {
                uint8_t *f = ping_frame(i * 1000, &len);

                memcpy(all + total, f, len);
                total += len;
                free(f);
        }
        pair(fds);
        write_all(fds[1], all, total);
        spawn_reader_init(&r, SPAWN_MAX_AGENT_FRAME);
        assert_int_equal(spawn_reader_fill(&r, fds[0]), (ssize_t)total);
        for (uint64_t i = 1; i <= 5; i++) {
                assert_int_equal(spawn_reader_next(&r, &p, &n, &why), 1);
                assert_int_equal(nonce_of(p, n), i * 1000);
        }
        assert_int_equal(spawn_reader_next(&r, &p, &n, &why), 0);
        errno = 0;
        assert_int_equal(spawn_reader_fill(&r, fds[0]), -1);
        assert_int_equal(errno, EAGAIN);
        /* EOF */
        close(fds[1]);
        assert_int_equal(spawn_reader_fill(&r, fds[0]), 0);
        spawn_reader_free(&r);
        close(fds[0]);
}

static void test_reader_truncated_and_byte_by_byte(void **state)
{
        (void)state;
        size_t len, n;
        uint8_t *f = ping_frame(77, &len);
        spawn_reader r;
        const uint8_t *p;
        const char *why = NULL;
        int fds[2];

        pair(fds);
        spawn_reader_init(&r, SPAWN_MAX_AGENT_FRAME);
        /* A prefix cut in two, then the payload one byte at a time. */
        for (size_t i = 0; i < len; i++) {
                assert_int_equal(spawn_reader_next(&r, &p, &n, &why), 0);
                write_all(fds[1], f + i, 1);
                assert_int_equal(spawn_reader_fill(&r, fds[0]), 1);
        }
        assert_int_equal(spawn_reader_next(&r, &p, &n, &why), 1);
        assert_int_equal(nonce_of(p, n), 77);
        /* A frame cut short by EOF is never returned. */
        write_all(fds[1], f, len - 1);
        close(fds[1]);
        while (spawn_reader_fill(&r, fds[0]) > 0)
                ;
        assert_int_equal(spawn_reader_next(&r, &p, &n, &why), 0);
        assert_int_equal(spawn_reader_fill(&r, fds[0]), 0);
        spawn_reader_free(&r);
        free(f);
        close(fds[0]);
}

/* A truncated payload that protobuf-c is handed anyway does not decode. */
static void test_truncated_payload_does_not_decode(void **state)
{
        (void)state;
        char *argv[] = { "/bin/echo", "hello" };
        Compute__Spawner__V1__Start s = COMPUTE__SPAWNER__V1__START__INIT;
        AF f = COMPUTE__SPAWNER__V1__AGENT_FRAME__INIT;
        const char *why;
        size_t len;
        uint8_t *buf;

        f.exec_id = 1;
        f.kind_case = COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START;
        f.start = &s;
        s.n_argv = 2;
        s.argv = argv;
        s.cwd = "/";
        s.credit = 10;
        buf = spawn_encode_agent(&f, &len);
        assert_non_null(buf);
        for (size_t cut = 1; cut < len - SPAWN_PREFIX; cut++) {
                AF *out;

                why = NULL;
                out = spawn_decode_agent(buf + SPAWN_PREFIX, cut, &why);
                /* Every cut either fails to decode or fails a check. */
                assert_null(out);
                assert_non_null(why);
        }
        free(buf);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_agent_round_trips),
                cmocka_unit_test(test_spawner_round_trips),
                cmocka_unit_test(test_agent_checks),
                cmocka_unit_test(test_spawner_checks),
                cmocka_unit_test(test_input_frames),
                cmocka_unit_test(test_decode_garbage_and_size),
                cmocka_unit_test(test_unknown_fields_refused),
                cmocka_unit_test(test_encode_refuses_oversize),
                cmocka_unit_test(test_reader_4gb_prefix),
                cmocka_unit_test(test_reader_max_frame),
                cmocka_unit_test(test_reader_several_frames_in_one_read),
                cmocka_unit_test(test_reader_truncated_and_byte_by_byte),
                cmocka_unit_test(test_truncated_payload_does_not_decode),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
