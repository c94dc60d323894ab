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
 * This file holds the scheduler ops (create, describe, destroy, route) and the scheduler's
 * life; it owns struct kube (scheduler_kube_internal.h, with the locking rule). The objects
 * are built in kube_objects.c, the API is reached through kube_api.c, the agents through
 * kube_agents.c; the GC is kube_gc.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "listing.h"
#include "scheduler_kube_internal.h"
#include "util.h"
#include "uuid.h"

/* A create that finds the session's previous pod terminating waits this long for it. */
#define CREATE_WAIT_MS 30000
/* While waiting for a pod, re-read it directly at least this often (the cache may not have
 * it yet when another replica made it). */
#define WAIT_POLL_MS 1000

/* The view of a sandbox whose pod exists (and whose PVC does not record a destroy). Usage
 * is the agent's while the pod runs; a describe still answers when the agent cannot. */
static void view_of_pod(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, fe_view *ret)
{
        const char *phase = kube_get_str(pod, "status.phase");

        kobj_view_of_pod(id, pod, ret);
        if (phase && strcmp(phase, "Running") == 0) {
                _cleanup_error_ cs_error *e = NULL;
                if (kagent_usage(k, ctx, id, pod, &ret->usage, &e) < 0)
                        fe_ctx_log(ctx, CS_LOG_WARN, "usage not available: %s", e->msg);
        }
}

/* The view of a sandbox whose workspace PVC is there without its pod and records no
 * destroy: the pod was deleted behind the frontend's back (eviction, a person, its node
 * lost), so the sandbox is FAILED. */
static void view_of_orphan_pvc(const char *id, json_t *pvc, fe_view *ret)
{
        const char *tenant = kobj_pvc_tenant(pvc);
        const char *session =
                kobj_annotation(pvc, ANN_SESSION_ID) ?: kobj_label(pvc, LABEL_SESSION_ID);

        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = FE_STATUS_FAILED;
        ret->created_at_ms = kobj_time_of(kube_get_str(pvc, "metadata.creationTimestamp"));
        ret->reason = cs_xstrdup("the sandbox's pod was deleted by something other than this "
                                 "service (an eviction, or its node was lost)");
        ret->tenant_id = tenant ? cs_xstrdup(tenant) : NULL;
        ret->session_id = session ? cs_xstrdup(session) : NULL;
}

/* Makes sure the sandbox's PVC exists (a frontend that died between the pod and the PVC is
 * repaired by the client's retry). */
static int ensure_pvc(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *id,
                      cs_error **err)
{
        _cleanup_json_ json_t *pvc = kobj_pvc_build(k->ns, spec, id, NULL);
        _cleanup_free_ char *path = kapi_pvcs_path(k);
        _cleanup_resp_ kube_response r = { 0 };

        if (kapi_request(k->kc, ctx, "POST", path, pvc, &r, err) < 0)
                return -1;
        if (r.status == 201 || r.status == 200)
                kube_cache_upsert(k->pvcs, r.body);
        if (r.status == 201 || r.status == 200 || r.status == 409)
                return 0;
        return kapi_fail(&r, err, "creating PVC ws-%s", id);
}

/* The one wait of the loops that wait for a pod (to be READY, to be gone): until the pod
 * cache changes from version v, deadline passes, or WAIT_POLL_MS, after which the loop looks
 * again (directly, when the cache stayed quiet). Returns the cache's version then. */
static uint64_t pods_wait_change(kube *k, uint64_t v, int64_t deadline)
{
        return kube_cache_wait_change(k->pods, v,
                                      min64(deadline, cs_now_monotonic_ms() + WAIT_POLL_MS));
}

/* Waits until the pod named name with uid is gone (or replaced). 0, or -1 (UNAVAILABLE
 * when it is still there at deadline). */
static int wait_pod_gone(kube *k, const fe_ctx *ctx, const char *name, const char *uid,
                         int64_t deadline, cs_error **err)
{
        _cleanup_free_ char *coll = kapi_pods_path(k);

        for (;;) {
                _cleanup_json_ json_t *pod = NULL;
                uint64_t v = kube_cache_version(k->pods);
                const char *u;

                if (kapi_get_named(k, ctx, coll, name, &pod, err) < 0)
                        return -1;
                u = kube_get_str(pod, "metadata.uid");
                if (!pod || !u || !uid || strcmp(u, uid) != 0)
                        return 0;
                if (cs_now_monotonic_ms() >= deadline || fe_ctx_cancelled(ctx))
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "the session's previous sandbox pod %s is still "
                                            "terminating; try again",
                                            name);
                pods_wait_change(k, v, deadline);
        }
}

