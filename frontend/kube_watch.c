/* Watches: one long GET over curl's multi interface (so a cancel fd and an idle timeout can
 * end it at once), its bytes handed to a kube_framer. See kube_watch in kube_client.h.
 *
 * Owns: the watch's own easy and multi handles (not pooled: a watch holds its connection
 * for minutes). Touches: the client's configuration read-only, its token through
 * kube_easy_setup; the framing is kube_framer.c's. */
#include <inttypes.h>
#include <string.h>

#include "kube_framer.h"
#include "kube_internal.h"
#include "util.h"

typedef struct watch_state {
        CURL *h;
        const char *path;
        long status;
        kube_framer framer; /* the event lines of a 2xx answer */
        kube_buf body;      /* the whole body of a non-2xx answer */
        int fn_rc;
        cs_error *err;
        int64_t last_byte_ms;
} watch_state;

static bool status_ok(long s)
{
        return s >= 200 && s < 300;
}

static size_t watch_write(char *p, size_t size, size_t n, void *userdata)
{
        watch_state *ws = userdata;
        int r;

        ws->last_byte_ms = cs_now_monotonic_ms();
        if (ws->status == 0)
                curl_easy_getinfo(ws->h, CURLINFO_RESPONSE_CODE, &ws->status);
        if (!status_ok(ws->status)) {
                if (kube_buf_append(&ws->body, p, size * n) < 0) {
                        cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                                     "kube watch %s: HTTP %ld body larger than %u bytes", ws->path,
                                     ws->status, KUBE_MAX_BODY);
                        return 0;
                }
                return size * n;
        }
        r = kube_framer_feed(&ws->framer, p, size * n, &ws->err);
        if (r != 0 && !ws->err)
                ws->fn_rc = r;
        return r != 0 ? 0 : size * n;
}

static size_t watch_header(char *p, size_t size, size_t n, void *userdata)
{
        watch_state *ws = userdata;

        (void)p;
        ws->last_byte_ms = cs_now_monotonic_ms();
        return size * n;
}

/* Drives the transfer until it ends, fn stops it, cancel_fd fires or it goes idle.
 * 0 = ended (see *ret_result) or cancelled (*ret_cancelled); -1 with ws->err. */
static int watch_loop(CURLM *m, watch_state *ws, int cancel_fd, int64_t idle_ms,
                      CURLcode *ret_result, bool *ret_cancelled)
{
        struct curl_waitfd extra = { .fd = cancel_fd, .events = CURL_WAIT_POLLIN };
        int running = 1;
        CURLMsg *msg;
        int left;

        for (;;) {
                CURLMcode mc;
                int64_t idle_left;
                int c = kube_cancel_check(cancel_fd);

                if (c != 0) {
                        if (c < 0)
                                return cs_error_set(&ws->err, GRPC_STATUS_INVALID_ARGUMENT,
                                                    "kube watch %s: cancel fd %d is not open",
                                                    ws->path, cancel_fd);
                        *ret_cancelled = true;
                        return 0;
                }
                mc = curl_multi_perform(m, &running);
                if (mc != CURLM_OK)
                        return cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                                            "kube watch %s: curl_multi_perform: %s", ws->path,
                                            curl_multi_strerror(mc));
                if (ws->err)
                        return -1;
                if (!running)
                        break;
                idle_left = idle_ms - (cs_now_monotonic_ms() - ws->last_byte_ms);
                if (idle_left <= 0)
                        return cs_error_set(&ws->err, GRPC_STATUS_UNAVAILABLE,
                                            "kube watch %s: watch idle for %" PRId64 " ms",
                                            ws->path, idle_ms);
                mc = curl_multi_poll(m, cancel_fd >= 0 ? &extra : NULL, cancel_fd >= 0 ? 1 : 0,
                                     (int)(idle_left < 1000 ? idle_left : 1000), NULL);
                if (mc != CURLM_OK)
                        return cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                                            "kube watch %s: curl_multi_poll: %s", ws->path,
                                            curl_multi_strerror(mc));
        }
        *ret_result = CURLE_OK;
        while ((msg = curl_multi_info_read(m, &left)))
                if (msg->msg == CURLMSG_DONE)
                        *ret_result = msg->data.result;
        return 0;
}

