/* Unit tests for frontend/scheduler_local.c against fake node agents: in-process gRPC servers
 * (the project's RPC layer on loopback) that answer GetAgentInfo, ListSandboxes, GetSandbox and
 * CreateSandbox from a few fields, and can be told to fail their health checks. No runsc, no
 * root; about a second.
 *
 * What is tested: health (the poller's view) steers placement and readiness but never refuses
 * a call by itself; the agent's answer, or the connection's failure, decides. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute/v1/compute.pb-c.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "listing.h"
#include "scheduler.h"
#include "util.h"
#include "uuid.h"

#define NA(name) "/nodeagent.v1.NodeAgent/" name

/* ---- the fake agent ---- */

typedef struct fake_agent {
        rpc_server *srv;
        char addr[64];
        char sandbox_id[CS_UUID_STRLEN + 1]; /* the one sandbox it holds ("" none) */
        atomic_bool sick;                    /* GetAgentInfo fails (a missed health check) */
        atomic_int creates;                  /* CreateSandbox calls answered */
        atomic_int warm;                     /* warm ones it reports; a default create takes one */
        int status;                          /* its sandbox's compute.v1 status (0: READY) */
        const char *message;                 /* its status_message ("" when NULL) */
        int64_t created_ms;                  /* its created_at (0: unset) */
        rpc_method methods[4];               /* the server keeps pointers to them */
} fake_agent;

static Nodeagent__V1__SandboxInfo *info_of(rpc_call *call, const char *id, const char *tenant,
                                           const char *session, int status)
{
        Nodeagent__V1__SandboxInfo *in = rpc_call_alloc(call, sizeof(*in));

        nodeagent__v1__sandbox_info__init(in);
        in->sandbox_id = rpc_call_strdup(call, id);
        in->tenant_id = rpc_call_strdup(call, tenant);
        in->session_id = rpc_call_strdup(call, session);
        in->status = status;
        return in;
}

/* The fake agent's one sandbox, as it reports it. */
static Nodeagent__V1__SandboxInfo *held_info(rpc_call *call, const fake_agent *a)
{
        Nodeagent__V1__SandboxInfo *in =
                info_of(call, a->sandbox_id, "t", "s",
                        a->status ? a->status : COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY);

        in->status_message = rpc_call_strdup(call, a->message ? a->message : "");
        if (a->created_ms) {
                in->created_at = rpc_call_alloc(call, sizeof(*in->created_at));
                google__protobuf__timestamp__init(in->created_at);
                in->created_at->seconds = a->created_ms / 1000;
                in->created_at->nanos = (int32_t)(a->created_ms % 1000) * 1000000;
        }
        in->cpu_millis = 500;
        return in;
}

static int h_info(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *userdata, cs_error **err)
{
        fake_agent *a = userdata;

        (void)call;
        (void)req;
        if (atomic_load(&a->sick))
                return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED, "busy (a missed check)");
        ((Nodeagent__V1__GetAgentInfoResponse *)resp)->warm_ready = (uint32_t)atomic_load(&a->warm);
        return 0;
}

static int h_list(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *resp_msg,
                  void *userdata, cs_error **err)
{
        fake_agent *a = userdata;
        Nodeagent__V1__ListSandboxesResponse *resp = (void *)resp_msg;

        (void)req;
        (void)err;
        if (!a->sandbox_id[0])
                return 0;
        resp->n_sandboxes = 1;
        resp->sandboxes = rpc_call_alloc(call, sizeof(*resp->sandboxes));
        resp->sandboxes[0] = held_info(call, a);
        return 0;
}

