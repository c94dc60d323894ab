/* The kube scheduler's node agents: which agent pod serves a node (from the agent pod
 * cache), one pooled gRPC channel per agent address, held by the routes that use it and
 * swept once no route holds it and no agent pod has its address; the routes themselves and
 * the usage call. Owns the channel pool (under kube.lock, see scheduler_kube_internal.h);
 * touches the agent cache (reads) and the agents (GetUsage). Speaks the agents' protobuf. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nodeagent/v1/nodeagent.pb-c.h"
#include "pbconv.h"
#include "scheduler_kube_internal.h"
#include "util.h"

#define NA(name) "/nodeagent.v1.NodeAgent/" name
/* A channel no route holds and no agent pod has the address of any more (the pod moved to
 * another IP, its node went away) is freed by the first lookup after this long. */
#define CHANNEL_SWEEP_MS 60000
/* A node whose agent pod is not up (being replaced: a DaemonSet rollout, a crashed agent's
 * restart) is waited for this long within the call's deadline before the call fails with
 * UNAVAILABLE, as an API server that cannot be reached is (kube_api.c): a rollout takes a
 * few seconds per node, and a call that waits them out is one the client need not retry. */
#define AGENT_WAIT_MS 10000
/* The wait looks at the client's cancellation at least this often. */
#define AGENT_WAIT_SLICE_MS 250

static bool match_agent(json_t *pod, void *userdata)
{
        const char *node = userdata;
        const char *n = kube_get_str(pod, "spec.nodeName");
        const char *phase = kube_get_str(pod, "status.phase");
        const char *ip = kube_get_str(pod, "status.podIP");

        return n && strcmp(n, node) == 0 && phase && strcmp(phase, "Running") == 0 && ip && ip[0] &&
               !kobj_being_deleted(pod);
}

/* The agent's gRPC port: its first container's port named "grpc", else --agent-port. */
static int64_t agent_port_of(kube *k, json_t *agent)
{
        json_t *ports = kube_get_key(
                json_array_get(kube_get_key(agent, "spec", "containers", NULL), 0), "ports", NULL);
        json_t *p;
        size_t i;

        json_array_foreach(ports, i, p)
        {
                const char *name = json_string_value(json_object_get(p, "name"));
                json_int_t port = json_integer_value(json_object_get(p, "containerPort"));
                if (name && strcmp(name, "grpc") == 0 && port > 0 && port < 65536)
                        return port;
        }
        return k->agent_port;
}

/* An agent pod's gRPC address ("ip:port", "[ip6]:port"), malloc'd; NULL without a pod IP. */
static char *agent_addr(kube *k, json_t *agent)
{
        const char *ip = kube_get_str(agent, "status.podIP");

        if (!ip || !ip[0])
                return NULL;
        return cs_xasprintf(strchr(ip, ':') ? "[%s]:%" PRId64 : "%s:%" PRId64, ip,
                            agent_port_of(k, agent));
}

static bool match_addr(json_t *agent, void *userdata)
{
        kube *k = ((void **)userdata)[0];
        _cleanup_free_ char *addr = agent_addr(k, agent);

        return addr && strcmp(addr, ((void **)userdata)[1]) == 0;
}

/* Frees the channels no route holds whose address no agent pod has any more. */
static void channels_sweep_locked(kube *k)
{
        int64_t now = cs_now_monotonic_ms();

        if (now - k->swept_ms < CHANNEL_SWEEP_MS)
                return;
        k->swept_ms = now;
        for (channel **pp = &k->channels; *pp;) {
                channel *c = *pp;
                void *ud[2] = { k, c->addr };
                _cleanup_json_ json_t *agent =
                        c->refs ? NULL : kube_cache_find(k->agents, match_addr, ud);

                if (c->refs || agent) {
                        pp = &c->next;
                        continue;
                }
                *pp = c->next;
                rpc_channel_free(c->ch);
                free(c->addr);
                free(c);
        }
}

/* The address of the agent pod on node that is up, malloc'd; waits for one (the agent cache
 * changing) for up to AGENT_WAIT_MS within the call's deadline. NULL with UNAVAILABLE when
 * none came, or the call's own status when it was cancelled or its deadline passed. */
static char *await_agent_addr(kube *k, const fe_ctx *ctx, const char *node, cs_error **err)
{
        int64_t start = cs_now_monotonic_ms();
        int64_t until = min64(ctx->deadline_ms, start + AGENT_WAIT_MS);

        for (;;) {
                uint64_t v = kube_cache_version(k->agents);
                _cleanup_json_ json_t *agent =
                        kube_cache_find(k->agents, match_agent, (void *)node);
                char *addr = agent ? agent_addr(k, agent) : NULL;
                int64_t now = cs_now_monotonic_ms();

                if (addr) {
                        if (now - start >= AGENT_WAIT_SLICE_MS)
                                log_info("node agent on node %s is up again after %" PRId64 " ms",
                                         node, now - start);
                        return addr;
                }
                if (fe_ctx_cancelled(ctx) || now >= ctx->deadline_ms) {
                        cs_error_set(
                                err, fe_ctx_cancel_status(ctx),
                                "no node agent on node %s: the call ended after waiting %" PRId64
                                " ms for one",
                                node, now - start);
                        return NULL;
                }
                if (now >= until) {
                        cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                     "no node agent on node %s (waited %" PRId64 " ms for one)",
                                     node, now - start);
                        return NULL;
                }
                kube_cache_wait_change(k->agents, v, min64(until, now + AGENT_WAIT_SLICE_MS));
        }
}

