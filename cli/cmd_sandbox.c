/* create, describe, destroy: the sandbox lifecycle. */
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "pbconv.h"
#include "util.h"

/* Bounds checked here so a typo fails before the call; the server has its own. */
#define CREATE_MAX_RUNTIME_S (365ULL * 24 * 3600)

/* Parses a command whose only argument is a sandbox id. */
static int parse_id_only(const cli_command *cmd, int argc, char **argv, const char **ret_id)
{
        _cleanup_free_ char **pos = NULL;
        size_t n = 0;
        int r = cli_parse(cmd, argc, argv, NULL, NULL, &pos, &n);

        if (r == 1) {
                cli_print_command_help(cmd, stdout);
                return 1;
        }
        if (r < 0)
                return -1;
        if (n != 1)
                return cli_usage_error(cmd, n == 0 ? "missing the sandbox ID"
                                                   : "too many arguments (only the sandbox ID)");
        *ret_id = pos[0];
        return 0;
}

static int exit_for_parse(int r)
{
        return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

/* --- create ------------------------------------------------------------------------------- */

enum {
        CREATE_TENANT = 1,
        CREATE_SESSION,
        CREATE_IMAGE,
        CREATE_CPU,
        CREATE_MEMORY,
        CREATE_MAX_RUNTIME,
        CREATE_MOUNT_PATH,
        CREATE_SIZE,
        CREATE_STORAGE_CLASS,
        CREATE_EGRESS,
        CREATE_ALLOW_DOMAIN,
        CREATE_ALLOW_CIDR,
};

static const cli_option create_options[] = {
        { CREATE_TENANT, "tenant", 't', "ID", "Tenant id (required)." },
        { CREATE_SESSION, "session", 's', "ID",
          "Agent session id (required). One sandbox per session: repeating create for a "
          "session whose sandbox is not destroyed prints the same id." },
        { CREATE_IMAGE, "image", 0, "IMAGE", "Container image. Default: the server's." },
        { CREATE_CPU, "cpu-millis", 0, "N", "CPU limit in millicores. Default: 1000." },
        { CREATE_MEMORY, "memory", 0, "BYTES",
          "Memory limit: bytes, or with a unit (512Mi, 1Gi, 2G). Default: 1Gi." },
        { CREATE_MAX_RUNTIME, "max-runtime", 0, "SECONDS",
          "Hard wall-time limit of the sandbox (s, m or h suffix allowed). Default: 15m." },
        { CREATE_MOUNT_PATH, "mount-path", 0, "PATH",
          "Where the workspace is mounted in the sandbox. Default: /workspace." },
        { CREATE_SIZE, "workspace-size", 0, "SIZE",
          "Workspace volume capacity, e.g. 5Gi (Kubernetes mode). Default: the server's." },
        { CREATE_STORAGE_CLASS, "storage-class", 0, "NAME",
          "Workspace StorageClass (Kubernetes mode). Default: the server's." },
        { CREATE_EGRESS, "egress", 0, "MODE",
          "What the sandbox may reach outside its node: none (loopback only), allowlist "
          "(--allow-domain and --allow-cidr only) or open (anything but the always-denied "
          "ranges). Default: the node's (none unless its operator chose otherwise); allowlist "
          "when --allow-domain or --allow-cidr is given." },
        { CREATE_ALLOW_DOMAIN, "allow-domain", 0, "NAME",
          "A name the sandbox may resolve and connect to (repeatable, at most 256): exact "
          "(pypi.org), or '*.' and a domain for every name below it (*.pythonhosted.org)." },
        { CREATE_ALLOW_CIDR, "allow-cidr", 0, "CIDR",
          "An IPv4 or IPv6 network the sandbox may connect to (repeatable, at most 256), "
          "e.g. 203.0.113.0/24; an address alone is a /32 or /128." },
};

typedef struct create_state {
        const cli_command *cmd;
        Compute__V1__CreateSandboxRequest req;
        Compute__V1__WorkspaceSpec ws;
        Compute__V1__ResourceLimits limits;
        Google__Protobuf__Duration max_runtime;
        Compute__V1__NetworkSpec network;
        size_t cap_domains, cap_cidrs;
        bool has_ws, has_limits, has_egress;
} create_state;

/* The lists' arrays (their strings are argv's). */
static void create_state_clear(create_state *s)
{
        free(s->network.allow_domains);
        free(s->network.allow_cidrs);
}

/* none, allowlist or open, in any case, with or without the EGRESS_MODE_ prefix (as the
 * enum's names, which describe prints). */
static int parse_egress(const cli_command *cmd, const char *text, Compute__V1__EgressMode *ret)
{
        static const char *const names[] = { "none", "allowlist", "open" };
        const char *name = text;

        if (strncasecmp(name, "EGRESS_MODE_", 12) == 0)
                name += 12;
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                if (strcasecmp(name, names[i]) == 0) {
                        *ret = (Compute__V1__EgressMode)cs_egress_from_name(names[i]);
                        return 0;
                }
        }
        return cli_usage_error(cmd, "--egress: '%s' is not one of none, allowlist, open", text);
}

