/* exec: runs a command in a sandbox, streaming its output as it comes.
 *
 * Each stdout/stderr chunk is written to our fd 1/2 with write(2) the moment it arrives (no
 * stdio buffering in between), so interleaving and progress output look as they would locally.
 * The exit status is the remote command's (see exec_exit_status). SIGINT and SIGTERM cancel
 * the call, which makes the server send SIGTERM to the remote process (SIGKILL 10 s later).
 *
 * With -i or -t the command runs through ExecSession instead: a thread forwards our stdin (and,
 * with -t, the terminal's size on SIGWINCH) while the main thread writes the events; with -t
 * our terminal is in raw mode for the session (restored on every way out), so Ctrl-C and the
 * other keys reach the remote terminal as input, as with `docker exec -it`. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "pbconv.h"
#include "util.h"

/* The server caps an exec at 600 s. The stream's own deadline leaves room on top for the wait
 * for a starting sandbox (60 s on the agent), the 10 s kill grace and slack, so that it only
 * ever fires on a server that has stopped answering. */
#define EXEC_SERVER_CAP_S     600
#define EXEC_DEADLINE_SLACK_S 120
#define EXEC_TIMEOUT_MAX_S    (24 * 3600)
/* stdin is forwarded in chunks of at most this (the server takes up to 64 KiB per message). */
#define EXEC_STDIN_CHUNK (64 * 1024)

enum {
        EXEC_ENV = 1,
        EXEC_CWD,
        EXEC_TIMEOUT,
        EXEC_STDIN,
        EXEC_TTY,
};

static const cli_option exec_options[] = {
        { EXEC_ENV, "env", 'e', "K=V",
          "Set an environment variable for the command (repeatable). A bare K takes K's value "
          "from computectl's own environment." },
        { EXEC_CWD, "cwd", 'w', "DIR",
          "Working directory, an absolute path (e.g. /workspace/src). Default: the workspace "
          "mount path." },
        { EXEC_TIMEOUT, "timeout", 0, "SECONDS",
          "Timeout of the command (s, m or h suffix allowed); the server caps it at 600 s, "
          "which is also the default. On expiry: exit status 124." },
        { EXEC_STDIN, "stdin", 'i', NULL,
          "Forward stdin to the command (EOF on stdin closes the command's stdin)." },
        { EXEC_TTY, "tty", 't', NULL,
          "Run the command under a terminal, sized as ours and resized with it; with -i our "
          "terminal is in raw mode meanwhile (Ctrl-C reaches the remote program as a key). "
          "stdin must be a terminal." },
};

typedef struct exec_state {
        const cli_command *cmd;
        Compute__V1__ExecCommandRequest__EnvEntry *env; /* keys owned, values borrowed */
        Compute__V1__ExecCommandRequest__EnvEntry **env_ptrs;
        size_t n_env;
        const char *cwd;
        uint64_t timeout_s; /* 0: the server's default */
        bool stdin, tty;
} exec_state;

static void exec_state_free(exec_state *s)
{
        for (size_t i = 0; i < s->n_env; i++)
                free(s->env[i].key);
        free(s->env);
        free(s->env_ptrs);
}

static int add_env(exec_state *s, const char *kv)
{
        const char *eq = strchr(kv, '=');
        size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
        const char *value = eq ? eq + 1 : NULL;
        char *key;

        if (klen == 0)
                return cli_usage_error(s->cmd, "--env '%s': empty variable name", kv);
        key = strndup(kv, klen);
        if (!key)
                abort();
        if (!value) {
                value = getenv(key);
                if (!value) {
                        cli_usage_error(s->cmd, "--env %s: not set in the local environment", key);
                        free(key);
                        return -1;
                }
        }
        /* A repeated name: the last one wins, as in env(1). */
        for (size_t i = 0; i < s->n_env; i++) {
                if (strcmp(s->env[i].key, key) == 0) {
                        s->env[i].value = (char *)value;
                        free(key);
                        return 0;
                }
        }
        compute__v1__exec_command_request__env_entry__init(&s->env[s->n_env]);
        s->env[s->n_env].key = key;
        s->env[s->n_env].value = (char *)value;
        s->env_ptrs[s->n_env] = &s->env[s->n_env];
        s->n_env++;
        return 0;
}

