/* computectl: a command-line client for compute.v1.ComputeService.
 *
 *   computectl [GLOBAL OPTION]... COMMAND [OPTION]... [ARG]...
 *
 * The global options may also come after the command's name (cli_set_global).
 * This file holds main, the global options, the command table, the shared call helpers and the
 * signal thread; each command lives in a cmd_*.c file (see cli.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "daemon.h"
#include "signals.h"
#include "util.h"

#define GLOBAL_TIMEOUT_DEFAULT_S 30
#define GLOBAL_TIMEOUT_MAX_S     (24 * 3600)

const cli_command *const cli_commands[] = {
        &cli_cmd_create, &cli_cmd_describe, &cli_cmd_destroy, &cli_cmd_list,       &cli_cmd_exec,
        &cli_cmd_cp,     &cli_cmd_ls,       &cli_cmd_version, &cli_cmd_completion,
};
const size_t cli_n_commands = ARRAY_SIZE(cli_commands);

enum {
        OPT_ADDR = 1,
        OPT_JSON,
        OPT_TIMEOUT,
        OPT_TLS,
        OPT_TLS_CA,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_SERVER_NAME,
};

/* TLS to the service (--tls and the --tls-* files): off unless asked for; any --tls-* flag
 * turns it on. The CA defaults to the system's bundle. */
#define TLS_ENV             "COMPUTE_TLS"
#define TLS_CA_ENV          "COMPUTE_TLS_CA_FILE"
#define TLS_CERT_ENV        "COMPUTE_TLS_CERT_FILE"
#define TLS_KEY_ENV         "COMPUTE_TLS_KEY_FILE"
#define TLS_SERVER_NAME_ENV "COMPUTE_TLS_SERVER_NAME"
#define TLS_SYSTEM_CA       "/etc/ssl/certs/ca-certificates.crt"

static struct {
        bool on;
        cs_client_tls_config files;
} tls;

static const cli_option global_options[] = {
        { OPT_ADDR, "addr", 0, "HOST:PORT",
          "Address of the compute service. Env: " CLI_ADDR_ENV "; default: " CLI_DEFAULT_ADDR "." },
        { OPT_JSON, "json", 0, NULL,
          "Machine-readable output: one JSON object per line on stdout (see each command)." },
        { OPT_TIMEOUT, "timeout", 0, "SECONDS",
          "Deadline of each unary call (s, m or h suffix allowed; 0: none). Default: 30." },
        { OPT_TLS, "tls", 0, NULL,
          "Connect over TLS, checking the service's certificate against the system's CAs "
          "(" TLS_SYSTEM_CA ") or --tls-ca. Implied by the other --tls-* options. "
          "Env: " TLS_ENV "=1." },
        { OPT_TLS_CA, "tls-ca", 0, "FILE",
          "PEM file of the CA(s) the service's certificate must chain to. Env: " TLS_CA_ENV "." },
        { OPT_TLS_CERT, "tls-cert", 0, "FILE",
          "PEM file of a client certificate, for a service that requires one (mutual TLS); "
          "with --tls-key. Env: " TLS_CERT_ENV "." },
        { OPT_TLS_KEY, "tls-key", 0, "FILE",
          "PEM file of the private key of --tls-cert (unencrypted). Env: " TLS_KEY_ENV "." },
        { OPT_TLS_SERVER_NAME, "tls-server-name", 0, "NAME",
          "The DNS name the service's certificate must carry (default: the host of --addr). "
          "Env: " TLS_SERVER_NAME_ENV "." },
};

const cli_command cli_global = {
        .name = NULL,
        .options = global_options,
        .n_options = ARRAY_SIZE(global_options),
        .options_first = true,
};

/* Laid out for help2man too (the man page is made from it and from --version): a Usage
 * line, a description paragraph, then "Heading:" sections of indented entries. */
