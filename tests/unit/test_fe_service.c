/* Unit tests for frontend/service_core.c and the scheduler seam's helpers (scheduler.c):
 * the frontend's request logic against a fake scheduler behind the scheduler_ops table, with
 * no gRPC call, no node agent and no API server. The fake keeps one sandbox per session, as
 * both real schedulers do, answers NOT_FOUND for ids it never made, and can be told to fail
 * the next op with a given error. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sandbox_limits.h"
#include "scheduler.h"
#include "service_core.h"
#include "util.h"
#include "uuid.h"

/* ---- the fake scheduler ---- */

#define FAKE_MAX 8

typedef struct fake_sandbox {
        char id[CS_UUID_STRLEN + 1];
        char tenant[CS_ID_MAX + 1], session[CS_ID_MAX + 1];
        fe_status status;
        int64_t created_at_ms, destroyed_at_ms;
} fake_sandbox;

typedef struct fake {
        scheduler s;
        fake_sandbox sb[FAKE_MAX];
        int n;
        int calls;              /* ops called, any */
        const fe_ctx *last_ctx; /* the context the last op was given */
        char last_image[64];
        fe_spec last_spec;
        /* the next op fails with this (0: it does not) */
        grpc_status_code fail_code;
        const char *fail_msg;
        int released; /* routes released */
} fake;

static fake_sandbox *fake_find(fake *f, const char *id)
{
        for (int i = 0; i < f->n; i++) {
                if (strcmp(f->sb[i].id, id) == 0)
                        return &f->sb[i];
        }
        return NULL;
}

static int fake_enter(fake *f, const fe_ctx *ctx, cs_error **err)
{
        grpc_status_code code = f->fail_code;

        f->calls++;
        f->last_ctx = ctx;
        f->fail_code = 0;
        if (code)
                return cs_error_set(err, code, "%s", f->fail_msg);
        return 0;
}

static void fake_view(const fake_sandbox *sb, fe_view *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(sb->id);
        ret->status = sb->status;
        ret->created_at_ms = sb->created_at_ms;
        ret->destroyed_at_ms = sb->destroyed_at_ms;
        ret->usage.cpu_ms = 7;
}

static int fake_create(scheduler *s, const fe_spec *spec, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err)
{
        fake *f = (fake *)s;
        fake_sandbox *sb;

        if (fake_enter(f, ctx, err) < 0)
                return -1;
        f->last_spec = *spec;
        snprintf(f->last_image, sizeof(f->last_image), "%s", spec->image ? spec->image : "(null)");
        for (int i = 0; i < f->n; i++) {
                sb = &f->sb[i];
                if (sb->status != FE_STATUS_DESTROYED && strcmp(sb->tenant, spec->tenant_id) == 0 &&
                    strcmp(sb->session, spec->session_id) == 0) {
                        fake_view(sb, ret);
                        return 0;
                }
        }
        assert_true(f->n < FAKE_MAX);
        sb = &f->sb[f->n++];
        cs_uuid_generate(sb->id);
        snprintf(sb->tenant, sizeof(sb->tenant), "%s", spec->tenant_id);
        snprintf(sb->session, sizeof(sb->session), "%s", spec->session_id);
        sb->status = FE_STATUS_STARTING;
        sb->created_at_ms = 1000;
        fake_view(sb, ret);
        return 0;
}

/* The op's common start: the injected failure, else the sandbox id names (NOT_FOUND for an
 * id this fake never made). */
static fake_sandbox *fake_lookup(fake *f, const fe_ctx *ctx, const char *id, cs_error **err)
{
        fake_sandbox *sb;

        if (fake_enter(f, ctx, err) < 0)
                return NULL;
        sb = fake_find(f, id);
        if (!sb)
                cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        return sb;
}

static int fake_describe(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                         cs_error **err)
{
        fake_sandbox *sb = fake_lookup((fake *)s, ctx, id, err);

        if (!sb)
                return -1;
        fake_view(sb, ret);
        return 0;
}

static int fake_destroy(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                        cs_error **err)
{
        fake_sandbox *sb = fake_lookup((fake *)s, ctx, id, err);

        if (!sb)
                return -1;
        if (sb->status != FE_STATUS_DESTROYED) {
                sb->status = FE_STATUS_DESTROYED;
                sb->destroyed_at_ms = 5000;
        }
        fake_view(sb, ret);
        return 0;
}

static void fake_release(void *arg)
{
        ((fake *)arg)->released++;
}

static int fake_route(scheduler *s, const char *id, const fe_ctx *ctx, fe_route *ret,
                      cs_error **err)
{
        fake *f = (fake *)s;

        if (!fake_lookup(f, ctx, id, err))
                return -1;
        memset(ret, 0, sizeof(*ret));
        snprintf(ret->sandbox_id, sizeof(ret->sandbox_id), "%s", id);
        ret->release = fake_release;
        ret->release_arg = f;
        return 0;
}

