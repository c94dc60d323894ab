/* The local scheduler: node agents listed on the command line.
 *
 * State, all rebuilt from the agents (the frontend keeps nothing a restart would lose):
 * which agent holds which sandbox, learnt by listing each agent when it is first seen
 * healthy and whenever it comes back, and by asking the agents about ids not seen yet.
 *
 * Placement: a new session goes to the healthy agent with the fewest live sandboxes (when
 * none is healthy, to the agent with the fewest: its answer decides); a request for the
 * default profile first to one that reported warm sandboxes ready (--warm-pool), counted
 * down here as creates are placed until the next health check reports again. A session
 * that has a live sandbox keeps it (creates are serialised per session, and the agent itself
 * refuses a second live sandbox per session). While any agent has never been listed, creates are
 * refused with UNAVAILABLE: that agent might hold the session already.
 *
 * Health (agent_poll) steers placement and the frontend's readiness; it never refuses a call
 * by itself. Health checks time out under load (two missed 5 s checks of a busy agent made
 * every call to its sandboxes fail UNAVAILABLE "unreachable" while the agent was serving
 * them): a call for a sandbox on an agent marked down is still made, and the agent's answer,
 * or the connection's failure, is what the caller gets.
 *
 * This file talks to the agents, so it speaks their protobuf. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "compute/v1/compute.pb-c.h"
#include "listing.h"
#include "metrics.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "pbconv.h"
#include "quantity.h"
#include "sandbox_limits.h"
#include "scheduler.h"
#include "util.h"
#include "uuid.h"

#define NA(name)      "/nodeagent.v1.NodeAgent/" name
#define SESSION_LOCKS 64
#define MAX_AGENTS    256

typedef struct agent {
        char *addr;
        rpc_channel *ch;
        bool healthy;
        int failed_checks; /* health checks failed in a row */
        bool listed;       /* its sandboxes are in the map */
        uint32_t live;
        uint32_t warm; /* warm sandboxes ready to be claimed, as last reported (less placed) */
} agent;

typedef struct entry {
        struct entry *next;
        char id[CS_UUID_STRLEN + 1];
        char *tenant_id, *session_id;
        int agent;
        bool destroyed;
} entry;

typedef struct local {
        scheduler s;
        local_config cfg;
        agent agents[MAX_AGENTS];
        int n_agents;
        pthread_mutex_t lock; /* agents' health, the map */
        pthread_cond_t cond;
        entry *map;
        pthread_mutex_t session_locks[SESSION_LOCKS];
        unsigned next_agent; /* round-robin among equals */
        pthread_t poller;
        bool stopping;
} local;

#define LOCAL(s) ((local *)(s))

/* The one reading of an agent's SandboxInfo.status (compute.v1.SandboxStatus); a value this
 * frontend does not know is UNSPECIFIED. */
static fe_status status_of_agent(int status)
{
        switch (status) {
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING:
                return FE_STATUS_STARTING;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY:
                return FE_STATUS_READY;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_FAILED:
                return FE_STATUS_FAILED;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_DESTROYED:
                return FE_STATUS_DESTROYED;
        default:
                return FE_STATUS_UNSPECIFIED;
        }
}

static void view_from_info(const Nodeagent__V1__SandboxInfo *in, fe_view *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(in->sandbox_id);
        ret->status = status_of_agent(in->status);
        ret->created_at_ms = pb_timestamp_ms(in->created_at);
        ret->destroyed_at_ms = pb_timestamp_ms(in->destroyed_at);
        pb_usage_read(in->usage, &ret->usage);
        /* The agent's status_message says "starting" and "destroyed" too; only a failure's
         * is a reason. A STARTING sandbox of a local agent is never stuck for long: its start
         * either succeeds or fails (FAILED, with why) within the runtime's own timeout. */
        if (ret->status == FE_STATUS_FAILED)
                ret->reason = fe_reason_clean(in->status_message);
        ret->tenant_id = cs_xstrdup(in->tenant_id);
        ret->session_id = cs_xstrdup(in->session_id);
        ret->cpu_millis = in->cpu_millis;
        ret->memory_bytes = in->memory_bytes;
        ret->max_runtime_ms = pb_duration_ms(in->max_runtime);
        /* Checked as a request is. One this frontend cannot read (a newer agent's) keeps its
         * mode, without the lists. */
        if (pb_network_read(in->network, &ret->network, NULL) < 0)
                ret->network.egress = (cs_egress)in->network->egress;
}

