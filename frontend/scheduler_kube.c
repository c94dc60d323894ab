/* The Kubernetes scheduler: each sandbox is a gVisor Pod with a workspace PVC, made through
 * the API server; the node agent DaemonSet's pod on the sandbox pod's node serves its exec,
 * file and usage calls. Objects, names, labels and annotations: docs/kube.md.
 *
 * State: none of its own. The API server is the record; two list+watch caches (the sandbox
 * pods, the agent pods) answer the hot paths (status, routing, waiting for READY), and
 * direct reads cover what a cache may not have seen yet (another replica's fresh pod) and
 * what it does not hold (the PVCs, read when a status depends on them).
 *
 * One sandbox per session without a lock anywhere: the pod's name is derived from the
 * session, so a retried or concurrent create, on any replica, POSTs the same name; the API
 * server lets one win and answers the others 409, and they adopt the winner's sandbox id
 * from its labels.
 *
 * Destroy records the end on the PVC (delete-after, destroyed-at, final usage) before it
 * deletes the pod, so an interrupted destroy is seen as DESTROYED and finished by the next
 * destroy, create or GC pass.
 *
 * This file talks to the agents, so it speaks their protobuf. */
#include <ctype.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <openssl/sha.h>

#include "kube_cache.h"
#include "kube_client.h"
#include "sandbox_limits.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "path.h"
#include "pbconv.h"
#include "scheduler.h"
#include "usage_json.h"
#include "util.h"
#include "uuid.h"

#define NA(name) "/nodeagent.v1.NodeAgent/" name

#define LABEL_MANAGED_BY "app.kubernetes.io/managed-by"
#define LABEL_APP_NAME   "app.kubernetes.io/name"
#define LABEL_SANDBOX_ID "compute.paper-board.io/sandbox-id"
#define LABEL_TENANT_ID  "compute.paper-board.io/tenant-id"
#define LABEL_SESSION_ID "compute.paper-board.io/session-id"
#define ANN_TENANT_ID    "compute.paper-board.io/tenant-id"
#define ANN_SESSION_ID   "compute.paper-board.io/session-id"
#define ANN_SANDBOX_ID   "compute.paper-board.io/sandbox-id"
#define ANN_MOUNT_PATH   "compute.paper-board.io/mount-path"
#define ANN_DELETE_AFTER "compute.paper-board.io/delete-after"
#define ANN_DESTROYED_AT "compute.paper-board.io/destroyed-at"
#define ANN_FINAL_USAGE  "compute.paper-board.io/final-usage"
/* Not in the contract's list, harmless beside it: the pod's creation time, kept on the PVC
 * at destroy so a DESTROYED sandbox reports the created_at it always had. */
#define ANN_CREATED_AT    "compute.paper-board.io/created-at"
#define MANAGED_BY        "compute-frontend"
#define SANDBOX_APP_NAME  "compute-sandbox"
#define SANDBOX_CONTAINER "sandbox"
#define WORKSPACE_VOLUME  "workspace"
#define SANDBOX_SELECTOR  LABEL_MANAGED_BY "=" MANAGED_BY
#define KEEPALIVE         "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"

#define IMAGE_MAX         1024
#define QUANTITY_MAX      32
#define STORAGE_CLASS_MAX 253

/* API requests that fail transiently (transport, 429, 5xx) are tried this many times in
 * all, API_BACKOFF_MS apart and doubling, within the call's deadline. */
#define API_ATTEMPTS 3
/* The GC leaves younger objects alone when it looks for orphans (a create makes the pod,
 * then the PVC, within a call's deadline). */
#define GC_ORPHAN_AGE_MS (10ll * 60 * 1000)
/* The longest a Retry-After from the API server makes a request wait. */
#define API_RETRY_AFTER_MAX_MS 30000
#define API_BACKOFF_MS         200
/* A create that finds the session's previous pod terminating waits this long for it. */
#define CREATE_WAIT_MS 30000
/* While waiting for a pod, re-read it directly at least this often (the cache may not have
 * it yet when another replica made it). */
#define WAIT_POLL_MS 1000
/* A channel no route holds and no agent pod has the address of any more (the pod moved to
 * another IP, its node went away) is freed by the first lookup after this long. */
#define CHANNEL_SWEEP_MS 60000

typedef struct channel {
        struct channel *next;
        char *addr;
        rpc_channel *ch;
        unsigned refs; /* routes holding it (until their call ends) */
} channel;

typedef struct kube {
        scheduler s;
        kube_client *kc;
        kube_cache *pods, *agents;
        char *ns, *agent_ns, *runtime_class, *storage_class, *size;
        int64_t agent_port, delete_grace_s, agent_timeout_ms, wait_ready_ms;

        pthread_mutex_t lock; /* channels */
        channel *channels;
        int64_t swept_ms;
} kube;

#define KUBE(s) ((kube *)(s))

/* --- small helpers --------------------------------------------------------------------- */

#define _cleanup_json_ _cleanup_(json_decrefp) /* jansson's own json_auto_t cleanup */

static void kube_response_clearp(kube_response *r)
{
        kube_response_clear(r);
}
#define _cleanup_resp_ _cleanup_(kube_response_clearp)

/* "sbx-" and the first 16 bytes of sha256(tenant NUL session), in hex. The ids are printable
 * ASCII (the service checks), so the NUL keeps the key unambiguous: ("a/b", "c") and
 * ("a", "b/c") name different pods. */
static void pod_name_for(const char *tenant, const char *session, char ret[static 4 + 32 + 1])
{
        size_t nt = strlen(tenant), ns = strlen(session);
        _cleanup_free_ char *key = cs_xmalloc(nt + 1 + ns);
        uint8_t md[SHA256_DIGEST_LENGTH];

        memcpy(key, tenant, nt);
        key[nt] = '\0';
        memcpy(key + nt + 1, session, ns);
        SHA256((const unsigned char *)key, nt + 1 + ns, md);
        memcpy(ret, "sbx-", 4);
        for (int i = 0; i < 16; i++)
                snprintf(ret + 4 + 2 * i, 3, "%02x", md[i]);
}

static bool streq0(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

static const char *label(json_t *obj, const char *key)
{
        return json_string_value(kube_get_key(obj, "metadata", "labels", key, NULL));
}

static const char *annotation(json_t *obj, const char *key)
{
        return json_string_value(kube_get_key(obj, "metadata", "annotations", key, NULL));
}

static bool being_deleted(json_t *obj)
{
        return kube_get_str(obj, "metadata.deletionTimestamp") != NULL;
}

static int64_t time_of(const char *s)
{
        int64_t ms = s ? kube_time_parse(s) : -1;

        return ms > 0 ? ms : 0;
}

/* A valid label value: at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends
 * (tenant and session ids that are not are kept in the annotations only). */
static bool label_value_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
                return false;
        for (; *s; s++) {
                if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
                        return false;
        }
        return true;
}

static int64_t min64(int64_t a, int64_t b)
{
        return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
        return a > b ? a : b;
}

/* --- API requests ---------------------------------------------------------------------- */

static bool transient(long status)
{
        return status == 429 || status >= 500;
}

