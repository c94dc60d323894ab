/* list: a tenant's sandboxes (ListSandboxes), every page fetched in turn so that paging is
 * not the user's business; --limit stops early. */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "pbconv.h"
#include "util.h"

/* The server's cap on a page (ListSandboxesRequest.page_size). */
#define LIST_MAX_PAGE 1000

enum {
        LIST_TENANT = 1,
        LIST_STATUS,
        LIST_LIMIT,
        LIST_PAGE_SIZE,
};

static const cli_option list_options[] = {
        { LIST_TENANT, "tenant", 't', "ID", "Tenant id (required)." },
        { LIST_STATUS, "status", 0, "STATUS",
          "Only sandboxes of this status: starting, ready, failed or destroyed." },
        { LIST_LIMIT, "limit", 0, "N", "At most N sandboxes (the oldest first). Default: all." },
        { LIST_PAGE_SIZE, "page-size", 0, "N",
          "Sandboxes per call (server default 100, at most 1000). The pages are fetched in "
          "turn and shown as one list." },
};

typedef struct list_state {
        const cli_command *cmd;
        const char *tenant;
        Compute__V1__SandboxStatus status;
        uint64_t limit, page_size;
} list_state;

static int parse_status(const cli_command *cmd, const char *text, Compute__V1__SandboxStatus *ret)
{
        static const struct {
                const char *name;
                Compute__V1__SandboxStatus value;
        } names[] = {
                { "starting", COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING },
                { "ready", COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY },
                { "failed", COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_FAILED },
                { "destroyed", COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_DESTROYED },
        };
        const char *name = text;

        if (strncasecmp(name, "SANDBOX_STATUS_", 15) == 0)
                name += 15;
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                if (strcasecmp(name, names[i].name) == 0) {
                        *ret = names[i].value;
                        return 0;
                }
        }
        return cli_usage_error(
                cmd, "--status: '%s' is not one of starting, ready, failed, destroyed", text);
}

static int on_list_option(void *state, int id, const char *value)
{
        list_state *s = state;

        switch (id) {
        case LIST_TENANT:
                s->tenant = value;
                return 0;
        case LIST_STATUS:
                return parse_status(s->cmd, value, &s->status);
        case LIST_LIMIT:
                return cli_parse_u64(s->cmd, "--limit", value, UINT32_MAX, &s->limit);
        case LIST_PAGE_SIZE:
                if (cli_parse_u64(s->cmd, "--page-size", value, LIST_MAX_PAGE, &s->page_size) < 0)
                        return -1;
                if (s->page_size == 0)
                        return cli_usage_error(s->cmd, "--page-size must be 1..%d", LIST_MAX_PAGE);
                return 0;
        }
        return cli_usage_error(s->cmd, "internal error: option %d", id);
}

/* --- output ----------------------------------------------------------------------------- */

#define ROW_FMT "%-36s  %-9s  %-20s  %9s  %10s  %10s  %-*s  %s\n"
/* SESSION is as wide as the longest session of the page (REASON lines up after it), up to
 * this. Rows are printed as pages come, so a later page's longer session widens its rows
 * only: the column never narrows. */
#define SESSION_WIDTH_MAX 64

static void print_header(int session_width)
{
        printf(ROW_FMT, "SANDBOX ID", "STATUS", "CREATED", "UPTIME", "CPU_MS", "MEM_PEAK",
               session_width, "SESSION", "REASON");
}

/* The SESSION column's width for a page: its longest session, never narrower than before. */
static int session_width(const Compute__V1__ListSandboxesResponse *resp, int width)
{
        for (size_t i = 0; i < resp->n_sandboxes; i++) {
                size_t len = strlen(resp->sandboxes[i]->session_id);

                if (len > (size_t)width)
                        width = len > SESSION_WIDTH_MAX ? SESSION_WIDTH_MAX : (int)len;
        }
        return width;
}

static void print_row(const Compute__V1__SandboxSummary *s, int session_width)
{
        const Common__V1__UsageMetrics *u = s->current_usage;
        char st[CLI_FMT_MAX], created[CLI_FMT_MAX], up[CLI_FMT_MAX], cpu[32], mem[CLI_FMT_MAX];
        _cleanup_free_ char *session = fmt_printable(s->session_id);
        _cleanup_free_ char *reason = fmt_printable(s->status_reason);

        fmt_timestamp(s->created_at, created);
        /* The table shows seconds: "2026-12-02T09:35:07Z". */
        if (strlen(created) == 24) {
                created[19] = 'Z';
                created[20] = '\0';
        }
        snprintf(cpu, sizeof(cpu), "%" PRIu64, u ? u->cpu_ms : 0);
        /* One word per column ("50.1MiB"), so that the table splits on spaces. */
        fmt_bytes(u ? u->memory_peak_bytes : 0, mem);
        char *sp = strchr(mem, ' ');
        if (sp)
                memmove(sp, sp + 1, strlen(sp));
        printf(ROW_FMT, s->sandbox_id, fmt_status(s->status, st), created[0] ? created : "-",
               fmt_duration_ms(pb_duration_ms(s->current_uptime), up), cpu, mem, session_width,
               session[0] ? session : "-", reason[0] ? reason : "-");
}