/* The listing as both real schedulers make it: the tenant's and status's candidates, then
 * listing.c's order and page. */
static int fake_list(scheduler *s, const fe_list_query *q, const fe_ctx *ctx, fe_view_list *ret,
                     cs_error **err)
{
        fake *f = (fake *)s;

        if (fake_enter(f, ctx, err) < 0)
                return -1;
        for (int i = 0; i < f->n; i++) {
                if (strcmp(f->sb[i].tenant, q->tenant_id) != 0 ||
                    (q->status && f->sb[i].status != q->status))
                        continue;
                fake_view(&f->sb[i], fe_view_list_add(ret));
        }
        fe_list_select(ret, q);
        return 0;
}

static bool fake_tenant_of(scheduler *s, const char *id, char ret[static CS_ID_MAX + 1])
{
        fake_sandbox *sb = fake_find((fake *)s, id);

        if (sb)
                snprintf(ret, CS_ID_MAX + 1, "%s", sb->tenant);
        return sb != NULL;
}

static void fake_free(scheduler *s)
{
        (void)s;
}

static const scheduler_ops fake_ops = {
        .name = "fake",
        .create = fake_create,
        .describe = fake_describe,
        .destroy = fake_destroy,
        .route = fake_route,
        .list = fake_list,
        .tenant_of = fake_tenant_of,
        .free = fake_free,
};

/* ---- fixtures ---- */

typedef struct world {
        fake f;
        frontend_service svc;
        fe_ctx ctx;
} world;

static int setup(void **state)
{
        world *w = calloc(1, sizeof(*w));

        w->f.s.ops = &fake_ops;
        w->svc = (frontend_service){ .sched = &w->f.s, .default_image = "img:default" };
        w->ctx = FE_CTX_NONE;
        *state = w;
        return 0;
}

static int teardown(void **state)
{
        free(*state);
        return 0;
}

static fe_spec spec_of(const char *tenant, const char *session)
{
        return (fe_spec){ .tenant_id = tenant, .session_id = session, .image = "" };
}

/* Asserts err is code with exactly msg, and frees it. */
static void assert_error(cs_error **err, grpc_status_code code, const char *msg)
{
        assert_non_null(*err);
        assert_int_equal((*err)->code, code);
        assert_string_equal((*err)->msg, msg);
        cs_error_free(*err);
        *err = NULL;
}

