/* The Kubernetes API client: configuration (kubeconfig or in-cluster), requests over a small
 * pool of curl easy handles, watches over the multi interface (so a cancel fd can end them at
 * once), and the few JSON and time helpers the scheduler needs. See kube_client.h. */
#include "kube_client.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <yaml.h>

#include "util.h"

/* Caps on what the files may hold: a kubeconfig, a certificate, a key, a token file. */
#define KUBE_MAX_CONFIG (4u << 20)
/* YAML nodes after alias expansion (no billion laughs), and nesting. */
#define KUBE_MAX_YAML_NODES 100000
#define KUBE_MAX_YAML_DEPTH 64
/* Idle easy handles kept; each holds its own live connections. */
#define KUBE_POOL_MAX                   8
#define KUBE_TOKEN_CHECK_MS             1000
#define KUBE_DEFAULT_TIMEOUT_MS         30000
#define KUBE_DEFAULT_CONNECT_TIMEOUT_MS 10000
#define KUBE_DEFAULT_SA_DIR             "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct kube_blob {
        char *data;
        size_t len;
} kube_blob;

struct kube_client {
        char *server; /* no trailing '/' */
        char *ns;
        char *user_agent;
        bool insecure;
        kube_blob ca, cert, key; /* PEM; len 0 = not set */
        int64_t timeout_ms, connect_timeout_ms;

        /* The bearer token: a fixed string, or the contents of token_path, re-read when the
         * file's identity or mtime changes (checked at most once a KUBE_TOKEN_CHECK_MS). */
        pthread_mutex_t token_lock;
        char *token;
        char *token_path;
        struct stat token_st;
        int64_t token_checked_ms;

        /* DNS cache and TLS sessions shared by every handle, each kind under its own lock. */
        CURLSH *share;
        pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

        pthread_mutex_t pool_lock;
        CURL *pool[KUBE_POOL_MAX];
        size_t n_pool;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void)
{
        curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- small utilities ---- */

/* Wipes too: the key blob is a secret. */
static void blob_free(kube_blob *b)
{
        if (b->data)
                explicit_bzero(b->data, b->len);
        free(b->data);
        b->data = NULL;
        b->len = 0;
}

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

/* A token goes into a header line: no control characters (no header injection). */
static bool token_valid(const char *t)
{
        for (; *t; t++)
                if ((unsigned char)*t < 0x20 || *t == 0x7f)
                        return false;
        return true;
}

static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+' || c == '-')
                return 62;
        if (c == '/' || c == '_')
                return 63;
        return -1;
}

/* Standard (or URL-safe) base64, whitespace ignored, padding optional. -1 if malformed. */
static int base64_decode(const char *s, kube_blob *ret)
{
        size_t n = strlen(s), len = 0;
        _cleanup_free_ char *out = cs_xmalloc(n / 4 * 3 + 4);
        uint32_t acc = 0;
        int bits = 0, pad = 0;

        for (size_t i = 0; i < n; i++) {
                int v;

                if (strchr(" \t\r\n", s[i]))
                        continue;
                if (s[i] == '=') {
                        pad++;
                        continue;
                }
                v = b64_value(s[i]);
                if (v < 0 || pad > 0)
                        return -1;
                acc = (acc << 6) | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[len++] = (char)((acc >> bits) & 0xff);
                }
        }
        if (bits >= 6 || pad > 2 || len == 0)
                return -1;
        out[len] = '\0';
        ret->data = TAKE_PTR(out);
        ret->len = len;
        return 0;
}

/* ---- YAML (and so JSON) documents to jansson values ---- */

typedef struct yaml_conv {
        yaml_document_t *doc;
        size_t nodes;
} yaml_conv;

static json_t *yaml_scalar_to_json(const yaml_node_t *node)
{
        const char *v = (const char *)node->data.scalar.value;
        size_t len = node->data.scalar.length;

        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE"))
                        return json_true();
                if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
                        return json_false();
                if (len == 0 || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL") ||
                    !strcmp(v, "~"))
                        return json_null();
        }
        return json_stringn(v, len);
}