static int on_exec_option(void *state, int id, const char *value)
{
        exec_state *s = state;

        switch (id) {
        case EXEC_ENV:
                return add_env(s, value);
        case EXEC_CWD:
                s->cwd = value;
                return 0;
        case EXEC_TIMEOUT:
                return cli_parse_seconds(s->cmd, "--timeout", value, EXEC_TIMEOUT_MAX_S,
                                         &s->timeout_s);
        case EXEC_STDIN:
                s->stdin = true;
                return 0;
        case EXEC_TTY:
                s->tty = true;
                return 0;
        }
        return cli_usage_error(s->cmd, "internal error: option %d", id);
}

/* How the command ended, from ExecCompleted. */
typedef struct exec_outcome {
        bool done;
        int32_t exit_code;
        bool cancelled, timed_out, oom_killed;
        int32_t signal;
} exec_outcome;

/* "SIGKILL", or "signal 99" for one this libc has no name for. */
static const char *signal_name(int sig, char buf[static CLI_FMT_MAX])
{
        const char *name = sig > 0 && sig < 128 ? sigabbrev_np(sig) : NULL;

        if (name)
                snprintf(buf, CLI_FMT_MAX, "SIG%s", name);
        else
                snprintf(buf, CLI_FMT_MAX, "signal %d", sig);
        return buf;
}

/* The exit status for a finished command, with a note on stderr when it did not simply
 * exit: 0..255 as the command exited; 128+n when signal n killed it; 124 when its timeout
 * passed; 130 when it was cancelled. */
static int exec_exit_status(const exec_outcome *o)
{
        char b[CLI_FMT_MAX];

        if (o->timed_out) {
                fprintf(stderr, CLI_NAME ": the remote command timed out\n");
                return CLI_EXIT_TIMEOUT;
        }
        if (o->cancelled) {
                fprintf(stderr, CLI_NAME ": the remote command was cancelled\n");
                return CLI_EXIT_CANCELLED;
        }
        if (o->signal > 0 && o->signal < 128) {
                fprintf(stderr, CLI_NAME ": the remote command was killed by %s%s\n",
                        signal_name(o->signal, b), o->oom_killed ? " (out of memory)" : "");
                return 128 + o->signal;
        }
        if (o->exit_code >= 0 && o->exit_code <= 255)
                return o->exit_code;
        fprintf(stderr, CLI_NAME ": the remote command ended with exit code %d\n", o->exit_code);
        return CLI_EXIT_ERROR;
}

static void cli_json_event_head(cli_json_writer *j, const char *kind,
                                const Compute__V1__ExecEvent *ev)
{
        char b[CLI_FMT_MAX];

        cli_json_object_begin(j);
        cli_json_kv_string(j, "event", kind);
        if (ev && ev->emitted_at)
                cli_json_kv_string(j, "emitted_at", fmt_timestamp(ev->emitted_at, b));
}

static void cli_json_completed(cli_json_writer *j, const Compute__V1__ExecEvent *ev)
{
        const Compute__V1__ExecCompleted *c = ev->completed;

        cli_json_event_head(j, "completed", ev);
        cli_json_kv_i64(j, "exit_code", c->exit_code);
        cli_json_kv_bool(j, "cancelled", c->cancelled);
        cli_json_kv_bool(j, "timed_out", c->timed_out);
        cli_json_kv_i64(j, "signal", c->signal);
        cli_json_kv_bool(j, "oom_killed", c->oom_killed);
        cli_json_kv_i64(j, "wall_time_ms", pb_duration_ms(c->wall_time));
        cli_json_key(j, "usage");
        cli_json_usage(j, c->usage);
        cli_json_object_end(j);
}