/* Sends one request, trying again after transport failures, 429 and 5xx (API_ATTEMPTS in
 * all, within the call's deadline, each attempt bounded by what is left of it and ended by
 * the call's cancellation; the Status body's retryAfterSeconds is honoured when it fits).
 * 0 with *ret for any other answer, whatever its status (the caller decides what a 404 or
 * 409 means); -1 with UNAVAILABLE when every attempt failed, DEADLINE_EXCEEDED when the
 * call's deadline passed, or the client's own error (INTERNAL: a malformed answer). */
static int api(kube_client *kc, const fe_ctx *ctx, const char *method, const char *path,
               json_t *body, kube_response *ret, cs_error **err)
{
        const fe_ctx none = FE_CTX_NONE;
        int64_t deadline, delay = API_BACKOFF_MS;
        int cancel_fd;

        if (!ctx)
                ctx = &none;
        deadline = ctx->deadline_ms;
        cancel_fd = ctx->cancel_fd;

        for (int attempt = 1;; attempt++) {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *why = NULL;
                kube_response resp = { 0 };
                int64_t wait = delay, timeout = 0;

                if (deadline != INT64_MAX) {
                        timeout = deadline - cs_now_monotonic_ms();
                        if (timeout <= 0)
                                return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                                    "Kubernetes API %s %s: the call's deadline "
                                                    "passed",
                                                    method, path);
                }
                if (kube_request_ex(kc, method, path, body, timeout, cancel_fd, &resp, &e) == 0 &&
                    !transient(resp.status)) {
                        *ret = resp;
                        return 0;
                }
                if (e && e->code != GRPC_STATUS_UNAVAILABLE) {
                        /* Not transient: a malformed answer or a bad request of ours. */
                        *err = TAKE_PTR(e);
                        return -1;
                }
                if (e) {
                        why = cs_xstrdup(e->msg);
                } else {
                        json_int_t ra = json_integer_value(
                                kube_get_key(resp.body, "details", "retryAfterSeconds", NULL));
                        why = cs_xasprintf("HTTP %ld: %s", resp.status,
                                           kube_response_message(&resp));
                        if (ra > 0)
                                wait = (int64_t)min64(ra, API_RETRY_AFTER_MAX_MS / 1000) * 1000;
                        kube_response_clear(&resp);
                }
                if (attempt >= API_ATTEMPTS || fe_ctx_cancelled(ctx) ||
                    (deadline != INT64_MAX && cs_now_monotonic_ms() + wait >= deadline))
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "Kubernetes API %s %s: %s", method, path, why);
                fe_ctx_sleep(ctx, min64(wait, API_RETRY_AFTER_MAX_MS));
                delay *= 2;
        }
}

/* An answer the caller did not expect, as the API reference's INTERNAL with the API
 * server's message; quota and admission refusals say so. */
static int api_fail(const kube_response *r, cs_error **err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int api_fail(const kube_response *r, cs_error **err, const char *fmt, ...)
{
        _cleanup_free_ char *what = NULL;
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&what, fmt, ap) < 0)
                what = NULL;
        va_end(ap);
        if (r->status == 403)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s: forbidden by quota/admission: %s", what ?: "",
                                    kube_response_message(r));
        if (r->status == 422)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: rejected as invalid: %s",
                                    what ?: "", kube_response_message(r));
        return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: HTTP %ld: %s", what ?: "", r->status,
                            kube_response_message(r));
}

static char *pods_path(const kube *k)
{
        return cs_xasprintf("/api/v1/namespaces/%s/pods", k->ns);
}

static char *pvcs_path(const kube *k)
{
        return cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims", k->ns);
}

/* GETs one object by name: 0 with *ret (NULL when it does not exist), or -1. */
static int get_named(kube *k, const fe_ctx *ctx, const char *collection, const char *name,
                     json_t **ret, cs_error **err)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/%s", collection, name);
        _cleanup_resp_ kube_response r = { 0 };

        *ret = NULL;
        if (api(k->kc, ctx, "GET", path, NULL, &r, err) < 0)
                return -1;
        if (r.status == 404)
                return 0;
        if (r.status != 200 || !json_is_object(r.body))
                return api_fail(&r, err, "reading %s", path);
        *ret = TAKE_PTR(r.body);
        return 0;
}

static int get_pvc(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err)
{
        _cleanup_free_ char *coll = pvcs_path(k), *name = cs_xasprintf("ws-%s", id);

        return get_named(k, ctx, coll, name, ret, err);
}

/* The sandbox's pod: from the cache, else (another replica may have just made it, or
 * `fresh` asks for the API server's word) from the API server by label. 0 with *ret (NULL:
 * none), or -1. */
static int find_pod_fresh(kube *k, const fe_ctx *ctx, const char *id, bool fresh, json_t **ret,
                          cs_error **err)
{
        _cleanup_free_ char *coll = NULL, *sel = NULL, *path = NULL;
        _cleanup_resp_ kube_response r = { 0 };
        json_t *items;

        *ret = fresh ? NULL : kube_cache_find_label(k->pods, LABEL_SANDBOX_ID, id);
        if (*ret)
                return 0;
        coll = pods_path(k);
        sel = kube_escape(LABEL_SANDBOX_ID "=");
        path = cs_xasprintf("%s?labelSelector=%s%s", coll, sel, id);
        if (api(k->kc, ctx, "GET", path, NULL, &r, err) < 0)
                return -1;
        if (r.status != 200 || !json_is_object(r.body))
                return api_fail(&r, err, "listing the pods of sandbox %s", id);
        items = json_object_get(r.body, "items");
        if (json_array_size(items) > 0) {
                *ret = json_incref(json_array_get(items, 0));
                kube_cache_upsert(k->pods, *ret);
        }
        return 0;
}

static int find_pod(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err)
{
        return find_pod_fresh(k, ctx, id, false, ret, err);
}

/* DELETE with preconditions (uid and resourceVersion, each when given): 0 when this
 * deleted it, 1 when it was already gone or is no longer the object judged (404, 409), -1
 * otherwise. */
static int delete_exact(kube_client *kc, const fe_ctx *ctx, const char *path, const char *uid,
                        const char *rv, cs_error **err)
{
        _cleanup_json_ json_t *opts =
                json_pack("{s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions");
        _cleanup_resp_ kube_response r = { 0 };
        json_t *pre = json_object();

        if (uid)
                json_object_set_new(pre, "uid", json_string(uid));
        if (rv)
                json_object_set_new(pre, "resourceVersion", json_string(rv));
        json_object_set_new(opts, "preconditions", pre);
        if (api(kc, ctx, "DELETE", path, opts, &r, err) < 0)
                return -1;
        if (r.status == 200 || r.status == 202)
                return 0;
        if (r.status == 404 || r.status == 409)
                return 1;
        return api_fail(&r, err, "deleting %s", path);
}

static int delete_pod(kube *k, const fe_ctx *ctx, json_t *pod, cs_error **err)
{
        _cleanup_free_ char *coll = pods_path(k);
        _cleanup_free_ char *path =
                cs_xasprintf("%s/%s", coll, kube_get_str(pod, "metadata.name") ?: "");

        return delete_exact(k->kc, ctx, path, kube_get_str(pod, "metadata.uid"), NULL, err) < 0 ? -1
                                                                                                : 0;
}