/* NULL when the document nests too deep, expands to too many nodes (aliases), has a
 * non-scalar mapping key or a string that is not UTF-8; *ret_why says which. */
static json_t *yaml_node_to_json(yaml_conv *c, yaml_node_t *node, int depth, const char **ret_why)
{
        json_t *v;

        if (!node || depth > KUBE_MAX_YAML_DEPTH || ++c->nodes > KUBE_MAX_YAML_NODES) {
                *ret_why = "document too deep or too large";
                return NULL;
        }
        switch (node->type) {
        case YAML_SCALAR_NODE:
                v = yaml_scalar_to_json(node);
                if (!v)
                        *ret_why = "string is not valid UTF-8";
                return v;
        case YAML_SEQUENCE_NODE:
                v = json_array();
                for (yaml_node_item_t *i = node->data.sequence.items.start;
                     i < node->data.sequence.items.top; i++) {
                        json_t *item = yaml_node_to_json(c, yaml_document_get_node(c->doc, *i),
                                                         depth + 1, ret_why);
                        if (!item || json_array_append_new(v, item) < 0) {
                                json_decref(v);
                                return NULL;
                        }
                }
                return v;
        case YAML_MAPPING_NODE:
                v = json_object();
                for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
                     p < node->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
                        json_t *item;

                        if (!k || k->type != YAML_SCALAR_NODE) {
                                *ret_why = "mapping key is not a string";
                                json_decref(v);
                                return NULL;
                        }
                        item = yaml_node_to_json(c, yaml_document_get_node(c->doc, p->value),
                                                 depth + 1, ret_why);
                        if (!item || json_object_setn_new(v, (const char *)k->data.scalar.value,
                                                          k->data.scalar.length, item) < 0) {
                                if (item)
                                        *ret_why = "mapping key is not valid UTF-8";
                                json_decref(v);
                                return NULL;
                        }
                }
                return v;
        default:
                *ret_why = "empty node";
                return NULL;
        }
}

/* Parses the first YAML document in buf. NULL with *err (INVALID_ARGUMENT naming path). */
static json_t *yaml_parse(const char *path, const char *buf, size_t len, cs_error **err)
{
        yaml_parser_t parser;
        yaml_document_t doc;
        yaml_conv c = { .doc = &doc };
        const char *why = NULL;
        yaml_node_t *root;
        json_t *v;

        if (!yaml_parser_initialize(&parser))
                abort();
        yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
        if (!yaml_parser_load(&parser, &doc)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: line %zu: %s", path,
                             parser.problem_mark.line + 1,
                             parser.problem ? parser.problem : "malformed YAML");
                yaml_parser_delete(&parser);
                return NULL;
        }
        root = yaml_document_get_root_node(&doc);
        if (!root) {
                why = "empty file";
                v = NULL;
        } else {
                v = yaml_node_to_json(&c, root, 0, &why);
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        if (!v)
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: %s", path, why);
        return v;
}

/* ---- kubeconfig ---- */

typedef struct kcfg {
        const char *path;
        char *dir;
        char what[256]; /* 'cluster "name"', for messages */
} kcfg;

/* obj[key] as a string: *ret NULL when absent (or null). -1 if present with another type. */
static int kcfg_str(const kcfg *c, json_t *obj, const char *key, bool required, const char **ret,
                    cs_error **err)
{
        json_t *v = json_object_get(obj, key);

        *ret = NULL;
        if (!v || json_is_null(v)) {
                if (required)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kubeconfig %s: %s: %s is missing", c->path, c->what,
                                            key);
                return 0;
        }
        if (!json_is_string(v))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: %s must be a string", c->path, c->what,
                                    key);
        *ret = json_string_value(v);
        if (required && !**ret)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: %s is empty", c->path, c->what, key);
        return 0;
}