static void print_global_help(FILE *out)
{
        fprintf(out, "Usage: " CLI_NAME " [OPTION]... COMMAND [ARG]...\n"
                     "A command-line client for the compute service (compute.v1.ComputeService):\n"
                     "gVisor sandboxes for agent sessions.\n\nCommands:\n");
        for (size_t i = 0; i < cli_n_commands; i++)
                fprintf(out, "  %-10s  %s\n", cli_commands[i]->name, cli_commands[i]->summary);
        fprintf(out, "\nOptions:\n");
        for (size_t i = 0; i < ARRAY_SIZE(global_options); i++) {
                const cli_option *o = &global_options[i];
                fprintf(out, "      --%s%s%s\n", o->name, o->metavar ? " " : "",
                        o->metavar ? o->metavar : "");
                cli_print_wrapped(out, 10, o->help);
        }
        fprintf(out,
                "  -h, --help\n          Print this help and exit.\n"
                "      --version\n          Print the version and exit.\n\n"
                "The options above may come before or after the command's name (for exec:\n"
                "before its ID). Run '" CLI_NAME " COMMAND --help' (or '" CLI_NAME " help\n"
                "COMMAND') for a command's own.\n\n"
                "Exit status:\n"
                "  0       success\n"
                "  125     computectl's own error: a usage error, or a call or local step\n"
                "          that failed (printed as '" CLI_NAME ": STATUS: message')\n"
                "  other   exec: the remote command's exit status (126: not executable,\n"
                "          127: not found, 128+N: killed by signal N), 124 when its\n"
                "          timeout passed, 130 when interrupted\n\n"
                "Examples:\n"
                "  SB=$(" CLI_NAME " create --tenant acme --session demo)\n"
                "  " CLI_NAME " exec $SB -- python3 -c 'print(6*7)'\n"
                "  " CLI_NAME " exec --cwd /workspace/in $SB -- ls -l   (options before the ID)\n"
                "  " CLI_NAME " cp hello.txt $SB:in/    (ID:PATH: a path in the workspace)\n"
                "  " CLI_NAME " cp $SB:in/hello.txt .\n"
                "  " CLI_NAME " ls -r $SB\n"
                "  " CLI_NAME " list --tenant acme\n"
                "  " CLI_NAME " destroy $SB\n");
}

/* --- errors and calls ------------------------------------------------------------------- */

/* The address of the one channel, for cli_fail's hint: a newcomer who forgot COMPUTE_ADDR
 * sees which address was tried. */
static const char *channel_addr;

int cli_fail(const cs_error *err)
{
        fprintf(stderr, CLI_NAME ": %s: %s\n", cs_status_name(err->code),
                err->msg ? err->msg : "(no message)");
        /* gRPC says no more than that the connection failed: name the likely TLS causes. */
        if (err->code == GRPC_STATUS_UNAVAILABLE && tls.on)
                fprintf(stderr,
                        CLI_NAME ": no connection over TLS: check that the service serves "
                                 "TLS, that its certificate chains to --tls-ca and names the host "
                                 "(or --tls-server-name), and whether it requires a client "
                                 "certificate (--tls-cert, --tls-key)\n");
        else if (err->code == GRPC_STATUS_UNAVAILABLE)
                fprintf(stderr,
                        CLI_NAME
                        ": no connection to %s: is the service up there (--addr or " CLI_ADDR_ENV
                        " to use another)? If it serves TLS, add --tls (and "
                        "--tls-ca FILE)\n",
                        channel_addr ? channel_addr : "the service");
        return CLI_EXIT_ERROR;
}

rpc_channel *cli_channel(cli_ctx *ctx)
{
        if (!ctx->channel) {
                ctx->channel = rpc_channel_new(ctx->addr);
                channel_addr = ctx->addr;
        }
        return ctx->channel;
}

int cli_unary(cli_ctx *ctx, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret_resp,
              cs_error **err)
{
        rpc_call_options opts = { .timeout_ms = ctx->timeout_ms };

        return rpc_unary(cli_channel(ctx), method, req, resp_desc, &opts, ret_resp, err);
}

int cli_unary_bytes(cli_ctx *ctx, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const char *bytes_field,
                    ProtobufCMessage **ret_resp, rpc_bytes *ret_bytes, cs_error **err)
{
        rpc_call_options opts = { .timeout_ms = ctx->timeout_ms };

        return rpc_unary_bytes(cli_channel(ctx), method, req, resp_desc, bytes_field, &opts,
                               ret_resp, ret_bytes, err);
}

/* --- signals ------------------------------------------------------------------------------ */