/* A create whose spec must be refused before the scheduler is asked. */
static void assert_create_refused(world *w, const fe_spec *spec, const char *msg)
{
        cs_error *err = NULL;
        fe_view v = { 0 };
        int calls = w->f.calls;

        assert_int_equal(fe_service_create(&w->svc, spec, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, msg);
        assert_null(v.id);
        assert_int_equal(w->f.calls, calls);
}

/* ---- create ---- */

static void test_create_checks_ids(void **state)
{
        world *w = *state;
        char id129[CS_ID_MAX + 2], id128[CS_ID_MAX + 1];
        fe_spec s;

        memset(id129, 'a', CS_ID_MAX + 1);
        id129[CS_ID_MAX + 1] = '\0';
        memset(id128, 'b', CS_ID_MAX);
        id128[CS_ID_MAX] = '\0';

        s = spec_of("", "s");
        assert_create_refused(w, &s, "tenant_id is empty");
        s = spec_of("t", "");
        assert_create_refused(w, &s, "session_id is empty");
        s = spec_of(id129, "s");
        assert_create_refused(w, &s, "tenant_id is longer than 128 bytes");
        s = spec_of("t", id129);
        assert_create_refused(w, &s, "session_id is longer than 128 bytes");
        s = spec_of("a tenant", "s");
        assert_create_refused(w, &s, "tenant_id must be printable ASCII without spaces");
        s = spec_of("t", "tab\there");
        assert_create_refused(w, &s, "session_id must be printable ASCII without spaces");
        s = spec_of("t", "caf\xc3\xa9");
        assert_create_refused(w, &s, "session_id must be printable ASCII without spaces");
        s = spec_of("t", "del\x7f");
        assert_create_refused(w, &s, "session_id must be printable ASCII without spaces");
        /* The tenant is checked before the session. */
        s = spec_of("", "");
        assert_create_refused(w, &s, "tenant_id is empty");

        /* The bounds themselves are accepted, with every printable character. */
        {
                cs_error *err = NULL;
                fe_view v = { 0 };
                s = spec_of(id128, "!~/a:b@c");
                assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
                assert_null(err);
                assert_true(cs_uuid_valid(v.id));
                fe_view_clear(&v);
                assert_null(v.id);
        }
}

static void test_create_checks_max_runtime(void **state)
{
        world *w = *state;
        fe_spec s = spec_of("t", "s");
        cs_error *err = NULL;
        fe_view v = { 0 };

        s.max_runtime_ms = -1;
        assert_create_refused(w, &s, "limits.max_runtime is negative");
        /* 0 is "unset": the scheduler fills in the default. */
        s.max_runtime_ms = 0;
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_int_equal(w->f.last_spec.max_runtime_ms, 0);
        fe_view_clear(&v);
}

/* WorkspaceSpec.size: a quantity within 16Mi..1Ti, or empty for the default; the attack pass
 * saw "garbage" accepted. */
static void test_create_checks_workspace_size(void **state)
{
        world *w = *state;
        fe_spec s = spec_of("t", "s");
        cs_error *err = NULL;
        fe_view v = { 0 };

        s.size = "garbage";
        assert_create_refused(w, &s, "workspace size 'garbage' is not a quantity like 10Gi");
        s.size = "-1Gi";
        assert_create_refused(w, &s, "workspace size '-1Gi' is not a quantity like 10Gi");
        s.size = "15Mi";
        assert_create_refused(w, &s, "workspace size '15Mi' must be 16Mi..1Ti");
        s.size = "1025Gi";
        assert_create_refused(w, &s, "workspace size '1025Gi' must be 16Mi..1Ti");
        s.size = "100Mi";
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_string_equal(w->f.last_spec.size, "100Mi");
        fe_view_clear(&v);
}

/* NetworkSpec: cs_netpolicy_parse's checks before the scheduler (test_netpolicy.c has them
 * all); a good one reaches the scheduler as given, for the agent to check again. */
static void test_create_checks_network(void **state)
{
        world *w = *state;
        const char *domains[] = { "pypi.org", "*.*.x" }, *cidrs[] = { "10.0.0.1/8" };
        fe_spec s = spec_of("t", "s");
        cs_error *err = NULL;
        fe_view v = { 0 };

        s.egress = CS_EGRESS_ALLOWLIST;
        s.allow_domains = domains;
        s.n_allow_domains = 2;
        assert_create_refused(w, &s,
                              "network.allow_domains[1] '*.*.x': '*' only as a whole leading "
                              "label (\"*.example.com\")");
        s.n_allow_domains = 0;
        s.allow_cidrs = cidrs;
        s.n_allow_cidrs = 1;
        assert_create_refused(w, &s,
                              "network.allow_cidrs[0] '10.0.0.1/8': host bits set (the network "
                              "is 10.0.0.0/8)");
        s.egress = CS_EGRESS_OPEN;
        cidrs[0] = "10.0.0.0/8";
        assert_create_refused(w, &s,
                              "network.allow_cidrs[0] '10.0.0.0/8': lists apply only to egress "
                              "allowlist (egress is open)");
        s.egress = CS_EGRESS_ALLOWLIST;
        s.n_allow_domains = 1;
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_int_equal(w->f.last_spec.egress, CS_EGRESS_ALLOWLIST);
        assert_int_equal(w->f.last_spec.n_allow_domains, 1);
        assert_ptr_equal(w->f.last_spec.allow_cidrs, cidrs);
        fe_view_clear(&v);
}

static void test_create_passes_spec_and_default_image(void **state)
{
        world *w = *state;
        fe_spec s = { .tenant_id = "t",
                      .session_id = "s1",
                      .image = "",
                      .storage_class = "fast",
                      .size = "5Gi",
                      .mount_path = "/data",
                      .cpu_millis = 250,
                      .memory_bytes = 128ull << 20,
                      .max_runtime_ms = 60000 };
        cs_error *err = NULL;
        fe_view v = { 0 };

        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_string_equal(w->f.last_image, "img:default");
        assert_string_equal(w->f.last_spec.storage_class, "fast");
        assert_string_equal(w->f.last_spec.size, "5Gi");
        assert_string_equal(w->f.last_spec.mount_path, "/data");
        assert_int_equal(w->f.last_spec.cpu_millis, 250);
        assert_int_equal(w->f.last_spec.memory_bytes, 128ull << 20);
        assert_int_equal(w->f.last_spec.max_runtime_ms, 60000);
        assert_ptr_equal(w->f.last_ctx, &w->ctx);
        assert_int_equal(v.status, FE_STATUS_STARTING);
        fe_view_clear(&v);

        /* An image the request names is kept; the caller's spec is not changed. */
        s.session_id = "s2";
        s.image = "busybox:stable";
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_string_equal(w->f.last_image, "busybox:stable");
        fe_view_clear(&v);
        s.image = "";
        s.session_id = "s3";
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        assert_string_equal(s.image, "");
        fe_view_clear(&v);
}

static void test_create_is_idempotent_per_session(void **state)
{
        world *w = *state;
        fe_spec a = spec_of("t", "s"), b = spec_of("t", "other");
        cs_error *err = NULL;
        fe_view v1 = { 0 }, v2 = { 0 }, v3 = { 0 }, d = { 0 }, v4 = { 0 };

        assert_int_equal(fe_service_create(&w->svc, &a, &w->ctx, &v1, &err), 0);
        assert_int_equal(fe_service_create(&w->svc, &a, &w->ctx, &v2, &err), 0);
        assert_string_equal(v1.id, v2.id);
        assert_int_equal(fe_service_create(&w->svc, &b, &w->ctx, &v3, &err), 0);
        assert_string_not_equal(v1.id, v3.id);
        /* Once destroyed, the session gets a new sandbox. */
        assert_int_equal(fe_service_destroy(&w->svc, v1.id, &w->ctx, &d, &err), 0);
        assert_int_equal(fe_service_create(&w->svc, &a, &w->ctx, &v4, &err), 0);
        assert_string_not_equal(v4.id, v1.id);
        assert_null(err);
        fe_view_clear(&v1);
        fe_view_clear(&v2);
        fe_view_clear(&v3);
        fe_view_clear(&d);
        fe_view_clear(&v4);
}

static void test_scheduler_errors_pass_through(void **state)
{
        world *w = *state;
        fe_spec s = spec_of("t", "s");
        cs_error *err = NULL;
        fe_view v = { 0 };
        fe_route r;
        char id[CS_UUID_STRLEN + 1];

        w->f.fail_code = GRPC_STATUS_UNAVAILABLE;
        w->f.fail_msg = "no node agent is reachable";
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_UNAVAILABLE, "no node agent is reachable");
        assert_null(v.id);

        cs_uuid_generate(id);
        w->f.fail_code = GRPC_STATUS_INTERNAL;
        w->f.fail_msg = "pod x: rejected as invalid: y";
        assert_int_equal(fe_service_describe(&w->svc, id, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_INTERNAL, "pod x: rejected as invalid: y");

        w->f.fail_code = GRPC_STATUS_DEADLINE_EXCEEDED;
        w->f.fail_msg = "sandbox still STARTING after 800 ms";
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_DEADLINE_EXCEEDED, "sandbox still STARTING after 800 ms");

        w->f.fail_code = GRPC_STATUS_FAILED_PRECONDITION;
        w->f.fail_msg = "sandbox is DESTROYED";
        assert_int_equal(fe_service_destroy(&w->svc, id, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_FAILED_PRECONDITION, "sandbox is DESTROYED");
}

/* ---- describe, destroy ---- */

static void test_describe_destroy_check_the_id(void **state)
{
        world *w = *state;
        const char *bad[] = { "", "nope", "123e4567-e89b-12d3-a456-42661417400",
                              "123e4567-e89b-12d3-a456-4266141740000",
                              "123e4567e89b-12d3-a456-4266141740000" };
        cs_error *err = NULL;
        fe_view v = { 0 };
        fe_route r;

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                assert_int_equal(fe_service_describe(&w->svc, bad[i], &w->ctx, &v, &err), -1);
                assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
                assert_int_equal(fe_service_destroy(&w->svc, bad[i], &w->ctx, &v, &err), -1);
                assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
                assert_int_equal(
                        fe_service_exec_route(&w->svc, bad[i], "true", 0, &w->ctx, &r, &err), -1);
                assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
        }
        assert_int_equal(w->f.calls, 0);
}