/* --- the map --------------------------------------------------------------------------- */

static entry *map_find_locked(local *l, const char *id)
{
        for (entry *e = l->map; e; e = e->next) {
                if (strcasecmp(e->id, id) == 0)
                        return e;
        }
        return NULL;
}

static entry *map_find_session_locked(local *l, const char *tenant, const char *session)
{
        for (entry *e = l->map; e; e = e->next) {
                if (!e->destroyed && strcmp(e->tenant_id, tenant) == 0 &&
                    strcmp(e->session_id, session) == 0)
                        return e;
        }
        return NULL;
}

/* Records what an agent says about a sandbox. */
static void map_learn_locked(local *l, int agent_idx, const Nodeagent__V1__SandboxInfo *in)
{
        entry *e = map_find_locked(l, in->sandbox_id);

        if (!e) {
                e = cs_xcalloc(1, sizeof(*e));
                snprintf(e->id, sizeof(e->id), "%s", in->sandbox_id);
                e->tenant_id = cs_xstrdup(in->tenant_id);
                e->session_id = cs_xstrdup(in->session_id);
                e->next = l->map;
                l->map = e;
        }
        e->agent = agent_idx;
        e->destroyed = status_of_agent(in->status) == FE_STATUS_DESTROYED;
}

static void map_forget_locked(local *l, const char *id)
{
        for (entry **p = &l->map; *p; p = &(*p)->next) {
                if (strcasecmp((*p)->id, id) == 0) {
                        entry *e = *p;
                        *p = e->next;
                        free(e->tenant_id);
                        free(e->session_id);
                        free(e);
                        return;
                }
        }
}

/* --- talking to agents ----------------------------------------------------------------- */

/* Health checks and listings must not hold the poller for a whole call timeout when an
 * agent hangs rather than refuses. */
#define POLL_TIMEOUT_MS 5000

/* An agent counts as down after this many health checks in a row have failed: one slow
 * answer from an agent busy starting many sandboxes must not fail every call to it until
 * the next check. A call to an agent that is really gone fails by itself meanwhile. */
#define DOWN_AFTER_CHECKS 2
/* The poll period until every agent has answered once (and while none is reachable): a
 * frontend started with its agents serves as soon as they do. */
#define FAST_POLL_MS 100
/* How long a call with no deadline waits for the agents to have answered once. */
#define READY_WAIT_NO_DEADLINE_MS 30000

static int agent_call_timeout(local *l, int idx, const char *method, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *resp_desc, const fe_ctx *ctx,
                              int64_t timeout_ms, ProtobufCMessage **ret, cs_error **err)
{
        rpc_call_options opts = { .timeout_ms = timeout_ms, .parent = ctx ? ctx->parent : NULL };
        int r = rpc_unary(l->agents[idx].ch, method, req, resp_desc, &opts, ret, err);

        /* Whether the agent is down is the health checks' call (agent_poll). */
        if (r < 0 && (*err)->code == GRPC_STATUS_UNAVAILABLE)
                cs_error_prefix(err, "node agent %s", l->agents[idx].addr);
        return r;
}

static int agent_call(local *l, int idx, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, const fe_ctx *ctx,
                      ProtobufCMessage **ret, cs_error **err)
{
        return agent_call_timeout(l, idx, method, req, resp_desc, ctx, l->cfg.agent_timeout_ms, ret,
                                  err);
}