/* The object named `name` in root[list] (entries {name: ..., item: {...}}): entry[item]. */
static json_t *kcfg_find(const kcfg *c, json_t *root, const char *list, const char *item,
                         const char *name, cs_error **err)
{
        json_t *arr = json_object_get(root, list), *e, *v;
        size_t i;

        if (arr && !json_is_null(arr) && !json_is_array(arr)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: %s must be a list",
                             c->path, list);
                return NULL;
        }
        json_array_foreach(arr, i, e)
        {
                json_t *n = json_object_get(e, "name");

                if (!json_is_string(n) || strcmp(json_string_value(n), name))
                        continue;
                v = json_object_get(e, item);
                if (!json_is_object(v)) {
                        cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                     "kubeconfig %s: %s \"%s\" has no %s mapping", c->path, item,
                                     name, item);
                        return NULL;
                }
                return v;
        }
        cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: %s \"%s\" not found",
                     c->path, item, name);
        return NULL;
}

static char *kcfg_resolve(const kcfg *c, const char *p)
{
        if (p[0] == '/')
                return cs_xstrdup(p);
        return cs_xasprintf("%s/%s", c->dir, p);
}

/* A PEM blob from `<key>-data` (base64) or `<key>` (a path relative to the kubeconfig). */
static int kcfg_blob(const kcfg *c, json_t *obj, const char *key, kube_blob *ret, cs_error **err)
{
        _cleanup_free_ char *data_key = cs_xasprintf("%s-data", key);
        _cleanup_free_ char *path = NULL;
        const char *data, *file;

        if (kcfg_str(c, obj, data_key, false, &data, err) < 0 ||
            kcfg_str(c, obj, key, false, &file, err) < 0)
                return -1;
        if (data && *data) {
                if (base64_decode(data, ret) < 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kubeconfig %s: %s: %s is not valid base64", c->path,
                                            c->what, data_key);
                return 0;
        }
        if (!file || !*file)
                return 0;
        path = kcfg_resolve(c, file);
        if (cs_read_file(path, KUBE_MAX_CONFIG, &ret->data, &ret->len, NULL) < 0)
                return cs_error_errno(err, errno, "kubeconfig %s: %s: %s %s", c->path, c->what, key,
                                      path);
        if (ret->len == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: %s %s is empty", c->path, c->what, key,
                                    path);
        return 0;
}

static int kcfg_cluster(kube_client *kc, kcfg *c, json_t *cluster, cs_error **err)
{
        const char *server, *unsupported[] = { "tls-server-name", "proxy-url" };
        json_t *insecure = json_object_get(cluster, "insecure-skip-tls-verify");
        size_t len;

        if (kcfg_str(c, cluster, "server", true, &server, err) < 0)
                return -1;
        if (strncmp(server, "https://", 8) && strncmp(server, "http://", 7))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: server \"%s\" is not an http(s) URL",
                                    c->path, c->what, server);
        len = strlen(server);
        while (len > 0 && server[len - 1] == '/')
                len--;
        kc->server = strndup(server, len);
        if (!kc->server)
                abort();
        for (size_t i = 0; i < ARRAY_SIZE(unsupported); i++)
                if (json_object_get(cluster, unsupported[i]))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kubeconfig %s: %s: %s is not supported", c->path,
                                            c->what, unsupported[i]);
        if (insecure && !json_is_null(insecure)) {
                if (json_is_boolean(insecure))
                        kc->insecure = json_is_true(insecure);
                else if (json_is_string(insecure) &&
                         (!strcmp(json_string_value(insecure), "true") ||
                          !strcmp(json_string_value(insecure), "false")))
                        kc->insecure = !strcmp(json_string_value(insecure), "true");
                else
                        return cs_error_set(
                                err, GRPC_STATUS_INVALID_ARGUMENT,
                                "kubeconfig %s: %s: insecure-skip-tls-verify must be a boolean",
                                c->path, c->what);
        }
        return kcfg_blob(c, cluster, "certificate-authority", &kc->ca, err);
}

