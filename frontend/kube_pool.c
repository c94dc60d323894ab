/* The kube scheduler's warm pool (--kube-warm-pool, docs/deploy.md "Warm pool"): sandbox
 * pods of the default profile (the --sandbox-image, the default limits, a workspace PVC of
 * --pvc-workspace-size and --pvc-storage-class) made ahead of any request, labelled
 * LABEL_POOL=POOL_PROFILE and owned by no tenant.
 *
 * One thread per frontend keeps the pool at its size, once a second, from the pod cache:
 * pool pods that failed are deleted; when fewer than the size are left it makes the missing
 * ones (a pod, then its PVC, one at a time, so a short pool never turns into a burst); when
 * more, it deletes those whose names sort last. Every frontend of a deployment has the same
 * size (one ConfigMap, deploy/), so when two see the pool short at once and both fill it, the
 * surplus is trimmed by the next pass, and both pick the same pods to trim. Each delete has
 * the pod's uid and resourceVersion as preconditions, so a pod that changed since it was read
 * is left alone. A pool pod's PVC goes with its pod; one left behind by a frontend that died
 * in between is an orphan the GC CronJob takes (kube_gc.c).
 *
 * A pool pod is no tenant's sandbox: its tenant and session annotations are empty, so no
 * ListSandboxes shows it, no tenant share counts it, and a describe or exec by its id answers
 * as for any pod (ids are never given out for pool pods).
 *
 * Claims (kube_create, scheduler_kube.c): a CreateSandbox of the default profile takes a
 * READY pool pod with a merge patch guarded by the resourceVersion read (on 409 it tries the
 * next one), which writes the tenant and session, the claim time and the idle usage, drops
 * the pool label and sets activeDeadlineSeconds to the pod's age plus max_runtime. Pods are no
 * longer named by their session then, so one sandbox per session rests on the session's
 * guard instead: a ConfigMap named as the session's pod would be (sbx-<hash>), holding the
 * sandbox id, POSTed after the pod is claimed (or made, on the cold path, while a pool is
 * configured). The API server lets one POST win; a create that loses releases its pod and
 * answers with the winner's sandbox, and a retried create finds the guard first. A guard
 * whose sandbox was destroyed or is gone is deleted and the session gets a new sandbox; a
 * destroy deletes its guard. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sandbox_limits.h"
#include "scheduler_kube_internal.h"
#include "util.h"
#include "usage_json.h"
#include "uuid.h"

/* How often the pool thread looks at the pool (a claim wakes it at once). */
#define POOL_PASS_MS 1000

/* The default profile's spec, as a pool pod is made with. */
static int pool_spec(kube *k, kobj_spec *ret, cs_error **err)
{
        fe_spec in = { .tenant_id = "", .session_id = "", .image = k->pool_image };

        return kobj_spec_normalise(k->storage_class, k->size, &in, ret, err);
}