/* --- status ---------------------------------------------------------------------------- */

static bool pod_ready(json_t *pod)
{
        json_t *conds = kube_get_key(pod, "status", "conditions", NULL), *c;
        size_t i;

        json_array_foreach(conds, i, c)
        {
                const char *type = json_string_value(json_object_get(c, "type"));
                const char *st = json_string_value(json_object_get(c, "status"));
                if (type && st && strcmp(type, "Ready") == 0)
                        return strcmp(st, "True") == 0;
        }
        return false;
}

/* The contract's mapping: Pending -> STARTING, Running and Ready -> READY, Running not
 * ready -> STARTING, Failed or Succeeded -> FAILED. */
static fe_status pod_status(json_t *pod)
{
        const char *phase = kube_get_str(pod, "status.phase") ?: "";

        /* Being deleted by someone else (a destroy marks the PVC first, and the caller
         * checks that): it will not serve again. */
        if (being_deleted(pod))
                return FE_STATUS_FAILED;
        if (strcmp(phase, "Running") == 0)
                return pod_ready(pod) ? FE_STATUS_READY : FE_STATUS_STARTING;
        if (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)
                return FE_STATUS_FAILED;
        return FE_STATUS_STARTING;
}

static bool pvc_destroyed(json_t *pvc)
{
        return pvc && annotation(pvc, ANN_DELETE_AFTER);
}

/* The view of a sandbox whose PVC records its destruction. */
static void view_destroyed(const char *id, json_t *pvc, fe_view *ret)
{
        const char *usage = annotation(pvc, ANN_FINAL_USAGE);
        _cleanup_json_ json_t *j = usage ? json_loads(usage, 0, NULL) : NULL;

        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = FE_STATUS_DESTROYED;
        ret->created_at_ms = time_of(annotation(pvc, ANN_CREATED_AT));
        if (!ret->created_at_ms)
                ret->created_at_ms = time_of(kube_get_str(pvc, "metadata.creationTimestamp"));
        ret->destroyed_at_ms = time_of(annotation(pvc, ANN_DESTROYED_AT));
        usage_from_json(j, &ret->usage);
}

/* --- node agents ----------------------------------------------------------------------- */

static bool match_agent(json_t *pod, void *userdata)
{
        const char *node = userdata;
        const char *n = kube_get_str(pod, "spec.nodeName");
        const char *phase = kube_get_str(pod, "status.phase");
        const char *ip = kube_get_str(pod, "status.podIP");

        return n && strcmp(n, node) == 0 && phase && strcmp(phase, "Running") == 0 && ip && ip[0] &&
               !being_deleted(pod);
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

/* The channel to the agent on node, borrowed for the scheduler's life. */
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

/* The channel to the agent on node, held (channel_release when done). */
static int agent_channel(kube *k, const char *node, channel **ret, cs_error **err)
{
        _cleanup_json_ json_t *agent = kube_cache_find(k->agents, match_agent, (void *)node);
        _cleanup_free_ char *addr = agent ? agent_addr(k, agent) : NULL;
        channel *c;

        if (!addr)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "no node agent on node %s", node);
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

/* Where the pod mounts its workspace: the sandbox container's volumeMount of the
 * "workspace" volume (a pod's spec cannot change; its annotations can). */
static const char *workspace_mount_path(json_t *pod)
{
        json_t *containers = kube_get_key(pod, "spec", "containers", NULL), *c, *m;
        size_t i, j;

        json_array_foreach(containers, i, c)
        {
                if (!streq0(kube_get_str(c, "name"), SANDBOX_CONTAINER))
                        continue;
                json_array_foreach(json_object_get(c, "volumeMounts"), j, m)
                {
                        if (streq0(kube_get_str(m, "name"), WORKSPACE_VOLUME))
                                return kube_get_str(m, "mountPath");
                }
        }
        return NULL;
}

/* The route to a sandbox pod that is on a node; *ret_hold is the channel it holds
 * (channel_release when the route is no longer used). */
static int route_of_pod(kube *k, const char *id, json_t *pod, fe_route *ret, channel **ret_hold,
                        cs_error **err)
{
        const char *node = kube_get_str(pod, "spec.nodeName");
        const char *mp = workspace_mount_path(pod);
        channel *c = NULL;

        memset(ret, 0, sizeof(*ret));
        if (!node || !node[0])
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "sandbox %s has no node yet", id);
        if (!mp || strlen(mp) >= sizeof(ret->mount_path))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod of sandbox %s has no usable workspace volumeMount", id);
        if (agent_channel(k, node, &c, err) < 0)
                return -1;
        ret->channel = c->ch;
        *ret_hold = c;
        snprintf(ret->sandbox_id, sizeof(ret->sandbox_id), "%s", id);
        snprintf(ret->pod_namespace, sizeof(ret->pod_namespace), "%s",
                 kube_get_str(pod, "metadata.namespace") ?: k->ns);
        snprintf(ret->pod_name, sizeof(ret->pod_name), "%s",
                 kube_get_str(pod, "metadata.name") ?: "");
        snprintf(ret->pod_uid, sizeof(ret->pod_uid), "%s", kube_get_str(pod, "metadata.uid") ?: "");
        snprintf(ret->mount_path, sizeof(ret->mount_path), "%s", mp);
        return 0;
}

/* The sandbox's cumulative usage, measured now by its node's agent. */
static int agent_usage(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, usage_metrics *ret,
                       cs_error **err)
{
        Nodeagent__V1__GetUsageRequest req = NODEAGENT__V1__GET_USAGE_REQUEST__INIT;
        Nodeagent__V1__SandboxRef ref = NODEAGENT__V1__SANDBOX_REF__INIT;
        Nodeagent__V1__PodRef pr = NODEAGENT__V1__POD_REF__INIT;
        Nodeagent__V1__GetUsageResponse *resp = NULL;
        rpc_call_options opts = { .timeout_ms = k->agent_timeout_ms, .parent = ctx->parent };
        fe_route route;
        channel *hold;
        int r;

        if (route_of_pod(k, id, pod, &route, &hold, err) < 0)
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
        channel_release(k, hold);
        if (r < 0)
                return -1;
        pb_usage_read(resp->usage, ret);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return 0;
}

/* The view of a sandbox whose pod exists (and whose PVC does not record a destroy). Usage
 * is the agent's while the pod runs; a describe still answers when the agent cannot. */
static void view_of_pod(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, fe_view *ret)
{
        const char *phase = kube_get_str(pod, "status.phase");

        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = pod_status(pod);
        ret->created_at_ms = time_of(kube_get_str(pod, "metadata.creationTimestamp"));
        if (phase && strcmp(phase, "Running") == 0) {
                _cleanup_error_ cs_error *e = NULL;
                if (agent_usage(k, ctx, id, pod, &ret->usage, &e) < 0)
                        fe_ctx_log(ctx, CS_LOG_WARN, "usage not available: %s", e->msg);
        }
}

/* --- create ---------------------------------------------------------------------------- */