/* One more entry of a repeatable option's list. */
static void list_add(char ***v, size_t *n, size_t *cap, const char *value)
{
        *v = cs_xgrow(*v, *n, cap, sizeof(**v));
        (*v)[(*n)++] = (char *)value;
}

static int on_create_option(void *state, int id, const char *value)
{
        create_state *s = state;
        uint64_t v;

        switch (id) {
        case CREATE_TENANT:
                s->req.tenant_id = (char *)value;
                return 0;
        case CREATE_SESSION:
                s->req.session_id = (char *)value;
                return 0;
        case CREATE_IMAGE:
                s->req.image = (char *)value;
                return 0;
        case CREATE_CPU:
                if (cli_parse_u64(s->cmd, "--cpu-millis", value, UINT32_MAX, &v) < 0)
                        return -1;
                s->limits.cpu_millis = (uint32_t)v;
                s->has_limits = true;
                return 0;
        case CREATE_MEMORY:
                if (cli_parse_bytes(s->cmd, "--memory", value, &v) < 0)
                        return -1;
                s->limits.memory_bytes = v;
                s->has_limits = true;
                return 0;
        case CREATE_MAX_RUNTIME:
                if (cli_parse_seconds(s->cmd, "--max-runtime", value, CREATE_MAX_RUNTIME_S, &v) < 0)
                        return -1;
                s->max_runtime.seconds = (int64_t)v;
                s->limits.max_runtime = &s->max_runtime;
                s->has_limits = true;
                return 0;
        case CREATE_MOUNT_PATH:
                s->ws.mount_path = (char *)value;
                s->has_ws = true;
                return 0;
        case CREATE_SIZE:
                s->ws.size = (char *)value;
                s->has_ws = true;
                return 0;
        case CREATE_STORAGE_CLASS:
                s->ws.storage_class = (char *)value;
                s->has_ws = true;
                return 0;
        case CREATE_EGRESS:
                s->has_egress = true;
                return parse_egress(s->cmd, value, &s->network.egress);
        case CREATE_ALLOW_DOMAIN:
                list_add(&s->network.allow_domains, &s->network.n_allow_domains, &s->cap_domains,
                         value);
                return 0;
        case CREATE_ALLOW_CIDR:
                list_add(&s->network.allow_cidrs, &s->network.n_allow_cidrs, &s->cap_cidrs, value);
                return 0;
        }
        return cli_usage_error(s->cmd, "internal error: option %d", id);
}

static int create_print(const cli_ctx *ctx, const Compute__V1__CreateSandboxResponse *resp)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        char b[CLI_FMT_MAX];

        if (!ctx->json) {
                printf("%s\n", resp->sandbox_id);
                return CLI_EXIT_OK;
        }
        cli_json_object_begin(&j);
        cli_json_kv_string(&j, "sandbox_id", resp->sandbox_id);
        cli_json_kv_string(&j, "status", fmt_status(resp->status, b));
        cli_json_kv_timestamp(&j, "created_at", resp->created_at);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

