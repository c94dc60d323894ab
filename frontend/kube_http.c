/* Requests to the API server: the pool of curl easy handles, the options every transfer
 * has (TLS, identity, headers), one request and its response. See kube_client.h.
 *
 * Owns: the handle pool (under pool_lock), kube_buf, the curl error wording, cancel fds.
 * Touches: the client's configuration read-only, its token through kube_client_token. */
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kube_internal.h"
#include "util.h"

/* ---- easy handles ---- */

static CURL *pool_get(kube_client *kc)
{
        CURL *h = NULL;

        pthread_mutex_lock(&kc->pool_lock);
        if (kc->n_pool > 0)
                h = kc->pool[--kc->n_pool];
        pthread_mutex_unlock(&kc->pool_lock);
        return h ? h : curl_easy_init();
}

/* Back to the pool: reset drops every option (and so pointers into the caller's stack) but
 * keeps the handle's live connections, which is what the pool is for. */
static void pool_put(kube_client *kc, CURL *h)
{
        if (!h)
                return;
        curl_easy_reset(h);
        pthread_mutex_lock(&kc->pool_lock);
        if (kc->n_pool < KUBE_POOL_MAX) {
                kc->pool[kc->n_pool++] = h;
                h = NULL;
        }
        pthread_mutex_unlock(&kc->pool_lock);
        if (h)
                curl_easy_cleanup(h);
}

int kube_buf_append(kube_buf *b, const char *p, size_t n)
{
        if (n > KUBE_MAX_BODY - b->len) {
                b->too_big = true;
                return -1;
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;

                while (cap < b->len + n + 1)
                        cap *= 2;
                b->data = realloc(b->data, cap);
                if (!b->data)
                        abort();
                b->cap = cap;
        }
        memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

static size_t body_write(char *p, size_t size, size_t n, void *userdata)
{
        return kube_buf_append(userdata, p, size * n) < 0 ? 0 : size * n;
}

CURLcode kube_easy_setup(kube_client *kc, CURL *h, const char *url, const char *content_type,
                         char *errbuf, struct curl_slist **headers)
{
        _cleanup_free_ char *token = kube_client_token(kc);
        _cleanup_free_ char *auth = NULL;
        CURLcode rc = CURLE_OK;
        struct curl_slist *l = NULL;

        errbuf[0] = '\0';
        l = curl_slist_append(l, "Accept: application/json");
        l = curl_slist_append(l, "Expect:");
        if (content_type) {
                _cleanup_free_ char *ct = cs_xasprintf("Content-Type: %s", content_type);
                l = curl_slist_append(l, ct);
        }
        if (token) {
                auth = cs_xasprintf("Authorization: Bearer %s", token);
                l = curl_slist_append(l, auth);
                explicit_bzero(auth, strlen(auth));
                explicit_bzero(token, strlen(token));
        }
        if (!l)
                abort();
        *headers = l;

        SETOPT(h, CURLOPT_URL, url);
        SETOPT(h, CURLOPT_ERRORBUFFER, errbuf);
        SETOPT(h, CURLOPT_NOSIGNAL, 1L);
        SETOPT(h, CURLOPT_SHARE, kc->share);
        SETOPT(h, CURLOPT_PROTOCOLS_STR, "https,http");
        SETOPT(h, CURLOPT_USERAGENT, kc->user_agent);
        SETOPT(h, CURLOPT_HTTPHEADER, l);
        SETOPT(h, CURLOPT_CONNECTTIMEOUT_MS, (long)kc->connect_timeout_ms);
        SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
        SETOPT(h, CURLOPT_SSL_VERIFYPEER, kc->conf.insecure ? 0L : 1L);
        SETOPT(h, CURLOPT_SSL_VERIFYHOST, kc->conf.insecure ? 0L : 2L);
        if (kc->conf.ca.pem.len > 0 && !kc->conf.insecure) {
                struct curl_blob b = { kc->conf.ca.pem.data, kc->conf.ca.pem.len,
                                       CURL_BLOB_NOCOPY };

                /* Only the cluster's CA: not the system bundle besides it (as kubectl). */
                SETOPT(h, CURLOPT_CAINFO, NULL);
                SETOPT(h, CURLOPT_CAPATH, NULL);
                SETOPT(h, CURLOPT_CAINFO_BLOB, &b);
        }
        if (kc->conf.cert.pem.len > 0) {
                struct curl_blob cb = { kc->conf.cert.pem.data, kc->conf.cert.pem.len,
                                        CURL_BLOB_NOCOPY };
                struct curl_blob kb = { kc->conf.key.pem.data, kc->conf.key.pem.len,
                                        CURL_BLOB_NOCOPY };

                SETOPT(h, CURLOPT_SSLCERTTYPE, "PEM");
                SETOPT(h, CURLOPT_SSLCERT_BLOB, &cb);
                SETOPT(h, CURLOPT_SSLKEYTYPE, "PEM");
                SETOPT(h, CURLOPT_SSLKEY_BLOB, &kb);
        }
        return rc;
}

const char *kube_curl_why(CURLcode rc, const char *errbuf)
{
        return errbuf[0] ? errbuf : curl_easy_strerror(rc);
}

const char *kube_curl_kind(CURLcode rc)
{
        switch (rc) {
        case CURLE_OPERATION_TIMEDOUT:
                return "timed out: ";
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_CLIENTCERT:
        case CURLE_USE_SSL_FAILED:
                return "TLS: ";
        default:
                return "";
        }
}

static int method_setup(CURL *h, const char *method, const char *body, const char **ret_ct)
{
        CURLcode rc = CURLE_OK;

        *ret_ct = NULL;
        if (!strcmp(method, "GET")) {
                SETOPT(h, CURLOPT_HTTPGET, 1L);
                return body ? -1 : (int)rc;
        }
        if (strcmp(method, "POST") && strcmp(method, "PUT") && strcmp(method, "PATCH") &&
            strcmp(method, "DELETE"))
                return -1;
        if (strcmp(method, "POST"))
                SETOPT(h, CURLOPT_CUSTOMREQUEST, method);
        if (body || !strcmp(method, "POST")) {
                SETOPT(h, CURLOPT_POSTFIELDS, body ? body : "");
                SETOPT(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? strlen(body) : 0));
                *ret_ct = !strcmp(method, "PATCH") ? "application/merge-patch+json"
                                                   : "application/json";
        }
        return (int)rc;
}

