/* computectl's internals, shared by its source files.
 *
 * computectl.c   main, global options, command table, help, signals
 * args.c         table-driven option parsing and value parsers
 * json.c         a small JSON writer (json.h)
 * format.c       times, sizes, durations, usage metrics
 * cmd_sandbox.c  create, describe, destroy
 * cmd_list.c     list
 * cmd_exec.c     exec
 * cmd_files.c    cp, ls
 * cmd_misc.c     version, completion
 *
 * Exit status of every command: 0 on success, 125 on computectl's own error (a usage error,
 * an RPC's status or a local failure, printed as "computectl: STATUS: message"), as docker
 * does, so that it never reads as a remote command's status. exec exits with the remote
 * command's status instead (see cmd_exec.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "compute/v1/compute.pb-c.h"
#include "error.h"
#include "json.h"
#include "rpc.h"

#define CLI_NAME         "computectl"
#define CLI_DEFAULT_ADDR "127.0.0.1:50051"
#define CLI_ADDR_ENV     "COMPUTE_ADDR"

#define CLI_VERSION CS_VERSION

#define CLI_EXIT_OK        0
#define CLI_EXIT_ERROR     125 /* our own error, never the remote command's (as docker) */
#define CLI_EXIT_USAGE     125 /* a usage error is one of ours too */
#define CLI_EXIT_TIMEOUT   124 /* the remote command's timeout passed (as timeout(1)) */
#define CLI_EXIT_CANCELLED 130 /* interrupted: the remote command was cancelled */
#define CLI_EXIT_SIGPIPE   141 /* our stdout went away (128 + SIGPIPE) */

/* The service's per-call data cap: cp moves files in chunks of this size. */
#define CLI_CHUNK_BYTES RPC_DATA_MAX_BYTES

#define CLI_METHOD(name) "/compute.v1.ComputeService/" name

/* What every command gets: the global options and the channel. */
typedef struct cli_ctx {
        const char *addr;
        bool json;
        int64_t timeout_ms; /* unary calls; 0: no deadline */
        rpc_channel *channel;
} cli_ctx;

/* --- options (args.c) ----------------------------------------------------------------- */

typedef struct cli_option {
        int id;              /* passed to the callback; > 0 */
        const char *name;    /* long name, without "--" */
        char short_name;     /* 0: none */
        const char *metavar; /* NULL: a flag without a value */
        const char *help;
} cli_option;

typedef struct cli_command {
        const char *name;
        const char *args;    /* the positional part of the usage line */
        const char *summary; /* one line */
        const char *details; /* printed below the options by --help; may be NULL */
        const cli_option *options;
        size_t n_options;
        /* Options are recognised only before the first positional argument, which with all
         * that follows is left alone (exec: the remote command line is not ours to parse). */
        bool options_first;
        int (*run)(cli_ctx *ctx, const struct cli_command *cmd, int argc, char **argv);
} cli_command;

/* Called once per option given; value is NULL for flags. Returns 0, or -1 after printing a
 * usage error with cli_usage_error(). */
typedef int (*cli_option_fn)(void *state, int id, const char *value);

/* Makes the global options (main's table, its callback and state) recognised by every
 * command's cli_parse() too, after the command's name, as kubectl does; a command's own
 * option of the same name wins. Adding a global option is one entry in main's table. */
void cli_set_global(const cli_command *global, cli_option_fn fn, void *state);

/* Parses argv[1..argc) against cmd's options ("--name VALUE", "--name=VALUE", "-n VALUE",
 * "-nVALUE"; "--" ends the options). Positional arguments are collected, in order, into
 * *ret_pos (an array of pointers into argv, NULL-terminated, that the caller frees) and
 * *ret_n_pos. Returns 0; 1 when --help or -h was given (the caller prints the help and exits
 * 0); 2 when --version was given to the global options; or -1 after printing a usage error. A NULL
 * cmd->name means the global options: messages then name no command. */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_option_fn fn, void *state,
              char ***ret_pos, size_t *ret_n_pos);

void cli_print_command_help(const cli_command *cmd, FILE *out);
/* Prints text word-wrapped to 79 columns, every line indented by `indent` spaces. */
void cli_print_wrapped(FILE *out, int indent, const char *text);

/* Prints "computectl: CMD: message" and a pointer to --help on stderr. Returns -1. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Value parsers: 0, or -1 after printing a usage error naming the option. */
int cli_parse_u64(const cli_command *cmd, const char *opt, const char *text, uint64_t max,
                  uint64_t *ret);
/* Bytes with an optional suffix: k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (of 1024). */
int cli_parse_bytes(const cli_command *cmd, const char *opt, const char *text, uint64_t *ret);
/* Seconds with an optional unit: s, m or h. */
int cli_parse_seconds(const cli_command *cmd, const char *opt, const char *text, uint64_t max,
                      uint64_t *ret);

