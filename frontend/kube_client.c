/* The Kubernetes API client's lifetime: configuration (a kubeconfig through kube_config.c,
 * or in-cluster), the rotating bearer token, curl's global init and shared caches. See
 * kube_client.h; requests are kube_http.c's, watches kube_watch.c's, the framing of their
 * events kube_framer.c's, the JSON and time helpers kube_json.c's.
 *
 * Owns: struct kube_client (kube_internal.h: the locking rule), the token (under
 * token_lock). Touches: the kubeconfig, service account and token files; the environment
 * (KUBERNETES_SERVICE_HOST/PORT). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kube_internal.h"
#include "util.h"

#define KUBE_TOKEN_CHECK_MS             1000
#define KUBE_DEFAULT_TIMEOUT_MS         30000
#define KUBE_DEFAULT_CONNECT_TIMEOUT_MS 10000
#define KUBE_DEFAULT_SA_DIR             "/var/run/secrets/kubernetes.io/serviceaccount"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void)
{
        curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- small utilities ---- */

static void trim_in_place(char *s)
{
        size_t len = strlen(s), start = 0;

        while (len > 0 && strchr(" \t\r\n", s[len - 1]))
                len--;
        s[len] = '\0';
        while (s[start] && strchr(" \t\r\n", s[start]))
                start++;
        memmove(s, s + start, len - start + 1);
}

/* ---- kubeconfig ---- */

static int kubeconfig_load(kube_client *kc, const char *path, const char *context, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        size_t len;

        if (cs_read_file(path, KUBE_MAX_CONFIG, &buf, &len, NULL) < 0)
                return cs_error_errno(err, errno, "kubeconfig %s", path);
        if (kube_config_parse(path, buf, len, context, &kc->conf, err) < 0)
                return -1;
        return kube_config_read_files(&kc->conf, path, err);
}

/* ---- in-cluster ---- */

static int incluster_load(kube_client *kc, const char *sa_dir, cs_error **err)
{
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        _cleanup_free_ char *ca_path = cs_xasprintf("%s/ca.crt", sa_dir);
        _cleanup_free_ char *ns_path = cs_xasprintf("%s/namespace", sa_dir);
        _cleanup_free_ char *ns = NULL;
        char *end;
        long p;

        if (!host || !*host || !port || !*port)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "in-cluster config: KUBERNETES_SERVICE_HOST and "
                                    "KUBERNETES_SERVICE_PORT are not set (give a kubeconfig)");
        errno = 0;
        p = strtol(port, &end, 10);
        if (errno || *end || p < 1 || p > 65535)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "in-cluster config: KUBERNETES_SERVICE_PORT \"%s\" is not a "
                                    "port",
                                    port);
        if (strchr(host, ':') && host[0] != '[')
                kc->conf.server = cs_xasprintf("https://[%s]:%ld", host, p);
        else
                kc->conf.server = cs_xasprintf("https://%s:%ld", host, p);
        kc->conf.token_path = cs_xasprintf("%s/token", sa_dir);
        if (cs_read_file(ca_path, KUBE_MAX_CONFIG, &kc->conf.ca.pem.data, &kc->conf.ca.pem.len,
                         NULL) < 0)
                return cs_error_errno(err, errno, "in-cluster config: %s", ca_path);
        if (cs_read_file(ns_path, KUBE_MAX_CONFIG, &ns, NULL, NULL) < 0) {
                if (errno != ENOENT)
                        return cs_error_errno(err, errno, "in-cluster config: %s", ns_path);
        } else {
                trim_in_place(ns);
        }
        kc->conf.ns = cs_xstrdup(ns && *ns ? ns : "default");
        return 0;
}

/* ---- the bearer token ---- */

static bool same_file(const struct stat *a, const struct stat *b)
{
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Reads kc->conf.token_path into kc->token. Caller holds token_lock (or is kube_client_new). */
static int token_read(kube_client *kc, cs_error **err)
{
        _cleanup_free_ char *t = NULL;
        struct stat st;

        if (cs_read_file(kc->conf.token_path, KUBE_MAX_CONFIG, &t, NULL, &st) < 0)
                return cs_error_errno(err, errno, "token file %s", kc->conf.token_path);
        trim_in_place(t);
        if (!*t)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "token file %s is empty",
                                    kc->conf.token_path);
        if (!kube_token_valid(t))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "token file %s holds control characters", kc->conf.token_path);
        if (kc->conf.token)
                explicit_bzero(kc->conf.token, strlen(kc->conf.token));
        free(kc->conf.token);
        kc->conf.token = TAKE_PTR(t);
        kc->token_st = st;
        return 0;
}

