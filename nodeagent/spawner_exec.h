/* The spawner exec backend: a command run by the sandbox's compute-init over its connection
 * (spawner_link.h), with the contract of exec.h: output streamed with backpressure (credit is
 * granted only as output reaches the sink, so a slow client stops the command's pipes, never
 * grows a buffer), timeout and cancel = SIGTERM to the command's tree and SIGKILL the grace
 * later, exit code or signal, and the command tree's own CPU time from its rusage.
 *
 * Used by exec.c, which adds the sandbox's usage window and OOM check around it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "exec.h"
#include "spawner_link.h"

/* The first output window of an exec, and how much delivered output is granted back at
 * once: 1 MiB in flight keeps a 100 MiB stream near the pipe's speed while bounding the
 * agent's memory per exec to that. */
#define SPAWN_EXEC_WINDOW  (1u << 20)
#define SPAWN_EXEC_REGRANT (SPAWN_EXEC_WINDOW / 4)
/* How long after its SIGKILL a spawner may take to report an exec's end before its
 * connection is given up as broken (which fails the exec: it cannot hold a call longer). */
#define SPAWN_KILL_SETTLE_MS 5000

typedef enum spawn_stop {
        SPAWN_STOP_NONE,
        SPAWN_STOP_CANCEL,
        SPAWN_STOP_TIMEOUT,
} spawn_stop;

typedef struct spawn_run_spec {
        char *const *argv, *const *env; /* NULL-terminated */
        const char *cwd;
        int64_t deadline;        /* monotonic ms */
        int64_t grace_ms;        /* SIGTERM to SIGKILL */
        const exec_input *input; /* NULL: stdin /dev/null */
} spawn_run_spec;

typedef struct spawn_run_result {
        spawn_exited exited; /* valid when the spawner reported the end */
        spawn_stop stop;     /* why the agent stopped it, if it did */
        int last_sig;        /* the last signal the agent sent */
        cs_error *input_err; /* the client's bad message (interactive execs), owned */
        bool idle;           /* the idle limit stopped it (stop is SPAWN_STOP_TIMEOUT) */
} spawn_run_result;

/* Runs spec on l. Returns 1 when the command ran and *ret says how it ended; 0 when nothing
 * was sent (the caller may use another path, *err says why); -1 with *err (UNAVAILABLE) when
 * the connection broke after the Start: the command may have run and was killed by the
 * spawner, and its end is unknown. */
int spawn_run(spawn_link *l, const spawn_run_spec *spec, const exec_sink *sink,
              spawn_run_result *ret, cs_error **err);
