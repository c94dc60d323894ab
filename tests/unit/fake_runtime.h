/* A fake runtime_ops for unit tests: no runsc, no sandbox, real host processes.
 *
 * Owns: its container table (id, state, host pid), the host processes its exec starts, and
 * the logs of what it was asked to do (signals, destroys). Touches: nothing but /proc (to
 * find the processes of a container) and the pid files it writes in an exec's scratch_dir.
 *
 * exec runs spec->argv on the host (execve: argv[0] is a path; spec->env is its environment;
 * spec->cwd is ignored, the host has no such directory) with stdout/stderr on the spec's fds,
 * so pipes, exits and signals are real. The host
 * process is also the "in-sandbox" process: the pid file names the host pid, and signal()
 * and processes() work on host pids. signal() refuses a pid that is not, or never was, one of
 * the container's processes (an exec's process or a descendant, or one added with
 * fake_runtime_add_process), so a bug in the code under test cannot signal the test runner.
 *
 * Scripting: containers are added, changed and removed with fake_runtime_set (state
 * RT_ABSENT removes), and the failures below are switched on and off at any time.
 *
 * Locking: one mutex guards everything in struct fake_runtime below the runtime header; the
 * ops and the fake_runtime_* functions take it, tests read the logs through the accessors. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "runtime.h"

typedef struct fake_runtime fake_runtime;

fake_runtime *fake_runtime_new(void);
/* Also the ops' free. Does not signal the processes it started (the tests reap them). */
void fake_runtime_free(fake_runtime *f);
runtime *fake_runtime_rt(fake_runtime *f);

/* Adds or changes a container (RT_ABSENT removes it). */
void fake_runtime_set(fake_runtime *f, const char *id, rt_state state);
/* The bundle directory list_details reports for a container (kube mode reads config.json
 * there). */
void fake_runtime_set_bundle(fake_runtime *f, const char *id, const char *bundle);
/* Makes host process pid one of the container's processes (as if an exec had started it). */
void fake_runtime_add_process(fake_runtime *f, const char *id, pid_t pid);

/* Failures: exec fails with code/msg (code 0: exec works); state and list fail with
 * UNAVAILABLE while set. */
void fake_runtime_fail_exec(fake_runtime *f, int code, const char *msg);
void fake_runtime_fail_queries(fake_runtime *f, bool fail);
/* Destroy fails (DEADLINE_EXCEEDED, the container left running, still logged as a destroy). */
void fake_runtime_fail_destroy(fake_runtime *f, bool fail);
/* Called at the end of every successful exec, with its spec and host pid (NULL: none). */
void fake_runtime_on_exec(fake_runtime *f,
                          void (*fn)(void *userdata, const rt_exec_spec *spec, pid_t pid),
                          void *userdata);

/* While hold is set, every create waits (in flight) until it is cleared. */
void fake_runtime_hold_creates(fake_runtime *f, bool hold);

/* What was asked. Creates: how many were asked, how many are in flight now, and the most
 * in flight at once. */
void fake_runtime_creates(fake_runtime *f, size_t *ret_asked, size_t *ret_in_flight,
                          size_t *ret_max);
/* Whether the container's create is in flight (held). */
bool fake_runtime_creating(fake_runtime *f, const char *id);
pid_t fake_runtime_last_exec_pid(fake_runtime *f);
size_t fake_runtime_execs(fake_runtime *f);
/* How many signals sig were delivered to processes of the container (sig 0: any). */
size_t fake_runtime_signals(fake_runtime *f, const char *id, int sig);
/* How many state queries were made. */
size_t fake_runtime_state_queries(fake_runtime *f);
/* How many times destroy was called for the container. */
size_t fake_runtime_destroys(fake_runtime *f, const char *id);
