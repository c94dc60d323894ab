/* The frontend's request logic (see service_core.h): checks, then the scheduler. Owns
 * nothing; touches only the scheduler it is given and the log (through the fe_ctx). */
#include "service_core.h"

#include <stdio.h>
#include <string.h>

#include "quantity.h"
#include "sandbox_limits.h"
#include "uuid.h"

/* A sandbox id is a UUID; it then names the call in every log line. */
static int check_sandbox_id(const fe_ctx *ctx, const char *id, cs_error **err)
{
        if (!cs_uuid_valid(id))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "sandbox_id is not a valid UUID");
        if (ctx->parent)
                rpc_call_set_sandbox_id(ctx->parent, id);
        return 0;
}

/* The tenant the call is about, for its access-log line (rpc.h): the one a request names
 * (as claimed, even when the checks refuse it: the logger escapes and bounds it) or the one
 * that owns the sandbox it names. */
static void log_tenant(const fe_ctx *ctx, const char *tenant)
{
        if (ctx->parent && tenant && tenant[0])
                rpc_call_add_log_field(ctx->parent, CS_LOG_STR("tenant", tenant));
}

static int check_id(const char *name, const char *v, cs_error **err)
{
        size_t len = strlen(v);

        if (len == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s is empty", name);
        if (len > CS_ID_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s is longer than %d bytes",
                                    name, CS_ID_MAX);
        for (const char *p = v; *p; p++) {
                if (*p < 0x21 || *p > 0x7e)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s must be printable ASCII without spaces", name);
        }
        return 0;
}

/* NetworkSpec: the checks of cs_netpolicy_parse (INVALID_ARGUMENT naming the entry). */
static int check_network(const fe_spec *spec, cs_error **err)
{
        cs_netpolicy p;

        if (cs_netpolicy_parse(spec->egress, spec->allow_domains, spec->n_allow_domains,
                               spec->allow_cidrs, spec->n_allow_cidrs, &p, err) < 0)
                return -1;
        cs_netpolicy_clear(&p);
        return 0;
}

/* WorkspaceSpec.size, when set: a quantity within the bounds of sandbox_limits.h. */
static int check_workspace_size(const char *size, cs_error **err)
{
        uint64_t bytes;

        if (!size || !size[0])
                return 0;
        if (cs_quantity_parse(size, &bytes) < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace size '%.40s' is not a quantity like 10Gi", size);
        if (bytes < CS_MIN_WORKSPACE_BYTES || bytes > CS_MAX_WORKSPACE_BYTES)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace size '%.40s' must be 16Mi..1Ti", size);
        return 0;
}

static int check_path(const char *path, bool allow_empty, cs_error **err)
{
        if (!allow_empty && !path[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "path is empty");
        return 0;
}

/* Takes one unit of the tenant's share into *ret (nothing when there is no share or no
 * tenant). RESOURCE_EXHAUSTED when the tenant has its share of calls in flight already. The
 * message does not name the tenant: a caller naming another tenant's sandbox learns no id. */
static int tenant_take(const frontend_service *svc, const char *tenant, fe_hold *ret,
                       cs_error **err)
{
        memset(ret, 0, sizeof(*ret));
        if (!svc->tenant_share || !tenant || !tenant[0])
                return 0;
        switch (cs_share_try(svc->tenant_share, tenant)) {
        case CS_SHARE_TAKEN:
                ret->share = svc->tenant_share;
                snprintf(ret->key, sizeof(ret->key), "%s", tenant);
                return 0;
        case CS_SHARE_USED_UP:
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "tenant share used up: the tenant has %u calls in flight "
                                    "already (--max-calls-per-tenant)",
                                    cs_share_limit(svc->tenant_share));
        case CS_SHARE_TABLE_FULL:
        default:
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "tenant share: %d tenants have calls in flight already",
                                    FE_MAX_TENANTS);
        }
}

/* The same for the tenant that owns sandbox id, when the scheduler knows it (then also
 * named in the call's access log). */
static int sandbox_tenant_take(const frontend_service *svc, const char *id, const fe_ctx *ctx,
                               fe_hold *ret, cs_error **err)
{
        char tenant[CS_ID_MAX + 1] = "";

        memset(ret, 0, sizeof(*ret));
        if (!svc->sched->ops->tenant_of || !svc->sched->ops->tenant_of(svc->sched, id, tenant))
                return 0;
        log_tenant(ctx, tenant);
        return tenant_take(svc, tenant, ret, err);
}

/* After a describe or destroy: the owner as the scheduler's view has it (a sandbox its map
 * or cache did not know before the call). */
static int view_tenant(const fe_ctx *ctx, int r, const fe_view *v)
{
        if (r == 0)
                log_tenant(ctx, v->tenant_id);
        return r;
}

/* The route op, holding the tenant's unit from before it (a route may wait for a STARTING
 * sandbox) until the route is released. */
static int route_held(const frontend_service *svc, const char *id, const fe_ctx *ctx, fe_route *ret,
                      cs_error **err)
{
        fe_hold hold;

        if (sandbox_tenant_take(svc, id, ctx, &hold, err) < 0)
                return -1;
        if (svc->sched->ops->route(svc->sched, id, ctx, ret, err) < 0) {
                fe_hold_give(&hold);
                return -1;
        }
        ret->hold = hold;
        return 0;
}

int fe_service_create(const frontend_service *svc, const fe_spec *spec, const fe_ctx *ctx,
                      fe_view *ret, cs_error **err)
{
        fe_spec s = *spec;
        fe_hold hold;
        int r;

        log_tenant(ctx, spec->tenant_id);
        if (ctx->parent && spec->session_id && spec->session_id[0])
                rpc_call_add_log_field(ctx->parent, CS_LOG_STR("session", spec->session_id));
        if (check_id("tenant_id", spec->tenant_id, err) < 0 ||
            check_id("session_id", spec->session_id, err) < 0 ||
            check_workspace_size(spec->size, err) < 0 || check_network(spec, err) < 0)
                return -1;
        if (spec->max_runtime_ms < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "limits.max_runtime is negative");
        if (!s.image || !s.image[0])
                s.image = svc->default_image;
        if (tenant_take(svc, spec->tenant_id, &hold, err) < 0)
                return -1;
        r = svc->sched->ops->create(svc->sched, &s, ctx, ret, err);
        fe_hold_give(&hold);
        return r;
}

int fe_service_describe(const frontend_service *svc, const char *id, const fe_ctx *ctx,
                        fe_view *ret, cs_error **err)
{
        fe_hold hold;
        int r;

        if (check_sandbox_id(ctx, id, err) < 0 || sandbox_tenant_take(svc, id, ctx, &hold, err) < 0)
                return -1;
        r = svc->sched->ops->describe(svc->sched, id, ctx, ret, err);
        fe_hold_give(&hold);
        return view_tenant(ctx, r, ret);
}

int fe_service_destroy(const frontend_service *svc, const char *id, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err)
{
        fe_hold hold;
        int r;

        if (check_sandbox_id(ctx, id, err) < 0 || sandbox_tenant_take(svc, id, ctx, &hold, err) < 0)
                return -1;
        r = svc->sched->ops->destroy(svc->sched, id, ctx, ret, err);
        fe_hold_give(&hold);
        return view_tenant(ctx, r, ret);
}

int fe_service_list(const frontend_service *svc, const char *tenant_id, fe_status status,
                    uint32_t page_size, const char *page_token, const fe_ctx *ctx,
                    fe_view_list *ret, char next_token[static FE_LIST_TOKEN_MAX + 1],
                    cs_error **err)
{
        char after_id[CS_UUID_STRLEN + 1];
        fe_list_query q = { .tenant_id = tenant_id,
                            .status = status,
                            .after_id = after_id,
                            .limit = fe_list_page_size(page_size) };
        fe_hold hold;
        int r;

        memset(ret, 0, sizeof(*ret));
        next_token[0] = '\0';
        log_tenant(ctx, tenant_id);
        if (check_id("tenant_id", tenant_id, err) < 0)
                return -1;
        if ((unsigned)status > FE_STATUS_DESTROYED)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "status %d is not a SandboxStatus", (int)status);
        if (fe_list_token_decode(page_token, tenant_id, status, &q.after_created_ms, after_id,
                                 err) < 0)
                return -1;
        if (!svc->sched->ops->list)
                return cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED,
                                    "the %s scheduler cannot list sandboxes",
                                    svc->sched->ops->name);
        if (tenant_take(svc, tenant_id, &hold, err) < 0)
                return -1;
        r = svc->sched->ops->list(svc->sched, &q, ctx, ret, err);
        fe_hold_give(&hold);
        if (r < 0) {
                fe_view_list_clear(ret);
                return -1;
        }
        if (ret->more && ret->n > 0)
                fe_list_token_encode(tenant_id, status, ret->v[ret->n - 1].created_at_ms,
                                     ret->v[ret->n - 1].id, next_token);
        return 0;
}