/* Lists every sandbox an agent holds (destroyed ones too) into the map. */
static int agent_list(local *l, int idx, cs_error **err)
{
        char token[32] = "";

        for (;;) {
                Nodeagent__V1__ListSandboxesRequest req =
                        NODEAGENT__V1__LIST_SANDBOXES_REQUEST__INIT;
                Nodeagent__V1__ListSandboxesResponse *resp = NULL;

                req.include_destroyed = true;
                req.page_token = token;
                if (agent_call_timeout(l, idx, NA("ListSandboxes"), &req.base,
                                       &nodeagent__v1__list_sandboxes_response__descriptor, NULL,
                                       POLL_TIMEOUT_MS, (ProtobufCMessage **)&resp, err) < 0)
                        return -1;
                pthread_mutex_lock(&l->lock);
                for (size_t i = 0; i < resp->n_sandboxes; i++)
                        map_learn_locked(l, idx, resp->sandboxes[i]);
                pthread_mutex_unlock(&l->lock);
                snprintf(token, sizeof(token), "%s", resp->next_page_token);
                protobuf_c_message_free_unpacked(&resp->base, NULL);
                if (!token[0])
                        return 0;
        }
}

/* One health check; lists the agent when it (re)appears. */
static void agent_poll(local *l, int idx)
{
        Nodeagent__V1__GetAgentInfoRequest req = NODEAGENT__V1__GET_AGENT_INFO_REQUEST__INIT;
        Nodeagent__V1__GetAgentInfoResponse *resp = NULL;
        cs_error *err = NULL;
        bool was, listed = false;

        pthread_mutex_lock(&l->lock);
        was = l->agents[idx].healthy;
        pthread_mutex_unlock(&l->lock);
        if (agent_call_timeout(l, idx, NA("GetAgentInfo"), &req.base,
                               &nodeagent__v1__get_agent_info_response__descriptor, NULL,
                               POLL_TIMEOUT_MS, (ProtobufCMessage **)&resp, &err) < 0) {
                bool down;

                pthread_mutex_lock(&l->lock);
                down = ++l->agents[idx].failed_checks >= DOWN_AFTER_CHECKS;
                if (down)
                        l->agents[idx].healthy = false;
                pthread_mutex_unlock(&l->lock);
                if (was && down)
                        log_warn("node agent %s is down: %s", l->agents[idx].addr, err->msg);
                else if (was)
                        log_info("node agent %s: a health check failed: %s", l->agents[idx].addr,
                                 err->msg);
                cs_error_free(err);
                return;
        }
        pthread_mutex_lock(&l->lock);
        l->agents[idx].failed_checks = 0;
        l->agents[idx].live = resp->sandboxes_live;
        l->agents[idx].warm = resp->warm_ready;
        pthread_mutex_unlock(&l->lock);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        if (!was) {
                listed = agent_list(l, idx, &err) == 0;
                if (!listed) {
                        log_warn("node agent %s: cannot list sandboxes: %s", l->agents[idx].addr,
                                 err->msg);
                        cs_error_free(err);
                }
        }
        pthread_mutex_lock(&l->lock);
        if (was || listed) {
                l->agents[idx].healthy = true;
                l->agents[idx].listed = true;
                pthread_cond_broadcast(&l->cond);
        }
        pthread_mutex_unlock(&l->lock);
        if (!was && listed)
                log_info("node agent %s is up", l->agents[idx].addr);
}

/* Whether every agent has answered once (its sandboxes are in the map). */
static bool all_listed_locked(const local *l)
{
        for (int i = 0; i < l->n_agents; i++) {
                if (!l->agents[i].listed)
                        return false;
        }
        return true;
}

static bool any_healthy_locked(const local *l)
{
        for (int i = 0; i < l->n_agents; i++) {
                if (l->agents[i].healthy)
                        return true;
        }
        return false;
}

/* A call arriving before every agent has answered once waits for that (until its deadline,
 * its cancel, or READY_WAIT_NO_DEADLINE_MS without a deadline) instead of failing: the
 * caller then goes on and fails as before if some agent is still missing. */
static void await_listed(local *l, const fe_ctx *ctx)
{
        int64_t now = cs_now_monotonic_ms();
        int64_t end =
                ctx->deadline_ms == INT64_MAX ? now + READY_WAIT_NO_DEADLINE_MS : ctx->deadline_ms;

        pthread_mutex_lock(&l->lock);
        while (!l->stopping && !all_listed_locked(l) && now < end && !fe_ctx_cancelled(ctx)) {
                /* Short slices: the cancel fd is not a condition variable. */
                cs_cond_wait_until(&l->cond, &l->lock,
                                   now + FAST_POLL_MS < end ? now + FAST_POLL_MS : end);
                now = cs_now_monotonic_ms();
        }
        pthread_mutex_unlock(&l->lock);
}