static int kcfg_user(kube_client *kc, kcfg *c, json_t *user, cs_error **err)
{
        static const char *const unsupported[][2] = {
                { "exec", "exec credential plugins are not supported" },
                { "auth-provider", "auth-provider plugins are not supported" },
                { "username", "basic authentication is not supported" },
                { "password", "basic authentication is not supported" },
                { "as", "impersonation is not supported" },
        };
        const char *token, *token_file;

        for (size_t i = 0; i < ARRAY_SIZE(unsupported); i++) {
                json_t *v = json_object_get(user, unsupported[i][0]);

                if (v && !json_is_null(v))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kubeconfig %s: %s: %s (use a token, tokenFile or "
                                            "client certificate)",
                                            c->path, c->what, unsupported[i][1]);
        }
        if (kcfg_str(c, user, "token", false, &token, err) < 0 ||
            kcfg_str(c, user, "tokenFile", false, &token_file, err) < 0 ||
            kcfg_blob(c, user, "client-certificate", &kc->cert, err) < 0 ||
            kcfg_blob(c, user, "client-key", &kc->key, err) < 0)
                return -1;
        if ((kc->cert.len > 0) != (kc->key.len > 0))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: client-certificate and client-key must "
                                    "be given together",
                                    c->path, c->what);
        /* As client-go: a tokenFile wins over an inline token (it is the one that rotates). */
        if (token_file && *token_file)
                kc->token_path = kcfg_resolve(c, token_file);
        else if (token && *token && !token_valid(token))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: token holds control characters", c->path,
                                    c->what);
        else if (token && *token)
                kc->token = cs_xstrdup(token);
        return 0;
}

static int kubeconfig_load(kube_client *kc, const char *path, const char *context, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        json_t *root, *ctx, *cluster, *user = NULL;
        const char *cur, *cluster_name, *user_name, *ns;
        kcfg c = { .path = path };
        size_t len;
        char *slash;
        int r = -1;

        if (cs_read_file(path, KUBE_MAX_CONFIG, &buf, &len, NULL) < 0)
                return cs_error_errno(err, errno, "kubeconfig %s", path);
        root = yaml_parse(path, buf, len, err);
        if (!root)
                return -1;
        c.dir = cs_xstrdup(path);
        slash = strrchr(c.dir, '/');
        if (!slash)
                strcpy(c.dir, ".");
        else if (slash == c.dir)
                slash[1] = '\0';
        else
                *slash = '\0';
        snprintf(c.what, sizeof(c.what), "top level");
        if (!json_is_object(root)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: not a mapping",
                             path);
                goto out;
        }
        if (kcfg_str(&c, root, "current-context", false, &cur, err) < 0)
                goto out;
        if (context && *context)
                cur = context;
        if (!cur || !*cur) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "kubeconfig %s: no current-context and no context given", path);
                goto out;
        }
        ctx = kcfg_find(&c, root, "contexts", "context", cur, err);
        if (!ctx)
                goto out;
        snprintf(c.what, sizeof(c.what), "context \"%s\"", cur);
        if (kcfg_str(&c, ctx, "cluster", true, &cluster_name, err) < 0 ||
            kcfg_str(&c, ctx, "user", false, &user_name, err) < 0 ||
            kcfg_str(&c, ctx, "namespace", false, &ns, err) < 0)
                goto out;
        kc->ns = cs_xstrdup(ns && *ns ? ns : "default");
        cluster = kcfg_find(&c, root, "clusters", "cluster", cluster_name, err);
        if (!cluster)
                goto out;
        snprintf(c.what, sizeof(c.what), "cluster \"%s\"", cluster_name);
        if (kcfg_cluster(kc, &c, cluster, err) < 0)
                goto out;
        if (user_name && *user_name) {
                user = kcfg_find(&c, root, "users", "user", user_name, err);
                if (!user)
                        goto out;
                snprintf(c.what, sizeof(c.what), "user \"%s\"", user_name);
                if (kcfg_user(kc, &c, user, err) < 0)
                        goto out;
        }
        r = 0;