static struct {
        pthread_mutex_t lock;
        int signo;
        bool defer;
        bool progress;
        rpc_stream *stream;
        char *unlink_path;
} sig = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *signal_thread(void *arg)
{
        (void)arg;
        for (;;) {
                int s = cs_signals_wait();

                pthread_mutex_lock(&sig.lock);
                if (sig.signo == 0) {
                        sig.signo = s;
                        if (sig.defer) {
                                if (sig.stream)
                                        rpc_stream_cancel(sig.stream);
                                pthread_mutex_unlock(&sig.lock);
                                continue;
                        }
                }
                /* Not deferred, or a second signal: leave now, and leave nothing behind.
                 * The lock stays held so that no other thread changes what we clean up. */
                if (sig.unlink_path)
                        unlink(sig.unlink_path);
                if (sig.progress)
                        (void)!write(STDERR_FILENO, "\n", 1);
                _exit(CLI_EXIT_CANCELLED);
        }
        return NULL;
}

void cli_signals_start(void)
{
        pthread_t t;

        /* Before any other thread exists (gRPC's included), so that all inherit the mask and
         * only signal_thread ever takes SIGINT and SIGTERM. */
        cs_signals_block();
        if (pthread_create(&t, NULL, signal_thread, NULL) != 0) {
                fprintf(stderr, CLI_NAME ": cannot start the signal thread\n");
                exit(CLI_EXIT_ERROR);
        }
        pthread_detach(t);
}

void cli_signals_defer(bool on)
{
        pthread_mutex_lock(&sig.lock);
        sig.defer = on;
        pthread_mutex_unlock(&sig.lock);
}

void cli_signals_set_stream(rpc_stream *st)
{
        pthread_mutex_lock(&sig.lock);
        sig.stream = st;
        /* A signal that came before the stream existed cancels it now. */
        if (st && sig.signo)
                rpc_stream_cancel(st);
        pthread_mutex_unlock(&sig.lock);
}

void cli_signals_set_unlink(const char *path)
{
        pthread_mutex_lock(&sig.lock);
        free(sig.unlink_path);
        sig.unlink_path = path ? cs_xstrdup(path) : NULL;
        pthread_mutex_unlock(&sig.lock);
}

void cli_signals_set_progress(bool on)
{
        pthread_mutex_lock(&sig.lock);
        sig.progress = on;
        pthread_mutex_unlock(&sig.lock);
}

int cli_signals_received(void)
{
        int s;

        pthread_mutex_lock(&sig.lock);
        s = sig.signo;
        pthread_mutex_unlock(&sig.lock);
        return s;
}

/* --- main ---------------------------------------------------------------------------------- */

typedef struct global_state {
        cli_ctx *ctx;
} global_state;

static int tls_option(int id, const char *value)
{
        const char **field = id == OPT_TLS_CA            ? &tls.files.ca
                             : id == OPT_TLS_CERT        ? &tls.files.cert
                             : id == OPT_TLS_KEY         ? &tls.files.key
                             : id == OPT_TLS_SERVER_NAME ? &tls.files.server_name
                                                         : NULL;

        for (size_t i = 0; field && !*value && i < ARRAY_SIZE(global_options); i++)
                if (global_options[i].id == id)
                        return cli_usage_error(&cli_global, "--%s: empty value",
                                               global_options[i].name);
        if (field)
                *field = value;
        tls.on = true;
        return 0;
}

/* The TLS environment variables, before the options (which override them). */
static void tls_from_env(void)
{
        const char *on = getenv(TLS_ENV);
        const char *const names[] = { TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TLS_SERVER_NAME_ENV };
        const char **fields[] = { &tls.files.ca, &tls.files.cert, &tls.files.key,
                                  &tls.files.server_name };

        tls.on = on && (strcmp(on, "1") == 0 || strcmp(on, "true") == 0);
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                const char *v = getenv(names[i]);
                if (v && *v) {
                        *fields[i] = v;
                        tls.on = true;
                }
        }
}

/* Reads and checks the TLS files (as the daemons check theirs) before any channel is made.
 * CLI_EXIT_OK, or CLI_EXIT_ERROR after printing why. */
static int tls_setup(void)
{
        _cleanup_error_ cs_error *err = NULL;

        if (!tls.on)
                return CLI_EXIT_OK;
        if (!tls.files.ca)
                tls.files.ca = TLS_SYSTEM_CA;
        if (cs_client_tls_setup(&tls.files, &err) < 0)
                return cli_fail(err);
        return CLI_EXIT_OK;
}