static void *poller_main(void *arg)
{
        local *l = arg;

        for (;;) {
                int64_t wake;

                pthread_mutex_lock(&l->lock);
                wake = cs_now_monotonic_ms() + (all_listed_locked(l) && any_healthy_locked(l)
                                                        ? l->cfg.poll_ms
                                                        : FAST_POLL_MS);
                while (!l->stopping && cs_now_monotonic_ms() < wake)
                        cs_cond_wait_until(&l->cond, &l->lock, wake);
                if (l->stopping) {
                        pthread_mutex_unlock(&l->lock);
                        return NULL;
                }
                pthread_mutex_unlock(&l->lock);
                for (int i = 0; i < l->n_agents; i++)
                        agent_poll(l, i);
        }
}

/* --- the ops --------------------------------------------------------------------------- */

static unsigned session_hash(const char *tenant, const char *session)
{
        unsigned h = 2166136261u;

        for (const char *p = tenant; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
        h = (h ^ 0xff) * 16777619u;
        for (const char *p = session; *p; p++)
                h = (h ^ (unsigned char)*p) * 16777619u;
        return h;
}

/* Whether spec is the agents' default profile, the one their warm pools hold: no image, no
 * limits, no workspace settings other than the defaults, the node's default network. (An
 * agent also takes a request that names its default image from its pool; the frontend does
 * not know that name, nor the agents' --egress-default.) */
static bool spec_default_profile(const fe_spec *spec)
{
        uint64_t size = 0, dflt = 0;

        if (!cs_isempty(spec->size) &&
            (cs_quantity_parse(spec->size, &size) < 0 ||
             cs_quantity_parse(CS_DEFAULT_WORKSPACE_SIZE, &dflt) < 0 || size != dflt))
                return false;
        return cs_isempty(spec->image) &&
               (cs_isempty(spec->mount_path) ||
                strcmp(spec->mount_path, CS_DEFAULT_MOUNT_PATH) == 0) &&
               (!spec->cpu_millis || spec->cpu_millis == CS_DEFAULT_CPU_MILLIS) &&
               (!spec->memory_bytes || spec->memory_bytes == CS_DEFAULT_MEMORY) &&
               spec->egress == CS_EGRESS_UNSPECIFIED;
}

/* Whether agent a is a better place than agent b (-1: none yet): a healthy agent before one
 * marked down, then (warm: the request is the pools' profile) one with a warm sandbox, then
 * the fewest live sandboxes. */
static bool place_better_locked(const local *l, bool warm, int a, int b)
{
        if (b < 0)
                return true;
        if (l->agents[a].healthy != l->agents[b].healthy)
                return l->agents[a].healthy;
        if (warm && (l->agents[a].warm > 0) != (l->agents[b].warm > 0))
                return l->agents[a].warm > 0;
        return l->agents[a].live < l->agents[b].live;
}

/* The healthy agent with the fewest live sandboxes, or -1 with why. When every agent is marked
 * down, the one with the fewest: a missed health check is not a refusal, and the create's
 * own call to it tells whether it is really gone. */
static int place_locked(local *l, const fe_spec *spec, cs_error **err)
{
        bool warm = spec_default_profile(spec);
        int best = -1;

        for (int k = 0; k < l->n_agents; k++) {
                int i = (int)((l->next_agent + (unsigned)k) % (unsigned)l->n_agents);
                if (!l->agents[i].listed)
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "node agent %s has not been reachable since this "
                                            "frontend started; it may hold this session",
                                            l->agents[i].addr);
                if (place_better_locked(l, warm, i, best))
                        best = i;
        }
        l->next_agent = (unsigned)best + 1;
        l->agents[best].live++;
        if (warm && l->agents[best].warm > 0)
                l->agents[best].warm--;
        return best;
}