/* ---- requests ---- */

static int64_t min_i64(int64_t a, int64_t b)
{
        return a < b ? a : b;
}

/* The progress callback of a request with a cancel fd: non-zero (abort) once it is readable.
 * libcurl calls it about once a second even while nothing moves. */
static int request_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                            curl_off_t ultotal, curl_off_t ulnow)
{
        (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
        return kube_cancel_check(*(const int *)userdata) != 0;
}

static const char *const kube_verbs[KUBE_N_VERBS] = { "GET",   "POST",   "PUT",
                                                      "PATCH", "DELETE", "other" };

static unsigned verb_index(const char *method)
{
        unsigned i = 0;

        while (i < KUBE_N_VERBS - 1 && strcmp(kube_verbs[i], method) != 0)
                i++;
        return i;
}

/* A request that went out ended with HTTP status (0: no answer) after ns. */
static void count_request(kube_client *kc, const char *method, long status, int64_t ns)
{
        unsigned v = verb_index(method);

        if (status < 0 || status > KUBE_MAX_STATUS)
                status = 0;
        atomic_fetch_add_explicit(&kc->requests[v][status], 1, memory_order_relaxed);
        cs_histogram_observe(&kc->request_seconds[v], ns);
}

void kube_client_metrics(kube_client *kc, cs_mpage *p)
{
        char code[8];

        cs_mpage_family(p, "compute_kube_requests_total", "counter",
                        "Requests to the Kubernetes API server (watches apart), by verb and HTTP "
                        "status; code=\"error\" when no answer came (connection, timeout).");
        for (unsigned v = 0; v < KUBE_N_VERBS; v++)
                for (unsigned s = 0; s <= KUBE_MAX_STATUS; s++) {
                        uint64_t n =
                                atomic_load_explicit(&kc->requests[v][s], memory_order_relaxed);
                        const char *labels[] = { "verb", kube_verbs[v], "code", code, NULL };

                        if (!n)
                                continue;
                        snprintf(code, sizeof(code), s ? "%u" : "error", s);
                        cs_mpage_sample_u64(p, "compute_kube_requests_total", labels, n);
                }
        cs_mpage_family(p, "compute_kube_request_duration_seconds", "histogram",
                        "Time of requests to the Kubernetes API server (watches apart), by verb.");
        for (unsigned v = 0; v < KUBE_N_VERBS; v++) {
                const char *labels[] = { "verb", kube_verbs[v], NULL };

                cs_mpage_histogram(p, "compute_kube_request_duration_seconds", labels,
                                   &kc->request_seconds[v]);
        }
}

int kube_request_ex(kube_client *kc, const char *method, const char *path, json_t *body,
                    int64_t timeout_ms, int cancel_fd, kube_response *ret, cs_error **err)
{
        _cleanup_free_ char *url = cs_xasprintf("%s%s", kc->conf.server, path);
        _cleanup_free_ char *payload = NULL;
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *headers = NULL;
        kube_buf out = { 0 };
        const char *ct;
        CURLcode rc;
        CURL *h;
        int64_t started = 0;
        long answered = 0;
        int r = -1;

        memset(ret, 0, sizeof(*ret));
        if (path[0] != '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kube %s %s: path must start with '/'", method, path);
        if (body) {
                payload = json_dumps(body, JSON_COMPACT);
                if (!payload)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kube %s %s: body cannot be serialized", method, path);
        }
        h = pool_get(kc);
        if (!h)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "kube %s %s: curl_easy_init failed",
                                    method, path);
        if (method_setup(h, method, payload, &ct) != 0) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "kube %s %s: unsupported method (or a body with GET)", method, path);
                goto out;
        }
        rc = kube_easy_setup(kc, h, url, ct, errbuf, &headers);
        if (rc == CURLE_OK)
                rc = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                                      (long)(timeout_ms > 0 ? min_i64(timeout_ms, kc->timeout_ms)
                                                            : kc->timeout_ms));
        if (rc == CURLE_OK && cancel_fd >= 0) {
                rc = curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, request_progress);
                if (rc == CURLE_OK)
                        rc = curl_easy_setopt(h, CURLOPT_XFERINFODATA, &cancel_fd);
                if (rc == CURLE_OK)
                        rc = curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        }
        if (rc == CURLE_OK)
                rc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
        if (rc == CURLE_OK)
                rc = curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
        if (rc != CURLE_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube %s %s: curl setup: %s", method, path,
                             kube_curl_why(rc, errbuf));
                goto out;
        }
        started = cs_now_monotonic_ns();
        rc = curl_easy_perform(h);
        if (rc == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &answered);
        if (out.too_big) {
                cs_error_set(err, GRPC_STATUS_INTERNAL,
                             "kube %s %s: response body larger than %u bytes", method, path,
                             KUBE_MAX_BODY);
                goto out;
        }
        if (rc == CURLE_ABORTED_BY_CALLBACK) {
                cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "kube %s %s: cancelled", method, path);
                goto out;
        }
        if (rc != CURLE_OK) {
                cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "kube %s %s: %s%s", method, path,
                             kube_curl_kind(rc), kube_curl_why(rc, errbuf));
                goto out;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        if (out.len > 0) {
                ret->body = json_loadb(out.data, out.len, 0, NULL);
                if (!ret->body && ret->status >= 200 && ret->status < 300) {
                        cs_error_set(err, GRPC_STATUS_INTERNAL,
                                     "kube %s %s: HTTP %ld with a body that is not JSON", method,
                                     path, ret->status);
                        ret->status = 0;
                        goto out;
                }
        }
        r = 0;