typedef struct norm_spec {
        const char *tenant_id, *session_id, *image, *storage_class, *size, *mount_path;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
} norm_spec;

/* A Kubernetes quantity as a PVC size takes it: digits, an optional fraction, an optional
 * binary or decimal suffix ("10Gi", "500M", "1.5Ti"). */
static bool quantity_ok(const char *s)
{
        static const char *const suffixes[] = { "",  "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
                                                "k", "M",  "G",  "T",  "P",  "E" };
        const char *p = s;

        if (strlen(s) > QUANTITY_MAX || !isdigit((unsigned char)*p))
                return false;
        while (isdigit((unsigned char)*p))
                p++;
        if (*p == '.') {
                p++;
                if (!isdigit((unsigned char)*p))
                        return false;
                while (isdigit((unsigned char)*p))
                        p++;
        }
        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                if (strcmp(p, suffixes[i]) == 0)
                        return true;
        }
        return false;
}

/* A DNS subdomain name (what a StorageClass is named by). */
static bool dns_subdomain_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > STORAGE_CLASS_MAX || !isalnum((unsigned char)s[0]) ||
            !isalnum((unsigned char)s[n - 1]))
                return false;
        for (; *s; s++) {
                if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' ||
                      *s == '.'))
                        return false;
        }
        return true;
}

static bool image_ok(const char *s)
{
        if (!s[0] || strlen(s) > IMAGE_MAX)
                return false;
        for (; *s; s++) {
                if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
                        return false;
        }
        return true;
}

/* The request with the defaults filled in, checked as the node agent checks it in local
 * mode (INVALID_ARGUMENT rather than the API server's 422 as INTERNAL). */
static int spec_normalise(kube *k, const fe_spec *in, norm_spec *out, cs_error **err)
{
        *out = (norm_spec){
                .tenant_id = in->tenant_id,
                .session_id = in->session_id,
                .image = in->image ?: "",
                .storage_class = in->storage_class && in->storage_class[0] ? in->storage_class
                                                                           : k->storage_class,
                .size = in->size && in->size[0] ? in->size : k->size,
                .mount_path = in->mount_path && in->mount_path[0] ? in->mount_path
                                                                  : CS_DEFAULT_MOUNT_PATH,
                .cpu_millis = in->cpu_millis ?: CS_DEFAULT_CPU_MILLIS,
                .memory_bytes = in->memory_bytes ?: CS_DEFAULT_MEMORY,
                .max_runtime_ms = in->max_runtime_ms ?: CS_DEFAULT_RUNTIME_MS,
        };
        if (!out->image[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "image is empty and the frontend has no default "
                                    "(--sandbox-image, SANDBOX_IMAGE)");
        if (!image_ok(out->image))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "image must be 1..%d printable characters without spaces",
                                    IMAGE_MAX);
        if (cs_mount_path_check(out->mount_path, err) < 0)
                return -1;
        if (!quantity_ok(out->size))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace size '%.40s' is not a quantity like 10Gi",
                                    out->size);
        if (out->storage_class[0] && !dns_subdomain_ok(out->storage_class))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "storage_class '%.64s' is not a valid StorageClass name",
                                    out->storage_class);
        if (out->cpu_millis < CS_MIN_CPU_MILLIS || out->cpu_millis > CS_MAX_CPU_MILLIS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cpu_millis must be %d..%d",
                                    CS_MIN_CPU_MILLIS, CS_MAX_CPU_MILLIS);
        if (out->memory_bytes < CS_MIN_MEMORY || out->memory_bytes > CS_MAX_MEMORY)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "memory_bytes must be %llu..%llu", CS_MIN_MEMORY,
                                    CS_MAX_MEMORY);
        if (out->max_runtime_ms < CS_MIN_RUNTIME_MS || out->max_runtime_ms > CS_MAX_RUNTIME_MS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "max_runtime must be 1 s..24 h");
        return 0;
}

static json_t *labels_for(const norm_spec *spec, const char *id)
{
        json_t *l = json_pack("{s:s, s:s, s:s}", LABEL_MANAGED_BY, MANAGED_BY, LABEL_APP_NAME,
                              SANDBOX_APP_NAME, LABEL_SANDBOX_ID, id);

        if (label_value_ok(spec->tenant_id))
                json_object_set_new(l, LABEL_TENANT_ID, json_string(spec->tenant_id));
        if (label_value_ok(spec->session_id))
                json_object_set_new(l, LABEL_SESSION_ID, json_string(spec->session_id));
        return l;
}

static json_t *pod_build(kube *k, const norm_spec *spec, const char *name, const char *id)
{
        _cleanup_free_ char *cpu = cs_xasprintf("%" PRIu32 "m", spec->cpu_millis);
        _cleanup_free_ char *mem = cs_xasprintf("%" PRIu64, spec->memory_bytes);
        _cleanup_free_ char *claim = cs_xasprintf("ws-%s", id);
        json_t *res = json_pack("{s:s, s:s}", "cpu", cpu, "memory", mem);
        json_t *pod = json_pack(
                "{s:s, s:s,"
                " s:{s:s, s:s, s:o, s:{s:s, s:s, s:s, s:s}},"
                " s:{s:s, s:b, s:b, s:I, s:I,"
                "    s:[{s:s, s:s, s:[s, s, s], s:{s:O, s:O}, s:[{s:s, s:s}]}],"
                "    s:[{s:s, s:{s:s}}]}}",
                "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", k->ns,
                "labels", labels_for(spec, id), "annotations", ANN_TENANT_ID, spec->tenant_id,
                ANN_SESSION_ID, spec->session_id, ANN_SANDBOX_ID, id, ANN_MOUNT_PATH,
                spec->mount_path, "spec", "restartPolicy", "Never", "automountServiceAccountToken",
                0, "enableServiceLinks", 0, "activeDeadlineSeconds",
                (json_int_t)((spec->max_runtime_ms + 999) / 1000), "terminationGracePeriodSeconds",
                (json_int_t)5, "containers", "name", SANDBOX_CONTAINER, "image", spec->image,
                "command", "/bin/sh", "-c", KEEPALIVE, "resources", "requests", res, "limits", res,
                "volumeMounts", "name", WORKSPACE_VOLUME, "mountPath", spec->mount_path, "volumes",
                "name", WORKSPACE_VOLUME, "persistentVolumeClaim", "claimName", claim);

        json_decref(res);
        if (pod && k->runtime_class[0])
                json_object_set_new(json_object_get(pod, "spec"), "runtimeClassName",
                                    json_string(k->runtime_class));
        return pod;
}

/* The workspace PVC; with annotations (a destroy that found no PVC) when given. */
static json_t *pvc_build(kube *k, const norm_spec *spec, const char *id, json_t *annotations)
{
        _cleanup_free_ char *name = cs_xasprintf("ws-%s", id);
        json_t *pvc = json_pack(
                "{s:s, s:s, s:{s:s, s:s, s:o, s:o},"
                " s:{s:[s], s:{s:{s:s}}}}",
                "apiVersion", "v1", "kind", "PersistentVolumeClaim", "metadata", "name", name,
                "namespace", k->ns, "labels", labels_for(spec, id), "annotations",
                annotations ? json_incref(annotations) : json_object(), "spec", "accessModes",
                "ReadWriteOnce", "resources", "requests", "storage", spec->size);

        if (pvc && spec->storage_class[0])
                json_object_set_new(json_object_get(pvc, "spec"), "storageClassName",
                                    json_string(spec->storage_class));
        return pvc;
}

