/* What the kube client's files share and nobody else sees: the client struct, its locking
 * rule, and the curl plumbing the requests (kube_http.c) and watches (kube_watch.c) both use.
 * Include only from frontend/kube_client.c, kube_http.c and kube_watch.c.
 *
 * Locking rule (the only locks of the kube client):
 *   - token_lock guards conf.token, token_st and token_checked_ms (the token rotates);
 *   - pool_lock guards pool[] and n_pool;
 *   - share_locks[i] guard curl's shared data of kind i, taken by curl itself;
 *   - everything else is written only by kube_client_new and read-only afterwards.
 * No lock is held while another is taken, nor across a transfer. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <curl/curl.h>

#include "kube_client.h"
#include "kube_config.h"
#include "metrics.h"

/* Idle easy handles kept; each holds its own live connections. */
#define KUBE_POOL_MAX 8

/* The verbs kube_request_ex counts, in kube_verbs[] order (kube_http.c). */
#define KUBE_N_VERBS    6 /* GET POST PUT PATCH DELETE, and anything else */
#define KUBE_MAX_STATUS 599

struct kube_client {
        /* Server, namespace, TLS material; conf.token and the token file under token_lock. */
        kube_config conf;
        char *user_agent;
        int64_t timeout_ms, connect_timeout_ms;

        /* The token file's identity when last read, and when that was last checked (at most
         * once a KUBE_TOKEN_CHECK_MS). */
        pthread_mutex_t token_lock;
        struct stat token_st;
        int64_t token_checked_ms;

        /* DNS cache and TLS sessions shared by every handle, each kind under its own lock. */
        CURLSH *share;
        pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

        pthread_mutex_t pool_lock;
        CURL *pool[KUBE_POOL_MAX];
        size_t n_pool;

        /* Requests (kube_request_ex; not watches) by verb and HTTP status (0: no answer),
         * and their durations by verb: kube_client_metrics. */
        _Atomic uint64_t requests[KUBE_N_VERBS][KUBE_MAX_STATUS + 1];
        cs_histogram request_seconds[KUBE_N_VERBS];
};

/* The bearer token to send now (malloc'd; the caller wipes and frees it), or NULL for none.
 * Takes token_lock. */
char *kube_client_token(kube_client *kc);

/* A growable byte buffer capped at KUBE_MAX_BODY, NUL-terminated past len. Owns data. */
typedef struct kube_buf {
        char *data;
        size_t len, cap;
        bool too_big;
} kube_buf;

/* Appends n bytes; -1 (and too_big set) past KUBE_MAX_BODY. */
int kube_buf_append(kube_buf *b, const char *p, size_t n);

/* curl_easy_setopt unless an earlier option failed: the caller has a CURLcode rc. */
#define SETOPT(h, opt, val)                                                                        \
        do {                                                                                       \
                if (rc == CURLE_OK)                                                                \
                        rc = curl_easy_setopt((h), (opt), (val));                                  \
        } while (0)

/* The options every request and watch has: URL, TLS, identity, headers (content_type NULL:
 * none). errbuf (CURL_ERROR_SIZE) receives curl's words. *headers gets the list the handle
 * points to: the caller frees it after the transfer. */
CURLcode kube_easy_setup(kube_client *kc, CURL *h, const char *url, const char *content_type,
                         char *errbuf, struct curl_slist **headers);

/* curl's words for rc: errbuf when it holds some, else curl's generic text. */
const char *kube_curl_why(CURLcode rc, const char *errbuf);
/* "timed out: " or "TLS: " before curl's words, so the log line says what kind of failure. */
const char *kube_curl_kind(CURLcode rc);

/* 1 if cancel_fd is readable (or hung up), 0 if not (or cancel_fd < 0), -1 if not open. */
int kube_cancel_check(int cancel_fd);
