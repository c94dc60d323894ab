/* The kubeconfig reader: YAML text to jansson values, the kubeconfig schema (contexts,
 * clusters, users) to a kube_config, and the files a kubeconfig names. See kube_config.h.
 *
 * Owns: the YAML conversion and its caps, the kubeconfig field checks, the kube client's base64
 * rules (over shared/base64). Touches: only its arguments; the file system only in
 * kube_config_read_files. No curl, no locks. */
#include "kube_config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "base64.h"
#include "util.h"

void kube_blob_free(kube_blob *b)
{
        if (b->data)
                explicit_bzero(b->data, b->len);
        free(b->data);
        b->data = NULL;
        b->len = 0;
}

static void pem_clear(kube_pem *p)
{
        kube_blob_free(&p->pem);
        free(p->path);
        free(p->label);
        p->path = p->label = NULL;
}

static bool pem_given(const kube_pem *p)
{
        return p->pem.len > 0 || p->path;
}

void kube_config_clear(kube_config *c)
{
        free(c->server);
        free(c->ns);
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        free(c->token_path);
        pem_clear(&c->ca);
        pem_clear(&c->cert);
        pem_clear(&c->key);
        memset(c, 0, sizeof(*c));
}

bool kube_token_valid(const char *t)
{
        for (; *t; t++)
                if ((unsigned char)*t < 0x20 || *t == 0x7f)
                        return false;
        return true;
}

/* ---- base64 ---- */

int kube_base64_decode(const char *s, kube_blob *ret)
{
        /* Kubeconfigs are written by many tools: wrapped lines, URL-safe or unpadded text. */
        const unsigned flags = CS_BASE64_SKIP_SPACE | CS_BASE64_PAD_OPTIONAL | CS_BASE64_URL_SAFE;
        uint8_t *out;
        size_t len;
        cs_error *err = NULL;

        if (cs_base64_decode(s, strlen(s), flags, &out, &len, &err) < 0) {
                cs_error_free(err);
                return -1;
        }
        if (len == 0) {
                free(out);
                return -1;
        }
        ret->data = (char *)out;
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

json_t *kube_yaml_parse(const char *source, const char *buf, size_t len, cs_error **err)
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
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: line %zu: %s",
                             source, parser.problem_mark.line + 1,
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
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "kubeconfig %s: %s", source, why);
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

/* A PEM from `<key>-data` (base64) or `<key>` (a path relative to the kubeconfig, kept for
 * kube_config_read_files). */
static int kcfg_pem(const kcfg *c, json_t *obj, const char *key, kube_pem *ret, cs_error **err)
{
        _cleanup_free_ char *data_key = cs_xasprintf("%s-data", key);
        const char *data, *file;

        if (kcfg_str(c, obj, data_key, false, &data, err) < 0 ||
            kcfg_str(c, obj, key, false, &file, err) < 0)
                return -1;
        if (data && *data) {
                if (kube_base64_decode(data, &ret->pem) < 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "kubeconfig %s: %s: %s is not valid base64", c->path,
                                            c->what, data_key);
                return 0;
        }
        if (!file || !*file)
                return 0;
        ret->path = kcfg_resolve(c, file);
        ret->label = cs_xasprintf("%s: %s", c->what, key);
        return 0;
}

static int kcfg_cluster(kube_config *kc, kcfg *c, json_t *cluster, cs_error **err)
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
        return kcfg_pem(c, cluster, "certificate-authority", &kc->ca, err);
}

static int kcfg_user(kube_config *kc, kcfg *c, json_t *user, cs_error **err)
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
            kcfg_pem(c, user, "client-certificate", &kc->cert, err) < 0 ||
            kcfg_pem(c, user, "client-key", &kc->key, err) < 0)
                return -1;
        if (pem_given(&kc->cert) != pem_given(&kc->key))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: client-certificate and client-key must "
                                    "be given together",
                                    c->path, c->what);
        /* As client-go: a tokenFile wins over an inline token (it is the one that rotates). */
        if (token_file && *token_file)
                kc->token_path = kcfg_resolve(c, token_file);
        else if (token && *token && !kube_token_valid(token))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s: token holds control characters", c->path,
                                    c->what);
        else if (token && *token)
                kc->token = cs_xstrdup(token);
        return 0;
}

/* kube_config_parse on a parsed document. */
static int kcfg_load(kube_config *kc, kcfg *c, json_t *root, const char *context, cs_error **err)
{
        json_t *ctx, *cluster, *user;
        const char *cur, *cluster_name, *user_name, *ns;

        snprintf(c->what, sizeof(c->what), "top level");
        if (!json_is_object(root))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: not a mapping", c->path);
        if (kcfg_str(c, root, "current-context", false, &cur, err) < 0)
                return -1;
        if (context && *context)
                cur = context;
        if (!cur || !*cur)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: no current-context and no context given",
                                    c->path);
        ctx = kcfg_find(c, root, "contexts", "context", cur, err);
        if (!ctx)
                return -1;
        snprintf(c->what, sizeof(c->what), "context \"%s\"", cur);
        if (kcfg_str(c, ctx, "cluster", true, &cluster_name, err) < 0 ||
            kcfg_str(c, ctx, "user", false, &user_name, err) < 0 ||
            kcfg_str(c, ctx, "namespace", false, &ns, err) < 0)
                return -1;
        kc->ns = cs_xstrdup(ns && *ns ? ns : "default");
        cluster = kcfg_find(c, root, "clusters", "cluster", cluster_name, err);
        if (!cluster)
                return -1;
        snprintf(c->what, sizeof(c->what), "cluster \"%s\"", cluster_name);
        if (kcfg_cluster(kc, c, cluster, err) < 0)
                return -1;
        if (!user_name || !*user_name)
                return 0;
        user = kcfg_find(c, root, "users", "user", user_name, err);
        if (!user)
                return -1;
        snprintf(c->what, sizeof(c->what), "user \"%s\"", user_name);
        return kcfg_user(kc, c, user, err);
}

/* The directory relative paths in the kubeconfig at source are resolved against. */
static char *source_dir(const char *source)
{
        char *dir = cs_xstrdup(source), *slash = strrchr(dir, '/');

        if (!slash)
                strcpy(dir, ".");
        else if (slash == dir)
                slash[1] = '\0';
        else
                *slash = '\0';
        return dir;
}

int kube_config_parse(const char *source, const char *buf, size_t len, const char *context,
                      kube_config *ret, cs_error **err)
{
        json_t *root = kube_yaml_parse(source, buf, len, err);
        kcfg c = { .path = source };
        int r;

        if (!root)
                return -1;
        c.dir = source_dir(source);
        r = kcfg_load(ret, &c, root, context, err);
        free(c.dir);
        json_decref(root);
        if (r < 0)
                kube_config_clear(ret);
        return r;
}

static int pem_read(kube_pem *p, const char *source, cs_error **err)
{
        if (!p->path)
                return 0;
        kube_blob_free(&p->pem);
        if (cs_read_file(p->path, KUBE_MAX_CONFIG, &p->pem.data, &p->pem.len, NULL) < 0)
                return cs_error_errno(err, errno, "kubeconfig %s: %s %s", source, p->label,
                                      p->path);
        if (p->pem.len == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "kubeconfig %s: %s %s is empty", source, p->label, p->path);
        return 0;
}

int kube_config_read_files(kube_config *c, const char *source, cs_error **err)
{
        if (pem_read(&c->ca, source, err) < 0 || pem_read(&c->cert, source, err) < 0 ||
            pem_read(&c->key, source, err) < 0)
                return -1;
        return 0;
}
