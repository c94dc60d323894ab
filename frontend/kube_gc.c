/* The kube workspace GC (`compute-frontend --mode gc`, a CronJob): one pass deletes the PVCs
 * whose delete-after has passed, the pods an interrupted destroy left, marks or deletes the
 * orphans no destroy will clean up, deletes the warm pool's session guards whose sandbox
 * is gone and the warm pods claimed for a session that never got them. Owns nothing between passes
 * (a client of its own per pass); touches the API server only, each delete with preconditions. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "scheduler_kube_internal.h"
#include "util.h"

/* The GC leaves younger objects alone when it looks for orphans (a create makes the pod,
 * then the PVC, within a call's deadline). */
#define GC_ORPHAN_AGE_MS (10ll * 60 * 1000)

/* Every object of a collection with the managed-by label, page by page, each trimmed to what
 * this pass reads of its kind (kobj_trim: the same whitelist as the frontend's caches), so the
 * pass holds a fraction of the collection, not all of it whole. */
static int list_managed(kube_client *kc, const char *coll, kobj_kind kind, json_t **ret,
                        cs_error **err)
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
                json_t *item;
                size_t i;

                if (kapi_request(kc, NULL, "GET", path, NULL, &r, err) < 0)
                        return -1;
                if (r.status != 200 || !json_is_object(r.body))
                        return kapi_fail(&r, err, "listing %s", coll);
                json_array_foreach(json_object_get(r.body, "items"), i, item)
                {
                        json_t *t = kobj_trim(item, kind);
                        if (t)
                                json_array_append_new(all, t);
                }
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
                const char *id = kobj_label(pod, LABEL_SANDBOX_ID);
                const char *name = kube_get_str(pod, "metadata.name");
                int r;

                if (!id || !name || kobj_being_deleted(pod) || !json_object_get(destroyed_ids, id))
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/pods/%s", ns, name);
                r = kapi_delete_exact(kc, NULL, path, kube_get_str(pod, "metadata.uid"), NULL, &e);
                if (r < 0)
                        log_warn("gc: sandbox %s: cannot delete its leftover pod %s: %s", id, name,
                                 e->msg);
                else if (r == 0)
                        log_info("gc: sandbox %s: deleted its leftover pod %s", id, name);
        }
}

/* The sandbox-id labels the objects carry, as the keys of an object (a set): a lookup per
 * object, not a scan of the other list (10,000 pods against 20,000 PVCs took minutes). */
static json_t *sandbox_ids(json_t *objects)
{
        json_t *set = json_object(), *o;
        size_t i;

        json_array_foreach(objects, i, o)
        {
                const char *id = kobj_label(o, LABEL_SANDBOX_ID);
                if (id)
                        json_object_set_new(set, id, json_true());
        }
        return set;
}

