/* What both server binaries share: the common options and the serve-until-signal loop. */
#pragma once

#include "config.h"
#include "rpc.h"

typedef struct cs_daemon_config {
        char *listen;
        int64_t max_calls;
        int64_t max_calls_per_peer;
        int64_t grace_ms;
        char *log_level;
        char *log_format;
        /* Server TLS (CS_SERVER_TLS_OPTIONS, or CS_PUBLIC_TLS_OPTIONS with public_tls):
         * paths of PEM files. All empty, or a program whose table lacks them: plaintext. */
        char *tls_ca;
        char *tls_cert;
        char *tls_key;
        /* Set by the program before it checks them: the TLS options are the public port's
         * (--public-tls-*: certificate and key, the client CA optional) rather than the
         * internal link's (--tls-*: all three or none). */
        bool public_tls;
        /* CS_METRICS_OPTIONS: where GET /metrics is served (empty: nowhere), and the file
         * holding the bearer token a scrape must present (empty: none). */
        char *metrics_listen;
        char *metrics_token_file;
        char *seccomp; /* "on", or "off" or "log" (debugging only): the syscall allowlist */
        /* Set by the program, not a flag: the level of the access-log line of a call that
         * ends OK (rpc_server_options.access_log_level; 0 is debug). */
        cs_log_level access_log_level;
} cs_daemon_config;

/* The metrics endpoint's options (each daemon names its own environment variables). */
#define CS_METRICS_OPTIONS(cfg, listen_env, token_env)                                             \
        { "metrics-listen",                                                                        \
          listen_env,                                                                              \
          CS_OPT_STRING,                                                                           \
          "",                                                                                      \
          "Address to serve Prometheus metrics on, plain HTTP (GET /metrics): host:port, "         \
          "numeric (port 0 picks a free one; an empty host: every address). Empty: no metrics "    \
          "endpoint.",                                                                             \
          &(cfg).metrics_listen,                                                                   \
          0,                                                                                       \
          0 },                                                                                     \
        {                                                                                          \
                "metrics-token-file", token_env, CS_OPT_STRING, "",                                \
                        "File holding a bearer token (16 to 256 printable characters) that every " \
                        "request to --metrics-listen must present (Authorization: Bearer TOKEN); " \
                        "others get 401. Read at start. Empty: no token (protect the port "        \
                        "otherwise: it names every sandbox).",                                     \
                        &(cfg).metrics_token_file, 0, 0                                            \
        }

