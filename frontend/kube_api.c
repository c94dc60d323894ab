/* The kube scheduler's access to the API server: requests with retries and backoff within
 * a call's deadline, the answers it did not expect as errors, and the reads and deletes of
 * sandbox pods and PVCs. Owns no state; touches the API server and (upserts after a read)
 * the sandbox pod cache. Locking: scheduler_kube_internal.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scheduler_kube_internal.h"
#include "util.h"

/* API requests that fail transiently (transport, 429, 5xx) are tried this many times in
 * all, API_BACKOFF_MS apart and doubling, within the call's deadline. */
#define API_ATTEMPTS 3
/* The longest a Retry-After from the API server makes a request wait. */
#define API_RETRY_AFTER_MAX_MS 30000
#define API_BACKOFF_MS         200
#define API_BACKOFF_MAX_MS     1000
/* How long a request keeps trying while the API server cannot be reached at all (refused,
 * reset: it is restarting or being rolled), within the call's deadline. Answers (429, 5xx)
 * count against API_ATTEMPTS instead. */
#define API_UNREACHABLE_MS 10000

static bool transient(long status)
{
        return status == 429 || status >= 500;
}

/* Sends one request, trying again after transport failures (for up to API_UNREACHABLE_MS),
 * 429 and 5xx (API_ATTEMPTS answers in all), within the call's deadline, each attempt
 * bounded by what is left of it and ended by the call's cancellation; the Status body's
 * retryAfterSeconds is honoured when it fits.
 * 0 with *ret for any other answer, whatever its status (the caller decides what a 404 or
 * 409 means); -1 with UNAVAILABLE when every attempt failed, DEADLINE_EXCEEDED when the
 * call's deadline passed, or the client's own error (INTERNAL: a malformed answer). */
int kapi_request(kube_client *kc, const fe_ctx *ctx, const char *method, const char *path,
                 json_t *body, kube_response *ret, cs_error **err)
{
        const fe_ctx none = FE_CTX_NONE;
        int64_t deadline, delay = API_BACKOFF_MS, start = cs_now_monotonic_ms();
        int cancel_fd, answers = 0;

        if (!ctx)
                ctx = &none;
        deadline = ctx->deadline_ms;
        cancel_fd = ctx->cancel_fd;

        for (;;) {
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
                if ((e ? cs_now_monotonic_ms() + wait - start > API_UNREACHABLE_MS
                       : ++answers >= API_ATTEMPTS) ||
                    fe_ctx_cancelled(ctx) ||
                    (deadline != INT64_MAX && cs_now_monotonic_ms() + wait >= deadline))
                        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                            "Kubernetes API %s %s: %s", method, path, why);
                fe_ctx_sleep(ctx, min64(wait, API_RETRY_AFTER_MAX_MS));
                delay = min64(delay * 2, API_BACKOFF_MAX_MS);
        }
}

int kapi_fail(const kube_response *r, cs_error **err, const char *fmt, ...)
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

char *kapi_pods_path(const kube *k)
{
        return cs_xasprintf("/api/v1/namespaces/%s/pods", k->ns);
}

char *kapi_pvcs_path(const kube *k)
{
        return cs_xasprintf("/api/v1/namespaces/%s/persistentvolumeclaims", k->ns);
}

/* GETs one object by name: 0 with *ret (NULL when it does not exist), or -1. */
int kapi_get_named(kube *k, const fe_ctx *ctx, const char *collection, const char *name,
                   json_t **ret, cs_error **err)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/%s", collection, name);
        _cleanup_resp_ kube_response r = { 0 };

        *ret = NULL;
        if (kapi_request(k->kc, ctx, "GET", path, NULL, &r, err) < 0)
                return -1;
        if (r.status == 404)
                return 0;
        if (r.status != 200 || !json_is_object(r.body))
                return kapi_fail(&r, err, "reading %s", path);
        *ret = TAKE_PTR(r.body);
        return 0;
}

int kapi_get_pvc(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err)
{
        _cleanup_free_ char *coll = kapi_pvcs_path(k), *name = cs_xasprintf("ws-%s", id);

        return kapi_get_named(k, ctx, coll, name, ret, err);
}

/* The sandbox's pod: from the cache, else (another replica may have just made it, or
 * `fresh` asks for the API server's word) from the API server by label. 0 with *ret (NULL:
 * none), or -1. */
int kapi_find_pod_fresh(kube *k, const fe_ctx *ctx, const char *id, bool fresh, json_t **ret,
                        cs_error **err)
{
        _cleanup_free_ char *coll = NULL, *sel = NULL, *path = NULL;
        _cleanup_resp_ kube_response r = { 0 };
        json_t *items;

        *ret = fresh ? NULL : kube_cache_find_label(k->pods, LABEL_SANDBOX_ID, id);
        if (*ret)
                return 0;
        coll = kapi_pods_path(k);
        sel = kube_escape(LABEL_SANDBOX_ID "=");
        path = cs_xasprintf("%s?labelSelector=%s%s", coll, sel, id);
        if (kapi_request(k->kc, ctx, "GET", path, NULL, &r, err) < 0)
                return -1;
        if (r.status != 200 || !json_is_object(r.body))
                return kapi_fail(&r, err, "listing the pods of sandbox %s", id);
        items = json_object_get(r.body, "items");
        if (json_array_size(items) > 0) {
                *ret = json_incref(json_array_get(items, 0));
                kube_cache_upsert(k->pods, *ret);
        }
        return 0;
}

int kapi_find_pod(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err)
{
        return kapi_find_pod_fresh(k, ctx, id, false, ret, err);
}

/* DELETE with preconditions (uid and resourceVersion, each when given): 0 when this
 * deleted it, 1 when it was already gone or is no longer the object judged (404, 409), -1
 * otherwise. */
int kapi_delete_exact(kube_client *kc, const fe_ctx *ctx, const char *path, const char *uid,
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
        if (kapi_request(kc, ctx, "DELETE", path, opts, &r, err) < 0)
                return -1;
        if (r.status == 200 || r.status == 202)
                return 0;
        if (r.status == 404 || r.status == 409)
                return 1;
        return kapi_fail(&r, err, "deleting %s", path);
}

int kapi_delete_pod(kube *k, const fe_ctx *ctx, json_t *pod, cs_error **err)
{
        _cleanup_free_ char *coll = kapi_pods_path(k);
        _cleanup_free_ char *path =
                cs_xasprintf("%s/%s", coll, kube_get_str(pod, "metadata.name") ?: "");

        return kapi_delete_exact(k->kc, ctx, path, kube_get_str(pod, "metadata.uid"), NULL, err) < 0
                       ? -1
                       : 0;
}

kube_client *kapi_client_new(const kube_config *cfg, cs_error **err)
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