static int run_create(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        _cleanup_(create_state_clear) create_state s = {
                .cmd = cmd,
                .req = COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT,
                .ws = COMPUTE__V1__WORKSPACE_SPEC__INIT,
                .limits = COMPUTE__V1__RESOURCE_LIMITS__INIT,
                .max_runtime = GOOGLE__PROTOBUF__DURATION__INIT,
                .network = COMPUTE__V1__NETWORK_SPEC__INIT,
        };
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_msg_ ProtobufCMessage *resp = NULL;
        _cleanup_free_ char **pos = NULL;
        size_t n = 0;
        int r;

        r = cli_parse(cmd, argc, argv, on_create_option, &s, &pos, &n);
        if (r == 1)
                cli_print_command_help(cmd, stdout);
        if (r != 0)
                return exit_for_parse(r);
        if (n > 0) {
                cli_usage_error(cmd, "unexpected argument '%s'", pos[0]);
                return CLI_EXIT_USAGE;
        }
        if (!*s.req.tenant_id || !*s.req.session_id) {
                cli_usage_error(cmd, "%s required (e.g. create --tenant acme --session demo)",
                                *s.req.tenant_id    ? "--session is"
                                : *s.req.session_id ? "--tenant is"
                                                    : "--tenant and --session are");
                return CLI_EXIT_USAGE;
        }
        if (s.has_ws)
                s.req.workspace = &s.ws;
        if (s.has_limits)
                s.req.limits = &s.limits;
        /* The lists are allowlist's: given alone, they ask for it. The entries are the
         * server's to check (it names the one at fault). */
        if (!s.has_egress && (s.network.n_allow_domains || s.network.n_allow_cidrs)) {
                s.network.egress = COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_ALLOWLIST;
                s.has_egress = true;
        }
        if (s.has_egress)
                s.req.network = &s.network;

        if (cli_unary(ctx, CLI_METHOD("CreateSandbox"), &s.req.base,
                      &compute__v1__create_sandbox_response__descriptor, &resp, &err) < 0)
                return cli_fail(err);
        return create_print(ctx, (const Compute__V1__CreateSandboxResponse *)resp);
}

const cli_command cli_cmd_create = {
        .name = "create",
        .args = "--tenant ID --session ID",
        .summary = "Create a sandbox for a session and print its id.",
        .details = "Prints the sandbox id (the sandbox starts asynchronously: exec waits for it).\n"
                   "--json: {\"sandbox_id\", \"status\", \"created_at\"}.\n"
                   "Network (docs/api.md, \"Network\"): e.g. --egress allowlist --allow-domain\n"
                   "pypi.org --allow-domain '*.pythonhosted.org' --allow-cidr 203.0.113.0/24.\n"
                   "Under allowlist, other names are answered REFUSED by the node's resolver.\n"
                   "Kubernetes mode has no sandbox network yet: allowlist and open are refused\n"
                   "(FAILED_PRECONDITION).\n",
        .options = create_options,
        .n_options = ARRAY_SIZE(create_options),
        .run = run_create,
};

/* --- describe ----------------------------------------------------------------------------- */

static int describe_print(const cli_ctx *ctx, const Compute__V1__DescribeSandboxResponse *resp)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        int64_t up = pb_duration_ms(resp->current_uptime);
        char b[CLI_FMT_MAX];

        if (!ctx->json) {
                print_kv("sandbox_id", "%s", resp->sandbox_id);
                print_kv("status", "%s", fmt_status(resp->status, b));
                /* Only when there is one: a READY sandbox's lines stay as they were. */
                if (resp->status_reason[0]) {
                        _cleanup_free_ char *reason = fmt_printable(resp->status_reason);
                        print_kv("status_reason", "%s", reason);
                }
                print_kv("created_at", "%s", fmt_timestamp(resp->created_at, b));
                print_kv("uptime", "%s", fmt_duration_ms(up, b));
                print_network_text(resp->network);
                print_usage_text(resp->current_usage);
                return CLI_EXIT_OK;
        }
        cli_json_object_begin(&j);
        cli_json_kv_string(&j, "sandbox_id", resp->sandbox_id);
        cli_json_kv_string(&j, "status", fmt_status(resp->status, b));
        cli_json_kv_string(&j, "status_reason", resp->status_reason);
        cli_json_kv_timestamp(&j, "created_at", resp->created_at);
        cli_json_kv_i64(&j, "uptime_ms", up);
        cli_json_key(&j, "network");
        cli_json_network(&j, resp->network);
        cli_json_key(&j, "usage");
        cli_json_usage(&j, resp->current_usage);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

