/* What both server binaries share: the common options and the serve-until-signal loop. */
#pragma once

#include "config.h"
#include "rpc.h"

typedef struct cs_daemon_config {
        char *listen;
        int64_t max_calls;
        int64_t grace_ms;
        char *log_level;
        char *log_format;
} cs_daemon_config;

/* The common options, as cs_option initialisers for a program's table. */
#define CS_DAEMON_OPTIONS(cfg, listen_env, listen_default)                                         \
        { "listen",                                                                                \
          listen_env,                                                                              \
          CS_OPT_STRING,                                                                           \
          listen_default,                                                                          \
          "Address to serve gRPC on (host:port; port 0 picks a free one).",                        \
          &(cfg).listen,                                                                           \
          0,                                                                                       \
          0 },                                                                                     \
                { "max-calls",                                                                     \
                  "COMPUTE_MAX_CALLS",                                                             \
                  CS_OPT_INT,                                                                      \
                  "256",                                                                           \
                  "Calls served at once; more are refused with RESOURCE_EXHAUSTED.",               \
                  &(cfg).max_calls,                                                                \
                  1,                                                                               \
                  65536 },                                                                         \
                { "shutdown-grace-ms",                                                             \
                  "COMPUTE_SHUTDOWN_GRACE_MS",                                                     \
                  CS_OPT_INT,                                                                      \
                  "10000",                                                                         \
                  "On SIGTERM/SIGINT, how long calls in flight may finish before they are "        \
                  "cancelled.",                                                                    \
                  &(cfg).grace_ms,                                                                 \
                  0,                                                                               \
                  3600000 },                                                                       \
                { "log-level",                                                                     \
                  "COMPUTE_LOG_LEVEL",                                                             \
                  CS_OPT_STRING,                                                                   \
                  "info",                                                                          \
                  "Lowest level logged: debug, info, warn or error.",                              \
                  &(cfg).log_level,                                                                \
                  0,                                                                               \
                  0 },                                                                             \
        {                                                                                          \
                "log-format", "COMPUTE_LOG_FORMAT", CS_OPT_STRING, "text",                         \
                        "Log line format on stderr: text, or json (one JSON object per line).",    \
                        &(cfg).log_format, 0, 0                                                    \
        }

/* Applies the logging options (and the servers' malloc tuning). -1 with *err on an unknown
 * level or format. */
int cs_daemon_setup_logging(const cs_daemon_config *cfg, cs_error **err);

/* Creates the server for cfg with health checks for `services` (NULL-terminated). */
rpc_server *cs_daemon_server_new(const cs_daemon_config *cfg, const char *const *services,
                                 cs_error **err);

/* Starts srv, logs where it listens, serves until SIGINT or SIGTERM, then shuts down
 * gracefully and frees it. Returns 0, or -1 with *err when the server cannot start. */
int cs_daemon_serve(rpc_server *srv, const char *name, cs_error **err);