/* Makes sure the sandbox's PVC exists (a frontend that died between the pod and the PVC is
 * repaired by the client's retry). */
static int ensure_pvc(kube *k, const fe_ctx *ctx, const norm_spec *spec, const char *id,
                      cs_error **err)
{
        _cleanup_json_ json_t *pvc = pvc_build(k, spec, id, NULL);
        _cleanup_free_ char *path = pvcs_path(k);
        _cleanup_resp_ kube_response r = { 0 };

        if (api(k->kc, ctx, "POST", path, pvc, &r, err) < 0)
                return -1;
        if (r.status == 201 || r.status == 200 || r.status == 409)
                return 0;
        return api_fail(&r, err, "creating PVC ws-%s", id);
}

/* Waits until the pod named name with uid is gone (or replaced). 0, or -1 (UNAVAILABLE
 * when it is still there at deadline). */
static int wait_pod_gone(kube *k, const fe_ctx *ctx, const char *name, const char *uid,
                         int64_t deadline, cs_error **err)
{
        _cleanup_free_ char *coll = pods_path(k);

        for (;;) {
                _cleanup_json_ json_t *pod = NULL;
                uint64_t v = kube_cache_version(k->pods);
                const char *u;

                if (get_named(k, ctx, coll, name, &pod, err) < 0)
                        return -1;
                u = kube_get_str(pod, "metadata.uid");
                if (!pod || !u || !uid || strcmp(u, uid) != 0)
                        return 0;
                if (cs_now_monotonic_ms() >= deadline || fe_ctx_cancelled(ctx))
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "the session's previous sandbox pod %s is still "
                                            "terminating; try again",
                                            name);
                kube_cache_wait_change(k->pods, v,
                                       min64(deadline, cs_now_monotonic_ms() + WAIT_POLL_MS));
        }
}

typedef enum adopt {
        ADOPT_USE,   /* the session's live sandbox: answer with it */
        ADOPT_RETRY, /* it went away (or was finished off): POST again */
} adopt;

/* The POST met an existing pod of that name: decides whether it is the session's live
 * sandbox (*ret_pod, *ret_id), or on its way out (then waits for it to go). */