int kpool_check(const char *image, int64_t size, cs_error **err)
{
        fe_spec in = { .tenant_id = "", .session_id = "", .image = image };
        kobj_spec spec;

        if (size <= 0)
                return 0;
        if (!image || !image[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--kube-warm-pool needs --sandbox-image (the pool's image)");
        if (kobj_spec_normalise("", "10Gi", &in, &spec, err) < 0) {
                cs_error_prefix(err, "--kube-warm-pool: --sandbox-image '%.64s'", image);
                return -1;
        }
        return 0;
}

static void scan_pool(json_t *pod, void *userdata)
{
        if (kobj_streq0(kobj_label(pod, LABEL_POOL), POOL_PROFILE) && !kobj_being_deleted(pod))
                json_array_append(userdata, pod);
}

static int by_name(const void *a, const void *b)
{
        const char *x = kube_get_str(*(json_t *const *)a, "metadata.name") ?: "";
        const char *y = kube_get_str(*(json_t *const *)b, "metadata.name") ?: "";

        return strcmp(x, y);
}

/* Deletes a pool pod (uid and resourceVersion as read: one that changed is left alone), then
 * its PVC. */
static void pool_delete(kube *k, json_t *pod, const char *why)
{
        _cleanup_error_ cs_error *e = NULL;
        _cleanup_free_ char *pods = kapi_pods_path(k), *pvcs = kapi_pvcs_path(k);
        const char *name = kube_get_str(pod, "metadata.name");
        const char *id = kobj_label(pod, LABEL_SANDBOX_ID);
        _cleanup_free_ char *path = NULL, *pvc_path = NULL;
        int r;

        if (!name || !id)
                return;
        path = cs_xasprintf("%s/%s", pods, name);
        r = kapi_delete_exact(k->kc, NULL, path, kube_get_str(pod, "metadata.uid"),
                              kube_get_str(pod, "metadata.resourceVersion"), &e);
        if (r < 0) {
                log_warn("warm pool: cannot delete pod %s/%s: %s", k->ns, name, e->msg);
                return;
        }
        if (r == 1)
                return; /* changed meanwhile: the next pass looks again */
        log_info("warm pool: deleted pod %s/%s (%s)", k->ns, name, why);
        pvc_path = cs_xasprintf("%s/ws-%s", pvcs, id);
        if (kapi_delete_exact(k->kc, NULL, pvc_path, NULL, NULL, &e) < 0)
                log_warn("warm pool: cannot delete PVC ws-%s: %s", id, e->msg);
}

/* Makes one pool pod and its PVC. */
static int pool_add(kube *k, cs_error **err)
{
        _cleanup_free_ char *pods = kapi_pods_path(k), *pvcs = kapi_pvcs_path(k);
        _cleanup_free_ char *spawner = strcmp(k->spawner_image, SPAWNER_IMAGE_AGENT) == 0
                                               ? kagent_image(k)
                                               : cs_xstrdup(k->spawner_image);
        _cleanup_json_ json_t *pod = NULL, *pvc = NULL;
        _cleanup_resp_ kube_response r = { 0 }, rp = { 0 };
        char id[CS_UUID_STRLEN + 1], name[KOBJ_POD_NAME_LEN + 1] = "sbx-";
        kobj_spec spec;
        size_t n = 4;

        if (pool_spec(k, &spec, err) < 0)
                return -1;
        cs_uuid_generate(id);
        for (const char *c = id; *c && n < KOBJ_POD_NAME_LEN; c++)
                if (*c != '-')
                        name[n++] = *c;
        name[n] = '\0';
        pod = kobj_pod_build(k->ns, k->runtime_class, spawner, &spec, name, id);
        pvc = kobj_pvc_build(k->ns, &spec, id, NULL);
        if (!pod || !pvc)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "cannot build a pool pod");
        json_object_set_new(kube_get_key(pod, "metadata", "labels", NULL), LABEL_POOL,
                            json_string(POOL_PROFILE));
        json_object_set_new(kube_get_key(pvc, "metadata", "labels", NULL), LABEL_POOL,
                            json_string(POOL_PROFILE));
        /* An idle pool pod has no deadline (it would fail after max_runtime of waiting). */
        json_object_del(json_object_get(pod, "spec"), "activeDeadlineSeconds");
        if (kapi_request(k->kc, NULL, "POST", pods, pod, &r, err) < 0)
                return -1;
        if (r.status != 201 && r.status != 200)
                return kapi_fail(&r, err, "creating pool pod %s/%s", k->ns, name);
        kube_cache_upsert(k->pods, r.body);
        if (kapi_request(k->kc, NULL, "POST", pvcs, pvc, &rp, err) < 0 ||
            (rp.status != 201 && rp.status != 200 &&
             kapi_fail(&rp, err, "creating pool PVC ws-%s", id) < 0)) {
                pool_delete(k, r.body, "its PVC could not be made");
                return -1;
        }
        kube_cache_upsert(k->pvcs, rp.body);
        log_info("warm pool: created pod %s/%s", k->ns, name);
        return 0;
}

static bool pool_stopping(kube *k)
{
        bool s;

        pthread_mutex_lock(&k->pool_lock);
        s = k->pool_stopping;
        pthread_mutex_unlock(&k->pool_lock);
        return s;
}

static void pool_pass(kube *k)
{
        _cleanup_json_ json_t *all = json_array();
        json_t **live;
        size_t n = 0, i;
        json_t *pod;

        kube_cache_each(k->pods, scan_pool, all);
        live = cs_xcalloc(json_array_size(all) + 1, sizeof(*live));
        json_array_foreach(all, i, pod)
        {
                if (kobj_pod_status(pod) == FE_STATUS_FAILED)
                        pool_delete(k, pod, "failed");
                else
                        live[n++] = pod;
        }
        qsort(live, n, sizeof(*live), by_name);
        for (i = (size_t)k->pool_target; i < n && !pool_stopping(k); i++)
                pool_delete(k, live[i], "beyond the pool's size");
        for (i = n; i < (size_t)k->pool_target && !pool_stopping(k); i++) {
                _cleanup_error_ cs_error *e = NULL;

                if (pool_add(k, &e) < 0) {
                        log_warn("warm pool: %s", e->msg);
                        break; /* the next pass tries again */
                }
        }
        pthread_mutex_lock(&k->pool_lock);
        k->pool_size = n < (size_t)k->pool_target ? n : (size_t)k->pool_target;
        pthread_mutex_unlock(&k->pool_lock);
        free(live);
}

static void *pool_main(void *arg)
{
        kube *k = arg;

        for (;;) {
                int64_t wake;

                pool_pass(k);
                pthread_mutex_lock(&k->pool_lock);
                wake = cs_now_monotonic_ms() + POOL_PASS_MS;
                while (!k->pool_stopping && cs_now_monotonic_ms() < wake)
                        cs_cond_wait_until(&k->pool_cond, &k->pool_lock, wake);
                if (k->pool_stopping) {
                        pthread_mutex_unlock(&k->pool_lock);
                        return NULL;
                }
                pthread_mutex_unlock(&k->pool_lock);
        }
}

int kpool_start(kube *k, int64_t size, const char *image, cs_error **err)
{
        int r;

        k->pool_target = size > 0 ? size : 0;
        k->pool_guards = size >= 0;
        k->pool_image = cs_xstrdup(image ?: "");
        pthread_mutex_init(&k->pool_lock, NULL);
        cs_cond_init_monotonic(&k->pool_cond);
        k->pool_init = true;
        if (size > 0 && kpool_check(image, size, err) < 0)
                return -1;
        /* Also with size 0: a pool left by an earlier configuration is drained. */
        r = pthread_create(&k->pool_thread, NULL, pool_main, k);
        if (r != 0)
                return cs_error_errno(err, r, "warm pool: cannot start its thread");
        k->pool_started = true;
        return 0;
}

void kpool_stop(kube *k)
{
        if (!k->pool_init)
                return;
        if (k->pool_started) {
                pthread_mutex_lock(&k->pool_lock);
                k->pool_stopping = true;
                pthread_cond_broadcast(&k->pool_cond);
                pthread_mutex_unlock(&k->pool_lock);
                pthread_join(k->pool_thread, NULL);
        }
        pthread_cond_destroy(&k->pool_cond);
        pthread_mutex_destroy(&k->pool_lock);
        free(k->pool_image);
}

void kpool_metrics(kube *k, cs_mpage *p)
{
        const char *labels[] = { "profile", POOL_PROFILE, NULL };
        uint64_t size, hits, misses, claim_ms;

        pthread_mutex_lock(&k->pool_lock);
        size = k->pool_size;
        hits = k->pool_hits;
        misses = k->pool_misses;
        claim_ms = k->pool_claim_ms_sum;
        pthread_mutex_unlock(&k->pool_lock);
        cs_mpage_family(p, "compute_kube_warm_pool_target", "gauge",
                        "Kube warm pool: the pool's configured size (--kube-warm-pool).");
        cs_mpage_sample_u64(p, "compute_kube_warm_pool_target", labels, (uint64_t)k->pool_target);
        cs_mpage_family(p, "compute_kube_warm_pool_pods", "gauge",
                        "Kube warm pool: pool pods alive at the last pass (up to the target).");
        cs_mpage_sample_u64(p, "compute_kube_warm_pool_pods", labels, size);
        cs_mpage_family(p, "compute_kube_warm_pool_hits_total", "counter",
                        "Kube warm pool: creates of the pool's profile that claimed a warm pod.");
        cs_mpage_sample_u64(p, "compute_kube_warm_pool_hits_total", labels, hits);
        cs_mpage_family(p, "compute_kube_warm_pool_misses_total", "counter",
                        "Kube warm pool: creates of the pool's profile that found no warm pod "
                        "READY and took the cold path.");
        cs_mpage_sample_u64(p, "compute_kube_warm_pool_misses_total", labels, misses);
        cs_mpage_family(p, "compute_kube_warm_pool_claim_seconds_total", "counter",
                        "Kube warm pool: time spent in the claims that succeeded (divided by the "
                        "hits: the mean claim latency).");
        cs_mpage_sample(p, "compute_kube_warm_pool_claim_seconds_total", labels,
                        (double)claim_ms / 1000.0);
}

/* --- claims ---------------------------------------------------------------------------- */

bool kpool_profile_matches(const kube *k, const kobj_spec *spec)
{
        return k->pool_target > 0 && strcmp(spec->image, k->pool_image) == 0 &&
               strcmp(spec->storage_class, k->storage_class) == 0 &&
               strcmp(spec->size, k->size) == 0 &&
               strcmp(spec->mount_path, CS_DEFAULT_MOUNT_PATH) == 0 &&
               spec->cpu_millis == CS_DEFAULT_CPU_MILLIS && spec->memory_bytes == CS_DEFAULT_MEMORY;
}

static char *guards_path(const kube *k)
{
        return cs_xasprintf("/api/v1/namespaces/%s/configmaps", k->ns);
}

/* The guard's sandbox id, after checking the guard is the session's (a name collision, or an
 * object someone else made, is never followed). */
static int guard_id(kube *k, const kobj_spec *spec, json_t *guard, const char **ret, cs_error **err)
{
        const char *id = kube_get_str(guard, "data." GUARD_KEY);

        if (!kobj_streq0(kobj_annotation(guard, ANN_TENANT_ID), spec->tenant_id) ||
            !kobj_streq0(kobj_annotation(guard, ANN_SESSION_ID), spec->session_id) || !id ||
            !cs_uuid_valid(id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "ConfigMap %s/%s is not this session's sandbox guard (name "
                                    "collision); not using it",
                                    k->ns, kube_get_str(guard, "metadata.name") ?: "?");
        *ret = id;
        return 0;
}

int kpool_guard_find(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                     json_t **ret_pod, cs_error **err)
{
        _cleanup_free_ char *coll = guards_path(k);

        *ret_pod = NULL;
        for (int attempt = 0; attempt < 3; attempt++) {
                _cleanup_json_ json_t *guard = NULL, *pod = NULL, *pvc = NULL;
                _cleanup_free_ char *path = NULL;
                const char *id;
                int r;

                if (kapi_get_named(k, ctx, coll, name, &guard, err) < 0)
                        return -1;
                if (!guard)
                        return 0;
                if (guard_id(k, spec, guard, &id, err) < 0 ||
                    kapi_find_pod(k, ctx, id, &pod, err) < 0 ||
                    kapi_get_pvc(k, ctx, id, &pvc, err) < 0)
                        return -1;
                if (pod && !kobj_being_deleted(pod) && !kobj_pvc_destroyed(pvc)) {
                        *ret_pod = TAKE_PTR(pod);
                        return 0;
                }
                /* Its sandbox was destroyed or is gone: the session gets a new one. */
                path = cs_xasprintf("%s/%s", coll, name);
                r = kapi_delete_exact(k->kc, ctx, path, kube_get_str(guard, "metadata.uid"),
                                      kube_get_str(guard, "metadata.resourceVersion"), err);
                if (r < 0)
                        return -1;
        }
        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                            "the session's guard %s/%s keeps changing; try again", k->ns, name);
}

/* Deletes a sandbox pod this create made or claimed and then lost to another, and its PVC. */
static void release(kube *k, const fe_ctx *ctx, json_t *pod)
{
        _cleanup_error_ cs_error *e = NULL;
        _cleanup_free_ char *pvcs = kapi_pvcs_path(k);
        const char *id = kobj_label(pod, LABEL_SANDBOX_ID);
        _cleanup_free_ char *path = cs_xasprintf("%s/ws-%s", pvcs, id ?: "?");

        if (kapi_delete_pod(k, ctx, pod, &e) < 0 ||
            (id && kapi_delete_exact(k->kc, ctx, path, NULL, NULL, &e) < 0))
                fe_ctx_log(ctx, CS_LOG_WARN, "cannot release the sandbox %s another create won: %s",
                           id ?: "?", e->msg);
}

int kpool_guard_settle(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                       json_t **pod, cs_error **err)
{
        _cleanup_free_ char *coll = guards_path(k);
        const char *mine = kobj_label(*pod, LABEL_SANDBOX_ID);

        for (int attempt = 0; attempt < 3; attempt++) {
                _cleanup_json_ json_t *body = json_pack(
                        "{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:{s:s, s:s}}, s:{s:s}}", "apiVersion",
                        "v1", "kind", "ConfigMap", "metadata", "name", name, "namespace", k->ns,
                        "labels", LABEL_MANAGED_BY, MANAGED_BY, "annotations", ANN_TENANT_ID,
                        spec->tenant_id, ANN_SESSION_ID, spec->session_id, "data", GUARD_KEY, mine);
                _cleanup_json_ json_t *guard = NULL, *winner = NULL;
                _cleanup_resp_ kube_response r = { 0 };
                const char *id;

                if (kapi_request(k->kc, ctx, "POST", coll, body, &r, err) < 0)
                        return -1;
                if (r.status == 201 || r.status == 200)
                        return 0;
                if (r.status != 409)
                        return kapi_fail(&r, err, "creating the session's guard %s/%s", k->ns,
                                         name);
                if (kapi_get_named(k, ctx, coll, name, &guard, err) < 0)
                        return -1;
                if (!guard)
                        continue; /* deleted in between: post again */
                if (guard_id(k, spec, guard, &id, err) < 0)
                        return -1;
                if (strcmp(id, mine) == 0)
                        return 0; /* another create of this session adopted the same pod */
                if (kapi_find_pod(k, ctx, id, &winner, err) < 0)
                        return -1;
                if (!winner || kobj_being_deleted(winner)) {
                        /* A stale guard: take it over (its sandbox is gone). */
                        _cleanup_free_ char *path = cs_xasprintf("%s/%s", coll, name);
                        if (kapi_delete_exact(k->kc, ctx, path, kube_get_str(guard, "metadata.uid"),
                                              kube_get_str(guard, "metadata.resourceVersion"),
                                              err) < 0)
                                return -1;
                        continue;
                }
                fe_ctx_log(ctx, CS_LOG_INFO,
                           "another create of this session won with sandbox %s; releasing %s", id,
                           mine);
                release(k, ctx, *pod);
                json_decref(*pod);
                *pod = TAKE_PTR(winner);
                return 0;
        }
        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                            "the session's guard %s/%s keeps changing; try again", k->ns, name);
}

void kpool_guard_drop(kube *k, const fe_ctx *ctx, json_t *pod, const char *id)
{
        _cleanup_free_ char *coll = guards_path(k), *path = NULL;
        _cleanup_json_ json_t *guard = NULL;
        _cleanup_error_ cs_error *e = NULL;
        const char *tenant = kobj_annotation(pod, ANN_TENANT_ID);
        const char *session = kobj_annotation(pod, ANN_SESSION_ID);
        char name[KOBJ_POD_NAME_LEN + 1];

        if (!tenant || !session || !tenant[0])
                return;
        kobj_pod_name(tenant, session, name);
        if (kapi_get_named(k, ctx, coll, name, &guard, &e) < 0 || !guard ||
            !kobj_streq0(kube_get_str(guard, "data." GUARD_KEY), id))
                return;
        path = cs_xasprintf("%s/%s", coll, name);
        if (kapi_delete_exact(k->kc, ctx, path, kube_get_str(guard, "metadata.uid"),
                              kube_get_str(guard, "metadata.resourceVersion"), &e) < 0)
                fe_ctx_log(ctx, CS_LOG_WARN, "cannot delete the session's guard %s: %s", name,
                           e->msg);
}

static void scan_ready(json_t *pod, void *userdata)
{
        const char *tenant = kobj_annotation(pod, ANN_TENANT_ID);

        if (kobj_streq0(kobj_label(pod, LABEL_POOL), POOL_PROFILE) && !kobj_being_deleted(pod) &&
            (!tenant || !tenant[0]) && kobj_pod_status(pod) == FE_STATUS_READY)
                json_array_append(userdata, pod);
}

/* Claims one pod: the merge patch carries the resourceVersion read, so of two claims of the
 * same pod (two frontends, two calls) the API server lets one through and answers the other
 * 409. 1 when claimed (*ret_pod), 0 when this pod was taken meanwhile, -1 on failure. */
static int claim_one(kube *k, const fe_ctx *ctx, const kobj_spec *spec, json_t *pod,
                     json_t **ret_pod, cs_error **err)
{
        _cleanup_free_ char *pods = kapi_pods_path(k), *pvcs = kapi_pvcs_path(k);
        const char *name = kube_get_str(pod, "metadata.name");
        const char *id = kobj_label(pod, LABEL_SANDBOX_ID);
        _cleanup_free_ char *path = NULL, *pvc_path = NULL, *baseline = NULL, *offset = NULL;
        _cleanup_json_ json_t *patch = NULL, *pvc_patch = NULL, *u = NULL;
        _cleanup_resp_ kube_response r = { 0 }, rp = { 0 };
        _cleanup_error_ cs_error *e = NULL;
        int64_t now = cs_now_realtime_ms();
        int64_t started = kobj_time_of(kube_get_str(pod, "status.startTime"))
                                  ?: kobj_time_of(kube_get_str(pod, "metadata.creationTimestamp"));
        int64_t age_s = started && now > started ? (now - started) / 1000 + 1 : 0;
        usage_metrics idle = { 0 };
        char claimed[32];

        if (!name || !id)
                return 0;
        /* The idle warm time's usage is the operator's: read now and subtracted from every
         * later reading (kobj_usage_subtract_baseline). */
        if (kagent_usage(k, ctx, id, pod, &idle, &e) < 0)
                fe_ctx_log(ctx, CS_LOG_WARN, "warm pod %s: no usage baseline (taken as zero): %s",
                           name, e->msg);
        u = usage_to_json(&idle);
        baseline = json_dumps(u, JSON_COMPACT);
        offset = cs_xasprintf("%" PRId64, age_s);
        patch = json_pack("{s:{s:s?, s:{s:n}, s:{s:s, s:s, s:s, s:s, s:s?}}, s:{s:I}}", "metadata",
                          "resourceVersion", kube_get_str(pod, "metadata.resourceVersion"),
                          "labels", LABEL_POOL, "annotations", ANN_TENANT_ID, spec->tenant_id,
                          ANN_SESSION_ID, spec->session_id, ANN_CLAIMED_AT,
                          kube_time_format(now, claimed), ANN_CLAIM_OFFSET, offset,
                          ANN_USAGE_BASELINE, baseline, "spec", "activeDeadlineSeconds",
                          (json_int_t)(age_s + (spec->max_runtime_ms + 999) / 1000));
        path = cs_xasprintf("%s/%s", pods, name);
        if (kapi_request(k->kc, ctx, "PATCH", path, patch, &r, err) < 0)
                return -1;
        if (r.status == 409 || r.status == 404 || r.status == 422)
                return 0;
        if (r.status != 200)
                return kapi_fail(&r, err, "claiming warm pod %s/%s", k->ns, name);
        kube_cache_upsert(k->pods, r.body);
        /* Whose the workspace is, for a listing once the pod is gone (best effort: the destroy
         * records it too). */
        pvc_patch =
                json_pack("{s:{s:{s:s, s:s}, s:{s:n}}}", "metadata", "annotations", ANN_TENANT_ID,
                          spec->tenant_id, ANN_SESSION_ID, spec->session_id, "labels", LABEL_POOL);
        pvc_path = cs_xasprintf("%s/ws-%s", pvcs, id);
        if (kapi_request(k->kc, ctx, "PATCH", pvc_path, pvc_patch, &rp, &e) < 0)
                fe_ctx_log(ctx, CS_LOG_WARN, "PVC ws-%s: %s", id, e->msg);
        else if (rp.status == 200)
                kube_cache_upsert(k->pvcs, rp.body);
        fe_ctx_log(ctx, CS_LOG_INFO, "claimed warm pod %s/%s (sandbox %s)", k->ns, name, id);
        *ret_pod = TAKE_PTR(r.body);
        return 1;
}

typedef struct own_scan {
        const kobj_spec *spec;
} own_scan;

/* A pod this session claimed by an earlier attempt that ended before writing the guard. */
static bool match_own_claim(json_t *pod, void *userdata)
{
        const own_scan *o = userdata;

        return kobj_annotation(pod, ANN_CLAIMED_AT) && !kobj_being_deleted(pod) &&
               kobj_streq0(kobj_annotation(pod, ANN_TENANT_ID), o->spec->tenant_id) &&
               kobj_streq0(kobj_annotation(pod, ANN_SESSION_ID), o->spec->session_id);
}

/* Takes over a pod this session claimed by an earlier attempt: a merge patch guarded by the
 * resourceVersion read, writing ANN_ADOPTED_AT. The GC removes a claim left without its guard
 * (kube_gc.c) with the resourceVersion it read as precondition, so of the two only one
 * succeeds: a pod the GC removes is never handed out, and a pod handed out is never
 * removed. 1 with *ret_pod, 0 when the pod changed or went (then claim another), -1. */
static int adopt_own(kube *k, const fe_ctx *ctx, json_t *pod, json_t **ret_pod, cs_error **err)
{
        _cleanup_free_ char *pods = kapi_pods_path(k), *path = NULL;
        const char *name = kube_get_str(pod, "metadata.name");
        _cleanup_json_ json_t *patch = NULL;
        _cleanup_resp_ kube_response r = { 0 };
        char now[32];

        if (!name)
                return 0;
        patch = json_pack("{s:{s:s?, s:{s:s}}}", "metadata", "resourceVersion",
                          kube_get_str(pod, "metadata.resourceVersion"), "annotations",
                          ANN_ADOPTED_AT, kube_time_format(cs_now_realtime_ms(), now));
        path = cs_xasprintf("%s/%s", pods, name);
        if (kapi_request(k->kc, ctx, "PATCH", path, patch, &r, err) < 0)
                return -1;
        if (r.status == 409 || r.status == 404)
                return 0;
        if (r.status != 200)
                return kapi_fail(&r, err, "taking over pod %s/%s", k->ns, name);
        kube_cache_upsert(k->pods, r.body);
        if (kobj_being_deleted(r.body))
                return 0;
        fe_ctx_log(ctx, CS_LOG_INFO, "took over pod %s/%s, claimed by an earlier attempt", k->ns,
                   name);
        *ret_pod = TAKE_PTR(r.body);
        return 1;
}

int kpool_claim(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                json_t **ret_pod, cs_error **err)
{
        _cleanup_json_ json_t *cands = json_array(), *own_pod = NULL;
        int64_t t0 = cs_now_monotonic_ms();
        own_scan own = { .spec = spec };
        size_t n, start = 0;
        int r = 0;

        /* A retry after a claim whose guard was never written (the frontend died, the call
         * was cancelled) takes that pod again rather than leaving it claimed and unused. */
        *ret_pod = NULL;
        own_pod = kube_cache_find(k->pods, match_own_claim, &own);
        if (own_pod) {
                r = adopt_own(k, ctx, own_pod, ret_pod, err);
                if (r != 0)
                        return r < 0 ? -1 : 0;
        }
        kube_cache_each(k->pods, scan_ready, cands);
        n = json_array_size(cands);
        /* Sessions start at different pods, so concurrent claims rarely meet on one. */
        for (const char *c = name; *c; c++)
                start = start * 31 + (unsigned char)*c;
        for (size_t i = 0; i < n && r == 0; i++) {
                r = claim_one(k, ctx, spec, json_array_get(cands, (start + i) % n), ret_pod, err);
                if (r < 0)
                        return -1;
        }
        pthread_mutex_lock(&k->pool_lock);
        if (r == 1) {
                k->pool_hits++;
                k->pool_claim_ms_sum += (uint64_t)(cs_now_monotonic_ms() - t0);
        } else {
                k->pool_misses++;
        }
        pthread_cond_broadcast(&k->pool_cond); /* the pool is short now: refill at once */
        pthread_mutex_unlock(&k->pool_lock);
        return 0;
}