/* Handles one event. Returns 0, or -1 with errno when our stdout could not take the data. */
static int exec_event(const cli_ctx *ctx, const Compute__V1__ExecEvent *ev, exec_outcome *out)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        const ProtobufCBinaryData *data = NULL;
        const char *kind = NULL;
        int fd = STDOUT_FILENO;

        switch (ev->event_case) {
        case COMPUTE__V1__EXEC_EVENT__EVENT_STDOUT:
                data = &ev->stdout->data;
                kind = "stdout";
                break;
        case COMPUTE__V1__EXEC_EVENT__EVENT_STDERR:
                data = &ev->stderr->data;
                kind = "stderr";
                fd = STDERR_FILENO;
                break;
        case COMPUTE__V1__EXEC_EVENT__EVENT_COMPLETED:
                out->done = true;
                out->exit_code = ev->completed->exit_code;
                out->cancelled = ev->completed->cancelled;
                out->timed_out = ev->completed->timed_out;
                out->signal = ev->completed->signal;
                out->oom_killed = ev->completed->oom_killed;
                if (!ctx->json)
                        return 0;
                cli_json_completed(&j, ev);
                cli_json_newline(&j);
                return cs_write_all(STDOUT_FILENO, j.buf, j.len);
        default:
                return 0; /* an event kind newer than this client */
        }
        if (!ctx->json) {
                /* Our stderr going away is no reason to stop the command: only stdout is. */
                if (cs_write_all(fd, data->data, data->len) < 0 && fd == STDOUT_FILENO)
                        return -1;
                return 0;
        }
        cli_json_event_head(&j, kind, ev);
        cli_json_key(&j, "data");
        cli_json_base64(&j, data->data, data->len);
        cli_json_object_end(&j);
        cli_json_newline(&j);
        return cs_write_all(STDOUT_FILENO, j.buf, j.len);
}

/* Reads the stream to its end. Returns -2 with *ret_errno when writing stdout failed (the
 * stream is then cancelled), else the last rpc_stream_read() result: 0 (ended with OK) or -1
 * with *err. */
static int exec_pump(const cli_ctx *ctx, rpc_stream *st, exec_outcome *out, int *ret_errno,
                     cs_error **err)
{
        for (;;) {
                ProtobufCMessage *msg = NULL;
                int r = rpc_stream_read(st, &msg, err);

                if (r <= 0)
                        return r;
                r = exec_event(ctx, (const Compute__V1__ExecEvent *)msg, out);
                *ret_errno = errno;
                protobuf_c_message_free_unpacked(msg, NULL);
                if (r < 0) {
                        rpc_stream_cancel(st);
                        return -2;
                }
        }
}

static int exec_interrupted(const cli_ctx *ctx, int signo)
{
        char b[CLI_FMT_MAX];

        if (ctx->json) {
                _cleanup_cli_json_ cli_json_writer j = { 0 };

                cli_json_event_head(&j, "interrupted", NULL);
                cli_json_kv_i64(&j, "signal", signo);
                cli_json_object_end(&j);
                cli_json_newline(&j);
                (void)cs_write_all(STDOUT_FILENO, j.buf, j.len);
        }
        fprintf(stderr, CLI_NAME ": interrupted by %s: the remote command was cancelled\n",
                signal_name(signo, b));
        return CLI_EXIT_CANCELLED;
}

/* computectl's exit status once exec_pump() returned r (werr: its write error). */
static int exec_status(const cli_ctx *ctx, int r, int werr, const exec_outcome *out, cs_error **err)
{
        int signo;

        if (r == -2) {
                if (werr == EPIPE)
                        return CLI_EXIT_SIGPIPE; /* as if SIGPIPE had killed us, quietly */
                cs_error_errno(err, werr, "stdout");
                return cli_fail(*err);
        }
        signo = cli_signals_received();
        if (signo && !out->done)
                return exec_interrupted(ctx, signo);
        if (out->done)
                return exec_exit_status(out);
        if (r == 0)
                cs_error_set(err, GRPC_STATUS_INTERNAL,
                             "the exec stream ended without an ExecCompleted event");
        return cli_fail(*err);
}

static int exec_run(cli_ctx *ctx, const Compute__V1__ExecCommandRequest *req, int64_t timeout_s)
{
        rpc_call_options opts = { .timeout_ms = (timeout_s + EXEC_DEADLINE_SLACK_S) * 1000 };
        _cleanup_error_ cs_error *err = NULL;
        exec_outcome out = { 0 };
        rpc_stream *st = NULL;
        int r, werr = 0;

        cli_signals_defer(true);
        if (rpc_stream_open(cli_channel(ctx), CLI_METHOD("ExecCommand"), &req->base,
                            &compute__v1__exec_event__descriptor, &opts, &st, &err) < 0)
                return cli_fail(err);
        cli_signals_set_stream(st);
        r = exec_pump(ctx, st, &out, &werr, &err);
        cli_signals_set_stream(NULL);
        rpc_stream_free(st);

        return exec_status(ctx, r, werr, &out, &err);
}