static int h_get(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                 void *userdata, cs_error **err)
{
        fake_agent *a = userdata;
        const Nodeagent__V1__GetSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__GetSandboxResponse *resp = (void *)resp_msg;

        if (!req->ref || strcmp(req->ref->sandbox_id, a->sandbox_id) != 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox");
        resp->sandbox = held_info(call, a);
        return 0;
}

static int h_create(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                    void *userdata, cs_error **err)
{
        fake_agent *a = userdata;
        const Nodeagent__V1__CreateSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__CreateSandboxResponse *resp = (void *)resp_msg;

        (void)err;
        atomic_fetch_add(&a->creates, 1);
        /* Only a create of the default profile (create_session's cpu_millis 0) claims a warm
         * sandbox, as on a real agent: another profile must not drain the count the poller
         * reports, or placement would depend on when the poller last ran. */
        if (!req->cpu_millis && atomic_load(&a->warm) > 0)
                atomic_fetch_sub(&a->warm, 1);
        resp->sandbox = info_of(call, req->sandbox_id, req->tenant_id, req->session_id,
                                COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING);
        resp->created = true;
        return 0;
}

static void fake_agent_start(fake_agent *a, bool holds_sandbox)
{
        const rpc_method methods[] = {
                { NA("GetAgentInfo"), &nodeagent__v1__get_agent_info_request__descriptor,
                  &nodeagent__v1__get_agent_info_response__descriptor, h_info, NULL, a, NULL },
                { NA("ListSandboxes"), &nodeagent__v1__list_sandboxes_request__descriptor,
                  &nodeagent__v1__list_sandboxes_response__descriptor, h_list, NULL, a, NULL },
                { NA("GetSandbox"), &nodeagent__v1__get_sandbox_request__descriptor,
                  &nodeagent__v1__get_sandbox_response__descriptor, h_get, NULL, a, NULL },
                { NA("CreateSandbox"), &nodeagent__v1__create_sandbox_request__descriptor,
                  &nodeagent__v1__create_sandbox_response__descriptor, h_create, NULL, a, NULL },
        };
        rpc_server_options opts = { .listen = "127.0.0.1:0", .max_calls = 16, .grace_ms = 100 };
        cs_error *err = NULL;

        memset(a, 0, sizeof(*a));
        memcpy(a->methods, methods, sizeof(methods));
        if (holds_sandbox)
                cs_uuid_generate(a->sandbox_id);
        a->srv = rpc_server_new(&opts);
        for (size_t i = 0; i < ARRAY_SIZE(a->methods); i++)
                assert_int_equal(rpc_server_add_method(a->srv, &a->methods[i], &err), 0);
        assert_int_equal(rpc_server_start(a->srv, &err), 0);
        snprintf(a->addr, sizeof(a->addr), "127.0.0.1:%d", rpc_server_port(a->srv));
}

static void fake_agent_stop(fake_agent *a)
{
        rpc_server_free(a->srv);
        a->srv = NULL;
}

/* ---- helpers ---- */

static scheduler *local_new(const char *agents)
{
        local_config cfg = { .agents = agents, .agent_timeout_ms = 5000, .poll_ms = 50 };
        cs_error *err = NULL;
        scheduler *s = scheduler_local_new(&cfg, &err);

        assert_null(err);
        assert_non_null(s);
        return s;
}

/* Waits (up to 10 s) until the scheduler's readiness is `serving`: the poller has marked the
 * agents down, or up again. */
static void await_serving(scheduler *s, bool serving)
{
        for (int i = 0; i < 1000 && scheduler_serving(s) != serving; i++)
                usleep(10000);
        assert_int_equal(scheduler_serving(s), serving);
}

static fe_ctx ctx_of(int64_t timeout_ms)
{
        return (fe_ctx){ .deadline_ms = cs_now_monotonic_ms() + timeout_ms, .cancel_fd = -1 };
}

/* Creates session "s<i>" of tenant "t" (cpu_millis 0: the default profile); must succeed. */
static void create_session(scheduler *s, int i, uint32_t cpu_millis)
{
        char session[16];
        fe_spec spec = {
                .tenant_id = "t", .session_id = session, .image = "", .cpu_millis = cpu_millis
        };
        fe_ctx ctx = ctx_of(10000);
        cs_error *err = NULL;
        fe_view v = { 0 };

        snprintf(session, sizeof(session), "s%d", i);
        assert_int_equal(s->ops->create(s, &spec, &ctx, &v, &err), 0);
        assert_null(err);
        fe_view_clear(&v);
}

/* ---- tests ---- */

/* An agent whose health checks fail (a busy agent, issue: e2e test_50_concurrent_sessions) is
 * marked down, and yet its sandbox's calls are made and answered, and a create is placed on
 * it when no agent is healthy. */
static void test_calls_reach_an_agent_marked_down(void **state)
{
        fake_agent a;
        scheduler *s;
        fe_ctx ctx = ctx_of(10000);
        fe_spec spec = { .tenant_id = "t", .session_id = "new", .image = "" };
        cs_error *err = NULL;
        char tenant[CS_ID_MAX + 1];
        fe_view v = { 0 };
        fe_route r;

        (void)state;
        fake_agent_start(&a, true);
        s = local_new(a.addr);
        assert_true(scheduler_serving(s));
        assert_true(s->ops->tenant_of(s, a.sandbox_id, tenant));
        assert_string_equal(tenant, "t");

        atomic_store(&a.sick, true);
        await_serving(s, false);

        assert_int_equal(s->ops->describe(s, a.sandbox_id, &ctx, &v, &err), 0);
        assert_null(err);
        assert_int_equal(v.status, FE_STATUS_READY);
        fe_view_clear(&v);
        assert_int_equal(s->ops->route(s, a.sandbox_id, &ctx, &r, &err), 0);
        assert_null(err);
        fe_route_release(&r);
        assert_int_equal(s->ops->create(s, &spec, &ctx, &v, &err), 0);
        assert_null(err);
        assert_int_equal(v.status, FE_STATUS_STARTING);
        assert_int_equal(atomic_load(&a.creates), 1);
        fe_view_clear(&v);

        /* Checks pass again: up, as before. */
        atomic_store(&a.sick, false);
        await_serving(s, true);
        s->ops->free(s);
        fake_agent_stop(&a);
}

/* An agent that is really gone: the call fails with the connection's UNAVAILABLE, naming the
 * agent, not with a verdict of the health map. */
static void test_gone_agent_fails_by_itself(void **state)
{
        fake_agent a;
        scheduler *s;
        fe_ctx ctx = ctx_of(10000);
        char prefix[96];
        cs_error *err = NULL;
        fe_view v = { 0 };

        (void)state;
        fake_agent_start(&a, true);
        s = local_new(a.addr);
        fake_agent_stop(&a);
        await_serving(s, false);
        assert_int_equal(s->ops->describe(s, a.sandbox_id, &ctx, &v, &err), -1);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        snprintf(prefix, sizeof(prefix), "node agent %s", a.addr);
        assert_memory_equal(err->msg, prefix, strlen(prefix));
        cs_error_free(err);
        s->ops->free(s);
}

/* Placement avoids an agent marked down while a healthy one exists. */
static void test_placement_prefers_healthy(void **state)
{
        fake_agent a, b;
        scheduler *s;
        char agents[160];

        (void)state;
        fake_agent_start(&a, false);
        fake_agent_start(&b, false);
        snprintf(agents, sizeof(agents), "%s,%s", a.addr, b.addr);
        s = local_new(agents);
        atomic_store(&a.sick, true);
        /* Readiness stays (b is up): wait for a's two missed checks by time instead. */
        usleep(1000 * 1000);
        for (int i = 0; i < 4; i++)
                create_session(s, i, 0);
        assert_int_equal(atomic_load(&a.creates), 0);
        assert_int_equal(atomic_load(&b.creates), 4);
        s->ops->free(s);
        fake_agent_stop(&a);
        fake_agent_stop(&b);
}

/* A create of the default profile goes first to an agent with warm sandboxes ready, as many
 * as it reported; a create of another profile, or once none is left, by the usual rule
 * (round-robin here: neither fake reports live sandboxes). */
static void test_placement_prefers_warm(void **state)
{
        fake_agent a, b;
        scheduler *s;
        char agents[160];

        (void)state;
        fake_agent_start(&a, false);
        fake_agent_start(&b, false);
        snprintf(agents, sizeof(agents), "%s,%s", b.addr, a.addr);
        atomic_store(&a.warm, 2);
        s = local_new(agents);
        await_serving(s, true);
        usleep(200 * 1000);         /* a few polls */
        for (int i = 0; i < 4; i++) /* two of another profile, then two of the default one */
                create_session(s, i, i < 2 ? 500 : 0);
        assert_int_equal(atomic_load(&a.creates), 3);
        assert_int_equal(atomic_load(&b.creates), 1);
        assert_int_equal(atomic_load(&a.warm), 0);
        s->ops->free(s);
        fake_agent_stop(&a);
        fake_agent_stop(&b);
}

/* ListSandboxes merges the agents' sandboxes of the tenant in the listing order, with the
 * failure reason cleaned; an agent that cannot be listed fails the call. */
static void test_list_merges_agents(void **state)
{
        fake_agent a, b;
        scheduler *s;
        fe_ctx ctx = ctx_of(10000);
        char agents[160];
        cs_error *err = NULL;
        fe_view_list l = { 0 };
        fe_list_query q = { .tenant_id = "t", .after_id = "", .limit = 10 };

        (void)state;
        fake_agent_start(&a, true);
        fake_agent_start(&b, true);
        a.created_ms = 2000;
        b.created_ms = 1000;
        b.status = COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_FAILED;
        b.message = "cannot open /var/lib/compute/sandboxes/x/rootfs: gone";
        snprintf(agents, sizeof(agents), "%s,%s", a.addr, b.addr);
        s = local_new(agents);

        /* Both agents', oldest first (b's, then a's). */
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), 0);
        assert_int_equal(l.n, 2);
        assert_false(l.more);
        assert_string_equal(l.v[0].id, b.sandbox_id);
        assert_string_equal(l.v[1].id, a.sandbox_id);
        assert_int_equal(l.v[0].status, FE_STATUS_FAILED);
        assert_string_equal(l.v[0].reason, "cannot open <path>: gone");
        assert_null(l.v[1].reason);
        assert_string_equal(l.v[1].tenant_id, "t");
        assert_string_equal(l.v[1].session_id, "s");
        assert_int_equal(l.v[1].cpu_millis, 500);
        assert_int_equal(l.v[1].created_at_ms, 2000);
        fe_view_list_clear(&l);

        /* A page of one, then the rest after its cursor; by status; another tenant. */
        q.limit = 1;
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), 0);
        assert_int_equal(l.n, 1);
        assert_true(l.more);
        q.after_created_ms = l.v[0].created_at_ms;
        q.after_id = b.sandbox_id;
        fe_view_list_clear(&l);
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), 0);
        assert_int_equal(l.n, 1);
        assert_false(l.more);
        assert_string_equal(l.v[0].id, a.sandbox_id);
        fe_view_list_clear(&l);
        q = (fe_list_query){
                .tenant_id = "t", .status = FE_STATUS_FAILED, .after_id = "", .limit = 10
        };
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), 0);
        assert_int_equal(l.n, 1);
        assert_string_equal(l.v[0].id, b.sandbox_id);
        fe_view_list_clear(&l);
        q.tenant_id = "u";
        q.status = FE_STATUS_UNSPECIFIED;
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), 0);
        assert_int_equal(l.n, 0);
        fe_view_list_clear(&l);

        /* One agent gone: no partial list. */
        fake_agent_stop(&b);
        q.tenant_id = "t";
        assert_int_equal(s->ops->list(s, &q, &ctx, &l, &err), -1);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, b.addr));
        cs_error_free(err);
        fe_view_list_clear(&l);
        s->ops->free(s);
        fake_agent_stop(&a);
}

static int group_setup(void **state)
{
        (void)state;
        rpc_global_init();
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        rpc_global_shutdown();
        return 0;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_calls_reach_an_agent_marked_down),
                cmocka_unit_test(test_gone_agent_fails_by_itself),
                cmocka_unit_test(test_placement_prefers_healthy),
                cmocka_unit_test(test_placement_prefers_warm),
                cmocka_unit_test(test_list_merges_agents),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