static void test_unknown_ids_are_not_found(void **state)
{
        world *w = *state;
        char id[CS_UUID_STRLEN + 1], msg[128];
        cs_error *err = NULL;
        fe_view v = { 0 };
        fe_route r;

        cs_uuid_generate(id);
        snprintf(msg, sizeof(msg), "no sandbox %s", id);
        assert_int_equal(fe_service_describe(&w->svc, id, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_NOT_FOUND, msg);
        assert_int_equal(fe_service_destroy(&w->svc, id, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_NOT_FOUND, msg);
        assert_int_equal(fe_service_read_route(&w->svc, id, "f", 0, 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_NOT_FOUND, msg);
        assert_null(v.id);
        assert_int_equal(w->f.calls, 3);
}

static void test_destroy_then_describe(void **state)
{
        world *w = *state;
        fe_spec s = spec_of("t", "s");
        cs_error *err = NULL;
        fe_view c = { 0 }, d = { 0 }, again = { 0 }, desc = { 0 };

        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &c, &err), 0);
        assert_int_equal(fe_service_destroy(&w->svc, c.id, &w->ctx, &d, &err), 0);
        assert_string_equal(d.id, c.id);
        assert_int_equal(d.status, FE_STATUS_DESTROYED);
        assert_int_equal(d.usage.cpu_ms, 7);
        /* Destroying again answers the same record. */
        assert_int_equal(fe_service_destroy(&w->svc, c.id, &w->ctx, &again, &err), 0);
        assert_int_equal(again.destroyed_at_ms, d.destroyed_at_ms);
        assert_int_equal(fe_service_describe(&w->svc, c.id, &w->ctx, &desc, &err), 0);
        assert_int_equal(desc.status, FE_STATUS_DESTROYED);
        /* Its uptime stops at the destruction, whatever the clock says now. */
        assert_int_equal(fe_view_uptime_ms(&desc, 1000000), 4000);
        fe_view_clear(&c);
        fe_view_clear(&d);
        fe_view_clear(&again);
        fe_view_clear(&desc);
}

static void test_uptime(void **state)
{
        fe_view live = { .created_at_ms = 1000 },
                dead = { .created_at_ms = 1000, .destroyed_at_ms = 1500 };

        (void)state;
        assert_int_equal(fe_view_uptime_ms(&live, 3500), 2500);
        assert_int_equal(fe_view_uptime_ms(&live, 999), 0); /* a clock that went back */
        assert_int_equal(fe_view_uptime_ms(&dead, 9999), 500);
}

/* ---- exec and file routes ---- */

static const char *make_sandbox(world *w, const char *session)
{
        static char id[CS_UUID_STRLEN + 1];
        fe_spec s = spec_of("t", session);
        cs_error *err = NULL;
        fe_view v = { 0 };

        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        snprintf(id, sizeof(id), "%s", v.id);
        fe_view_clear(&v);
        return id;
}

static void test_exec_checks_then_routes(void **state)
{
        world *w = *state;
        const char *id = make_sandbox(w, "s");
        cs_error *err = NULL;
        fe_route r;
        int calls = w->f.calls;

        assert_int_equal(fe_service_exec_route(&w->svc, id, "", 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "command is empty");
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", -1, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "timeout is negative");
        /* The id first, then the command. */
        assert_int_equal(fe_service_exec_route(&w->svc, "x", "", 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
        assert_int_equal(w->f.calls, calls);

        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r, &err), 0);
        assert_string_equal(r.sandbox_id, id);
        assert_ptr_equal(w->f.last_ctx, &w->ctx);
        /* The route's release runs once, however often it is called. */
        fe_route_release(&r);
        fe_route_release(&r);
        fe_route_release(NULL);
        assert_int_equal(w->f.released, 1);
}

static void test_file_checks(void **state)
{
        world *w = *state;
        const char *id = make_sandbox(w, "s");
        cs_error *err = NULL;
        fe_route r;
        int calls = w->f.calls;

        /* ReadFile: the numbers before the id and path. */
        assert_int_equal(fe_service_read_route(&w->svc, "x", "", -1, 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "offset and max_bytes must not be negative");
        assert_int_equal(fe_service_read_route(&w->svc, id, "f", 0, -5, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "offset and max_bytes must not be negative");
        assert_int_equal(fe_service_read_route(&w->svc, id, "", 0, 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "path is empty");

        /* WriteFile: the size cap before anything else. */
        assert_int_equal(
                fe_service_write_route(&w->svc, "x", "", RPC_DATA_MAX_BYTES + 1, &w->ctx, &r, &err),
                -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                     "data of 16777217 bytes is over the 16777216-byte cap per call; write in "
                     "chunks with append");
        assert_int_equal(fe_service_write_route(&w->svc, id, "", 1, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "path is empty");
        assert_int_equal(w->f.calls, calls);

        assert_int_equal(
                fe_service_write_route(&w->svc, id, "f", RPC_DATA_MAX_BYTES, &w->ctx, &r, &err), 0);
        fe_route_release(&r);
        assert_int_equal(fe_service_read_route(&w->svc, id, "f", 0, 0, &w->ctx, &r, &err), 0);
        fe_route_release(&r);
        /* ListFiles: an empty path is the workspace root. */
        assert_int_equal(fe_service_list_route(&w->svc, id, "", &w->ctx, &r, &err), 0);
        assert_string_equal(r.sandbox_id, id);
        fe_route_release(&r);
        assert_int_equal(fe_service_list_route(&w->svc, "x", "", &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
        assert_int_equal(w->f.released, 3);
}

/* ---- the tenant share ---- */

#define TENANT_FULL                                                                                \
        "tenant share used up: the tenant has 2 calls in flight already (--max-calls-per-tenant)"

static const char *make_sandbox_of(world *w, const char *tenant, const char *session,
                                   char id[static CS_UUID_STRLEN + 1])
{
        fe_spec s = spec_of(tenant, session);
        cs_error *err = NULL;
        fe_view v = { 0 };

        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        snprintf(id, CS_UUID_STRLEN + 1, "%s", v.id);
        fe_view_clear(&v);
        return id;
}

/* A tenant holding its share in open routes (exec streams, file calls) is refused every
 * further call, before the scheduler is asked; another tenant is not. Releasing a route gives
 * its unit back; the unary calls give theirs back before they return. */
static void test_tenant_share_refuses_greedy_tenant_only(void **state)
{
        world *w = *state;
        char greedy[CS_UUID_STRLEN + 1], greedy2[CS_UUID_STRLEN + 1], other[CS_UUID_STRLEN + 1];
        fe_spec s = spec_of("greedy", "s3");
        cs_error *err = NULL;
        fe_route r1, r2, r3;
        fe_view v = { 0 };
        int calls;

        w->svc.tenant_share = cs_share_new(2, 8);
        make_sandbox_of(w, "greedy", "s1", greedy);
        make_sandbox_of(w, "greedy", "s2", greedy2);
        make_sandbox_of(w, "other", "s1", other);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "greedy"), 0);

        /* Two streams, on two of its sandboxes: the share counts the tenant, not the sandbox. */
        assert_int_equal(fe_service_exec_route(&w->svc, greedy, "sleep", 0, &w->ctx, &r1, &err), 0);
        assert_int_equal(fe_service_list_route(&w->svc, greedy2, "", &w->ctx, &r2, &err), 0);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "greedy"), 2);

        calls = w->f.calls;
        assert_int_equal(fe_service_exec_route(&w->svc, greedy, "sleep", 0, &w->ctx, &r3, &err),
                         -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_int_equal(fe_service_describe(&w->svc, greedy2, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_int_equal(fe_service_destroy(&w->svc, greedy, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_int_equal(fe_service_read_route(&w->svc, greedy, "f", 0, 0, &w->ctx, &r3, &err), -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_null(v.id);
        assert_int_equal(w->f.calls, calls); /* refused before the scheduler */

        /* The neighbour is served meanwhile, and gives its units back. */
        for (int i = 0; i < 5; i++) {
                assert_int_equal(fe_service_describe(&w->svc, other, &w->ctx, &v, &err), 0);
                fe_view_clear(&v);
        }
        assert_int_equal(fe_service_exec_route(&w->svc, other, "true", 0, &w->ctx, &r3, &err), 0);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "other"), 1);
        fe_route_release(&r3);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "other"), 0);

        /* The greedy tenant's stream ends: one more call fits, given back at its return. */
        fe_route_release(&r1);
        fe_route_release(&r1); /* once only */
        assert_int_equal(cs_share_held(w->svc.tenant_share, "greedy"), 1);
        assert_int_equal(fe_service_describe(&w->svc, greedy, &w->ctx, &v, &err), 0);
        fe_view_clear(&v);
        assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), 0);
        fe_view_clear(&v);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "greedy"), 1);
        fe_route_release(&r2);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "greedy"), 0);
        assert_null(err);
        cs_share_free(w->svc.tenant_share);
}