static void json_row(cli_json_writer *j, const Compute__V1__SandboxSummary *s)
{
        char b[CLI_FMT_MAX];

        cli_json_object_begin(j);
        cli_json_kv_string(j, "sandbox_id", s->sandbox_id);
        cli_json_kv_string(j, "tenant_id", s->tenant_id);
        cli_json_kv_string(j, "session_id", s->session_id);
        cli_json_kv_string(j, "status", fmt_status(s->status, b));
        cli_json_kv_string(j, "status_reason", s->status_reason);
        cli_json_kv_timestamp(j, "created_at", s->created_at);
        cli_json_kv_timestamp(j, "destroyed_at", s->destroyed_at);
        cli_json_kv_i64(j, "uptime_ms", pb_duration_ms(s->current_uptime));
        cli_json_key(j, "limits");
        if (s->limits) {
                cli_json_object_begin(j);
                cli_json_kv_u64(j, "cpu_millis", s->limits->cpu_millis);
                cli_json_kv_u64(j, "memory_bytes", s->limits->memory_bytes);
                cli_json_kv_i64(j, "max_runtime_ms", pb_duration_ms(s->limits->max_runtime));
                cli_json_object_end(j);
        } else {
                cli_json_null(j);
        }
        cli_json_key(j, "network");
        cli_json_network(j, s->network);
        cli_json_key(j, "usage");
        cli_json_usage(j, s->current_usage);
        cli_json_object_end(j);
}

/* --- the command ------------------------------------------------------------------------ */

static int run_list(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        list_state s = { .cmd = cmd, .tenant = "" };
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        _cleanup_free_ char **pos = NULL;
        _cleanup_free_ char *token = cs_xstrdup("");
        uint64_t shown = 0;
        int width = (int)strlen("SESSION");
        bool truncated = false;
        size_t n = 0;
        int r;

        r = cli_parse(cmd, argc, argv, on_list_option, &s, &pos, &n);
        if (r == 1)
                cli_print_command_help(cmd, stdout);
        if (r != 0)
                return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
        if (n > 0) {
                cli_usage_error(cmd, "unexpected argument '%s'", pos[0]);
                return CLI_EXIT_USAGE;
        }
        if (!s.tenant[0]) {
                cli_usage_error(cmd, "--tenant is required");
                return CLI_EXIT_USAGE;
        }
        if (ctx->json) {
                cli_json_object_begin(&j);
                cli_json_key(&j, "sandboxes");
                cli_json_array_begin(&j);
        }
        /* Rows are printed page by page, as they come; an error after the first page leaves
         * the rows printed so far (the error says the list is incomplete). */
        do {
                Compute__V1__ListSandboxesRequest req = COMPUTE__V1__LIST_SANDBOXES_REQUEST__INIT;
                _cleanup_msg_ ProtobufCMessage *msg = NULL;
                _cleanup_error_ cs_error *err = NULL;
                const Compute__V1__ListSandboxesResponse *resp;
                uint64_t want = s.page_size;

                req.tenant_id = (char *)s.tenant;
                req.status = s.status;
                req.page_token = token;
                /* Ask for no more than --limit still needs. */
                if (s.limit && (!want || want > s.limit - shown))
                        want = s.limit - shown;
                req.page_size = (uint32_t)(want > LIST_MAX_PAGE ? LIST_MAX_PAGE : want);
                if (cli_unary(ctx, CLI_METHOD("ListSandboxes"), &req.base,
                              &compute__v1__list_sandboxes_response__descriptor, &msg, &err) < 0) {
                        if (shown)
                                cs_error_prefix(&err,
                                                "the list is incomplete (%" PRIu64
                                                " sandboxes shown)",
                                                shown);
                        return cli_fail(err);
                }
                resp = (const Compute__V1__ListSandboxesResponse *)msg;
                if (resp->n_sandboxes == 0 && resp->next_page_token[0]) {
                        cs_error e = { .code = GRPC_STATUS_INTERNAL,
                                       .msg = "the server gave an empty page with a next page "
                                              "token" };
                        return cli_fail(&e);
                }
                width = session_width(resp, width);
                if (!ctx->json && shown == 0)
                        print_header(width);
                for (size_t i = 0; i < resp->n_sandboxes; i++) {
                        if (s.limit && shown == s.limit) {
                                truncated = true;
                                break;
                        }
                        if (ctx->json)
                                json_row(&j, resp->sandboxes[i]);
                        else
                                print_row(resp->sandboxes[i], width);
                        shown++;
                }
                free(token);
                token = cs_xstrdup(resp->next_page_token);
                if (token[0] && s.limit && shown == s.limit) {
                        truncated = true;
                        break;
                }
                fflush(stdout);
        } while (token[0]);
        if (!ctx->json) {
                if (truncated)
                        printf("(truncated at --limit %" PRIu64 ")\n", s.limit);
                return CLI_EXIT_OK;
        }
        cli_json_array_end(&j);
        cli_json_kv_bool(&j, "truncated", truncated);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

const cli_command cli_cmd_list = {
        .name = "list",
        .args = "--tenant ID",
        .summary = "List a tenant's sandboxes with their status and usage.",
        .details =
                "Oldest first, DESTROYED ones included during their grace window (filter with\n"
                "--status). Text: a table of SANDBOX ID, STATUS, CREATED (UTC), UPTIME, CPU_MS,\n"
                "MEM_PEAK, SESSION and REASON ('-' when none); a last line '(truncated at\n"
                "--limit N)' when more sandboxes exist than --limit. The network policy is in\n"
                "--json only (and in describe).\n"
                "--json: {\"sandboxes\": [{\"sandbox_id\", \"tenant_id\", \"session_id\",\n"
                "\"status\", \"status_reason\", \"created_at\", \"destroyed_at\", \"uptime_ms\",\n"
                "\"limits\": {\"cpu_millis\", \"memory_bytes\", \"max_runtime_ms\"} or null,\n"
                "\"network\": {\"egress\", \"allow_domains\", \"allow_cidrs\"}, \"usage\":\n"
                "{\"cpu_ms\", ...}}], \"truncated\"}.\n",
        .options = list_options,
        .n_options = ARRAY_SIZE(list_options),
        .run = run_list,
};