out:
        if (started)
                count_request(kc, method, answered, cs_now_monotonic_ns() - started);
        pool_put(kc, h);
        curl_slist_free_all(headers);
        free(out.data);
        return r;
}

void kube_response_clear(kube_response *r)
{
        if (!r)
                return;
        json_decref(r->body);
        r->body = NULL;
        r->status = 0;
}

static const char *http_reason(long status)
{
        static const struct {
                long code;
                const char *text;
        } table[] = {
                { 200, "OK" },
                { 201, "Created" },
                { 202, "Accepted" },
                { 400, "Bad Request" },
                { 401, "Unauthorized" },
                { 403, "Forbidden" },
                { 404, "Not Found" },
                { 405, "Method Not Allowed" },
                { 406, "Not Acceptable" },
                { 409, "Conflict" },
                { 410, "Gone" },
                { 413, "Request Entity Too Large" },
                { 415, "Unsupported Media Type" },
                { 422, "Unprocessable Entity" },
                { 429, "Too Many Requests" },
                { 500, "Internal Server Error" },
                { 502, "Bad Gateway" },
                { 503, "Service Unavailable" },
                { 504, "Gateway Timeout" },
        };

        for (size_t i = 0; i < ARRAY_SIZE(table); i++)
                if (table[i].code == status)
                        return table[i].text;
        return status >= 500   ? "server error"
               : status >= 400 ? "client error"
                               : "unexpected status";
}

const char *kube_response_message(const kube_response *r)
{
        const char *s = kube_get_str(r->body, "message");

        if (s && *s)
                return s;
        s = kube_get_str(r->body, "reason");
        if (s && *s)
                return s;
        return http_reason(r->status);
}

/* ---- cancel fds ---- */

int kube_cancel_check(int cancel_fd)
{
        struct pollfd pfd = { .fd = cancel_fd, .events = POLLIN };

        if (cancel_fd < 0)
                return 0;
        while (poll(&pfd, 1, 0) < 0)
                if (errno != EINTR)
                        return -1;
        if (pfd.revents & POLLNVAL)
                return -1;
        return (pfd.revents & (POLLIN | POLLHUP | POLLERR)) ? 1 : 0;
}
