/* The state directory's lock, and `compute-nodeagent cleanup`: what a node keeps of a local
 * mode agent that is stopped (its sandboxes, their mounts, loop devices and cgroups), removed
 * on the operator's word. */
#pragma once

#include <stdbool.h>

#include "error.h"

/* Locks path/agent.lock (flock, exclusive, never waiting): one agent, or one cleanup, per state
 * directory. create: make path (0700, with its parents) if missing. Returns the lock's fd (held
 * until closed), or -1 with *err: FAILED_PRECONDITION "another node agent is using PATH" when
 * it is held, NOT_FOUND when path does not exist and !create. */
int state_dir_lock(const char *path, bool create, cs_error **err);

/* Runs `cleanup [OPTIONS]` (argv[0] is "cleanup"). Returns the exit status: 0 (all done, or
 * nothing to do), 1 (something could not be removed, or an agent holds the state directory:
 * a line on stderr each), 2 (usage). */
int cleanup_main(int argc, char **argv);