/* A rotated file is picked up within a second; if the new file cannot be read
 * (mid-rotation), the last good token is kept. */
char *kube_client_token(kube_client *kc)
{
        char *t;

        pthread_mutex_lock(&kc->token_lock);
        if (kc->conf.token_path) {
                int64_t now = cs_now_monotonic_ms();
                struct stat st;

                if (now - kc->token_checked_ms >= KUBE_TOKEN_CHECK_MS) {
                        kc->token_checked_ms = now;
                        if (stat(kc->conf.token_path, &st) == 0 && !same_file(&st, &kc->token_st)) {
                                cs_error *e = NULL;

                                if (token_read(kc, &e) < 0)
                                        cs_error_free(e);
                        }
                }
        }
        t = kc->conf.token ? cs_xstrdup(kc->conf.token) : NULL;
        pthread_mutex_unlock(&kc->token_lock);
        return t;
}

/* ---- client lifetime ---- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userptr)
{
        kube_client *kc = userptr;

        (void)h;
        (void)access;
        pthread_mutex_lock(&kc->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *userptr)
{
        kube_client *kc = userptr;

        (void)h;
        pthread_mutex_unlock(&kc->share_locks[data]);
}

static int share_init(kube_client *kc, cs_error **err)
{
        CURLSHcode rc = CURLSHE_OK;

        kc->share = curl_share_init();
        if (!kc->share)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "curl_share_init failed");
        if (!rc)
                rc = curl_share_setopt(kc->share, CURLSHOPT_LOCKFUNC, share_lock);
        if (!rc)
                rc = curl_share_setopt(kc->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        if (!rc)
                rc = curl_share_setopt(kc->share, CURLSHOPT_USERDATA, kc);
        if (!rc)
                rc = curl_share_setopt(kc->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        if (!rc)
                rc = curl_share_setopt(kc->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
        if (rc)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "curl share setup: %s",
                                    curl_share_strerror(rc));
        return 0;
}

kube_client *kube_client_new(const kube_client_config *cfg, cs_error **err)
{
        kube_client *kc;
        int r;

        pthread_once(&curl_once, curl_init_once);
        if (curl_init_result != CURLE_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "curl_global_init: %s",
                             curl_easy_strerror(curl_init_result));
                return NULL;
        }
        kc = cs_xcalloc(1, sizeof(*kc));
        pthread_mutex_init(&kc->token_lock, NULL);
        pthread_mutex_init(&kc->pool_lock, NULL);
        for (int v = 0; v < KUBE_N_VERBS; v++)
                cs_histogram_init(&kc->request_seconds[v], cs_histogram_default_bounds,
                                  cs_histogram_default_n);
        for (size_t i = 0; i < ARRAY_SIZE(kc->share_locks); i++)
                pthread_mutex_init(&kc->share_locks[i], NULL);
        kc->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : KUBE_DEFAULT_TIMEOUT_MS;
        kc->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms
                                                             : KUBE_DEFAULT_CONNECT_TIMEOUT_MS;
        kc->user_agent = cs_xstrdup(cfg->user_agent ? cfg->user_agent : "compute-frontend");
        if (cfg->kubeconfig && *cfg->kubeconfig)
                r = kubeconfig_load(kc, cfg->kubeconfig, cfg->context, err);
        else
                r = incluster_load(
                        kc, cfg->sa_dir && *cfg->sa_dir ? cfg->sa_dir : KUBE_DEFAULT_SA_DIR, err);
        if (r == 0 && kc->conf.token_path) {
                r = token_read(kc, err);
                kc->token_checked_ms = cs_now_monotonic_ms();
        }
        if (r == 0)
                r = share_init(kc, err);
        if (r < 0) {
                kube_client_free(kc);
                return NULL;
        }
        return kc;
}

void kube_client_free(kube_client *kc)
{
        if (!kc)
                return;
        for (size_t i = 0; i < kc->n_pool; i++)
                curl_easy_cleanup(kc->pool[i]);
        if (kc->share)
                curl_share_cleanup(kc->share);
        kube_config_clear(&kc->conf);
        free(kc->user_agent);
        pthread_mutex_destroy(&kc->token_lock);
        pthread_mutex_destroy(&kc->pool_lock);
        for (size_t i = 0; i < ARRAY_SIZE(kc->share_locks); i++)
                pthread_mutex_destroy(&kc->share_locks[i]);
        free(kc);
}

const char *kube_client_server(const kube_client *kc)
{
        return kc->conf.server;
}

const char *kube_client_namespace(const kube_client *kc)
{
        return kc->conf.ns;
}