typedef enum adopt {
        ADOPT_USE,   /* the session's live sandbox: answer with it */
        ADOPT_RETRY, /* it went away (or was finished off): POST again */
} adopt;

/* The POST met an existing pod of that name: decides whether it is the session's live
 * sandbox (*ret_pod, *ret_id), or on its way out (then waits for it to go). */
static int adopt_existing(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                          int64_t deadline, json_t **ret_pod, adopt *ret, cs_error **err)
{
        _cleanup_free_ char *coll = kapi_pods_path(k);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;
        const char *id;

        if (kapi_get_named(k, ctx, coll, name, &pod, err) < 0)
                return -1;
        *ret = ADOPT_RETRY;
        if (!pod)
                return 0; /* deleted in between */
        id = kobj_label(pod, LABEL_SANDBOX_ID);
        if (!id || !cs_uuid_valid(id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod %s/%s exists but carries no valid %s label", k->ns, name,
                                    LABEL_SANDBOX_ID);
        /* The name is the session's; a pod of another session under it (a hash collision, or
         * an object someone else made) is never handed out. */
        if (!kobj_streq0(kobj_annotation(pod, ANN_TENANT_ID), spec->tenant_id) ||
            !kobj_streq0(kobj_annotation(pod, ANN_SESSION_ID), spec->session_id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "pod %s/%s belongs to another tenant or session (name "
                                    "collision); not using it",
                                    k->ns, name);
        if (!kobj_being_deleted(pod)) {
                if (kapi_get_pvc(k, ctx, id, &pvc, err) < 0)
                        return -1;
                if (!kobj_pvc_destroyed(pvc)) {
                        kube_cache_upsert(k->pods, pod);
                        *ret_pod = TAKE_PTR(pod);
                        *ret = ADOPT_USE;
                        return 0;
                }
                /* A destroy that recorded itself on the PVC and died before deleting the pod:
                 * finish it, then make the session a new sandbox. */
                fe_ctx_log(ctx, CS_LOG_INFO,
                           "finishing the interrupted destroy of sandbox %s (pod %s)", id, name);
                if (kapi_delete_pod(k, ctx, pod, err) < 0)
                        return -1;
        }
        return wait_pod_gone(k, ctx, name, kube_get_str(pod, "metadata.uid"), deadline, err);
}

static int kube_create(scheduler *s, const fe_spec *in, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_free_ char *coll = kapi_pods_path(k);
        /* "agent": compute-init comes from the image the node agents run, so a sandbox and
         * the agent that serves it speak the same protocol version. */
        _cleanup_free_ char *spawner = strcmp(k->spawner_image, SPAWNER_IMAGE_AGENT) == 0
                                               ? kagent_image(k)
                                               : cs_xstrdup(k->spawner_image);
        _cleanup_json_ json_t *pod = NULL;
        int64_t deadline = min64(ctx->deadline_ms, cs_now_monotonic_ms() + CREATE_WAIT_MS);
        char name[4 + 32 + 1];
        const char *id;
        bool created = false, warm = false;
        kobj_spec spec;

        if (kobj_spec_normalise(k->storage_class, k->size, in, &spec, err) < 0)
                return -1;
        kobj_pod_name(spec.tenant_id, spec.session_id, name);
        /* With a warm pool (or one turned off: size 0), the session's guard says first whether
         * it has a sandbox (warm or cold); else a pod of the pool's profile is claimed
         * (kube_pool.c). */
        if (k->pool_guards) {
                if (kpool_guard_find(k, ctx, &spec, name, &pod, err) < 0)
                        return -1;
                if (!pod && kpool_profile_matches(k, &spec)) {
                        if (kpool_claim(k, ctx, &spec, name, &pod, err) < 0 ||
                            (pod && kpool_guard_settle(k, ctx, &spec, name, &pod, err) < 0))
                                return -1;
                }
                warm = pod != NULL;
        }
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
                body = kobj_pod_build(k->ns, k->runtime_class, spawner, &spec, name, new_id);
                if (kapi_request(k->kc, ctx, "POST", coll, body, &r, err) < 0)
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
                        return kapi_fail(&r, err, "creating pod %s/%s", k->ns, name);
                if (adopt_existing(k, ctx, &spec, name, deadline, &pod, &a, err) < 0)
                        return -1;
        }
        id = kobj_label(pod, LABEL_SANDBOX_ID);
        if (!id)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "pod %s/%s has no %s label", k->ns,
                                    name, LABEL_SANDBOX_ID);
        if (!warm && ensure_pvc(k, ctx, &spec, id, err) < 0) {
                /* A PVC refused for good (quota, admission) would leave the new pod Pending
                 * forever: take it back. One that may still come (UNAVAILABLE) is left for
                 * the client's retry to complete. */
                if (created && (*err)->code != GRPC_STATUS_UNAVAILABLE) {
                        _cleanup_error_ cs_error *e = NULL;
                        if (kapi_delete_pod(k, ctx, pod, &e) < 0)
                                fe_ctx_log(ctx, CS_LOG_WARN,
                                           "cannot delete pod %s/%s after its PVC failed: %s",
                                           k->ns, name, e->msg);
                }
                return -1;
        }
        /* The cold path records its sandbox in the session's guard too while a pool is
         * configured, so a warm claim of the same session elsewhere and this one agree. */
        if (!warm && k->pool_target > 0) {
                if (kpool_guard_settle(k, ctx, &spec, name, &pod, err) < 0)
                        return -1;
                id = kobj_label(pod, LABEL_SANDBOX_ID);
                if (!id)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "the session's sandbox pod has no %s label",
                                            LABEL_SANDBOX_ID);
        }
        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = kobj_pod_status(pod);
        ret->created_at_ms = kobj_pod_created_at(pod);
        if (!ret->created_at_ms)
                ret->created_at_ms = cs_now_realtime_ms();
        return 0;
}