/* The channel to the agent on node, held (channel_release when done). */
static int agent_channel(kube *k, const fe_ctx *ctx, const char *node, channel **ret,
                         cs_error **err)
{
        _cleanup_free_ char *addr = await_agent_addr(k, ctx, node, err);
        channel *c;

        if (!addr)
                return -1;
        pthread_mutex_lock(&k->lock);
        channels_sweep_locked(k);
        for (c = k->channels; c; c = c->next) {
                if (strcmp(c->addr, addr) == 0)
                        break;
        }
        if (!c) {
                c = cs_xcalloc(1, sizeof(*c));
                c->addr = TAKE_PTR(addr);
                c->ch = rpc_channel_new(c->addr);
                c->next = k->channels;
                k->channels = c;
        }
        c->refs++;
        pthread_mutex_unlock(&k->lock);
        *ret = c;
        return 0;
}

static void channel_release(kube *k, channel *c)
{
        pthread_mutex_lock(&k->lock);
        c->refs--;
        pthread_mutex_unlock(&k->lock);
}

typedef struct channel_hold {
        kube *k;
        channel *c;
} channel_hold;

static void channel_hold_end(void *arg)
{
        channel_hold *h = arg;

        channel_release(h->k, h->c);
        free(h);
}

int kagent_route(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, fe_route *ret,
                 cs_error **err)
{
        const char *node = kube_get_str(pod, "spec.nodeName");
        const char *mp = kobj_workspace_mount_path(pod);
        channel_hold *h;
        channel *c = NULL;

        memset(ret, 0, sizeof(*ret));
        if (!node || !node[0])
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "sandbox %s has no node yet", id);
        if (!mp || strlen(mp) >= sizeof(ret->mount_path))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod of sandbox %s has no usable workspace volumeMount", id);
        if (agent_channel(k, ctx, node, &c, err) < 0)
                return -1;
        h = cs_xcalloc(1, sizeof(*h));
        h->k = k;
        h->c = c;
        ret->channel = c->ch;
        ret->release = channel_hold_end;
        ret->release_arg = h;
        snprintf(ret->sandbox_id, sizeof(ret->sandbox_id), "%s", id);
        snprintf(ret->pod_namespace, sizeof(ret->pod_namespace), "%s",
                 kube_get_str(pod, "metadata.namespace") ?: k->ns);
        snprintf(ret->pod_name, sizeof(ret->pod_name), "%s",
                 kube_get_str(pod, "metadata.name") ?: "");
        snprintf(ret->pod_uid, sizeof(ret->pod_uid), "%s", kube_get_str(pod, "metadata.uid") ?: "");
        snprintf(ret->mount_path, sizeof(ret->mount_path), "%s", mp);
        return 0;
}

int kagent_usage(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, usage_metrics *ret,
                 cs_error **err)
{
        Nodeagent__V1__GetUsageRequest req = NODEAGENT__V1__GET_USAGE_REQUEST__INIT;
        Nodeagent__V1__SandboxRef ref = NODEAGENT__V1__SANDBOX_REF__INIT;
        Nodeagent__V1__PodRef pr = NODEAGENT__V1__POD_REF__INIT;
        Nodeagent__V1__GetUsageResponse *resp = NULL;
        rpc_call_options opts = { .timeout_ms = k->agent_timeout_ms, .parent = ctx->parent };
        fe_route route;
        int r;

        if (kagent_route(k, ctx, id, pod, &route, err) < 0)
                return -1;
        pr.pod_namespace = route.pod_namespace;
        pr.pod_name = route.pod_name;
        pr.pod_uid = route.pod_uid;
        pr.mount_path = route.mount_path;
        ref.sandbox_id = (char *)id;
        ref.pod = &pr;
        req.ref = &ref;
        r = rpc_unary(route.channel, NA("GetUsage"), &req.base,
                      &nodeagent__v1__get_usage_response__descriptor, &opts,
                      (ProtobufCMessage **)&resp, err);
        if (r < 0)
                cs_error_prefix(err, "node agent %s", rpc_channel_target(route.channel));
        fe_route_release(&route);
        if (r < 0)
                return -1;
        pb_usage_read(resp->usage, ret);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        kobj_usage_subtract_baseline(pod, ret);
        return 0;
}

void kagent_channels_free(kube *k)
{
        while (k->channels) {
                channel *next = k->channels->next;
                rpc_channel_free(k->channels->ch);
                free(k->channels->addr);
                free(k->channels);
                k->channels = next;
        }
}

/* An agent pod is up when it could be routed to: Running, with an IP, not being deleted. */
static void agent_up(json_t *pod, void *userdata)
{
        cs_mpage *p = userdata;
        const char *node = kube_get_str(pod, "spec.nodeName");
        const char *labels[] = { "agent", node ? node : "", NULL };

        if (node)
                cs_mpage_sample_u64(p, "compute_agent_up", labels, match_agent(pod, (void *)node));
}

static void first_image(json_t *pod, void *userdata)
{
        char **image = userdata;
        const char *node = kube_get_str(pod, "spec.nodeName");
        const char *s = kube_get_str(
                json_array_get(kube_get_key(pod, "spec", "containers", NULL), 0), "image");

        if (!*image && node && s && s[0] && match_agent(pod, (void *)node))
                *image = cs_xstrdup(s);
}

char *kagent_image(kube *k)
{
        char *image = NULL;

        kube_cache_each(k->agents, first_image, &image);
        return image;
}

void kagent_metrics(kube *k, cs_mpage *p)
{
        cs_mpage_family(p, "compute_agent_up", "gauge",
                        "1 when the node's agent pod can be called (Running, with an IP), 0 "
                        "when not.");
        kube_cache_each(k->agents, agent_up, p);
}