out:
        free(c.dir);
        json_decref(root);
        return r;
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
                kc->server = cs_xasprintf("https://[%s]:%ld", host, p);
        else
                kc->server = cs_xasprintf("https://%s:%ld", host, p);
        kc->token_path = cs_xasprintf("%s/token", sa_dir);
        if (cs_read_file(ca_path, KUBE_MAX_CONFIG, &kc->ca.data, &kc->ca.len, NULL) < 0)
                return cs_error_errno(err, errno, "in-cluster config: %s", ca_path);
        if (cs_read_file(ns_path, KUBE_MAX_CONFIG, &ns, NULL, NULL) < 0) {
                if (errno != ENOENT)
                        return cs_error_errno(err, errno, "in-cluster config: %s", ns_path);
        } else {
                trim_in_place(ns);
        }
        kc->ns = cs_xstrdup(ns && *ns ? ns : "default");
        return 0;
}

/* ---- the bearer token ---- */

static bool same_file(const struct stat *a, const struct stat *b)
{
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Reads kc->token_path into kc->token. Caller holds token_lock (or is kube_client_new). */
static int token_read(kube_client *kc, cs_error **err)
{
        _cleanup_free_ char *t = NULL;
        struct stat st;

        if (cs_read_file(kc->token_path, KUBE_MAX_CONFIG, &t, NULL, &st) < 0)
                return cs_error_errno(err, errno, "token file %s", kc->token_path);
        trim_in_place(t);
        if (!*t)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "token file %s is empty",
                                    kc->token_path);
        if (!token_valid(t))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "token file %s holds control characters", kc->token_path);
        free(kc->token);
        kc->token = TAKE_PTR(t);
        kc->token_st = st;
        return 0;
}

/* The token to send now (malloc'd), or NULL for none. A rotated file is picked up within a
 * second; if the new file cannot be read (mid-rotation), the last good token is kept. */
static char *token_get(kube_client *kc)
{
        char *t;

        pthread_mutex_lock(&kc->token_lock);
        if (kc->token_path) {
                int64_t now = cs_now_monotonic_ms();
                struct stat st;

                if (now - kc->token_checked_ms >= KUBE_TOKEN_CHECK_MS) {
                        kc->token_checked_ms = now;
                        if (stat(kc->token_path, &st) == 0 && !same_file(&st, &kc->token_st)) {
                                cs_error *e = NULL;

                                if (token_read(kc, &e) < 0)
                                        cs_error_free(e);
                        }
                }
        }
        t = kc->token ? cs_xstrdup(kc->token) : NULL;
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
        if (r == 0 && kc->token_path) {
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
        free(kc->server);
        free(kc->ns);
        free(kc->user_agent);
        if (kc->token)
                explicit_bzero(kc->token, strlen(kc->token));
        free(kc->token);
        free(kc->token_path);
        blob_free(&kc->ca);
        blob_free(&kc->cert);
        blob_free(&kc->key);
        pthread_mutex_destroy(&kc->token_lock);
        pthread_mutex_destroy(&kc->pool_lock);
        for (size_t i = 0; i < ARRAY_SIZE(kc->share_locks); i++)
                pthread_mutex_destroy(&kc->share_locks[i]);
        free(kc);
}

const char *kube_client_server(const kube_client *kc)
{
        return kc->server;
}

const char *kube_client_namespace(const kube_client *kc)
{
        return kc->ns;
}

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

typedef struct kube_buf {
        char *data;
        size_t len, cap;
        bool too_big;
} kube_buf;

static int buf_append(kube_buf *b, const char *p, size_t n)
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
        return buf_append(userdata, p, size * n) < 0 ? 0 : size * n;
}

#define SETOPT(h, opt, val)                                                                        \
        do {                                                                                       \
                if (rc == CURLE_OK)                                                                \
                        rc = curl_easy_setopt((h), (opt), (val));                                  \
        } while (0)

/* The options every request and watch has: URL, TLS, identity, headers. *headers gets the
 * list the handle points to (the caller frees it after the transfer). */