/* --- -i and -t: ExecSession ------------------------------------------------------------ */

/* Our terminal's settings while a -it session has it in raw mode (restored by atexit too, so
 * that no way out leaves the user's shell without echo). */
static struct termios saved_termios;
static bool termios_saved;

static void terminal_restore(void)
{
        if (termios_saved) {
                (void)tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_termios);
                termios_saved = false;
        }
}

static int terminal_raw(void)
{
        struct termios raw;

        if (tcgetattr(STDIN_FILENO, &saved_termios) < 0)
                return -1;
        termios_saved = true;
        atexit(terminal_restore);
        raw = saved_termios;
        cfmakeraw(&raw);
        return tcsetattr(STDIN_FILENO, TCSADRAIN, &raw);
}

/* Our terminal's size (stdin's, else stdout's); false when neither is a terminal. */
static bool terminal_size(Compute__V1__TerminalSize *ret)
{
        struct winsize ws = { 0 };

        if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0)
                return false;
        if (ws.ws_row == 0 || ws.ws_col == 0)
                return false;
        ret->rows = ws.ws_row;
        ret->cols = ws.ws_col;
        return true;
}

/* SIGWINCH, to the input thread through a pipe (write(2) is async-signal-safe). */
static int winch_fd = -1;

static void on_winch(int signo)
{
        int saved = errno;

        (void)signo;
        if (winch_fd >= 0)
                (void)!write(winch_fd, "w", 1);
        errno = saved;
}

typedef struct session_input {
        rpc_stream *st;
        bool forward_stdin, tty;
        int wake[2]; /* [0] polled by the thread: 'w' resize, 'q' quit */
        pthread_t thread;
} session_input;

static int session_send(session_input *in, Compute__V1__ExecSessionRequest *req)
{
        _cleanup_error_ cs_error *err = NULL;

        /* A failure means the call ended: its status comes to the reading side. */
        return rpc_stream_send(in->st, &req->base, &err);
}

static void *session_input_main(void *arg)
{
        session_input *in = arg;
        uint8_t *buf = cs_xmalloc(EXEC_STDIN_CHUNK);
        bool stdin_open = in->forward_stdin;

        for (;;) {
                struct pollfd p[2] = { { .fd = in->wake[0], .events = POLLIN },
                                       { .fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN } };
                Compute__V1__ExecSessionRequest req = COMPUTE__V1__EXEC_SESSION_REQUEST__INIT;
                Compute__V1__TerminalSize size = COMPUTE__V1__TERMINAL_SIZE__INIT;
                ssize_t n;
                char c;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[0].revents) {
                        if (read(in->wake[0], &c, 1) != 1 || c == 'q')
                                break;
                        if (in->tty && terminal_size(&size)) {
                                req.kind_case = COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_RESIZE;
                                req.resize = &size;
                                if (session_send(in, &req) < 0)
                                        break;
                        }
                        continue;
                }
                if (!p[1].revents)
                        continue;
                n = read(STDIN_FILENO, buf, EXEC_STDIN_CHUNK);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n <= 0) {
                        /* EOF (or an unreadable stdin): the command's stdin ends. */
                        stdin_open = false;
                        req.kind_case = COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_CLOSE_STDIN;
                        req.close_stdin = true;
                } else {
                        req.kind_case = COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_STDIN;
                        req.stdin = (ProtobufCBinaryData){ .len = (size_t)n, .data = buf };
                }
                if (session_send(in, &req) < 0)
                        break;
        }
        free(buf);
        return NULL;
}