/* A call that fails after its unit was taken (the scheduler's error, a route not found) gives
 * it back; a sandbox the scheduler does not know counts against nobody. */
static void test_tenant_share_given_back_on_failure(void **state)
{
        world *w = *state;
        char id[CS_UUID_STRLEN + 1], unknown[CS_UUID_STRLEN + 1];
        cs_error *err = NULL;
        fe_route r;
        fe_view v = { 0 };

        w->svc.tenant_share = cs_share_new(1, 8);
        make_sandbox_of(w, "t", "s", id);
        w->f.fail_code = GRPC_STATUS_UNAVAILABLE;
        w->f.fail_msg = "node agent x unreachable";
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r, &err), -1);
        assert_error(&err, GRPC_STATUS_UNAVAILABLE, "node agent x unreachable");
        w->f.fail_code = GRPC_STATUS_INTERNAL;
        w->f.fail_msg = "boom";
        assert_int_equal(fe_service_describe(&w->svc, id, &w->ctx, &v, &err), -1);
        assert_error(&err, GRPC_STATUS_INTERNAL, "boom");
        w->f.fail_code = GRPC_STATUS_UNAVAILABLE;
        w->f.fail_msg = "no node agent is reachable";
        {
                fe_spec s = spec_of("t", "s2");
                assert_int_equal(fe_service_create(&w->svc, &s, &w->ctx, &v, &err), -1);
                assert_error(&err, GRPC_STATUS_UNAVAILABLE, "no node agent is reachable");
        }
        assert_int_equal(cs_share_held(w->svc.tenant_share, "t"), 0);

        cs_uuid_generate(unknown);
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r, &err), 0);
        assert_int_equal(fe_service_describe(&w->svc, unknown, &w->ctx, &v, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        cs_error_free(err);
        err = NULL;
        fe_route_release(&r);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "t"), 0);
        cs_share_free(w->svc.tenant_share);
}