/* The common options, as cs_option initialisers for a program's table. */
#define CS_DAEMON_OPTIONS(cfg, listen_env, listen_default)                                         \
        { "listen",                                                                                \
          listen_env,                                                                              \
          CS_OPT_STRING,                                                                           \
          listen_default,                                                                          \
          "Address to serve gRPC on: host:port (port 0 picks a free one) or unix:/abs/path.",      \
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
                { "max-calls-per-peer",                                                            \
                  "COMPUTE_MAX_CALLS_PER_PEER",                                                    \
                  CS_OPT_INT,                                                                      \
                  "0",                                                                             \
                  "Calls one peer (a host; for loopback, a connection) may run at once; "          \
                  "0: max-calls / 2 (frontend), max-calls (agent).",                               \
                  &(cfg).max_calls_per_peer,                                                       \
                  0,                                                                               \
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
                { "log-format",                                                                    \
                  "COMPUTE_LOG_FORMAT",                                                            \
                  CS_OPT_STRING,                                                                   \
                  "text",                                                                          \
                  "Log line format on stderr: text, or json (one JSON object per line).",          \
                  &(cfg).log_format,                                                               \
                  0,                                                                               \
                  0 },                                                                             \
        {                                                                                          \
                "seccomp", "COMPUTE_SECCOMP", CS_OPT_STRING, "on",                                 \
                        "on: once started, only the syscalls of the program's allowlist "          \
                        "(docs/security.md); others fail with EPERM and are logged. off: no "      \
                        "filter; log: others are allowed and logged in the kernel log (both "      \
                        "for debugging only).",                                                    \
                        &(cfg).seccomp, 0, 0                                                       \
        }

/* Mutual TLS on the server's port, as cs_option initialisers: a program that serves the
 * internal link (the node agent) adds these after CS_DAEMON_OPTIONS and calls
 * cs_daemon_check_server_tls() at startup. All three set: TLS only, every client must
 * present a certificate signed by the CA. None: plaintext. */
#define CS_SERVER_TLS_OPTIONS(cfg)                                                                 \
        { "tls-ca",                                                                                \
          "COMPUTE_TLS_CA",                                                                        \
          CS_OPT_STRING,                                                                           \
          "",                                                                                      \
          "PEM file of the CA that signs client certificates. With --tls-cert and --tls-key: "     \
          "the port serves mutual TLS only (no client certificate signed by this CA, no call); "   \
          "all three empty: plaintext.",                                                           \
          &(cfg).tls_ca,                                                                           \
          0,                                                                                       \
          0 },                                                                                     \
                { "tls-cert",                                                                      \
                  "COMPUTE_TLS_CERT",                                                              \
                  CS_OPT_STRING,                                                                   \
                  "",                                                                              \
                  "PEM file of this server's certificate (chain, leaf first).",                    \
                  &(cfg).tls_cert,                                                                 \
                  0,                                                                               \
                  0 },                                                                             \
        {                                                                                          \
                "tls-key", "COMPUTE_TLS_KEY", CS_OPT_STRING, "",                                   \
                        "PEM file of the private key of --tls-cert (unencrypted).",                \
                        &(cfg).tls_key, 0, 0                                                       \
        }

/* TLS on the public port (the frontend's compute.v1.ComputeService), as cs_option
 * initialisers: the program adds these after CS_DAEMON_OPTIONS, sets cfg.public_tls and calls
 * cs_daemon_check_server_tls() at startup. Certificate and key: TLS only; with the client CA
 * too: mutual TLS only (every client must present a certificate signed by it). None:
 * plaintext. They fill the fields CS_SERVER_TLS_OPTIONS does: a program has one or the other. */
#define CS_PUBLIC_TLS_OPTIONS(cfg)                                                                 \
        { "public-tls-cert",                                                                       \
          "COMPUTE_PUBLIC_TLS_CERT",                                                               \
          CS_OPT_STRING,                                                                           \
          "",                                                                                      \
          "PEM file of the public port's certificate (chain, leaf first). With "                   \
          "--public-tls-key: --listen serves TLS only; both empty: plaintext.",                    \
          &(cfg).tls_cert,                                                                         \
          0,                                                                                       \
          0 },                                                                                     \
                { "public-tls-key",                                                                \
                  "COMPUTE_PUBLIC_TLS_KEY",                                                        \
                  CS_OPT_STRING,                                                                   \
                  "",                                                                              \
                  "PEM file of the private key of --public-tls-cert (unencrypted).",               \
                  &(cfg).tls_key,                                                                  \
                  0,                                                                               \
                  0 },                                                                             \
        {                                                                                          \
                "public-tls-client-ca", "COMPUTE_PUBLIC_TLS_CLIENT_CA", CS_OPT_STRING, "",         \
                        "PEM file of the CA that signs client certificates. With "                 \
                        "--public-tls-cert and --public-tls-key: every client must present a "     \
                        "certificate signed by it (mutual TLS); empty: none asked for.",           \
                        &(cfg).tls_ca, 0, 0                                                        \
        }

/* The frontend's side of the internal link (client TLS to the node agents). */
typedef struct cs_agent_tls_config {
        char *ca;          /* PEM file: the CA the agents' certificates must chain to */
        char *cert;        /* PEM file: the frontend's client certificate */
        char *key;         /* PEM file: its private key */
        char *server_name; /* the name the agents' certificates must carry */
} cs_agent_tls_config;

#define CS_AGENT_TLS_DEFAULT_SERVER_NAME "compute-node-agent"

/* Client TLS to the node agents, as cs_option initialisers; the program calls
 * cs_daemon_setup_agent_tls() at startup. */
#define CS_AGENT_TLS_OPTIONS(tls)                                                                  \
        { "agent-tls-ca",                                                                          \
          "COMPUTE_AGENT_TLS_CA",                                                                  \
          CS_OPT_STRING,                                                                           \
          "",                                                                                      \
          "PEM file of the CA that signs the node agents' certificates. With --agent-tls-cert "    \
          "and --agent-tls-key: calls to node agents use mutual TLS; all three empty: "            \
          "plaintext.",                                                                            \
          &(tls).ca,                                                                               \
          0,                                                                                       \
          0 },                                                                                     \
                { "agent-tls-cert",                                                                \
                  "COMPUTE_AGENT_TLS_CERT",                                                        \
                  CS_OPT_STRING,                                                                   \
                  "",                                                                              \
                  "PEM file of the client certificate presented to node agents.",                  \
                  &(tls).cert,                                                                     \
                  0,                                                                               \
                  0 },                                                                             \
                { "agent-tls-key",                                                                 \
                  "COMPUTE_AGENT_TLS_KEY",                                                         \
                  CS_OPT_STRING,                                                                   \
                  "",                                                                              \
                  "PEM file of the private key of --agent-tls-cert (unencrypted).",                \
                  &(tls).key,                                                                      \
                  0,                                                                               \
                  0 },                                                                             \
        {                                                                                          \
                "agent-tls-server-name", "COMPUTE_AGENT_TLS_SERVER_NAME", CS_OPT_STRING,           \
                        CS_AGENT_TLS_DEFAULT_SERVER_NAME,                                          \
                        "With TLS: the DNS name every node agent's certificate must carry "        \
                        "(agents are reached by pod IP); empty: the host of each agent's "         \
                        "address.",                                                                \
                        &(tls).server_name, 0, 0                                                   \
        }

/* Applies the logging options (and the servers' malloc tuning), and routes gRPC core's own
 * log lines (gpr_log) through the same logger: call it before rpc_global_init. gRPC's
 * severities map to error, info and debug, its file and line become the fields grpc_file
 * and grpc_line (with source "grpc"); GRPC_VERBOSITY still decides which gRPC lets through
 * (gRPC's default: errors only), and --log-level filters them as any line. -1 with *err on
 * an unknown level or format. */
int cs_daemon_setup_logging(const cs_daemon_config *cfg, cs_error **err);

/* Checks the server TLS options: the three files all given or none (with cfg->public_tls:
 * certificate and key both or neither, the client CA only with them; INVALID_ARGUMENT
 * otherwise), each readable, the certificates and key well-formed and the key that of the
 * certificate. Call at startup with the other option checks; cs_daemon_server_new() checks
 * again when it reads them. 0 when they are fine or absent, -1 with *err. */
int cs_daemon_check_server_tls(const cs_daemon_config *cfg, cs_error **err);

/* Reads the --agent-tls-* files and sets the process-wide client TLS (rpc_client_tls_set)
 * used by every channel made afterwards: CA, certificate and key all given (mutual TLS,
 * agents' certificates checked against server_name) or none (plaintext); any other mix is
 * INVALID_ARGUMENT. Logs which it is. Call once at startup, before any channel is made
 * (before or after rpc_global_init). */
int cs_daemon_setup_agent_tls(const cs_agent_tls_config *tls, cs_error **err);

/* A client of the public port (computectl's --tls-ca, --tls-cert, --tls-key and
 * --tls-server-name; CS_CLIENT_TLS_ENV names their environment variables): paths of PEM
 * files, and the name to check the server's certificate against. */
typedef struct cs_client_tls_config {
        const char *ca;          /* required: the CA (bundle) the server's certificate chains to */
        const char *cert;        /* the client certificate, for a port that asks for one... */
        const char *key;         /* ...and its key: both or neither */
        const char *server_name; /* NULL or "": the host of the address */
} cs_client_tls_config;

#define CS_CLIENT_TLS_ENV "COMPUTE_TLS_CA_FILE/CERT_FILE/KEY_FILE"

/* Reads tls's files, checks them as the daemons' are checked (readable, PEM, the key that of
 * the certificate) and sets the process-wide client TLS (rpc_client_tls_set) for every
 * channel made afterwards. 0, or -1 with *err naming the flag and the file. */
int cs_client_tls_setup(const cs_client_tls_config *tls, cs_error **err);

/* Creates the server for cfg with health checks for `services` (NULL-terminated). With the
 * server TLS options set, the server serves TLS only, mutual when a client CA is set (the
 * files are read here). */
rpc_server *cs_daemon_server_new(const cs_daemon_config *cfg, const char *const *services,
                                 cs_error **err);

/* The program's own metrics, written on every scrape after the common ones
 * (process_*, compute_build_info, grpc_server_* of the server cs_daemon_serve runs). */
struct cs_mpage;
typedef void (*cs_daemon_metrics_fn)(struct cs_mpage *page, void *userdata);

/* Makes cs_daemon_serve() serve GET /metrics on cfg->metrics_listen (when not empty) from
 * the moment its gRPC server listens until it stops, with fn (NULL: the common metrics only)
 * adding the program's. Call before cs_daemon_serve(). */
void cs_daemon_set_metrics(const cs_daemon_config *cfg, cs_daemon_metrics_fn fn, void *userdata);
/* Checks --seccomp (on, off or log; INVALID_ARGUMENT otherwise) and, unless off, has
 * cs_daemon_serve() install `allow` (a NULL-terminated table of syscall names, borrowed for
 * the life of the process) on every thread once the server listens and the user is dropped.
 * Call at startup with the other option checks. */
int cs_daemon_set_seccomp(const cs_daemon_config *cfg, const char *const *allow, cs_error **err);

/* Installs the table of cs_daemon_set_seccomp() now, when --seccomp is on (the programs that
 * do not serve, e.g. the frontend's --mode gc, call it once their libraries have started).
 * Logs that it did. 0, or -1 with *err. */
int cs_daemon_seccomp_install(const char *name, cs_error **err);

/* Starts srv, logs where it listens, serves until SIGINT or SIGTERM, then shuts down
 * gracefully and frees it. Returns 0, or -1 with *err when the server cannot start. */
int cs_daemon_serve(rpc_server *srv, const char *name, cs_error **err);

/* Makes cs_daemon_serve() switch to `user` (a name; "" or NULL: stay) right after it starts
 * listening: no supplementary groups, the user's uid and gid, no capabilities (the bounding
 * set is emptied here), no new privileges (set here). Call it while the process has one
 * thread (before rpc_global_init), as root; -1 with *err for an unknown user, root, or a
 * caller that is not root. `user` is borrowed until cs_daemon_serve(). */
int cs_daemon_set_user(const char *user, cs_error **err);

/* With a "unix:" listen address: `group` (a name; "" or NULL: none) may connect too. The
 * socket is then 0660 with that group and its directory 0710 with that group (search only),
 * instead of 0600 and 0700; the directories above it must let the group search. -1 with
 * *err for an unknown group or root's. `group` is borrowed until cs_daemon_serve(). Call it
 * before cs_daemon_server_new(). */
int cs_daemon_set_listen_group(const char *group, cs_error **err);
