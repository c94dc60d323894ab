/* Running a command in a sandbox with its output streamed as it comes.
 *
 * Output: stdout and stderr are read from two pipes in chunks of at most EXEC_CHUNK bytes and
 * handed to the sink as soon as they arrive (no waiting for newlines). The sink blocks while
 * the client is slow, and nothing is read meanwhile: the pipes fill and the process blocks in
 * write(2). Memory per exec is one chunk, whatever the output volume.
 *
 * Ending: the process's exit (its code; a signal death as 128+n and `signal` = n, which is
 * all runsc reports), a cancel (the sink's cancel fd, or the sink failing because the client
 * went away) or the timeout: SIGTERM to the process in the sandbox, SIGKILL to it and every
 * process it started the grace later (kill_grace_ms, EXEC_KILL_GRACE_MS by default) if it
 * still runs, exit_code -1.
 *
 * Usage: the sandbox's accounting over the exec's window (sandbox.h).
 *
 * Two paths, one contract: the sandbox's resident spawner (spawner_exec.h) when it is
 * connected, `runsc exec` (the runtime's exec) when it is not: a sandbox made before the
 * spawner or with --spawner=off, a spawner that died or has not connected yet. cpu_ms is the
 * sandbox's over the window, except for a command the spawner ran while another exec ran in
 * the sandbox too: its own tree's CPU time (rusage, capped by the window's), so two execs at
 * once in one sandbox are told apart. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "runtime.h"
#include "sandbox.h"

#define EXEC_CHUNK          (256 * 1024) /* bytes per event; also the pipes' capacity */
#define EXEC_KILL_GRACE_MS  10000
#define EXEC_MAX_TIMEOUT_MS (600 * 1000)
#define EXEC_MAX_ARGS       4096      /* command + args */
#define EXEC_MAX_ENV        1024      /* entries */
#define EXEC_MAX_ARGV_BYTES (1 << 20) /* command, args and env together */

/* One message of an interactive exec's client (ExecSession), already checked against the
 * sequence rules (shared/session.h). */
typedef struct exec_input_msg {
        int kind;            /* session_kind: SESSION_STDIN, _CLOSE_STDIN, _RESIZE or _SIGNAL */
        const uint8_t *data; /* stdin */
        size_t len;
        uint32_t rows, cols; /* resize */
        int signo;           /* signal */
} exec_input_msg;

/* The input side of an interactive exec. Served only by the sandbox's spawner (runsc exec
 * has no stdin here, and a terminal would need its console socket): without one, exec_run
 * fails with FAILED_PRECONDITION. */
typedef struct exec_input {
        bool tty;
        uint32_t rows, cols; /* the terminal's first size; 0x0: its default */
        int64_t idle_ms;     /* no input and no output for this long ends it; <= 0: no limit */
        /* Blocks for the client's next message: 1 with *m (valid until the next call), 0 when
         * the client closed its side or after abandon, -1 with *err (INVALID_ARGUMENT for a
         * message against the rules: the command is then ended as on a cancel and the error
         * returned in exec_result.input_err; anything else: the call ended). Called from a
         * thread of exec_run's own. */
        int (*next)(void *userdata, exec_input_msg *m, cs_error **err);
        /* Makes a next() that blocks return 0 (the exec is over). Any thread. */
        void (*abandon)(void *userdata);
        void *userdata;
} exec_input;

typedef struct exec_request {
        const char *command;
        char *const *args; /* n_args strings */
        size_t n_args;
        char *const *env_keys, *const *env_values; /* n_env pairs */
        size_t n_env;
        const char *working_dir; /* NULL or "": the sandbox's mount_path */
        int64_t timeout_ms;      /* <= 0 or above the cap: EXEC_MAX_TIMEOUT_MS */
        int64_t kill_grace_ms;   /* SIGTERM to SIGKILL; <= 0: EXEC_KILL_GRACE_MS */
        const exec_input *input; /* ExecSession; NULL: stdin is /dev/null */
} exec_request;

typedef struct exec_result {
        int exit_code; /* -1 when cancelled or timed out */
        int signal;    /* the signal that ended the process, 0 if none */
        bool cancelled, timed_out, oom_killed;
        int64_t wall_ms;
        usage_metrics usage;
        const char *path;   /* "spawner" or "runsc exec": which path served it */
        char fallback[160]; /* why the spawner did not serve it ("" if it did, or is off) */
        /* Interactive execs: the client's bad message that ended it (INVALID_ARGUMENT; the
         * caller owns and returns it instead of the ExecCompleted), and whether the idle
         * limit ended it (then timed_out is set too). */
        cs_error *input_err;
        bool idle;
} exec_result;

enum {
        EXEC_STDOUT = 1,
        EXEC_STDERR = 2
};

typedef struct exec_sink {
        /* Sends one chunk; blocks while the client is slow. -1 when the client is gone. */
        int (*write)(void *userdata, int stream, const uint8_t *data, size_t len, cs_error **err);
        void *userdata;
        int cancel_fd; /* readable once the caller cancelled; -1: none */
} exec_sink;

/* A warm sandbox's first command (sb_config.warm_up; data: its runtime), run before it may be
 * claimed: `true`, output dropped, so that the session's first exec does not pay for the
 * sandbox's first process start (the dynamic loader and libc read in through the gofer):
 * that exec's p50 was 67 ms against 41 ms after one `true` (docs/performance.md). A failure
 * is logged; the sandbox stays warm. */
#define EXEC_WARM_UP_TIMEOUT_MS 10000
void exec_warm_up(sb_registry *reg, sandbox *sb, void *rt);

/* Checks the request against the caps (INVALID_ARGUMENT). */
int exec_validate(const exec_request *req, cs_error **err);

/* Runs req in sb (which the caller holds) and fills *ret. Fails only when the process could
 * not be started or watched (a pidfd: RESOURCE_EXHAUSTED when the agent is out of fds; the
 * process is then stopped and reaped before the return); everything after that ends in *ret.
 *
 * Ownership: req, sink and sb stay the caller's. *err is set (and then owned by the caller)
 * only when -1 is returned; exec_run never frees or replaces an error it did not make, and
 * the errors of its own clean-up (a wait, a signal) are its own and freed here. */
int exec_run(sb_registry *reg, runtime *rt, sandbox *sb, const exec_request *req,
             const exec_sink *sink, exec_result *ret, cs_error **err);
