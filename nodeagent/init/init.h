/* compute-init: the sandbox's init process and its resident spawner (compute.spawner.v1,
 * proto/spawner/v1/spawner.proto). A static binary with libc, protobuf-c and libseccomp only:
 * it runs inside gVisor, read-only bind-mounted from the node.
 *
 * Three roles, all in this one program:
 *   - init (pid 1): reaps every orphan, survives every signal it can, and keeps a spawner
 *     running (restarted with a backoff when it dies);
 *   - spawner: connects out to the agent's Unix socket and serves execs over it;
 *   - shepherd: one per exec, forked from the spawner; a child subreaper that starts the
 *     command, reaps its whole tree (so its RUSAGE_CHILDREN is the exec's CPU), signals that
 *     tree on request and kills it when the spawner goes away. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "spawner_paths.h"

#define INIT_VERSION        "compute-init 1"
#define INIT_DEFAULT_SOCKET CS_SPAWNER_SOCKET

/* Logs one line to stderr ("compute-init[pid]: ..."). */
void init_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t init_now_ms(void);

/* Closes every descriptor from `from` up by a walk of /proc/self/fd (where close_range is
 * missing). */
void init_close_fds_from(int from);

/* The spawner role: serves the socket at `path` until killed. Never returns. */
_Noreturn void spawner_main(const char *path);

/* Messages between the spawner and one shepherd, over a SOCK_SEQPACKET socketpair. */
enum {
        SHEP_START = 1, /* spawner -> shepherd, with 3 fds: a memfd holding the AgentFrame
                         * (a checked Start), the stdout and stderr pipes' write ends */
        SHEP_SIGNAL,    /* spawner -> shepherd: a = signo, to the whole tree */
        SHEP_FINISH,    /* spawner -> shepherd: report the usage and leave */
        SHEP_STARTED,   /* shepherd -> spawner: a = the command's pid */
        SHEP_FAILED,    /* shepherd -> spawner: a = errno, b = what failed (SHEP_AT_*) */
        SHEP_EXITED,    /* shepherd -> spawner: a = wait status of the command; b = 1 when
                         * nothing of the tree is left: the usage is final, no FINISH follows
                         * and the shepherd is idle again */
        SHEP_DONE,      /* shepherd -> spawner: a = wait status, usage of the whole tree;
                         * b = 1 when the shepherd is idle again (may take another START) */
};
enum {
        SHEP_AT_EXEC = 0,
        SHEP_AT_CWD,
        SHEP_AT_SETUP,
};

typedef struct shep_msg {
        int32_t op;
        int32_t a;
        int32_t b;
        int32_t pad;
        uint64_t user_us;
        uint64_t system_us;
        uint64_t max_rss_kib;
} shep_msg;

/* The shepherd role, in a child forked from the spawner ahead of need (the spawner keeps a
 * few idle ones: a fork costs milliseconds in gVisor); `ctl` is its end of the socketpair.
 * It waits for SHEP_START and runs that command; it serves the next START when the exec left
 * no process behind, else it exits. Never returns. */
_Noreturn void shepherd_main(int ctl);