static CURLcode easy_setup(kube_client *kc, CURL *h, const char *url, const char *content_type,
                           char *errbuf, struct curl_slist **headers)
{
        _cleanup_free_ char *token = token_get(kc);
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
        SETOPT(h, CURLOPT_SSL_VERIFYPEER, kc->insecure ? 0L : 1L);
        SETOPT(h, CURLOPT_SSL_VERIFYHOST, kc->insecure ? 0L : 2L);
        if (kc->ca.len > 0 && !kc->insecure) {
                struct curl_blob b = { kc->ca.data, kc->ca.len, CURL_BLOB_NOCOPY };

                /* Only the cluster's CA: not the system bundle besides it (as kubectl). */
                SETOPT(h, CURLOPT_CAINFO, NULL);
                SETOPT(h, CURLOPT_CAPATH, NULL);
                SETOPT(h, CURLOPT_CAINFO_BLOB, &b);
        }
        if (kc->cert.len > 0) {
                struct curl_blob cb = { kc->cert.data, kc->cert.len, CURL_BLOB_NOCOPY };
                struct curl_blob kb = { kc->key.data, kc->key.len, CURL_BLOB_NOCOPY };

                SETOPT(h, CURLOPT_SSLCERTTYPE, "PEM");
                SETOPT(h, CURLOPT_SSLCERT_BLOB, &cb);
                SETOPT(h, CURLOPT_SSLKEYTYPE, "PEM");
                SETOPT(h, CURLOPT_SSLKEY_BLOB, &kb);
        }
        return rc;
}

static const char *curl_why(CURLcode rc, const char *errbuf)
{
        return errbuf[0] ? errbuf : curl_easy_strerror(rc);
}

/* "timed out: " or "TLS: " before curl's words, so the log line says what kind of failure. */
static const char *curl_kind(CURLcode rc)
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

static int cancel_check(int cancel_fd);

/* The progress callback of a request with a cancel fd: non-zero (abort) once it is readable.
 * libcurl calls it about once a second even while nothing moves. */
static int request_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                            curl_off_t ultotal, curl_off_t ulnow)
{
        (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
        return cancel_check(*(const int *)userdata) != 0;
}

int kube_request(kube_client *kc, const char *method, const char *path, json_t *body,
                 kube_response *ret, cs_error **err)
{
        return kube_request_ex(kc, method, path, body, 0, -1, ret, err);
}

int kube_request_ex(kube_client *kc, const char *method, const char *path, json_t *body,
                    int64_t timeout_ms, int cancel_fd, kube_response *ret, cs_error **err)
{
        _cleanup_free_ char *url = cs_xasprintf("%s%s", kc->server, path);
        _cleanup_free_ char *payload = NULL;
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *headers = NULL;
        kube_buf out = { 0 };
        const char *ct;
        CURLcode rc;
        CURL *h;
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
        rc = easy_setup(kc, h, url, ct, errbuf, &headers);
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
                             curl_why(rc, errbuf));
                goto out;
        }
        rc = curl_easy_perform(h);
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
                             curl_kind(rc), curl_why(rc, errbuf));
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

const char *kube_response_reason(const kube_response *r)
{
        const char *s = kube_get_str(r->body, "reason");

        return s ? s : "";
}

/* ---- watches ---- */

typedef struct watch_state {
        CURL *h;
        const char *path;
        kube_watch_fn fn;
        void *userdata;
        long status;
        kube_buf buf; /* the partial event line, or the whole body of a non-2xx answer */
        int fn_rc;
        cs_error *err;
        int64_t last_byte_ms;
} watch_state;

static bool status_ok(long s)
{
        return s >= 200 && s < 300;
}