int64_t fe_view_uptime_ms(const fe_view *v, int64_t now_ms)
{
        /* A destroyed sandbox's uptime stops at its destruction. */
        int64_t end = v->destroyed_at_ms ? v->destroyed_at_ms : now_ms;

        return end > v->created_at_ms ? end - v->created_at_ms : 0;
}

int fe_service_exec_route(const frontend_service *svc, const char *id, const char *command,
                          int64_t timeout_ms, const fe_ctx *ctx, fe_route *ret, cs_error **err)
{
        if (check_sandbox_id(ctx, id, err) < 0)
                return -1;
        if (!command[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "command is empty");
        if (timeout_ms < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "timeout is negative");
        return route_held(svc, id, ctx, ret, err);
}

/* Checks the id and path, and finds the sandbox's agent. */
static int file_route(const frontend_service *svc, const char *id, const char *path,
                      bool allow_empty, const fe_ctx *ctx, fe_route *ret, cs_error **err)
{
        if (check_sandbox_id(ctx, id, err) < 0 || check_path(path, allow_empty, err) < 0)
                return -1;
        return route_held(svc, id, ctx, ret, err);
}

int fe_service_read_route(const frontend_service *svc, const char *id, const char *path,
                          int64_t offset, int64_t max_bytes, const fe_ctx *ctx, fe_route *ret,
                          cs_error **err)
{
        if (offset < 0 || max_bytes < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "offset and max_bytes must not be negative");
        return file_route(svc, id, path, false, ctx, ret, err);
}

int fe_service_write_route(const frontend_service *svc, const char *id, const char *path,
                           size_t data_len, const fe_ctx *ctx, fe_route *ret, cs_error **err)
{
        if (data_len > RPC_DATA_MAX_BYTES)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "data of %zu bytes is over the %d-byte cap per call; write "
                                    "in chunks with append",
                                    data_len, RPC_DATA_MAX_BYTES);
        return file_route(svc, id, path, false, ctx, ret, err);
}

int fe_service_list_route(const frontend_service *svc, const char *id, const char *path,
                          const fe_ctx *ctx, fe_route *ret, cs_error **err)
{
        /* An empty path lists the workspace root. */
        return file_route(svc, id, path, true, ctx, ret, err);
}
