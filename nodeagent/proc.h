/* Starting host processes (runsc) safely from a multithreaded server.
 *
 * fork-then-exec at once: the child only sets up its fds, its signal mask and (optionally)
 * a parent-death signal, closes every other fd and execs. Library code: no logging. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* Output kept from a command run with proc_run(); more is read and dropped. */
#define PROC_OUTPUT_MAX (4u << 20)

typedef struct proc_spawn_opts {
        int stdin_fd;  /* -1: an empty pipe (never the host's /dev/null: runsc fchowns it) */
        int stdout_fd; /* -1: /dev/null */
        int stderr_fd; /* -1: /dev/null */
        /* Kill the child when the thread that spawned it exits (PR_SET_PDEATHSIG). Only for
         * children that the spawning thread waits for itself. */
        bool die_with_parent;
        /* Run it in a mount namespace of its own (a slave of the agent's) with an empty tmpfs
         * over /proc/sys/net: runsc's sandbox network tells the host's network namespace by
         * /proc/sys/net/core/rmem_default, which Linux 6.x shows in every namespace, and then
         * refuses to start (gVisor issue 10704; docs/security.md, "Network"). */
        bool mask_proc_sys_net;
} proc_spawn_opts;

/* Starts argv[0] (looked up in PATH when it has no '/'). */
int proc_spawn(char *const argv[], const proc_spawn_opts *opts, pid_t *ret_pid, cs_error **err);

/* Waits for pid (retrying on EINTR) and returns its raw wait status. */
int proc_wait(pid_t pid, int *ret_status, cs_error **err);

/* Runs argv to completion, waiting at most timeout_ms (then SIGKILL). *ret_out gets stdout
 * (NUL-terminated, malloc'd; may be NULL if not wanted). A non-zero exit is an INTERNAL error
 * carrying the first line of stderr. */
int proc_run(char *const argv[], int64_t timeout_ms, char **ret_out, cs_error **err);

/* For commands that leave daemons behind (runsc run -detach): stdout and stderr go to the file
 * log_path (appended), which the daemons may keep open, and only the command itself is waited
 * for (at most timeout_ms). A failure carries the log's last line. */
int proc_run_detached(char *const argv[], int64_t timeout_ms, const char *log_path,
                      bool mask_proc_sys_net, cs_error **err);

/* "exited 3", "killed by SIGKILL" ... for messages. buf holds at least 64 bytes. */
const char *proc_status_str(int status, char *buf, size_t size);
