/* A small Kubernetes API client over libcurl and jansson: what the kube scheduler and the GC
 * need and no more. JSON in, JSON out; the caller builds and reads the objects.
 *
 * Cluster access, in this order of preference:
 *   - a kubeconfig file (cfg->kubeconfig set): server, certificate-authority(-data),
 *     insecure-skip-tls-verify, and the user's token / tokenFile /
 *     client-certificate(-data) + client-key(-data); the context's namespace.
 *   - in-cluster (cfg->kubeconfig empty): the server at
 *     https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6 host in brackets),
 *     the service account token, CA and namespace under
 *     /var/run/secrets/kubernetes.io/serviceaccount (overridden for tests: cfg->sa_dir).
 * Exec and auth-provider plugins, basic auth, impersonation, tls-server-name and proxy-url
 * are refused (INVALID_ARGUMENT) rather than ignored.
 * TLS is always verified unless the kubeconfig says insecure-skip-tls-verify. A token read
 * from a file is re-read when the file changes (projected tokens rotate).
 *
 * Thread-safe: any number of threads may call kube_request_ex and kube_watch at once.
 *
 * Implemented by concern: kube_client.c (lifetime, in-cluster, token), kube_config.c
 * (kubeconfig and YAML, pure), kube_http.c (handle pool, requests), kube_watch.c (watch
 * transport), kube_framer.c (watch event framing, pure), kube_json.c (the helpers below);
 * kube_internal.h holds what they share and the locking rule. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

typedef struct kube_client kube_client;

typedef struct kube_client_config {
        const char *kubeconfig;     /* path; NULL or "": in-cluster */
        const char *context;        /* kubeconfig context; NULL or "": current-context */
        const char *sa_dir;         /* NULL or "": /var/run/secrets/kubernetes.io/serviceaccount */
        int64_t timeout_ms;         /* whole-request deadline of kube_request_ex (not of watches);
                                     * <= 0: 30 s */
        int64_t connect_timeout_ms; /* TCP + TLS handshake, requests and watches; <= 0: 10 s */
        const char *user_agent;     /* NULL: "compute-frontend" */
} kube_client_config;

/* Reads the configuration (files are read now; a missing or malformed one is an error
 * naming the file and the field). NULL with *err (INVALID_ARGUMENT, or NOT_FOUND for a
 * missing file) on failure. Free with kube_client_free. */
kube_client *kube_client_new(const kube_client_config *cfg, cs_error **err);
/* Accepts NULL. No request or watch may still be running on kc. */
void kube_client_free(kube_client *kc);

/* The API server URL ("https://host:port"), and the namespace the configuration names (the
 * kubeconfig context's namespace, or the service account's namespace file; "default" when
 * neither says). Borrowed: valid while kc lives. */
const char *kube_client_server(const kube_client *kc);
const char *kube_client_namespace(const kube_client *kc);

/* One response. status is the HTTP status; body is the parsed JSON body (a new reference,
 * NULL when the body was empty or not JSON). */
typedef struct kube_response {
        long status;
        json_t *body;
} kube_response;

void kube_response_clear(kube_response *r);

/* The message of a non-2xx response: the Status body's "message" (or "reason"), else the
 * HTTP status line's meaning. Borrowed from r. */
const char *kube_response_message(const kube_response *r);

/* Sends one request and reads the whole response.
 *   method  "GET", "POST", "PUT", "PATCH" (body sent as application/merge-patch+json) or
 *           "DELETE".
 *   path    absolute path with query, already escaped ("/api/v1/namespaces/ns/pods?...").
 *   body    request body or NULL (not stolen).
 * Returns 0 when a response arrived, whatever its status (the caller decides what a 404 or a
 * 409 means). Returns -1 with *err when none did: UNAVAILABLE for connect/TLS/transport
 * failures and timeouts (the message says which), INTERNAL for a response body over the
 * cap (KUBE_MAX_BODY) or one that is not JSON while the status is 2xx, INVALID_ARGUMENT for
 * another method, a GET with a body or a path not starting with '/'. Messages are one line:
 * "kube GET /api/v1/...: TLS: SSL certificate problem: ..." ("timed out: " for timeouts).
 * *ret is cleared first; on success the caller frees it with kube_response_clear.
 *   timeout_ms  the whole request's deadline, at most the client's (<= 0: the client's).
 *   cancel_fd   ends the request early once readable, within about a second (UNAVAILABLE,
 *               "cancelled"); -1: none. For requests made on behalf of a call with a
 *               deadline, and for threads that must stop promptly. */