static int agent_create(local *l, int idx, const char *id, const fe_spec *spec, const fe_ctx *ctx,
                        fe_view *ret, cs_error **err)
{
        Nodeagent__V1__CreateSandboxRequest req = NODEAGENT__V1__CREATE_SANDBOX_REQUEST__INIT;
        Nodeagent__V1__CreateSandboxResponse *resp = NULL;
        Google__Protobuf__Duration max_runtime = GOOGLE__PROTOBUF__DURATION__INIT;
        Compute__V1__NetworkSpec network = COMPUTE__V1__NETWORK_SPEC__INIT;

        req.sandbox_id = (char *)id;
        req.tenant_id = (char *)spec->tenant_id;
        req.session_id = (char *)spec->session_id;
        req.image = (char *)spec->image;
        req.mount_path = (char *)spec->mount_path;
        req.cpu_millis = spec->cpu_millis;
        req.memory_bytes = spec->memory_bytes;
        /* Checked by service_core.c (a quantity within 16Mi..1Ti): the agent gets bytes. */
        if (cs_quantity_parse(spec->size && spec->size[0] ? spec->size : CS_DEFAULT_WORKSPACE_SIZE,
                              &req.workspace_bytes) < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace size '%.40s' is not a quantity like 10Gi",
                                    spec->size);
        if (spec->max_runtime_ms) {
                max_runtime.seconds = spec->max_runtime_ms / 1000;
                max_runtime.nanos = (int32_t)(spec->max_runtime_ms % 1000) * 1000000;
                req.max_runtime = &max_runtime;
        }
        /* As the request gave it (checked by service_core.c): the agent checks it again. */
        if (spec->egress || spec->n_allow_domains || spec->n_allow_cidrs) {
                network.egress = (Compute__V1__EgressMode)spec->egress;
                network.allow_domains = (char **)spec->allow_domains;
                network.n_allow_domains = spec->n_allow_domains;
                network.allow_cidrs = (char **)spec->allow_cidrs;
                network.n_allow_cidrs = spec->n_allow_cidrs;
                req.network = &network;
        }
        if (agent_call(l, idx, NA("CreateSandbox"), &req.base,
                       &nodeagent__v1__create_sandbox_response__descriptor, ctx,
                       (ProtobufCMessage **)&resp, err) < 0)
                return -1;
        pthread_mutex_lock(&l->lock);
        map_learn_locked(l, idx, resp->sandbox);
        pthread_mutex_unlock(&l->lock);
        view_from_info(resp->sandbox, ret);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return 0;
}

static int local_create(scheduler *s, const fe_spec *spec, const fe_ctx *ctx, fe_view *ret,
                        cs_error **err)
{
        local *l = LOCAL(s);
        pthread_mutex_t *session_lock =
                &l->session_locks[session_hash(spec->tenant_id, spec->session_id) % SESSION_LOCKS];
        char id[CS_UUID_STRLEN + 1];
        int idx, r = -1;

        await_listed(l, ctx);
        pthread_mutex_lock(session_lock);
        /* Twice at most: a sandbox the map still thought live may turn out destroyed (by
         * another frontend); then the session gets a new one. */
        for (int attempt = 0; attempt < 2; attempt++) {
                pthread_mutex_lock(&l->lock);
                entry *e = map_find_session_locked(l, spec->tenant_id, spec->session_id);
                if (e) {
                        snprintf(id, sizeof(id), "%s", e->id);
                        idx = e->agent;
                } else {
                        cs_uuid_generate(id);
                        idx = place_locked(l, spec, err);
                }
                pthread_mutex_unlock(&l->lock);
                r = idx < 0 ? -1 : agent_create(l, idx, id, spec, ctx, ret, err);
                if (r < 0 || ret->status != FE_STATUS_DESTROYED)
                        break;
                fe_view_clear(ret);
        }
        pthread_mutex_unlock(session_lock);
        return r;
}

/* Finds the agent holding id: the map, else every agent. An agent the health checks mark down
 * is still returned (see the top of the file): the call made to it decides. */