static int session_run(cli_ctx *ctx, Compute__V1__ExecCommandRequest *cmd, const exec_state *s,
                       int64_t timeout_s)
{
        rpc_call_options opts = { .timeout_ms = (timeout_s + EXEC_DEADLINE_SLACK_S) * 1000 };
        Compute__V1__ExecSessionRequest first = COMPUTE__V1__EXEC_SESSION_REQUEST__INIT;
        Compute__V1__ExecSessionStart start = COMPUTE__V1__EXEC_SESSION_START__INIT;
        Compute__V1__TerminalSize size = COMPUTE__V1__TERMINAL_SIZE__INIT;
        session_input in = { .forward_stdin = s->stdin, .tty = s->tty, .wake = { -1, -1 } };
        struct sigaction sa = { .sa_handler = on_winch, .sa_flags = SA_RESTART };
        _cleanup_error_ cs_error *err = NULL;
        exec_outcome out = { 0 };
        bool thread = false;
        int r, werr = 0;

        start.command = cmd;
        start.tty = s->tty;
        if (s->tty && terminal_size(&size))
                start.size = &size;
        first.kind_case = COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_START;
        first.start = &start;
        if (pipe2(in.wake, O_CLOEXEC) < 0) {
                cs_error_errno(&err, errno, "pipe");
                return cli_fail(err);
        }
        cli_signals_defer(true);
        r = rpc_stream_open_bidi(cli_channel(ctx), CLI_METHOD("ExecSession"),
                                 &compute__v1__exec_event__descriptor, &opts, &in.st, &err);
        if (r == 0)
                r = rpc_stream_send(in.st, &first.base, &err);
        if (r < 0) {
                rpc_stream_free(in.st);
                close(in.wake[0]);
                close(in.wake[1]);
                return cli_fail(err);
        }
        cli_signals_set_stream(in.st);
        if (s->tty) {
                winch_fd = in.wake[1];
                sigemptyset(&sa.sa_mask);
                sigaction(SIGWINCH, &sa, NULL);
        }
        if (s->tty && s->stdin && terminal_raw() < 0)
                r = cs_error_errno(&err, errno, "stdin: raw mode");
        else if (!(thread = pthread_create(&in.thread, NULL, session_input_main, &in) == 0))
                r = cs_error_set(&err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "cannot start the input thread");
        else
                r = exec_pump(ctx, in.st, &out, &werr, &err);
        terminal_restore();
        signal(SIGWINCH, SIG_DFL);
        winch_fd = -1;
        cli_signals_set_stream(NULL);
        /* The thread may be blocked in a send the server holds back: cancelling the call
         * (ended already, or now) fails that send. */
        rpc_stream_cancel(in.st);
        (void)!write(in.wake[1], "q", 1);
        if (thread)
                pthread_join(in.thread, NULL);
        rpc_stream_free(in.st);
        close(in.wake[0]);
        close(in.wake[1]);

        return exec_status(ctx, r, werr, &out, &err);
}

/* Whether our stdin holds input that exec without -i does not forward. Asked without reading or
 * blocking: a regular file with bytes left, or a pipe or socket with bytes waiting. A terminal,
 * /dev/null, an empty file or an empty pipe says nothing: scripts and CI jobs with an idle stdin
 * get no noise. */
static bool stdin_has_input(void)
{
        struct stat st;
        int waiting = 0;
        off_t at;

        if (isatty(STDIN_FILENO) || fstat(STDIN_FILENO, &st) < 0)
                return false;
        if (S_ISREG(st.st_mode)) {
                at = lseek(STDIN_FILENO, 0, SEEK_CUR);
                return st.st_size > (at > 0 ? at : 0);
        }
        if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
                return ioctl(STDIN_FILENO, FIONREAD, &waiting) == 0 && waiting > 0;
        return false;
}

/* Warns once: before the call, and again after it for input that came meanwhile (`echo hi |
 * computectl exec ...`: echo may not have written yet when we start). */
static void warn_stdin(bool *warned)
{
        if (*warned || !stdin_has_input())
                return;
        *warned = true;
        fprintf(stderr, CLI_NAME ": exec: stdin is not forwarded to the remote command without "
                                 "-i: its input is ignored\n");
}