static int adopt_existing(kube *k, const fe_ctx *ctx, const norm_spec *spec, const char *name,
                          int64_t deadline, json_t **ret_pod, adopt *ret, cs_error **err)
{
        _cleanup_free_ char *coll = pods_path(k);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;
        const char *id;

        if (get_named(k, ctx, coll, name, &pod, err) < 0)
                return -1;
        *ret = ADOPT_RETRY;
        if (!pod)
                return 0; /* deleted in between */
        id = label(pod, LABEL_SANDBOX_ID);
        if (!id || !cs_uuid_valid(id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod %s/%s exists but carries no valid %s label", k->ns, name,
                                    LABEL_SANDBOX_ID);
        /* The name is the session's; a pod of another session under it (a hash collision, or
         * an object someone else made) is never handed out. */
        if (!streq0(annotation(pod, ANN_TENANT_ID), spec->tenant_id) ||
            !streq0(annotation(pod, ANN_SESSION_ID), spec->session_id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod %s/%s belongs to another tenant or session (name "
                                    "collision); not using it",
                                    k->ns, name);
        if (!being_deleted(pod)) {
                if (get_pvc(k, ctx, id, &pvc, err) < 0)
                        return -1;
                if (!pvc_destroyed(pvc)) {
                        kube_cache_upsert(k->pods, pod);
                        *ret_pod = TAKE_PTR(pod);
                        *ret = ADOPT_USE;
                        return 0;
                }
                /* A destroy that recorded itself on the PVC and died before deleting the pod:
                 * finish it, then make the session a new sandbox. */
                fe_ctx_log(ctx, CS_LOG_INFO,
                           "finishing the interrupted destroy of sandbox %s (pod %s)", id, name);
                if (delete_pod(k, ctx, pod, err) < 0)
                        return -1;
        }
        return wait_pod_gone(k, ctx, name, kube_get_str(pod, "metadata.uid"), deadline, err);
}

static int kube_create(scheduler *s, const fe_spec *in, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_free_ char *coll = pods_path(k);
        _cleanup_json_ json_t *pod = NULL;
        int64_t deadline = min64(ctx->deadline_ms, cs_now_monotonic_ms() + CREATE_WAIT_MS);
        char name[4 + 32 + 1];
        const char *id;
        bool created = false;
        norm_spec spec;

        if (spec_normalise(k, in, &spec, err) < 0)
                return -1;
        pod_name_for(spec.tenant_id, spec.session_id, name);
        while (!pod) {
                _cleanup_resp_ kube_response r = { 0 };
                _cleanup_json_ json_t *body = NULL;
                char new_id[CS_UUID_STRLEN + 1];
                adopt a;

                if (cs_now_monotonic_ms() >= deadline || fe_ctx_cancelled(ctx))
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "pod %s/%s kept changing while being created; try "
                                            "again",
                                            k->ns, name);
                cs_uuid_generate(new_id);
                body = pod_build(k, &spec, name, new_id);
                if (api(k->kc, ctx, "POST", coll, body, &r, err) < 0)
                        return -1;
                if (r.status == 201 || r.status == 200) {
                        kube_cache_upsert(k->pods, r.body);
                        pod = TAKE_PTR(r.body);
                        created = true;
                        fe_ctx_log(ctx, CS_LOG_INFO, "created pod %s/%s for sandbox %s", k->ns,
                                   name, new_id);
                        break;
                }
                if (r.status != 409)
                        return api_fail(&r, err, "creating pod %s/%s", k->ns, name);
                if (adopt_existing(k, ctx, &spec, name, deadline, &pod, &a, err) < 0)
                        return -1;
        }
        id = label(pod, LABEL_SANDBOX_ID);
        if (!id)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "pod %s/%s has no %s label", k->ns,
                                    name, LABEL_SANDBOX_ID);
        if (ensure_pvc(k, ctx, &spec, id, err) < 0) {
                /* A PVC refused for good (quota, admission) would leave the new pod Pending
                 * forever: take it back. One that may still come (UNAVAILABLE) is left for
                 * the client's retry to complete. */
                if (created && (*err)->code != GRPC_STATUS_UNAVAILABLE) {
                        _cleanup_error_ cs_error *e = NULL;
                        if (delete_pod(k, ctx, pod, &e) < 0)
                                fe_ctx_log(ctx, CS_LOG_WARN,
                                           "cannot delete pod %s/%s after its PVC failed: %s",
                                           k->ns, name, e->msg);
                }
                return -1;
        }
        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = pod_status(pod);
        ret->created_at_ms = time_of(kube_get_str(pod, "metadata.creationTimestamp"));
        if (!ret->created_at_ms)
                ret->created_at_ms = cs_now_realtime_ms();
        return 0;
}

/* --- describe, destroy ----------------------------------------------------------------- */

static int kube_describe(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                         cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;

        if (find_pod(k, ctx, id, &pod, err) < 0 || get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (pvc_destroyed(pvc)) {
                view_destroyed(id, pvc, ret);
                return 0;
        }
        if (pod) {
                view_of_pod(k, ctx, id, pod, ret);
                return 0;
        }
        if (pvc) {
                /* The workspace without its pod, and no destroy recorded: the pod was deleted
                 * behind the frontend's back (eviction, a person). */
                memset(ret, 0, sizeof(*ret));
                ret->id = cs_xstrdup(id);
                ret->status = FE_STATUS_FAILED;
                ret->created_at_ms = time_of(kube_get_str(pvc, "metadata.creationTimestamp"));
                return 0;
        }
        return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
}

/* Records the destroy on the PVC: a merge patch guarded by the resourceVersion read, so two
 * destroys at once agree on one record. 1 when another destroy recorded it first (*pvc is
 * then re-read), 0 when this one did, -1 on failure. A missing PVC is created with the
 * record (the pod was made, the PVC never was). */
static int record_destroy(kube *k, const fe_ctx *ctx, const char *id, json_t **pvc,
                          json_t *annotations, cs_error **err)
{
        _cleanup_free_ char *coll = pvcs_path(k);
        _cleanup_free_ char *path = cs_xasprintf("%s/ws-%s", coll, id);
        _cleanup_resp_ kube_response r = { 0 };

        if (!*pvc) {
                norm_spec spec = { .tenant_id = "",
                                   .session_id = "",
                                   .size = k->size,
                                   .storage_class = k->storage_class };
                _cleanup_json_ json_t *body = pvc_build(k, &spec, id, annotations);
                if (api(k->kc, ctx, "POST", coll, body, &r, err) < 0)
                        return -1;
                if (r.status == 201 || r.status == 200)
                        return 0;
                if (r.status != 409)
                        return api_fail(&r, err, "creating PVC ws-%s", id);
        } else {
                _cleanup_json_ json_t *patch = json_pack(
                        "{s:{s:s?, s:O}}", "metadata", "resourceVersion",
                        kube_get_str(*pvc, "metadata.resourceVersion"), "annotations", annotations);
                if (api(k->kc, ctx, "PATCH", path, patch, &r, err) < 0)
                        return -1;
                if (r.status == 200)
                        return 0;
                if (r.status != 409 && r.status != 404)
                        return api_fail(&r, err, "annotating PVC ws-%s", id);
        }
        /* Changed or made meanwhile: read it again and let the caller decide. */
        json_decref(*pvc);
        *pvc = NULL;
        if (get_pvc(k, ctx, id, pvc, err) < 0)
                return -1;
        return 1;
}

static json_t *destroy_annotations(kube *k, json_t *pod, json_t *pvc, const usage_metrics *u,
                                   int64_t now)
{
        _cleanup_json_ json_t *usage = usage_to_json(u);
        _cleanup_free_ char *usage_text = json_dumps(usage, JSON_COMPACT);
        char destroyed[32], after[32], created[32];
        int64_t created_ms = time_of(kube_get_str(pod ?: pvc, "metadata.creationTimestamp"));

        return json_pack("{s:s, s:s, s:s, s:s}", ANN_DELETE_AFTER,
                         kube_time_format(now + k->delete_grace_s * 1000, after), ANN_DESTROYED_AT,
                         kube_time_format(now, destroyed), ANN_FINAL_USAGE, usage_text ?: "{}",
                         ANN_CREATED_AT, kube_time_format(created_ms ?: now, created));
}

static int kube_destroy(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                        cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;
        usage_metrics usage = { 0 };
        const char *phase;

        if (find_pod(k, ctx, id, &pod, err) < 0 || get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (!pod && !pvc)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        phase = kube_get_str(pod, "status.phase");
        if (!pvc_destroyed(pvc) && phase && strcmp(phase, "Running") == 0 && !being_deleted(pod)) {
                _cleanup_error_ cs_error *e = NULL;
                if (agent_usage(k, ctx, id, pod, &usage, &e) < 0)
                        fe_ctx_log(ctx, CS_LOG_WARN,
                                   "final usage not available, recorded as zero: %s", e->msg);
        }
        for (int attempt = 0; !pvc_destroyed(pvc); attempt++) {
                _cleanup_json_ json_t *ann = NULL;
                int r;

                if (attempt == 3)
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "PVC ws-%s keeps changing; try again", id);
                ann = destroy_annotations(k, pod, pvc, &usage, cs_now_realtime_ms());
                r = record_destroy(k, ctx, id, &pvc, ann, err);
                if (r < 0)
                        return -1;
                if (r == 0) {
                        json_decref(pvc);
                        pvc = NULL;
                        /* The view below reads the record back from what was written. */
                        pvc = json_pack("{s:{s:O}}", "metadata", "annotations", ann);
                }
        }
        if (pod && delete_pod(k, ctx, pod, err) < 0)
                return -1;
        view_destroyed(id, pvc, ret);
        return 0;
}

/* --- route ----------------------------------------------------------------------------- */

/* Why calls cannot reach a sandbox whose pod is gone or going. */
static int not_routable(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, cs_error **err)
{
        _cleanup_json_ json_t *pvc = NULL;

        if (get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (pvc_destroyed(pvc))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "sandbox %s is DESTROYED",
                                    id);
        if (pod || pvc)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "sandbox %s is FAILED: its pod %s", id,
                                    pod ? "is being deleted" : "is gone");
        return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
}

static int failed_precondition(const char *id, json_t *pod, cs_error **err)
{
        const char *reason = kube_get_str(pod, "status.reason");
        const char *msg = kube_get_str(pod, "status.message");

        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                            "sandbox %s is FAILED (pod %s%s%s%s%s)", id,
                            kube_get_str(pod, "status.phase") ?: "?", reason ? ": " : "",
                            reason ?: "", msg ? ": " : "", msg ?: "");
}

static int kube_route(scheduler *s, const char *id, const fe_ctx *ctx, fe_route *ret,
                      cs_error **err)
{
        kube *k = KUBE(s);
        int64_t start = cs_now_monotonic_ms();
        int64_t deadline = min64(ctx->deadline_ms, start + k->wait_ready_ms);
        bool fresh = false;

        for (;;) {
                _cleanup_json_ json_t *pod = NULL;
                uint64_t v = kube_cache_version(k->pods);

                if (find_pod_fresh(k, ctx, id, fresh, &pod, err) < 0)
                        return -1;
                if (!pod || being_deleted(pod))
                        return not_routable(k, ctx, id, pod, err);
                switch (pod_status(pod)) {
                case FE_STATUS_READY: {
                        /* The channel is held until the caller releases the route. */
                        channel_hold *h = cs_xcalloc(1, sizeof(*h));
                        if (route_of_pod(k, id, pod, ret, &h->c, err) < 0) {
                                free(h);
                                return -1;
                        }
                        h->k = k;
                        ret->release = channel_hold_end;
                        ret->release_arg = h;
                        return 0;
                }
                case FE_STATUS_FAILED:
                        return failed_precondition(id, pod, err);
                default:
                        break;
                }
                if (fe_ctx_cancelled(ctx))
                        return cs_error_set(err, fe_ctx_cancel_status(ctx),
                                            "cancelled while sandbox %s was STARTING", id);
                if (cs_now_monotonic_ms() >= deadline)
                        return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                            "sandbox %s still STARTING after %" PRId64 " ms", id,
                                            cs_now_monotonic_ms() - start);
                /* A cache that stays quiet for WAIT_POLL_MS (its watch may be down) is
                 * bypassed for the next look. */
                fresh = kube_cache_wait_change(
                                k->pods, v,
                                min64(deadline, cs_now_monotonic_ms() + WAIT_POLL_MS)) == v;
        }
}