static int locate(local *l, const char *id, const fe_ctx *ctx, int *ret_idx, cs_error **err)
{
        bool unreachable = false;
        entry *e;

        await_listed(l, ctx);
        pthread_mutex_lock(&l->lock);
        e = map_find_locked(l, id);
        if (e) {
                *ret_idx = e->agent;
                pthread_mutex_unlock(&l->lock);
                return 0;
        }
        pthread_mutex_unlock(&l->lock);

        for (int i = 0; i < l->n_agents; i++) {
                Nodeagent__V1__GetSandboxRequest req = NODEAGENT__V1__GET_SANDBOX_REQUEST__INIT;
                Nodeagent__V1__SandboxRef ref = NODEAGENT__V1__SANDBOX_REF__INIT;
                Nodeagent__V1__GetSandboxResponse *resp = NULL;
                cs_error *e2 = NULL;

                ref.sandbox_id = (char *)id;
                req.ref = &ref;
                if (agent_call(l, i, NA("GetSandbox"), &req.base,
                               &nodeagent__v1__get_sandbox_response__descriptor, ctx,
                               (ProtobufCMessage **)&resp, &e2) == 0) {
                        pthread_mutex_lock(&l->lock);
                        map_learn_locked(l, i, resp->sandbox);
                        pthread_mutex_unlock(&l->lock);
                        protobuf_c_message_free_unpacked(&resp->base, NULL);
                        *ret_idx = i;
                        return 0;
                }
                unreachable |= e2->code != GRPC_STATUS_NOT_FOUND;
                cs_error_free(e2);
        }
        if (unreachable)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                    "sandbox %s is not on any reachable node agent, and some "
                                    "are unreachable",
                                    id);
        return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
}

/* An agent answered NOT_FOUND for a sandbox in the map: its grace period has ended. */
static void forget_if_gone(local *l, const char *id, cs_error *err)
{
        if (err && err->code == GRPC_STATUS_NOT_FOUND) {
                pthread_mutex_lock(&l->lock);
                map_forget_locked(l, id);
                pthread_mutex_unlock(&l->lock);
        }
}

static int local_describe(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                          cs_error **err)
{
        local *l = LOCAL(s);
        Nodeagent__V1__GetSandboxRequest req = NODEAGENT__V1__GET_SANDBOX_REQUEST__INIT;
        Nodeagent__V1__SandboxRef ref = NODEAGENT__V1__SANDBOX_REF__INIT;
        Nodeagent__V1__GetSandboxResponse *resp = NULL;
        int idx;

        if (locate(l, id, ctx, &idx, err) < 0)
                return -1;
        ref.sandbox_id = (char *)id;
        req.ref = &ref;
        if (agent_call(l, idx, NA("GetSandbox"), &req.base,
                       &nodeagent__v1__get_sandbox_response__descriptor, ctx,
                       (ProtobufCMessage **)&resp, err) < 0) {
                forget_if_gone(l, id, *err);
                return -1;
        }
        view_from_info(resp->sandbox, ret);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return 0;
}

static int local_destroy(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                         cs_error **err)
{
        local *l = LOCAL(s);
        Nodeagent__V1__DestroySandboxRequest req = NODEAGENT__V1__DESTROY_SANDBOX_REQUEST__INIT;
        Nodeagent__V1__SandboxRef ref = NODEAGENT__V1__SANDBOX_REF__INIT;
        Nodeagent__V1__DestroySandboxResponse *resp = NULL;
        int idx;

        if (locate(l, id, ctx, &idx, err) < 0)
                return -1;
        ref.sandbox_id = (char *)id;
        req.ref = &ref;
        if (agent_call(l, idx, NA("DestroySandbox"), &req.base,
                       &nodeagent__v1__destroy_sandbox_response__descriptor, ctx,
                       (ProtobufCMessage **)&resp, err) < 0) {
                forget_if_gone(l, id, *err);
                return -1;
        }
        pthread_mutex_lock(&l->lock);
        map_learn_locked(l, idx, resp->sandbox);
        pthread_mutex_unlock(&l->lock);
        view_from_info(resp->sandbox, ret);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return 0;
}

static int local_route(scheduler *s, const char *id, const fe_ctx *ctx, fe_route *ret,
                       cs_error **err)
{
        local *l = LOCAL(s);
        int idx;

        if (locate(l, id, ctx, &idx, err) < 0)
                return -1;
        memset(ret, 0, sizeof(*ret));
        ret->channel = l->agents[idx].ch;
        snprintf(ret->sandbox_id, sizeof(ret->sandbox_id), "%s", id);
        return 0;
}