static int run_exec(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        Compute__V1__ExecCommandRequest req = COMPUTE__V1__EXEC_COMMAND_REQUEST__INIT;
        Google__Protobuf__Duration timeout = GOOGLE__PROTOBUF__DURATION__INIT;
        exec_state s = { .cmd = cmd };
        _cleanup_free_ char **pos = NULL;
        size_t n = 0, first;
        bool warned = false;
        int64_t budget_s;
        int r;

        s.env = cs_xcalloc((size_t)argc, sizeof(*s.env));
        s.env_ptrs = cs_xcalloc((size_t)argc, sizeof(*s.env_ptrs));
        r = cli_parse(cmd, argc, argv, on_exec_option, &s, &pos, &n);
        if (r == 1)
                cli_print_command_help(cmd, stdout);
        if (r != 0) {
                exec_state_free(&s);
                return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
        }
        /* ID [--] COMMAND [ARG]... */
        first = n > 1 && strcmp(pos[1], "--") == 0 ? 2 : 1;
        if (n == 0 || first >= n) {
                cli_usage_error(cmd, n == 0 ? "missing the sandbox ID and the command"
                                            : "missing the command to run");
                exec_state_free(&s);
                return CLI_EXIT_USAGE;
        }
        /* "exec ID -w DIR pwd": an option after the ID would be the remote command and fail
         * as "-w: command not found" (127). A command whose name starts with '-' is written
         * after "--", which passes it as is. */
        if (first == 1 && pos[1][0] == '-' && pos[1][1] != '\0') {
                cli_usage_error(cmd,
                                "'%s' after the sandbox ID would be the remote command: "
                                "exec's options go before the ID (computectl exec [OPTION]... "
                                "ID [--] COMMAND [ARG]...); a command that starts with '-' "
                                "goes after '--'",
                                pos[1]);
                exec_state_free(&s);
                return CLI_EXIT_USAGE;
        }

        req.sandbox_id = pos[0];
        req.command = pos[first];
        req.args = pos + first + 1;
        req.n_args = n - first - 1;
        req.env = s.env_ptrs;
        req.n_env = s.n_env;
        if (s.cwd)
                req.working_dir = (char *)s.cwd;
        budget_s = EXEC_SERVER_CAP_S;
        if (s.timeout_s) {
                timeout.seconds = (int64_t)s.timeout_s;
                req.timeout = &timeout;
                if (s.timeout_s < EXEC_SERVER_CAP_S)
                        budget_s = (int64_t)s.timeout_s;
        }
        if (s.tty && s.stdin && !isatty(STDIN_FILENO)) {
                cli_usage_error(cmd, "-t with -i needs stdin to be a terminal (use -i alone)");
                exec_state_free(&s);
                return CLI_EXIT_USAGE;
        }
        if (s.stdin || s.tty) {
                r = session_run(ctx, &req, &s, budget_s);
                exec_state_free(&s);
                return r;
        }
        warn_stdin(&warned);
        r = exec_run(ctx, &req, budget_s);
        warn_stdin(&warned);
        exec_state_free(&s);
        return r;
}

const cli_command cli_cmd_exec = {
        .name = "exec",
        .args = "ID [--] COMMAND [ARG]...",
        .summary = "Run a command in a sandbox, streaming its stdout and stderr.",
        .details =
                "Options go before ID; everything after ID (and an optional '--') is the remote\n"
                "command line, passed as is. The command's stdout and stderr are written to\n"
                "ours as they arrive. Without -i stdin is not forwarded: when it holds input\n"
                "(a file, or a pipe with data) a warning says so on stderr. -i forwards it\n"
                "(ExecSession); -t runs the command under a terminal, and -it makes ours raw\n"
                "for the session, as docker exec -it and kubectl exec -it do.\n"
                "\n"
                "Exit status: the remote command's (0-255): 127 when it was not found, 126\n"
                "when it could not be executed (the server says why on stderr, as a shell\n"
                "would); 128+N when signal N killed it; 124 when its --timeout passed; 130\n"
                "when Ctrl-C (SIGINT) or SIGTERM cancelled it (the remote process gets\n"
                "SIGTERM, then SIGKILL after 10 s); 141 when our stdout was closed; 125 on\n"
                "computectl's own error (computectl: STATUS: message).\n"
                "\n"
                "--json: one JSON object per line on stdout, one per event:\n"
                "  {\"event\":\"stdout\"|\"stderr\", \"emitted_at\", \"data\": base64}\n"
                "  {\"event\":\"completed\", \"emitted_at\", \"exit_code\", \"cancelled\",\n"
                "   \"timed_out\", \"signal\", \"oom_killed\", \"wall_time_ms\", \"usage\"}\n"
                "  {\"event\":\"interrupted\", \"signal\"}   (we cancelled it on a signal)\n",
        .options = exec_options,
        .n_options = ARRAY_SIZE(exec_options),
        .options_first = true,
        .run = run_exec,
};