static int64_t age_ms(json_t *obj, int64_t now_ms)
{
        int64_t t = kobj_time_of(kube_get_str(obj, "metadata.creationTimestamp"));

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
        _cleanup_json_ json_t *pod_ids = sandbox_ids(pods), *pvc_ids = sandbox_ids(pvcs);
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
                const char *id = kobj_label(o, LABEL_SANDBOX_ID),
                           *name = kube_get_str(o, "metadata.name");

                if (!id || !name || kobj_annotation(o, ANN_DELETE_AFTER) || kobj_being_deleted(o) ||
                    age_ms(o, now_ms) < GC_ORPHAN_AGE_MS || json_object_get(pod_ids, id))
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
                patch = json_pack("{s:{s:s?, s:{s:s, s:s}}}", "metadata", "resourceVersion",
                                  kube_get_str(o, "metadata.resourceVersion"), "annotations",
                                  ANN_DELETE_AFTER, after, ANN_DESTROYED_AT, now);
                if (kapi_request(kc, NULL, "PATCH", path, patch, &r, &e) < 0 || r.status != 200) {
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
                const char *id = kobj_label(o, LABEL_SANDBOX_ID),
                           *name = kube_get_str(o, "metadata.name");

                if (!id || !name || kobj_being_deleted(o) || json_object_get(pvc_ids, id) ||
                    !kobj_streq0(kube_get_str(o, "status.phase"), "Pending") ||
                    age_ms(o, now_ms) < GC_ORPHAN_AGE_MS)
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/pods/%s", ns, name);
                if (kapi_delete_exact(kc, NULL, path, kube_get_str(o, "metadata.uid"),
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

/* Deletes the session guards (kube_pool.c) whose sandbox has no pod and no live PVC (none, or
 * one a destroy marked): a session never destroyed, whose PVC the GC took, kept its guard
 * until its next create. Young guards are left alone (a create writes its guard after the
 * pod, which this pass's list may predate). */
static void gc_guards(kube_client *kc, const char *ns, json_t *guards, json_t *pods, json_t *pvcs,
                      int64_t now_ms)
{
        _cleanup_json_ json_t *pod_ids = sandbox_ids(pods), *live = json_object();
        json_t *o;
        size_t i;

        json_array_foreach(pvcs, i, o)
        {
                const char *id = kobj_label(o, LABEL_SANDBOX_ID);
                if (id && !kobj_annotation(o, ANN_DELETE_AFTER) && !kobj_being_deleted(o))
                        json_object_set_new(live, id, json_true());
        }
        json_array_foreach(guards, i, o)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL;
                const char *id = kube_get_str(o, "data." GUARD_KEY),
                           *name = kube_get_str(o, "metadata.name");

                if (!id || !name || kobj_being_deleted(o) || age_ms(o, now_ms) < GC_ORPHAN_AGE_MS ||
                    json_object_get(pod_ids, id) || json_object_get(live, id))
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/configmaps/%s", ns, name);
                if (kapi_delete_exact(kc, NULL, path, kube_get_str(o, "metadata.uid"),
                                      kube_get_str(o, "metadata.resourceVersion"), &e) != 0) {
                        if (e)
                                log_warn("gc: sandbox %s: cannot delete session guard %s/%s: %s",
                                         id, ns, name, e->msg);
                        continue;
                }
                log_info("gc: sandbox %s: gone; deleted its session guard %s/%s", id, ns, name);
        }
}

/* A warm pod claimed (kube_pool.c) by a create that ended before it wrote the session's
 * guard, or that lost the guard to another create and could not release its pod, and that no
 * retry took over: no client was ever given its id (a create answers only once the guard
 * names its pod). Such a pod, claimed or taken over more than GC_ORPHAN_AGE_MS ago, whose
 * session's guard is missing or names another sandbox, is deleted with the uid and
 * resourceVersion listed as preconditions, then its PVC. A retry that takes the pod over
 * meanwhile changes its resourceVersion first (ANN_ADOPTED_AT), so the delete fails and the
 * pod stays; a delete that wins leaves the retry a 404 or 409, and it claims another pod.
 * Guards were listed after pods, so a guard written before this pass is seen. */
static void gc_abandoned_claims(kube_client *kc, const char *ns, json_t *pods, json_t *guards,
                                int64_t now_ms)
{
        _cleanup_json_ json_t *guard_of = json_object();
        json_t *o;
        size_t i;

        json_array_foreach(guards, i, o)
        {
                const char *name = kube_get_str(o, "metadata.name");
                const char *id = kube_get_str(o, "data." GUARD_KEY);
                if (name && !kobj_being_deleted(o))
                        json_object_set_new(guard_of, name, json_string(id ?: ""));
        }
        json_array_foreach(pods, i, o)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL, *pvc_path = NULL;
                const char *id = kobj_label(o, LABEL_SANDBOX_ID),
                           *name = kube_get_str(o, "metadata.name"),
                           *tenant = kobj_annotation(o, ANN_TENANT_ID),
                           *session = kobj_annotation(o, ANN_SESSION_ID),
                           *claimed = kobj_annotation(o, ANN_CLAIMED_AT),
                           *adopted = kobj_annotation(o, ANN_ADOPTED_AT);
                int64_t claimed_ms = kobj_time_of(claimed), adopted_ms = kobj_time_of(adopted);
                char guard[KOBJ_POD_NAME_LEN + 1];
                const char *guarded;

                if (!id || !name || !claimed || !tenant || !tenant[0] || !session ||
                    kobj_being_deleted(o) || claimed_ms <= 0 ||
                    now_ms - claimed_ms < GC_ORPHAN_AGE_MS ||
                    (adopted && (adopted_ms <= 0 || now_ms - adopted_ms < GC_ORPHAN_AGE_MS)))
                        continue;
                kobj_pod_name(tenant, session, guard);
                guarded = json_string_value(json_object_get(guard_of, guard));
                if (guarded && strcmp(guarded, id) == 0)
                        continue;
                path = cs_xasprintf("/api/v1/namespaces/%s/pods/%s", ns, name);
                if (kapi_delete_exact(kc, NULL, path, kube_get_str(o, "metadata.uid"),
                                      kube_get_str(o, "metadata.resourceVersion"), &e) != 0) {
                        if (e)
                                log_warn("gc: sandbox %s: cannot delete abandoned claim %s/%s: %s",
                                         id, ns, name, e->msg);
                        continue;
                }
                log_info("gc: sandbox %s: deleted pod %s/%s, claimed from the warm pool at %s "
                         "and never given to a client (%s)",
                         id, ns, name, claimed,
                         guarded ? "its session's guard names another sandbox"
                                 : "its session has no guard");
                pvc_path =
                        cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims/ws-%s", ns, id);
                if (kapi_delete_exact(kc, NULL, pvc_path, NULL, NULL, &e) < 0)
                        log_warn("gc: sandbox %s: cannot delete PVC ws-%s: %s", id, id, e->msg);
        }
}

int kube_gc_run(const kube_config *cfg, int64_t now_ms, unsigned *ret_deleted, cs_error **err)
{
        const char *ns = cfg->sandbox_namespace && cfg->sandbox_namespace[0]
                                 ? cfg->sandbox_namespace
                                 : "compute-sandboxes";
        _cleanup_free_ char *pvcs_coll =
                cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims", ns);
        _cleanup_free_ char *pods_coll = cs_xasprintf("/api/v1/namespaces/%s/pods", ns);
        _cleanup_free_ char *guards_coll = cs_xasprintf("/api/v1/namespaces/%s/configmaps", ns);
        _cleanup_json_ json_t *pvcs = NULL, *pods = NULL, *guards = NULL,
                              *destroyed = json_object();
        kube_client *kc = kapi_client_new(cfg, err);
        unsigned deleted = 0, failed = 0;
        json_t *pvc;
        size_t i;

        *ret_deleted = 0;
        if (!kc)
                return -1;
        if (list_managed(kc, pvcs_coll, KOBJ_WORKSPACE_PVC, &pvcs, err) < 0 ||
            list_managed(kc, pods_coll, KOBJ_SANDBOX_POD, &pods, err) < 0 ||
            list_managed(kc, guards_coll, KOBJ_GUARD, &guards, err) < 0) {
                kube_client_free(kc);
                return -1;
        }
        json_array_foreach(pvcs, i, pvc)
        {
                _cleanup_error_ cs_error *e = NULL;
                _cleanup_free_ char *path = NULL;
                const char *name = kube_get_str(pvc, "metadata.name");
                const char *id = kobj_label(pvc, LABEL_SANDBOX_ID) ?: "?";
                const char *after = kobj_annotation(pvc, ANN_DELETE_AFTER);
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
                if (after_ms > now_ms || kobj_being_deleted(pvc))
                        continue;
                path = cs_xasprintf("%s/%s", pvcs_coll, name);
                /* The UID and resourceVersion judged here, or nothing: a PVC changed or
                 * replaced meanwhile (409), or deleted by a concurrent pass (404), is left
                 * to that change. */
                r = kapi_delete_exact(kc, NULL, path, kube_get_str(pvc, "metadata.uid"),
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
        gc_guards(kc, ns, guards, pods, pvcs, now_ms);
        gc_abandoned_claims(kc, ns, pods, guards, now_ms);
        kube_client_free(kc);
        *ret_deleted = deleted;
        if (failed)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                    "%u expired PVCs could not be deleted", failed);
        return 0;
}