/* Adds agent idx's sandboxes of q's tenant and status to *ret (every page of its listing;
 * the agent does not filter). */
static int agent_list_tenant(local *l, int idx, const fe_list_query *q, const fe_ctx *ctx,
                             fe_view_list *ret, cs_error **err)
{
        char token[64] = "";

        for (;;) {
                Nodeagent__V1__ListSandboxesRequest req =
                        NODEAGENT__V1__LIST_SANDBOXES_REQUEST__INIT;
                Nodeagent__V1__ListSandboxesResponse *resp = NULL;

                req.include_destroyed =
                        q->status == FE_STATUS_UNSPECIFIED || q->status == FE_STATUS_DESTROYED;
                req.page_token = token;
                if (agent_call(l, idx, NA("ListSandboxes"), &req.base,
                               &nodeagent__v1__list_sandboxes_response__descriptor, ctx,
                               (ProtobufCMessage **)&resp, err) < 0) {
                        cs_error_prefix(err, "cannot list the sandboxes of node agent %s",
                                        l->agents[idx].addr);
                        return -1;
                }
                pthread_mutex_lock(&l->lock);
                for (size_t i = 0; i < resp->n_sandboxes; i++) {
                        const Nodeagent__V1__SandboxInfo *in = resp->sandboxes[i];

                        if (!cs_uuid_valid(in->sandbox_id))
                                continue;
                        map_learn_locked(l, idx, in);
                        if (strcmp(in->tenant_id, q->tenant_id) != 0 ||
                            (q->status && status_of_agent(in->status) != q->status))
                                continue;
                        view_from_info(in, fe_view_list_add(ret));
                }
                pthread_mutex_unlock(&l->lock);
                if (strlen(resp->next_page_token) >= sizeof(token)) {
                        protobuf_c_message_free_unpacked(&resp->base, NULL);
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "node agent %s gave a page token of an unexpected "
                                            "size",
                                            l->agents[idx].addr);
                }
                snprintf(token, sizeof(token), "%s", resp->next_page_token);
                protobuf_c_message_free_unpacked(&resp->base, NULL);
                if (!token[0])
                        return 0;
        }
}

/* Every agent's sandboxes of the tenant, merged in the listing order: an agent that cannot
 * be listed fails the call (UNAVAILABLE): a list without its sandboxes would understate
 * what the tenant runs. */
static int local_list(scheduler *s, const fe_list_query *q, const fe_ctx *ctx, fe_view_list *ret,
                      cs_error **err)
{
        local *l = LOCAL(s);

        await_listed(l, ctx);
        for (int i = 0; i < l->n_agents; i++) {
                if (agent_list_tenant(l, i, q, ctx, ret, err) < 0) {
                        if ((*err)->code != GRPC_STATUS_UNAVAILABLE &&
                            (*err)->code != GRPC_STATUS_DEADLINE_EXCEEDED &&
                            (*err)->code != GRPC_STATUS_CANCELLED)
                                (*err)->code = GRPC_STATUS_UNAVAILABLE;
                        return -1;
                }
        }
        fe_list_select(ret, q);
        return 0;
}

static bool local_tenant_of(scheduler *s, const char *id, char ret[static CS_ID_MAX + 1])
{
        local *l = LOCAL(s);
        entry *e;

        pthread_mutex_lock(&l->lock);
        e = map_find_locked(l, id);
        if (e)
                snprintf(ret, CS_ID_MAX + 1, "%s", e->tenant_id);
        pthread_mutex_unlock(&l->lock);
        return e != NULL;
}

static bool local_serving(scheduler *s)
{
        local *l = LOCAL(s);
        bool r;

        pthread_mutex_lock(&l->lock);
        r = any_healthy_locked(l);
        pthread_mutex_unlock(&l->lock);
        return r;
}

/* compute_agent_up per agent of --agents, compute_scheduler_sandboxes by what the map knows:
 * live or destroyed (the local map keeps no finer status; DescribeSandbox asks the agent). */