/* After the transfer ended by itself: the last line without '\n', or the error body. Returns
 * fn's value, 0, or -1 with ws->err. */
static int watch_finish(watch_state *ws, json_t **ret_body)
{
        int r;

        if (ws->status == 0)
                curl_easy_getinfo(ws->h, CURLINFO_RESPONSE_CODE, &ws->status);
        if (!status_ok(ws->status)) {
                if (ret_body && ws->body.len > 0)
                        *ret_body = json_loadb(ws->body.data, ws->body.len, 0, NULL);
                return 0;
        }
        r = kube_framer_finish(&ws->framer, &ws->err);
        if (r != 0 && !ws->err)
                ws->fn_rc = r;
        return r;
}

int kube_watch(kube_client *kc, const char *path, kube_watch_fn fn, void *userdata, int cancel_fd,
               int64_t idle_timeout_ms, long *ret_status, json_t **ret_body, bool *ret_cancelled,
               cs_error **err)
{
        _cleanup_free_ char *url = cs_xasprintf("%s%s", kc->conf.server, path);
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *headers = NULL;
        watch_state ws = { .path = path };
        CURLcode rc, result = CURLE_OK;
        CURLM *m = NULL;
        bool cancelled = false, added = false;
        long status = 0;
        int r = -1;

        if (ret_body)
                *ret_body = NULL;
        if (ret_status)
                *ret_status = 0;
        if (ret_cancelled)
                *ret_cancelled = false;
        if (path[0] != '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kube watch %s: path must start with '/'", path);
        kube_framer_init(&ws.framer, path, KUBE_MAX_BODY, fn, userdata);
        ws.h = curl_easy_init();
        m = curl_multi_init();
        if (!ws.h || !m) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: curl init failed", path);
                goto out;
        }
        rc = kube_easy_setup(kc, ws.h, url, NULL, errbuf, &headers);
        SETOPT(ws.h, CURLOPT_HTTPGET, 1L);
        SETOPT(ws.h, CURLOPT_WRITEFUNCTION, watch_write);
        SETOPT(ws.h, CURLOPT_WRITEDATA, &ws);
        SETOPT(ws.h, CURLOPT_HEADERFUNCTION, watch_header);
        SETOPT(ws.h, CURLOPT_HEADERDATA, &ws);
        if (rc != CURLE_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: curl setup: %s", path,
                             kube_curl_why(rc, errbuf));
                goto out;
        }
        if (curl_multi_add_handle(m, ws.h) != CURLM_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: curl_multi_add_handle",
                             path);
                goto out;
        }
        added = true;
        ws.last_byte_ms = cs_now_monotonic_ms();
        if (watch_loop(m, &ws, cancel_fd, idle_timeout_ms > 0 ? idle_timeout_ms : INT64_MAX / 4,
                       &result, &cancelled) == 0) {
                if (cancelled) {
                        if (ret_cancelled)
                                *ret_cancelled = true;
                        r = 0;
                } else if (ws.fn_rc != 0) {
                        r = ws.fn_rc;
                } else if (!ws.err && result != CURLE_OK) {
                        /* curl's own words (errbuf) name the cause, e.g. the TLS failure. */
                        cs_error_set(&ws.err, GRPC_STATUS_UNAVAILABLE, "kube watch %s: %s%s", path,
                                     kube_curl_kind(result), kube_curl_why(result, errbuf));
                } else if (!ws.err) {
                        r = watch_finish(&ws, ret_body);
                }
        }
        if (ws.status == 0) /* no body byte yet: headers only, or nothing */
                curl_easy_getinfo(ws.h, CURLINFO_RESPONSE_CODE, &ws.status);
        status = ws.status;
        if (ws.err) {
                r = cs_error_set(err, ws.err->code, "%s", ws.err->msg);
                status = 0;
                if (ret_body) {
                        json_decref(*ret_body);
                        *ret_body = NULL;
                }
        }
        if (ret_status)
                *ret_status = status;
out:
        if (added)
                curl_multi_remove_handle(m, ws.h);
        if (m)
                curl_multi_cleanup(m);
        if (ws.h)
                curl_easy_cleanup(ws.h);
        curl_slist_free_all(headers);
        free(ws.body.data);
        kube_framer_release(&ws.framer);
        cs_error_free(ws.err);
        return r;
}