/* --- life ------------------------------------------------------------------------------ */

static void kube_free(scheduler *s)
{
        kube *k = KUBE(s);

        if (!k)
                return;
        kube_cache_free(k->pods);
        kube_cache_free(k->agents);
        while (k->channels) {
                channel *next = k->channels->next;
                rpc_channel_free(k->channels->ch);
                free(k->channels->addr);
                free(k->channels);
                k->channels = next;
        }
        kube_client_free(k->kc);
        free(k->ns);
        free(k->agent_ns);
        free(k->runtime_class);
        free(k->storage_class);
        free(k->size);
        pthread_mutex_destroy(&k->lock);
        free(k);
}

static const scheduler_ops kube_ops = {
        .name = "kube",
        .create = kube_create,
        .describe = kube_describe,
        .destroy = kube_destroy,
        .route = kube_route,
        .free = kube_free,
};

static kube_client *client_new(const kube_config *cfg, cs_error **err)
{
        kube_client_config kcc = {
                .kubeconfig = cfg->kubeconfig,
                .context = cfg->context,
                .timeout_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 30000,
                .connect_timeout_ms = 5000,
                .user_agent = "compute-frontend",
        };
        kube_client *kc = kube_client_new(&kcc, err);

        if (!kc)
                cs_error_prefix(err, "Kubernetes API access");
        return kc;
}

scheduler *scheduler_kube_new(const kube_config *cfg, cs_error **err)
{
        kube *k = cs_xcalloc(1, sizeof(*k));
        int64_t sync_ms = cfg->sync_timeout_ms > 0 ? cfg->sync_timeout_ms : 30000, sync_end;
        _cleanup_free_ char *pods = NULL, *agents = NULL;

        k->s.ops = &kube_ops;
        pthread_mutex_init(&k->lock, NULL);
        k->runtime_class = cs_xstrdup(cfg->runtime_class ?: "");
        k->storage_class = cs_xstrdup(cfg->pvc_storage_class ?: "");
        k->size = cs_xstrdup(cfg->pvc_workspace_size && cfg->pvc_workspace_size[0]
                                     ? cfg->pvc_workspace_size
                                     : "10Gi");
        k->agent_port = cfg->agent_port;
        k->delete_grace_s = cfg->delete_grace_s;
        k->agent_timeout_ms = cfg->agent_timeout_ms;
        k->wait_ready_ms = cfg->wait_ready_ms;
        if (!quantity_ok(k->size) || (k->storage_class[0] && !dns_subdomain_ok(k->storage_class))) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "--pvc-workspace-size must be a quantity like 10Gi and "
                             "--pvc-storage-class a StorageClass name");
                goto fail;
        }
        k->kc = client_new(cfg, err);
        if (!k->kc)
                goto fail;
        k->ns = cs_xstrdup(cfg->sandbox_namespace && cfg->sandbox_namespace[0]
                                   ? cfg->sandbox_namespace
                                   : "compute-sandboxes");
        k->agent_ns = cs_xstrdup(cfg->agent_namespace && cfg->agent_namespace[0]
                                         ? cfg->agent_namespace
                                         : kube_client_namespace(k->kc));
        pods = pods_path(k);
        agents = cs_xasprintf("/api/v1/namespaces/%s/pods", k->agent_ns);
        k->pods = kube_cache_new(&(kube_cache_config){ .client = k->kc,
                                                       .path = pods,
                                                       .label_selector = SANDBOX_SELECTOR,
                                                       .what = "sandbox pods" },
                                 err);
        if (!k->pods)
                goto fail;
        k->agents = kube_cache_new(&(kube_cache_config){ .client = k->kc,
                                                         .path = agents,
                                                         .label_selector = cfg->agent_selector,
                                                         .what = "node agent pods" },
                                   err);
        if (!k->agents)
                goto fail;
        /* Both caches list at once; together they get sync_ms. */
        sync_end = cs_now_monotonic_ms() + sync_ms;
        if (kube_cache_wait_synced(k->pods, sync_ms, err) < 0 ||
            kube_cache_wait_synced(k->agents, max64(sync_end - cs_now_monotonic_ms(), 1), err) <
                    0) {
                cs_error_prefix(err, "cannot read from the Kubernetes API server %s",
                                kube_client_server(k->kc));
                goto fail;
        }
        log_info("kube scheduler: API server %s, sandboxes in namespace %s, node agents in %s "
                 "(%s)",
                 kube_client_server(k->kc), k->ns, k->agent_ns, cfg->agent_selector);
        return &k->s;
fail:
        kube_free(&k->s);
        return NULL;
}

/* --- GC -------------------------------------------------------------------------------- */

/* Every object of a collection with the managed-by label, page by page. */
static int list_managed(kube_client *kc, const char *coll, json_t **ret, cs_error **err)
{
        _cleanup_json_ json_t *all = json_array();
        _cleanup_free_ char *sel = kube_escape(SANDBOX_SELECTOR), *cont = NULL;

        do {
                _cleanup_free_ char *cont_q = cont ? kube_escape(cont) : NULL;
                _cleanup_free_ char *path =
                        cs_xasprintf("%s?limit=500&labelSelector=%s%s%s", coll, sel,
                                     cont_q ? "&continue=" : "", cont_q ?: "");
                _cleanup_resp_ kube_response r = { 0 };
                const char *next;

                if (api(kc, NULL, "GET", path, NULL, &r, err) < 0)
                        return -1;
                if (r.status != 200 || !json_is_object(r.body))
                        return api_fail(&r, err, "listing %s", coll);
                json_array_extend(all, json_object_get(r.body, "items"));
                next = kube_get_str(r.body, "metadata.continue");
                free(cont);
                cont = next && next[0] ? cs_xstrdup(next) : NULL;
        } while (cont);
        *ret = TAKE_PTR(all);
        return 0;
}

/* Deletes the pods of destroyed sandboxes that an interrupted destroy left running. */
static void gc_pods(kube_client *kc, const char *ns, json_t *pods, json_t *destroyed_ids)
{
        json_t *pod;
        size_t i;

        json_array_foreach(pods, i, pod)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL;
                const char *id = label(pod, LABEL_SANDBOX_ID);
                const char *name = kube_get_str(pod, "metadata.name");
                int r;

                if (!id || !name || being_deleted(pod) || !json_object_get(destroyed_ids, id))
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/pods/%s", ns, name);
                r = delete_exact(kc, NULL, path, kube_get_str(pod, "metadata.uid"), NULL, &e);
                if (r < 0)
                        log_warn("gc: sandbox %s: cannot delete its leftover pod %s: %s", id, name,
                                 e->msg);
                else if (r == 0)
                        log_info("gc: sandbox %s: deleted its leftover pod %s", id, name);
        }
}