static int run_describe(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        Compute__V1__DescribeSandboxRequest req = COMPUTE__V1__DESCRIBE_SANDBOX_REQUEST__INIT;
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_msg_ ProtobufCMessage *resp = NULL;
        const char *id = NULL;
        int r;

        r = parse_id_only(cmd, argc, argv, &id);
        if (r != 0)
                return exit_for_parse(r);
        req.sandbox_id = (char *)id;
        if (cli_unary(ctx, CLI_METHOD("DescribeSandbox"), &req.base,
                      &compute__v1__describe_sandbox_response__descriptor, &resp, &err) < 0)
                return cli_fail(err);
        return describe_print(ctx, (const Compute__V1__DescribeSandboxResponse *)resp);
}

const cli_command cli_cmd_describe = {
        .name = "describe",
        .args = "ID",
        .summary = "Show a sandbox's status, creation time, uptime, network and usage.",
        .details = "Text: aligned 'key: value' lines; a status_reason line says why a sandbox\n"
                   "is FAILED or still STARTING, when the server says; egress is the policy in\n"
                   "force (NONE, ALLOWLIST or OPEN), followed by allow_domains and allow_cidrs\n"
                   "lines (space-separated) when it has entries.\n"
                   "--json: {\"sandbox_id\", \"status\", \"status_reason\" (\"\" when none),\n"
                   "\"created_at\", \"uptime_ms\", \"network\": {\"egress\", \"allow_domains\",\n"
                   "\"allow_cidrs\"}, \"usage\": {\"cpu_ms\", ...}}.\n",
        .run = run_describe,
};

/* --- destroy ------------------------------------------------------------------------------ */

static int run_destroy(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        Compute__V1__DestroySandboxRequest req = COMPUTE__V1__DESTROY_SANDBOX_REQUEST__INIT;
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_msg_ ProtobufCMessage *msg = NULL;
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        const Compute__V1__DestroySandboxResponse *resp;
        const char *id = NULL;
        int r;

        r = parse_id_only(cmd, argc, argv, &id);
        if (r != 0)
                return exit_for_parse(r);
        req.sandbox_id = (char *)id;
        if (cli_unary(ctx, CLI_METHOD("DestroySandbox"), &req.base,
                      &compute__v1__destroy_sandbox_response__descriptor, &msg, &err) < 0)
                return cli_fail(err);
        resp = (const Compute__V1__DestroySandboxResponse *)msg;
        if (!ctx->json) {
                print_kv("sandbox_id", "%s", resp->sandbox_id);
                print_kv("status", "DESTROYED");
                print_usage_text(resp->total_usage);
                return CLI_EXIT_OK;
        }
        cli_json_object_begin(&j);
        /* The names describe and list use for the same things. */
        cli_json_kv_string(&j, "sandbox_id", resp->sandbox_id);
        cli_json_kv_string(&j, "status", "DESTROYED");
        cli_json_key(&j, "usage");
        cli_json_usage(&j, resp->total_usage);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

const cli_command cli_cmd_destroy = {
        .name = "destroy",
        .args = "ID",
        .summary = "Destroy a sandbox and print its total usage.",
        .details = "The workspace is kept for the server's grace window (describe then shows\n"
                   "DESTROYED). --json: {\"sandbox_id\", \"status\": \"DESTROYED\", \"usage\":\n"
                   "{\"cpu_ms\", ...}} (usage: the sandbox's total, as describe's usage).\n",
        .run = run_destroy,
};