static int kube_describe(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                         cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;

        if (kapi_find_pod(k, ctx, id, &pod, err) < 0 || kapi_get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (kobj_pvc_destroyed(pvc)) {
                kobj_view_destroyed(id, pvc, ret);
                return 0;
        }
        if (pod) {
                view_of_pod(k, ctx, id, pod, ret);
                return 0;
        }
        if (pvc) {
                view_of_orphan_pvc(id, pvc, ret);
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
        _cleanup_free_ char *coll = kapi_pvcs_path(k);
        _cleanup_free_ char *path = cs_xasprintf("%s/ws-%s", coll, id);
        _cleanup_resp_ kube_response r = { 0 };

        if (!*pvc) {
                kobj_spec spec = { .tenant_id = "",
                                   .session_id = "",
                                   .size = k->size,
                                   .storage_class = k->storage_class };
                _cleanup_json_ json_t *body = kobj_pvc_build(k->ns, &spec, id, annotations);
                if (kapi_request(k->kc, ctx, "POST", coll, body, &r, err) < 0)
                        return -1;
                if (r.status == 201 || r.status == 200) {
                        kube_cache_upsert(k->pvcs, r.body);
                        return 0;
                }
                if (r.status != 409)
                        return kapi_fail(&r, err, "creating PVC ws-%s", id);
        } else {
                _cleanup_json_ json_t *patch = json_pack(
                        "{s:{s:s?, s:O}}", "metadata", "resourceVersion",
                        kube_get_str(*pvc, "metadata.resourceVersion"), "annotations", annotations);
                if (kapi_request(k->kc, ctx, "PATCH", path, patch, &r, err) < 0)
                        return -1;
                if (r.status == 200) {
                        /* A listing right after the destroy reads it DESTROYED, as a
                         * describe does (which reads the PVC itself). */
                        kube_cache_upsert(k->pvcs, r.body);
                        return 0;
                }
                if (r.status != 409 && r.status != 404)
                        return kapi_fail(&r, err, "annotating PVC ws-%s", id);
        }
        /* Changed or made meanwhile: read it again and let the caller decide. */
        json_decref(*pvc);
        *pvc = NULL;
        if (kapi_get_pvc(k, ctx, id, pvc, err) < 0)
                return -1;
        return 1;
}

static int kube_destroy(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                        cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;
        usage_metrics usage = { 0 };
        const char *phase;

        if (kapi_find_pod(k, ctx, id, &pod, err) < 0 || kapi_get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (!pod && !pvc)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        phase = kube_get_str(pod, "status.phase");
        if (!kobj_pvc_destroyed(pvc) && phase && strcmp(phase, "Running") == 0 &&
            !kobj_being_deleted(pod)) {
                _cleanup_error_ cs_error *e = NULL;
                if (kagent_usage(k, ctx, id, pod, &usage, &e) < 0)
                        fe_ctx_log(ctx, CS_LOG_WARN,
                                   "final usage not available, recorded as zero: %s", e->msg);
        }
        for (int attempt = 0; !kobj_pvc_destroyed(pvc); attempt++) {
                _cleanup_json_ json_t *ann = NULL;
                int r;

                if (attempt == 3)
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "PVC ws-%s keeps changing; try again", id);
                ann = kobj_destroy_annotations(k->delete_grace_s, pod, pvc, &usage,
                                               cs_now_realtime_ms());
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
        if (pod && kapi_delete_pod(k, ctx, pod, err) < 0)
                return -1;
        if (pod && (k->pool_guards || kobj_annotation(pod, ANN_CLAIMED_AT)))
                kpool_guard_drop(k, ctx, pod, id);
        kobj_view_destroyed(id, pvc, ret);
        return 0;
}

/* Why calls cannot reach a sandbox whose pod is gone or going. */
static int not_routable(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, cs_error **err)
{
        _cleanup_json_ json_t *pvc = NULL;

        if (kapi_get_pvc(k, ctx, id, &pvc, err) < 0)
                return -1;
        if (kobj_pvc_destroyed(pvc))
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
        bool fresh = false, starting = false;

        for (;;) {
                _cleanup_json_ json_t *pod = NULL;
                uint64_t v = kube_cache_version(k->pods);

                if (kapi_find_pod_fresh(k, ctx, id, fresh, &pod, err) < 0) {
                        /* Once the sandbox was seen STARTING, an API server that does not
                         * answer one look (a loaded one timed out a TLS handshake with 50
                         * sessions starting) does not end the wait: the cache and the next
                         * look go on until the deadline, which then reports this error. */
                        if (!starting || (*err)->code != GRPC_STATUS_UNAVAILABLE ||
                            cs_now_monotonic_ms() >= deadline || fe_ctx_cancelled(ctx))
                                return -1;
                        log_debug("sandbox %s: a look at its pod failed, still waiting: %s", id,
                                  (*err)->msg);
                        cs_error_freep(err);
                        fresh = pods_wait_change(k, v, deadline) == v;
                        continue;
                }
                starting = true;
                if (!pod || kobj_being_deleted(pod))
                        return not_routable(k, ctx, id, pod, err);
                switch (kobj_pod_status(pod)) {
                case FE_STATUS_READY:
                        /* The channel is held until the caller releases the route. */
                        return kagent_route(k, ctx, id, pod, ret, err);
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
                fresh = pods_wait_change(k, v, deadline) == v;
        }
}

static void count_pod(json_t *pod, void *userdata)
{
        uint64_t *by_status = userdata;
        fe_status st = kobj_pod_status(pod);

        if ((unsigned)st <= FE_STATUS_DESTROYED)
                by_status[st]++;
}

typedef struct pvc_count {
        int64_t now_ms;
        uint64_t expired;
} pvc_count;

/* A PVC whose delete-after has passed and that still exists: the GC has not run since. */
static void count_pvc(json_t *pvc, void *userdata)
{
        pvc_count *c = userdata;
        const char *after = kobj_annotation(pvc, ANN_DELETE_AFTER);
        int64_t after_ms = after ? kube_time_parse(after) : -1;

        if (after_ms >= 0 && after_ms <= c->now_ms && !kobj_being_deleted(pvc))
                c->expired++;
}

static void kube_metrics(scheduler *s, cs_mpage *p)
{
        static const char *const names[] = { [FE_STATUS_UNSPECIFIED] = "UNSPECIFIED",
                                             [FE_STATUS_STARTING] = "STARTING",
                                             [FE_STATUS_READY] = "READY",
                                             [FE_STATUS_FAILED] = "FAILED",
                                             [FE_STATUS_DESTROYED] = "DESTROYED" };
        const struct {
                kube_cache *c;
                const char *resource;
        } caches[] = { { KUBE(s)->pods, "sandbox_pods" },
                       { KUBE(s)->agents, "agent_pods" },
                       { KUBE(s)->pvcs, "workspace_pvcs" } };
        kube *k = KUBE(s);
        uint64_t by_status[FE_STATUS_DESTROYED + 1] = { 0 };
        pvc_count pvcs = { .now_ms = cs_now_realtime_ms() };
        uint64_t restarts[ARRAY_SIZE(caches)], relists[ARRAY_SIZE(caches)];
        const struct {
                const char *name, *help;
                const uint64_t *values;
        } per_cache[] = {
                { "compute_kube_watch_restarts_total",
                  "Watches that ended in an error or 410 Gone, by the cache's resource.",
                  restarts },
                { "compute_kube_relists_total",
                  "LISTs after a cache's first (after a 410 Gone or a failed watch).", relists },
        };

        kube_client_metrics(k->kc, p);
        for (size_t i = 0; i < ARRAY_SIZE(caches); i++)
                kube_cache_stats(caches[i].c, &restarts[i], &relists[i]);
        for (size_t f = 0; f < ARRAY_SIZE(per_cache); f++) {
                cs_mpage_family(p, per_cache[f].name, "counter", per_cache[f].help);
                for (size_t i = 0; i < ARRAY_SIZE(caches); i++) {
                        const char *labels[] = { "resource", caches[i].resource, NULL };

                        cs_mpage_sample_u64(p, per_cache[f].name, labels, per_cache[f].values[i]);
                }
        }
        kagent_metrics(k, p);
        kpool_metrics(k, p);
        kube_cache_each(k->pods, count_pod, by_status);
        cs_mpage_family(p, "compute_scheduler_sandboxes", "gauge",
                        "Sandbox pods by the status the API reports for them.");
        for (unsigned st = FE_STATUS_STARTING; st <= FE_STATUS_FAILED; st++) {
                const char *labels[] = { "status", names[st], NULL };

                cs_mpage_sample_u64(p, "compute_scheduler_sandboxes", labels, by_status[st]);
        }
        kube_cache_each(k->pvcs, count_pvc, &pvcs);
        cs_mpage_family(p, "compute_workspace_pvcs_expired", "gauge",
                        "Workspace PVCs whose delete-after has passed and that still exist (the "
                        "GC CronJob deletes them).");
        cs_mpage_sample_u64(p, "compute_workspace_pvcs_expired", NULL, pvcs.expired);
}

/* --- ListSandboxes ---------------------------------------------------------------------- */

typedef struct list_scan {
        const char *tenant;
        json_t *pods; /* the tenant's pods (array) */
        json_t *pvcs; /* every workspace PVC, by sandbox id */
} list_scan;

static void scan_pod(json_t *pod, void *userdata)
{
        list_scan *sc = userdata;

        if (kobj_streq0(kobj_annotation(pod, ANN_TENANT_ID), sc->tenant))
                json_array_append(sc->pods, pod);
}

static void scan_pvc(json_t *pvc, void *userdata)
{
        list_scan *sc = userdata;
        const char *id = kobj_label(pvc, LABEL_SANDBOX_ID);

        if (id && cs_uuid_valid(id))
                json_object_set(sc->pvcs, id, pvc);
}

/* Adds v to the candidates when it has q's status; clears it otherwise. */
static void list_keep(const fe_list_query *q, fe_view *v, fe_view_list *ret)
{
        if (q->status && v->status != q->status) {
                fe_view_clear(v);
                return;
        }
        *fe_view_list_add(ret) = *v;
}

static json_t *pod_of_id(json_t *pods, const char *id)
{
        json_t *pod;
        size_t i;

        json_array_foreach(pods, i, pod)
        {
                if (kobj_streq0(kobj_label(pod, LABEL_SANDBOX_ID), id))
                        return pod;
        }
        return NULL;
}

/* From the caches, as kube_describe reads each sandbox: a PVC recording a destroy makes it
 * DESTROYED (with the final usage it recorded), else its pod says, else a PVC alone is a
 * FAILED sandbox whose pod was deleted (once the API server confirms the pod is gone). The tenant
 * is the pod's annotation, or the PVC's (annotation, else label) once the pod is gone. Usage is
 * asked of the agents only for the page's running pods. */
static int kube_list(scheduler *s, const fe_list_query *q, const fe_ctx *ctx, fe_view_list *ret,
                     cs_error **err)
{
        kube *k = KUBE(s);
        _cleanup_json_ json_t *pods = json_array(), *pvcs = json_object(), *seen = json_object();
        list_scan sc = { .tenant = q->tenant_id, .pods = pods, .pvcs = pvcs };
        int64_t wait = ctx->deadline_ms == INT64_MAX
                               ? 30000
                               : max64(ctx->deadline_ms - cs_now_monotonic_ms(), 1);
        const char *id;
        json_t *pod, *pvc;
        size_t i;

        /* The PVC cache is not waited for at start (only the metrics read it otherwise). */
        if (kube_cache_wait_synced(k->pvcs, wait, err) < 0)
                return -1;
        kube_cache_each(k->pods, scan_pod, &sc);
        kube_cache_each(k->pvcs, scan_pvc, &sc);
        json_array_foreach(pods, i, pod)
        {
                fe_view v;

                id = kobj_label(pod, LABEL_SANDBOX_ID);
                if (!id || !cs_uuid_valid(id) || json_object_get(seen, id))
                        continue;
                json_object_set_new(seen, id, json_true());
                pvc = json_object_get(pvcs, id);
                if (kobj_pvc_destroyed(pvc)) {
                        kobj_view_destroyed(id, pvc, &v);
                        if (!v.tenant_id)
                                v.tenant_id = cs_xstrdup(q->tenant_id);
                } else {
                        kobj_view_of_pod(id, pod, &v);
                }
                list_keep(q, &v, ret);
        }
        json_object_foreach(pvcs, id, pvc)
        {
                fe_view v;

                if (json_object_get(seen, id) || !kobj_streq0(kobj_pvc_tenant(pvc), q->tenant_id))
                        continue;
                if (kobj_pvc_destroyed(pvc)) {
                        kobj_view_destroyed(id, pvc, &v);
                } else {
                        /* Its pod may be one the cache has not seen yet (another replica's
                         * create): asked of the API server, as describe would. Rare: only
                         * a sandbox whose pod is gone or brand new gets here. */
                        _cleanup_json_ json_t *fresh = NULL;

                        if (kapi_find_pod(k, ctx, id, &fresh, err) < 0)
                                return -1;
                        if (fresh &&
                            kobj_streq0(kobj_annotation(fresh, ANN_TENANT_ID), q->tenant_id)) {
                                kobj_view_of_pod(id, fresh, &v);
                                json_array_append(pods, fresh);
                        } else {
                                view_of_orphan_pvc(id, pvc, &v);
                        }
                }
                list_keep(q, &v, ret);
        }
        fe_list_select(ret, q);
        for (i = 0; i < ret->n; i++) {
                fe_view *v = &ret->v[i];
                const char *phase;

                if (v->status == FE_STATUS_DESTROYED)
                        continue;
                pod = pod_of_id(pods, v->id);
                phase = kube_get_str(pod, "status.phase");
                if (pod && phase && strcmp(phase, "Running") == 0) {
                        _cleanup_error_ cs_error *e = NULL;
                        if (kagent_usage(k, ctx, v->id, pod, &v->usage, &e) < 0)
                                fe_ctx_log(ctx, CS_LOG_WARN, "sandbox %s: usage not available: %s",
                                           v->id, e->msg);
                }
        }
        return 0;
}

/* From the pod cache only: a pod it has not seen yet counts against no tenant for this call. */
static bool kube_tenant_of(scheduler *s, const char *id, char ret[static CS_ID_MAX + 1])
{
        _cleanup_json_ json_t *pod = kube_cache_find_label(KUBE(s)->pods, LABEL_SANDBOX_ID, id);
        const char *tenant = pod ? kobj_annotation(pod, ANN_TENANT_ID) : NULL;

        if (!tenant || !tenant[0])
                return false;
        snprintf(ret, CS_ID_MAX + 1, "%s", tenant);
        return true;
}

static void kube_free(scheduler *s)
{
        kube *k = KUBE(s);

        if (!k)
                return;
        kpool_stop(k); /* before the caches and the client it uses */
        kube_cache_free(k->pvcs);
        kube_cache_free(k->pods);
        kube_cache_free(k->agents);
        kagent_channels_free(k);
        kube_client_free(k->kc);
        free(k->ns);
        free(k->agent_ns);
        free(k->runtime_class);
        free(k->spawner_image);
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
        .list = kube_list,
        .metrics = kube_metrics,
        .tenant_of = kube_tenant_of,
        .free = kube_free,
};

scheduler *scheduler_kube_new(const kube_config *cfg, cs_error **err)
{
        kube *k = cs_xcalloc(1, sizeof(*k));
        int64_t sync_ms = cfg->sync_timeout_ms > 0 ? cfg->sync_timeout_ms : 30000, sync_end;
        _cleanup_free_ char *pods = NULL, *agents = NULL, *pvcs = NULL;

        k->s.ops = &kube_ops;
        pthread_mutex_init(&k->lock, NULL);
        k->runtime_class = cs_xstrdup(cfg->runtime_class ?: "");
        k->spawner_image = cs_xstrdup(cfg->spawner_image ?: "");
        k->storage_class = cs_xstrdup(cfg->pvc_storage_class ?: "");
        k->size = cs_xstrdup(cfg->pvc_workspace_size && cfg->pvc_workspace_size[0]
                                     ? cfg->pvc_workspace_size
                                     : "10Gi");
        k->agent_port = cfg->agent_port;
        k->delete_grace_s = cfg->delete_grace_s;
        k->agent_timeout_ms = cfg->agent_timeout_ms;
        k->wait_ready_ms = cfg->wait_ready_ms;
        if (!kobj_quantity_ok(k->size) ||
            (k->storage_class[0] && !kobj_dns_subdomain_ok(k->storage_class))) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "--pvc-workspace-size must be a quantity like 10Gi and "
                             "--pvc-storage-class a StorageClass name");
                goto fail;
        }
        k->kc = kapi_client_new(cfg, err);
        if (!k->kc)
                goto fail;
        k->ns = cs_xstrdup(cfg->sandbox_namespace && cfg->sandbox_namespace[0]
                                   ? cfg->sandbox_namespace
                                   : "compute-sandboxes");
        k->agent_ns = cs_xstrdup(cfg->agent_namespace && cfg->agent_namespace[0]
                                         ? cfg->agent_namespace
                                         : kube_client_namespace(k->kc));
        pods = kapi_pods_path(k);
        agents = cs_xasprintf("/api/v1/namespaces/%s/pods", k->agent_ns);
        k->pods = kube_cache_new(&(kube_cache_config){ .client = k->kc,
                                                       .path = pods,
                                                       .label_selector = SANDBOX_SELECTOR,
                                                       .what = "sandbox pods",
                                                       .trim = kobj_trim_sandbox_pod },
                                 err);
        if (!k->pods)
                goto fail;
        k->agents = kube_cache_new(&(kube_cache_config){ .client = k->kc,
                                                         .path = agents,
                                                         .label_selector = cfg->agent_selector,
                                                         .what = "node agent pods",
                                                         .trim = kobj_trim_agent_pod },
                                   err);
        if (!k->agents)
                goto fail;
        pvcs = kapi_pvcs_path(k);
        /* Not waited for: only the metrics read it. */
        k->pvcs = kube_cache_new(&(kube_cache_config){ .client = k->kc,
                                                       .path = pvcs,
                                                       .label_selector = SANDBOX_SELECTOR,
                                                       .what = "workspace PVCs",
                                                       .trim = kobj_trim_workspace_pvc },
                                 err);
        if (!k->pvcs)
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
        if (kpool_start(k, cfg->warm_pool, cfg->default_image, err) < 0)
                goto fail;
        log_info("kube scheduler: API server %s, sandboxes in namespace %s, node agents in %s "
                 "(%s)",
                 kube_client_server(k->kc), k->ns, k->agent_ns, cfg->agent_selector);
        return &k->s;
fail:
        kube_free(&k->s);
        return NULL;
}