static int on_global_option(void *state, int id, const char *value)
{
        cli_ctx *ctx = ((global_state *)state)->ctx;
        uint64_t secs;

        switch (id) {
        case OPT_ADDR:
                if (!*value)
                        return cli_usage_error(&cli_global, "--addr: empty address");
                ctx->addr = value;
                return 0;
        case OPT_JSON:
                ctx->json = true;
                return 0;
        case OPT_TIMEOUT:
                if (cli_parse_seconds(&cli_global, "--timeout", value, GLOBAL_TIMEOUT_MAX_S,
                                      &secs) < 0)
                        return -1;
                ctx->timeout_ms = (int64_t)secs * 1000;
                return 0;
        case OPT_TLS:
        case OPT_TLS_CA:
        case OPT_TLS_CERT:
        case OPT_TLS_KEY:
        case OPT_TLS_SERVER_NAME:
                return tls_option(id, value);
        }
        return cli_usage_error(&cli_global, "internal error: option %d", id);
}

static const cli_command *find_command(const char *name)
{
        for (size_t i = 0; i < cli_n_commands; i++)
                if (strcmp(cli_commands[i]->name, name) == 0)
                        return cli_commands[i];
        return NULL;
}

/* Parses the global options; returns the index of the command in argv, or -(exit status)
 * when the program is done (help printed, usage error). */
static int parse_global(cli_ctx *ctx, global_state *st, int argc, char **argv)
{
        _cleanup_free_ char **pos = NULL;
        const char *env = getenv(CLI_ADDR_ENV);
        size_t n_pos = 0;
        int r;

        ctx->addr = env && *env ? env : CLI_DEFAULT_ADDR;
        ctx->timeout_ms = GLOBAL_TIMEOUT_DEFAULT_S * 1000;
        tls_from_env();
        r = cli_parse(&cli_global, argc, argv, on_global_option, st, &pos, &n_pos);
        if (r == 1) {
                print_global_help(stdout);
                return -CLI_EXIT_OK;
        }
        if (r == 2) {
                printf(CLI_NAME " " CLI_VERSION "\n");
                return -CLI_EXIT_OK;
        }
        if (r < 0)
                return -CLI_EXIT_USAGE;
        if (n_pos == 0) {
                fprintf(stderr, CLI_NAME ": no command given\nTry '" CLI_NAME " --help'.\n");
                return -CLI_EXIT_USAGE;
        }
        /* The command is the first positional argument; with options_first every later
         * argument is positional too, so it sits at argc - n_pos. */
        return argc - (int)n_pos;
}

int main(int argc, char **argv)
{
        cli_ctx ctx = { 0 };
        global_state st = { .ctx = &ctx };
        const cli_command *cmd;
        int idx, rc;

        idx = parse_global(&ctx, &st, argc, argv);
        if (idx <= 0)
                return -idx;
        cli_set_global(&cli_global, on_global_option, &st);
        /* "computectl help [COMMAND]", as git and kubectl take it: the same as --help. */
        if (strcmp(argv[idx], "help") == 0) {
                if (idx + 1 >= argc) {
                        print_global_help(stdout);
                        return CLI_EXIT_OK;
                }
                cmd = find_command(argv[idx + 1]);
                if (!cmd || idx + 2 < argc) {
                        if (!cmd)
                                fprintf(stderr, CLI_NAME ": help: unknown command '%s'\n",
                                        argv[idx + 1]);
                        else
                                fprintf(stderr, CLI_NAME ": help: one command at a time\n");
                        fprintf(stderr, "Try '" CLI_NAME " --help'.\n");
                        return CLI_EXIT_USAGE;
                }
                cli_print_command_help(cmd, stdout);
                return CLI_EXIT_OK;
        }
        cmd = find_command(argv[idx]);
        if (!cmd) {
                fprintf(stderr, CLI_NAME ": unknown command '%s'\nTry '" CLI_NAME " --help'.\n",
                        argv[idx]);
                return CLI_EXIT_USAGE;
        }

        rc = tls_setup();
        if (rc != CLI_EXIT_OK)
                return rc;
        cli_signals_start();
        rpc_global_init();
        rc = cmd->run(&ctx, cmd, argc - idx, argv + idx);
        rpc_channel_free(ctx.channel);
        rpc_global_shutdown();
        cli_signals_set_unlink(NULL);

        if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
                /* A reader that went away (`| head`): quietly, as exec does. */
                if (errno == EPIPE)
                        return CLI_EXIT_SIGPIPE;
                perror(CLI_NAME ": stdout");
                rc = CLI_EXIT_ERROR;
        }
        return rc;
}