/* One event line: {"type": "...", "object": {...}}. Returns fn's value, or -1 with ws->err. */
static int watch_line(watch_state *ws, const char *line, size_t len)
{
        json_error_t jerr;
        json_t *ev, *type, *obj;
        int r;

        while (len > 0 && strchr(" \t\r", line[len - 1]))
                len--;
        if (len == 0)
                return 0;
        ev = json_loadb(line, len, 0, &jerr);
        type = json_object_get(ev, "type");
        obj = json_object_get(ev, "object");
        if (!json_is_string(type) || !obj) {
                cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                             "kube watch %s: malformed event line (%s)", ws->path,
                             ev ? "no type or object" : jerr.text);
                json_decref(ev);
                return -1;
        }
        r = ws->fn(json_string_value(type), obj, ws->userdata);
        json_decref(ev);
        return r;
}

/* Splits data into lines, handing each complete one to watch_line. Non-zero to stop. */
static int watch_feed(watch_state *ws, const char *p, size_t n)
{
        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t chunk = nl ? (size_t)(nl - p) : n;
                int r;

                if (!nl || ws->buf.len > 0) {
                        if (buf_append(&ws->buf, p, chunk) < 0) {
                                cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                                             "kube watch %s: event line larger than %u bytes",
                                             ws->path, KUBE_MAX_BODY);
                                return -1;
                        }
                }
                if (!nl)
                        return 0;
                if (ws->buf.len > 0) {
                        r = watch_line(ws, ws->buf.data, ws->buf.len);
                        ws->buf.len = 0;
                } else {
                        r = watch_line(ws, p, chunk);
                }
                if (r != 0) {
                        if (!ws->err)
                                ws->fn_rc = r;
                        return r;
                }
                p += chunk + 1;
                n -= chunk + 1;
        }
        return 0;
}

static size_t watch_write(char *p, size_t size, size_t n, void *userdata)
{
        watch_state *ws = userdata;

        ws->last_byte_ms = cs_now_monotonic_ms();
        if (ws->status == 0)
                curl_easy_getinfo(ws->h, CURLINFO_RESPONSE_CODE, &ws->status);
        if (!status_ok(ws->status)) {
                if (buf_append(&ws->buf, p, size * n) < 0) {
                        cs_error_set(&ws->err, GRPC_STATUS_INTERNAL,
                                     "kube watch %s: HTTP %ld body larger than %u bytes", ws->path,
                                     ws->status, KUBE_MAX_BODY);
                        return 0;
                }
                return size * n;
        }
        return watch_feed(ws, p, size * n) != 0 ? 0 : size * n;
}

static size_t watch_header(char *p, size_t size, size_t n, void *userdata)
{
        watch_state *ws = userdata;

        (void)p;
        ws->last_byte_ms = cs_now_monotonic_ms();
        return size * n;
}

/* 1 if cancel_fd is readable (or hung up), 0 if not, -1 if it is not an open fd. */
static int cancel_check(int cancel_fd)
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
                int c = cancel_check(cancel_fd);

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
        if (ws->status == 0)
                curl_easy_getinfo(ws->h, CURLINFO_RESPONSE_CODE, &ws->status);
        if (!status_ok(ws->status)) {
                if (ret_body && ws->buf.len > 0)
                        *ret_body = json_loadb(ws->buf.data, ws->buf.len, 0, NULL);
                return 0;
        }
        if (ws->buf.len > 0) {
                int r = watch_line(ws, ws->buf.data, ws->buf.len);

                ws->buf.len = 0;
                return r;
        }
        return 0;
}

int kube_watch(kube_client *kc, const char *path, kube_watch_fn fn, void *userdata, int cancel_fd,
               int64_t idle_timeout_ms, long *ret_status, json_t **ret_body, bool *ret_cancelled,
               cs_error **err)
{
        _cleanup_free_ char *url = cs_xasprintf("%s%s", kc->server, path);
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *headers = NULL;
        watch_state ws = { .path = path, .fn = fn, .userdata = userdata };
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
        ws.h = curl_easy_init();
        m = curl_multi_init();
        if (!ws.h || !m) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: curl init failed", path);
                goto out;
        }
        rc = easy_setup(kc, ws.h, url, NULL, errbuf, &headers);
        SETOPT(ws.h, CURLOPT_HTTPGET, 1L);
        SETOPT(ws.h, CURLOPT_WRITEFUNCTION, watch_write);
        SETOPT(ws.h, CURLOPT_WRITEDATA, &ws);
        SETOPT(ws.h, CURLOPT_HEADERFUNCTION, watch_header);
        SETOPT(ws.h, CURLOPT_HEADERDATA, &ws);
        if (rc != CURLE_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: curl setup: %s", path,
                             curl_why(rc, errbuf));
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
                                     curl_kind(result), curl_why(result, errbuf));
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
        free(ws.buf.data);
        cs_error_free(ws.err);
        return r;
}

