/* The scheduler seam's own helpers: the request context (fe_ctx), the view and the route
 * that every backend fills in. Owns nothing; touches only what it is handed (and logs). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "util.h"

fe_ctx fe_ctx_from_call(rpc_call *call)
{
        return (fe_ctx){ .deadline_ms = rpc_call_deadline_ms(call),
                         .cancel_fd = rpc_call_cancel_fd(call),
                         .parent = call };
}

bool fe_ctx_cancelled(const fe_ctx *ctx)
{
        struct pollfd p = { .fd = ctx->cancel_fd, .events = POLLIN };

        return ctx->cancel_fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

grpc_status_code fe_ctx_cancel_status(const fe_ctx *ctx)
{
        return cs_now_monotonic_ms() >= ctx->deadline_ms ? GRPC_STATUS_DEADLINE_EXCEEDED
                                                         : GRPC_STATUS_CANCELLED;
}

void fe_ctx_sleep(const fe_ctx *ctx, int64_t ms)
{
        struct pollfd p = { .fd = ctx->cancel_fd, .events = POLLIN };

        if (ms > 0)
                poll(&p, 1, (int)(ms > INT32_MAX ? INT32_MAX : ms));
}

void fe_ctx_log(const fe_ctx *ctx, cs_log_level level, const char *fmt, ...)
{
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        if (!cs_log_enabled(level))
                return;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        if (!msg)
                return;
        if (ctx->parent)
                rpc_call_log(ctx->parent, level, "%s", msg);
        else
                cs_log(level, NULL, NULL, "%s", msg);
}

void fe_view_clear(fe_view *v)
{
        free(v->id);
        free(v->reason);
        free(v->tenant_id);
        free(v->session_id);
        cs_netpolicy_clear(&v->network);
        memset(v, 0, sizeof(*v));
}

fe_view *fe_view_list_add(fe_view_list *l)
{
        l->v = cs_xgrow(l->v, l->n, &l->cap, sizeof(*l->v));
        memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
        return &l->v[l->n++];
}

void fe_view_list_clear(fe_view_list *l)
{
        for (size_t i = 0; i < l->n; i++)
                fe_view_clear(&l->v[i]);
        free(l->v);
        memset(l, 0, sizeof(*l));
}

void fe_hold_give(fe_hold *h)
{
        if (!h || !h->share)
                return;
        cs_share_give(h->share, h->key);
        h->share = NULL;
}

void fe_route_release(fe_route *route)
{
        if (!route)
                return;
        fe_hold_give(&route->hold);
        if (!route->release)
                return;
        route->release(route->release_arg);
        route->release = NULL;
        route->release_arg = NULL;
}

bool scheduler_serving(scheduler *s)
{
        return !s->ops->serving || s->ops->serving(s);
}

void scheduler_metrics(scheduler *s, struct cs_mpage *page)
{
        if (s->ops->metrics)
                s->ops->metrics(s, page);
}