/* ---- ListSandboxes ---- */

/* Pages through tenant's sandboxes of status, page_size at a time; returns how many, with
 * their ids in ids (in the order listed) and the page count in *pages. */
static int list_all(world *w, const char *tenant, fe_status status, uint32_t page_size,
                    char ids[][CS_UUID_STRLEN + 1], int *pages)
{
        char token[FE_LIST_TOKEN_MAX + 1] = "", next[FE_LIST_TOKEN_MAX + 1];
        cs_error *err = NULL;
        int n = 0;

        *pages = 0;
        do {
                fe_view_list l;

                assert_int_equal(fe_service_list(&w->svc, tenant, status, page_size, token, &w->ctx,
                                                 &l, next, &err),
                                 0);
                assert_true(l.n <= fe_list_page_size(page_size));
                for (size_t i = 0; i < l.n; i++)
                        snprintf(ids[n++], CS_UUID_STRLEN + 1, "%s", l.v[i].id);
                (*pages)++;
                fe_view_list_clear(&l);
                memcpy(token, next, sizeof(token));
        } while (token[0]);
        return n;
}

static void test_list_pages_and_filters(void **state)
{
        world *w = *state;
        char ids[FAKE_MAX][CS_UUID_STRLEN + 1], made[5][CS_UUID_STRLEN + 1];
        char next[FE_LIST_TOKEN_MAX + 1], token[FE_LIST_TOKEN_MAX + 1];
        cs_error *err = NULL;
        fe_view_list l;
        fe_view v = { 0 };
        int pages;

        for (int i = 0; i < 5; i++) {
                char session[8];
                snprintf(session, sizeof(session), "s%d", i);
                make_sandbox_of(w, "acme", session, made[i]);
                w->f.sb[w->f.n - 1].created_at_ms = 1000 + i; /* oldest first */
        }
        make_sandbox_of(w, "other", "s0", ids[0]);
        assert_int_equal(fe_service_destroy(&w->svc, made[1], &w->ctx, &v, &err), 0);
        fe_view_clear(&v);

        /* Every one of the tenant's, once, oldest first, in pages of 2 (3 pages). */
        assert_int_equal(list_all(w, "acme", FE_STATUS_UNSPECIFIED, 2, ids, &pages), 5);
        assert_int_equal(pages, 3);
        for (int i = 0; i < 5; i++)
                assert_string_equal(ids[i], made[i]);
        /* By status. */
        assert_int_equal(list_all(w, "acme", FE_STATUS_DESTROYED, 2, ids, &pages), 1);
        assert_string_equal(ids[0], made[1]);
        assert_int_equal(list_all(w, "acme", FE_STATUS_STARTING, 0, ids, &pages), 4);
        assert_int_equal(pages, 1);
        assert_int_equal(list_all(w, "acme", FE_STATUS_READY, 0, ids, &pages), 0);
        assert_int_equal(list_all(w, "nobody", FE_STATUS_UNSPECIFIED, 0, ids, &pages), 0);

        /* The tenant is required and checked; the status must be one; a token is for its
         * own tenant and status. None of these reach the scheduler. */
        int calls = w->f.calls;
        assert_int_equal(fe_service_list(&w->svc, "", 0, 0, "", &w->ctx, &l, next, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "tenant_id is empty");
        assert_int_equal(fe_service_list(&w->svc, "a b", 0, 0, "", &w->ctx, &l, next, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "tenant_id must be printable ASCII without spaces");
        assert_int_equal(
                fe_service_list(&w->svc, "acme", (fe_status)9, 0, "", &w->ctx, &l, next, &err), -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "status 9 is not a SandboxStatus");
        assert_int_equal(w->f.calls, calls);
        assert_int_equal(fe_service_list(&w->svc, "acme", 0, 1, "", &w->ctx, &l, token, &err), 0);
        assert_int_equal(l.n, 1);
        fe_view_list_clear(&l);
        assert_true(token[0]);
        calls = w->f.calls;
        assert_int_equal(fe_service_list(&w->svc, "other", 0, 1, token, &w->ctx, &l, next, &err),
                         -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "page_token was given for another tenant_id or status");
        assert_int_equal(fe_service_list(&w->svc, "acme", FE_STATUS_READY, 1, token, &w->ctx, &l,
                                         next, &err),
                         -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "page_token was given for another tenant_id or status");
        assert_int_equal(fe_service_list(&w->svc, "acme", 0, 1, "garbage", &w->ctx, &l, next, &err),
                         -1);
        assert_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "page_token is not one this service gave");
        assert_int_equal(w->f.calls, calls);

        /* A scheduler failure passes through, with nothing listed. */
        w->f.fail_code = GRPC_STATUS_UNAVAILABLE;
        w->f.fail_msg = "node agent x unreachable";
        assert_int_equal(fe_service_list(&w->svc, "acme", 0, 0, "", &w->ctx, &l, next, &err), -1);
        assert_error(&err, GRPC_STATUS_UNAVAILABLE, "node agent x unreachable");
        assert_int_equal(l.n, 0);
        assert_null(l.v);
}

/* The call counts against the request's tenant, and gives its unit back. */
static void test_list_takes_the_tenant_share(void **state)
{
        world *w = *state;
        char id[CS_UUID_STRLEN + 1], next[FE_LIST_TOKEN_MAX + 1];
        cs_error *err = NULL;
        fe_view_list l;
        fe_route r, r2;

        w->svc.tenant_share = cs_share_new(2, 8);
        make_sandbox_of(w, "t", "s", id);
        assert_int_equal(fe_service_list(&w->svc, "t", 0, 0, "", &w->ctx, &l, next, &err), 0);
        fe_view_list_clear(&l);
        assert_int_equal(cs_share_held(w->svc.tenant_share, "t"), 0);
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r, &err), 0);
        assert_int_equal(fe_service_exec_route(&w->svc, id, "true", 0, &w->ctx, &r2, &err), 0);
        assert_int_equal(fe_service_list(&w->svc, "t", 0, 0, "", &w->ctx, &l, next, &err), -1);
        assert_error(&err, GRPC_STATUS_RESOURCE_EXHAUSTED, TENANT_FULL);
        assert_int_equal(fe_service_list(&w->svc, "u", 0, 0, "", &w->ctx, &l, next, &err), 0);
        fe_view_list_clear(&l);
        fe_route_release(&r);
        fe_route_release(&r2);
        cs_share_free(w->svc.tenant_share);
}