#define KUBE_MAX_BODY (64u << 20)
int kube_request_ex(kube_client *kc, const char *method, const char *path, json_t *body,
                    int64_t timeout_ms, int cancel_fd, kube_response *ret, cs_error **err);

/* One watch event: type is "ADDED", "MODIFIED", "DELETED", "BOOKMARK" or "ERROR" (object is
 * then a Status, e.g. code 410 when the resourceVersion is too old). object is borrowed for
 * the duration of the callback (json_incref to keep it). Return 0 to go on, non-zero to end
 * the watch (kube_watch then returns that value). */
typedef int (*kube_watch_fn)(const char *type, json_t *object, void *userdata);

/* Opens a watch (path must include watch=1 and usually resourceVersion=...,
 * allowWatchBookmarks=true, timeoutSeconds=...) and calls fn for each event line as it
 * arrives, until:
 *   - the server ends the stream (returns 0),
 *   - fn returns non-zero (returns that value),
 *   - cancel_fd becomes readable (returns 0 with *ret_cancelled = true; the fd is not read),
 *   - no byte arrives for idle_timeout_ms (returns -1, UNAVAILABLE: "watch idle";
 *     <= 0: no idle timeout),
 *   - the transport fails (returns -1, UNAVAILABLE),
 *   - an event line is not a JSON {"type": string, "object": ...} (returns -1, INTERNAL).
 * A non-2xx answer to the watch request itself returns 0 with *ret_status set to it (and
 * *ret_body to its Status body, a new reference, or NULL; ret_body may be NULL). On 200,
 * *ret_status is 200 (also when fn stopped it; when cancelled, the status if one had arrived,
 * else 0). One event line is capped at KUBE_MAX_BODY. fn runs on the calling thread.
 * ret_status and ret_cancelled may be NULL. cancel_fd: -1 for none; a pipe whose write end
 * is closed counts as readable. */
int kube_watch(kube_client *kc, const char *path, kube_watch_fn fn, void *userdata, int cancel_fd,
               int64_t idle_timeout_ms, long *ret_status, json_t **ret_body, bool *ret_cancelled,
               cs_error **err);

/* Percent-escapes s for a query value (label selectors: '=' ',' '!' and spaces). malloc'd. */
char *kube_escape(const char *s);

/* Helpers for reading objects: the string at a dotted path ("metadata.name",
 * "metadata.annotations.compute.paper-board.io/delete-after" does not work for keys holding
 * dots: use kube_get_key for those), or NULL. Borrowed from obj. */
const char *kube_get_str(json_t *obj, const char *dotted);
/* obj[a][b]...[key] for a path of keys given as separate arguments, NULL-terminated. */
json_t *kube_get_key(json_t *obj, ...) __attribute__((sentinel));

/* RFC 3339 (Kubernetes "2006-01-02T15:04:05Z") to and from milliseconds since the epoch.
 * kube_time_parse accepts fractional seconds and numeric offsets ("+01:00"), and returns -1
 * for a malformed string (or one before 1970). kube_time_format writes UTC with second
 * precision and "Z" ("2026-12-02T11:00:00Z", milliseconds dropped) into buf (at least 32
 * bytes) and returns buf. */
int64_t kube_time_parse(const char *s);
const char *kube_time_format(int64_t ms, char buf[static 32]);

/* Writes compute_kube_requests_total{verb,code} and compute_kube_request_duration_seconds
 * {verb} (the requests of kube_request_ex; watches are counted by their caches). */
struct cs_mpage;
void kube_client_metrics(kube_client *kc, struct cs_mpage *page);