/* Whether any of the objects carries the sandbox-id label id. */
static bool has_sandbox(json_t *objects, const char *id)
{
        json_t *o;
        size_t i;

        json_array_foreach(objects, i, o)
        {
                if (streq0(label(o, LABEL_SANDBOX_ID), id))
                        return true;
        }
        return false;
}

static int64_t age_ms(json_t *obj, int64_t now_ms)
{
        int64_t t = time_of(kube_get_str(obj, "metadata.creationTimestamp"));

        return t ? now_ms - t : 0;
}

/* What no destroy will ever clean up:
 *  - a PVC (older than GC_ORPHAN_AGE_MS, no delete-after) whose pod is gone: deleted outside
 *    the frontend (eviction, an operator), or failed and replaced by a new sandbox of the
 *    session. It gets delete-after = now + the grace, as a destroy would have done, so its
 *    data outlives it by the same window and Describe answers DESTROYED.
 *  - a pod (older than GC_ORPHAN_AGE_MS, still Pending) whose PVC was never made: its create
 *    failed between the two and the client never retried. Deleted.
 * Pods are made before their PVCs, and the PVCs were listed before the pods, so neither
 * check can catch a create in progress. Returns how many objects it changed. */
static unsigned gc_orphans(kube_client *kc, const char *ns, json_t *pvcs, json_t *pods,
                           int64_t now_ms, int64_t grace_s)
{
        char now[32], after[32];
        unsigned changed = 0;
        json_t *o;
        size_t i;

        kube_time_format(now_ms, now);
        kube_time_format(now_ms + grace_s * 1000, after);
        json_array_foreach(pvcs, i, o)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_resp_ kube_response r = { 0 };
                _cleanup_free_ char *path = NULL;
                _cleanup_json_ json_t *patch = NULL;
                const char *id = label(o, LABEL_SANDBOX_ID),
                           *name = kube_get_str(o, "metadata.name");

                if (!id || !name || annotation(o, ANN_DELETE_AFTER) || being_deleted(o) ||
                    age_ms(o, now_ms) < GC_ORPHAN_AGE_MS || has_sandbox(pods, id))
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
                patch = json_pack("{s:{s:s?, s:{s:s, s:s}}}", "metadata", "resourceVersion",
                                  kube_get_str(o, "metadata.resourceVersion"), "annotations",
                                  ANN_DELETE_AFTER, after, ANN_DESTROYED_AT, now);
                if (api(kc, NULL, "PATCH", path, patch, &r, &e) < 0 || r.status != 200) {
                        log_warn("gc: sandbox %s: cannot mark PVC %s/%s of a pod that is gone: %s",
                                 id, ns, name, e ? e->msg : kube_response_message(&r));
                        continue;
                }
                log_info("gc: sandbox %s: its pod is gone without a destroy; PVC %s/%s marked "
                         "delete-after %s",
                         id, ns, name, after);
                changed++;
        }
        json_array_foreach(pods, i, o)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL;
                const char *id = label(o, LABEL_SANDBOX_ID),
                           *name = kube_get_str(o, "metadata.name");

                if (!id || !name || being_deleted(o) || has_sandbox(pvcs, id) ||
                    !streq0(kube_get_str(o, "status.phase"), "Pending") ||
                    age_ms(o, now_ms) < GC_ORPHAN_AGE_MS)
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/pods/%s", ns, name);
                if (delete_exact(kc, NULL, path, kube_get_str(o, "metadata.uid"),
                                 kube_get_str(o, "metadata.resourceVersion"), &e) != 0) {
                        if (e)
                                log_warn("gc: sandbox %s: cannot delete pod %s/%s: %s", id, ns,
                                         name, e->msg);
                        continue;
                }
                log_info("gc: sandbox %s: deleted pod %s/%s, Pending without its PVC", id, ns,
                         name);
                changed++;
        }
        return changed;
}

int kube_gc_run(const kube_config *cfg, int64_t now_ms, unsigned *ret_deleted, cs_error **err)
{
        const char *ns = cfg->sandbox_namespace && cfg->sandbox_namespace[0]
                                 ? cfg->sandbox_namespace
                                 : "compute-sandboxes";
        _cleanup_free_ char *pvcs_coll =
                cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims", ns);
        _cleanup_free_ char *pods_coll = cs_xasprintf("/api/v1/namespaces/%s/pods", ns);
        _cleanup_json_ json_t *pvcs = NULL, *pods = NULL, *destroyed = json_object();
        kube_client *kc = client_new(cfg, err);
        unsigned deleted = 0, failed = 0;
        json_t *pvc;
        size_t i;

        *ret_deleted = 0;
        if (!kc)
                return -1;
        if (list_managed(kc, pvcs_coll, &pvcs, err) < 0 ||
            list_managed(kc, pods_coll, &pods, err) < 0) {
                kube_client_free(kc);
                return -1;
        }
        json_array_foreach(pvcs, i, pvc)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL;
                const char *name = kube_get_str(pvc, "metadata.name");
                const char *id = label(pvc, LABEL_SANDBOX_ID) ?: "?";
                const char *after = annotation(pvc, ANN_DELETE_AFTER);
                int64_t after_ms = after ? kube_time_parse(after) : -1;
                int r;

                if (!name || !after)
                        continue;
                json_object_set_new(destroyed, id, json_true());
                if (after_ms < 0) {
                        log_warn("gc: PVC %s/%s: malformed %s '%s'; left alone", ns, name,
                                 ANN_DELETE_AFTER, after);
                        continue;
                }
                if (after_ms > now_ms || being_deleted(pvc))
                        continue;
                path = cs_xasprintf("%s/%s", pvcs_coll, name);
                /* The UID and resourceVersion judged here, or nothing: a PVC changed or
                 * replaced meanwhile (409), or deleted by a concurrent pass (404), is left
                 * to that change. */
                r = delete_exact(kc, NULL, path, kube_get_str(pvc, "metadata.uid"),
                                 kube_get_str(pvc, "metadata.resourceVersion"), &e);
                if (r < 0) {
                        log_warn("gc: sandbox %s: cannot delete PVC %s/%s: %s", id, ns, name,
                                 e->msg);
                        failed++;
                        continue;
                }
                if (r > 0) {
                        log_info("gc: sandbox %s: PVC %s/%s already deleted or changed by "
                                 "someone else",
                                 id, ns, name);
                        continue;
                }
                log_info("gc: sandbox %s: deleted PVC %s/%s (delete-after %s)", id, ns, name,
                         after);
                deleted++;
        }
        gc_pods(kc, ns, pods, destroyed);
        gc_orphans(kc, ns, pvcs, pods, now_ms, cfg->delete_grace_s);
        kube_client_free(kc);
        *ret_deleted = deleted;
        if (failed)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                    "%u expired PVCs could not be deleted", failed);
        return 0;
}