static void local_metrics(scheduler *s, cs_mpage *p)
{
        local *l = LOCAL(s);
        uint64_t live = 0, destroyed = 0;
        const char *live_l[] = { "status", "live", NULL },
                   *dest_l[] = { "status", "destroyed", NULL };

        cs_mpage_family(p, "compute_agent_up", "gauge",
                        "1 when the node agent answers its health checks, 0 when not.");
        pthread_mutex_lock(&l->lock);
        for (int i = 0; i < l->n_agents; i++) {
                const char *labels[] = { "agent", l->agents[i].addr, NULL };

                cs_mpage_sample_u64(p, "compute_agent_up", labels, l->agents[i].healthy);
        }
        for (entry *e = l->map; e; e = e->next) {
                if (e->destroyed)
                        destroyed++;
                else
                        live++;
        }
        pthread_mutex_unlock(&l->lock);
        cs_mpage_family(p, "compute_scheduler_sandboxes", "gauge",
                        "Sandboxes the scheduler knows of, by status (local: live or destroyed).");
        cs_mpage_sample_u64(p, "compute_scheduler_sandboxes", live_l, live);
        cs_mpage_sample_u64(p, "compute_scheduler_sandboxes", dest_l, destroyed);
}

static void local_free(scheduler *s)
{
        local *l = LOCAL(s);

        if (!l)
                return;
        pthread_mutex_lock(&l->lock);
        l->stopping = true;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        pthread_join(l->poller, NULL);
        while (l->map) {
                entry *next = l->map->next;
                free(l->map->tenant_id);
                free(l->map->session_id);
                free(l->map);
                l->map = next;
        }
        for (int i = 0; i < l->n_agents; i++) {
                rpc_channel_free(l->agents[i].ch);
                free(l->agents[i].addr);
        }
        for (int i = 0; i < SESSION_LOCKS; i++)
                pthread_mutex_destroy(&l->session_locks[i]);
        pthread_cond_destroy(&l->cond);
        pthread_mutex_destroy(&l->lock);
        free(l);
}

static const scheduler_ops local_ops = {
        .name = "local",
        .create = local_create,
        .describe = local_describe,
        .destroy = local_destroy,
        .route = local_route,
        .list = local_list,
        .tenant_of = local_tenant_of,
        .serving = local_serving,
        .metrics = local_metrics,
        .free = local_free,
};

scheduler *scheduler_local_new(const local_config *cfg, cs_error **err)
{
        local *l = cs_xcalloc(1, sizeof(*l));
        _cleanup_free_ char *list = cs_xstrdup(cfg->agents);
        char *save = NULL;

        l->s.ops = &local_ops;
        l->cfg = *cfg;
        l->cfg.agents = NULL; /* not kept */
        pthread_mutex_init(&l->lock, NULL);
        cs_cond_init_monotonic(&l->cond);
        for (int i = 0; i < SESSION_LOCKS; i++)
                pthread_mutex_init(&l->session_locks[i], NULL);
        for (char *a = strtok_r(list, ", ", &save); a; a = strtok_r(NULL, ", ", &save)) {
                if (l->n_agents == MAX_AGENTS) {
                        cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                     "--agents: more than %d agents", MAX_AGENTS);
                        goto fail;
                }
                l->agents[l->n_agents].addr = cs_xstrdup(a);
                l->agents[l->n_agents].ch = rpc_channel_new(a);
                l->n_agents++;
        }
        if (l->n_agents == 0) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "--agents: no node agent given");
                goto fail;
        }
        /* Learn what the reachable agents hold before serving anything. */
        for (int i = 0; i < l->n_agents; i++)
                agent_poll(l, i);
        if (pthread_create(&l->poller, NULL, poller_main, l) != 0) {
                cs_error_errno(err, errno, "cannot start the agent poller");
                goto fail;
        }
        return &l->s;
fail:
        l->stopping = true;
        for (int i = 0; i < l->n_agents; i++) {
                rpc_channel_free(l->agents[i].ch);
                free(l->agents[i].addr);
        }
        while (l->map) {
                entry *next = l->map->next;
                free(l->map->tenant_id);
                free(l->map->session_id);
                free(l->map);
                l->map = next;
        }
        free(l);
        return NULL;
}