/* --- errors and calls (computectl.c) ---------------------------------------------------- */

/* Prints "computectl: STATUS: message" on stderr. Returns CLI_EXIT_ERROR. */
int cli_fail(const cs_error *err);

/* The channel to ctx->addr, made on first use. */
rpc_channel *cli_channel(cli_ctx *ctx);

static inline void cli_msg_freep(ProtobufCMessage **m)
{
        if (*m)
                protobuf_c_message_free_unpacked(*m, NULL);
}
#define _cleanup_msg_ __attribute__((cleanup(cli_msg_freep)))

/* A unary call with the --timeout deadline. */
int cli_unary(cli_ctx *ctx, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret_resp,
              cs_error **err);

/* cli_unary, with the response's bytes field left undecoded in *ret_bytes (rpc_unary_bytes). */
int cli_unary_bytes(cli_ctx *ctx, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const char *bytes_field,
                    ProtobufCMessage **ret_resp, rpc_bytes *ret_bytes, cs_error **err);

/* Signal handling. SIGINT and SIGTERM are blocked in every thread and taken by one thread
 * of their own. By default a signal ends the program at once with status 130, after
 * removing the path registered with cli_signals_set_unlink() (a download's temp file).
 * Between cli_signals_defer(true) and the end of the command, the first signal instead cancels
 * the stream registered with cli_signals_set_stream() (at once, or when one is registered
 * later) and the command ends itself; a second signal still ends the program at once. */
void cli_signals_start(void);
void cli_signals_defer(bool on);
void cli_signals_set_stream(rpc_stream *st);
void cli_signals_set_unlink(const char *path); /* copied; NULL clears */
void cli_signals_set_progress(bool on);        /* a progress line is on stderr */
int cli_signals_received(void);                /* the first signal's number, 0 if none */

/* --- formatting (format.c) ------------------------------------------------------------ */

#define CLI_FMT_MAX 64

/* Writes all of buf to fd, retrying on EINTR and short writes. 0, or -1 with errno. */

/* RFC 3339 in UTC with milliseconds ("2026-12-02T08:37:19.123Z"); "" for an unset one. */
const char *fmt_timestamp(const Google__Protobuf__Timestamp *ts, char buf[static CLI_FMT_MAX]);
/* "512 B", "40.0 MiB". */
const char *fmt_bytes(uint64_t n, char buf[static CLI_FMT_MAX]);
/* "850ms", "12.3s", "5m07s", "2h03m04s". */
const char *fmt_duration_ms(int64_t ms, char buf[static CLI_FMT_MAX]);
/* "READY" for SANDBOX_STATUS_READY. */
const char *fmt_status(Compute__V1__SandboxStatus status, char buf[static CLI_FMT_MAX]);
/* "ALLOWLIST" for EGRESS_MODE_ALLOWLIST. */
const char *fmt_egress(Compute__V1__EgressMode egress, char buf[static CLI_FMT_MAX]);

/* A copy of s (malloc'd; "" for NULL) with control characters as '?': text from the server
 * shown on a terminal never carries escape sequences. */
char *fmt_printable(const char *s);
void fmt_printable_inplace(char *s); /* the same, in place */

/* "key:" padded to the key column, then the value: describe's and destroy's text lines. */
void print_kv(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The seven usage fields as aligned lines (NULL: all zero). */
void print_usage_text(const Common__V1__UsageMetrics *u);
/* A network policy's "key: value" lines: egress, then allow_domains and allow_cidrs (each
 * one line, space-separated) when not empty. Nothing for NULL (a server from before
 * policies). */
void print_network_text(const Compute__V1__NetworkSpec *n);
/* The policy as a JSON object value {"egress", "allow_domains", "allow_cidrs"}; null for
 * NULL. */
void cli_json_network(cli_json_writer *j, const Compute__V1__NetworkSpec *n);
/* The seven usage fields as a JSON object value. */
void cli_json_usage(cli_json_writer *j, const Common__V1__UsageMetrics *u);
/* A timestamp member: RFC 3339 as fmt_timestamp(), null when unset. */
void cli_json_kv_timestamp(cli_json_writer *j, const char *key,
                           const Google__Protobuf__Timestamp *ts);
/* Writes j's document as one line on fd 1. Returns 0, or CLI_EXIT_ERROR after printing why. */
int cli_json_print(cli_json_writer *j);

/* --- commands --------------------------------------------------------------------------- */

extern const cli_command cli_cmd_create, cli_cmd_describe, cli_cmd_destroy, cli_cmd_list,
        cli_cmd_exec, cli_cmd_cp, cli_cmd_ls, cli_cmd_version, cli_cmd_completion;

/* The command table and the global options (computectl.c), for completion. */
extern const cli_command *const cli_commands[];
extern const size_t cli_n_commands;
extern const cli_command cli_global;