/* ---- the context ---- */

static void test_ctx_cancel_and_sleep(void **state)
{
        int efd = eventfd(0, EFD_CLOEXEC);
        fe_ctx none = FE_CTX_NONE;
        fe_ctx ctx = { .deadline_ms = cs_now_monotonic_ms() + 60000, .cancel_fd = efd };
        uint64_t one = 1;
        int64_t t0;

        (void)state;
        assert_true(efd >= 0);
        assert_false(fe_ctx_cancelled(&none));
        assert_false(fe_ctx_cancelled(&ctx));
        /* Not cancelled: the sleep lasts. */
        t0 = cs_now_monotonic_ms();
        fe_ctx_sleep(&ctx, 50);
        assert_true(cs_now_monotonic_ms() - t0 >= 45);

        assert_int_equal(write(efd, &one, sizeof(one)), sizeof(one));
        assert_true(fe_ctx_cancelled(&ctx));
        assert_true(fe_ctx_cancelled(&ctx)); /* reading the state does not consume it */
        assert_int_equal(fe_ctx_cancel_status(&ctx), GRPC_STATUS_CANCELLED);
        /* Cancelled: a long sleep ends at once. */
        t0 = cs_now_monotonic_ms();
        fe_ctx_sleep(&ctx, 30000);
        assert_true(cs_now_monotonic_ms() - t0 < 5000);

        ctx.deadline_ms = cs_now_monotonic_ms() - 1;
        assert_int_equal(fe_ctx_cancel_status(&ctx), GRPC_STATUS_DEADLINE_EXCEEDED);
        close(efd);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_create_checks_ids, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_checks_max_runtime, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_checks_workspace_size, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_checks_network, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_passes_spec_and_default_image, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_create_is_idempotent_per_session, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_scheduler_errors_pass_through, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_describe_destroy_check_the_id, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unknown_ids_are_not_found, setup, teardown),
                cmocka_unit_test_setup_teardown(test_destroy_then_describe, setup, teardown),
                cmocka_unit_test(test_uptime),
                cmocka_unit_test_setup_teardown(test_exec_checks_then_routes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_file_checks, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tenant_share_refuses_greedy_tenant_only, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_tenant_share_given_back_on_failure, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_list_pages_and_filters, setup, teardown),
                cmocka_unit_test_setup_teardown(test_list_takes_the_tenant_share, setup, teardown),
                cmocka_unit_test(test_ctx_cancel_and_sleep),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
