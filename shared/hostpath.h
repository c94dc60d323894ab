/* Host paths out of client-facing messages. Pure.
 *
 * An error message built deep in the agent (a bundle, a pid file, a cgroup directory, the
 * state directory) would tell a tenant how the node is laid out. The agent's RPC edge passes
 * every error through cs_paths_hide() with the directories it must not name. */
#pragma once

#include <stddef.h>

#define CS_HIDDEN_PATH "<host path>"

/* A copy of msg in which every absolute path that is one of dirs[] (NULL-terminated; empty or
 * relative entries are ignored) or lies beneath one is replaced by CS_HIDDEN_PATH; NULL when
 * nothing was replaced. A path counts when it starts the message or follows a space, a quote,
 * '(', '[', '=', ',' or ':', and runs to the next space, quote, ')', ']', ',', ';' or ':'.
 * The result is malloc'd, owned by the caller. */
char *cs_paths_hide(const char *msg, const char *const *dirs);