/* ---- helpers ---- */

char *kube_escape(const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        char *out = cs_xmalloc(strlen(s) * 3 + 1), *o = out;

        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
                        *o++ = (char)*p;
                } else {
                        *o++ = '%';
                        *o++ = hex[*p >> 4];
                        *o++ = hex[*p & 15];
                }
        }
        *o = '\0';
        return out;
}

const char *kube_get_str(json_t *obj, const char *dotted)
{
        const char *p = dotted;

        for (;;) {
                const char *dot = strchr(p, '.');

                if (!json_is_object(obj))
                        return NULL;
                obj = json_object_getn(obj, p, dot ? (size_t)(dot - p) : strlen(p));
                if (!dot)
                        return json_string_value(obj);
                p = dot + 1;
        }
}

json_t *kube_get_key(json_t *obj, ...)
{
        const char *key;
        va_list ap;

        va_start(ap, obj);
        while (obj && (key = va_arg(ap, const char *)))
                obj = json_is_object(obj) ? json_object_get(obj, key) : NULL;
        va_end(ap);
        return obj;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), after Howard Hinnant's algorithm. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
        int64_t era, yoe, doy, doe;

        y -= m <= 2;
        era = (y >= 0 ? y : y - 399) / 400;
        yoe = y - era * 400;
        doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
}

static int parse_digits(const char **p, int n)
{
        int v = 0;

        for (int i = 0; i < n; i++, (*p)++) {
                if (**p < '0' || **p > '9')
                        return -1;
                v = v * 10 + (**p - '0');
        }
        return v;
}

static bool expect_char(const char **p, const char *set)
{
        if (!**p || !strchr(set, **p))
                return false;
        (*p)++;
        return true;
}

int64_t kube_time_parse(const char *s)
{
        static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
        int y, mo, d, h, mi, sec, ms = 0, off = 0;
        const char *p = s;
        int64_t t;

        if (!s)
                return -1;
        y = parse_digits(&p, 4);
        if (y < 0 || !expect_char(&p, "-") || (mo = parse_digits(&p, 2)) < 0 ||
            !expect_char(&p, "-") || (d = parse_digits(&p, 2)) < 0 || !expect_char(&p, "Tt") ||
            (h = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
            (mi = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
            (sec = parse_digits(&p, 2)) < 0)
                return -1;
        if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59)
                return -1;
        if (d > mdays[mo - 1] + (mo == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))))
                return -1;
        if (*p == '.') {
                int digits = 0;

                for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                        if (digits < 3)
                                ms = ms * 10 + (*p - '0');
                if (digits == 0 || digits > 9)
                        return -1;
                for (; digits < 3; digits++)
                        ms *= 10;
        }
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                int sign = *p++ == '-' ? -1 : 1, oh, om;

                if ((oh = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
                    (om = parse_digits(&p, 2)) < 0 || oh > 23 || om > 59)
                        return -1;
                off = sign * (oh * 60 + om);
        } else {
                return -1;
        }
        if (*p)
                return -1;
        t = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi - off) * 60 + sec;
        if (t < 0)
                return -1;
        return t * 1000 + ms;
}

const char *kube_time_format(int64_t ms, char buf[static 32])
{
        time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
        struct tm tm;

        if (!gmtime_r(&secs, &tm)) {
                snprintf(buf, 32, "1970-01-01T00:00:00Z");
                return buf;
        }
        if (strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                snprintf(buf, 32, "1970-01-01T00:00:00Z");
        return buf;
}
