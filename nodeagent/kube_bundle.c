/* Kube mode: reading containerd's OCI bundles (see kube_bundle.h). */
#include "kube_bundle.h"

#include <jansson.h>
#include <string.h>

#include "util.h"

static char *str_or_empty(json_t *j)
{
        const char *s = json_string_value(j);

        return cs_xstrdup(s ? s : "");
}

static bool is_bind(json_t *m)
{
        const char *type = json_string_value(json_object_get(m, "type"));
        json_t *opts = json_object_get(m, "options"), *o;
        size_t i;

        if (type && strcmp(type, "bind") == 0)
                return true;
        json_array_foreach(opts, i, o)
        {
                const char *s = json_string_value(o);
                if (s && (strcmp(s, "bind") == 0 || strcmp(s, "rbind") == 0))
                        return true;
        }
        return false;
}

int kb_parse_config(const char *text, size_t len, kb_container *ret, cs_error **err)
{
        json_error_t jerr;
        json_t *doc, *ann, *linux_, *res, *mounts, *m;
        json_int_t quota = 0, period = 0, limit = 0;
        size_t i;

        memset(ret, 0, sizeof(*ret));
        if (len > KB_CONFIG_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "config.json is larger than %u bytes", KB_CONFIG_MAX);
        doc = json_loadb(text, len, 0, &jerr);
        if (!doc || !json_is_object(doc)) {
                json_decref(doc);
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "config.json is not a JSON object: %s", doc ? "" : jerr.text);
        }
        ann = json_object_get(doc, "annotations");
        ret->type = str_or_empty(json_object_get(ann, KB_ANN_TYPE));
        ret->sandbox_id = str_or_empty(json_object_get(ann, KB_ANN_SANDBOX_ID));
        ret->pod_namespace = str_or_empty(json_object_get(ann, KB_ANN_NAMESPACE));
        ret->pod_name = str_or_empty(json_object_get(ann, KB_ANN_NAME));
        ret->pod_uid = str_or_empty(json_object_get(ann, KB_ANN_UID));
        ret->container_name = str_or_empty(json_object_get(ann, KB_ANN_CONTAINER_NAME));
        ret->image = str_or_empty(json_object_get(ann, KB_ANN_IMAGE));

        linux_ = json_object_get(doc, "linux");
        ret->cgroups_path = str_or_empty(json_object_get(linux_, "cgroupsPath"));
        res = json_object_get(linux_, "resources");
        json_unpack(res, "{s?{s?I, s?I}}", "cpu", "quota", &quota, "period", &period);
        json_unpack(res, "{s?{s?I}}", "memory", "limit", &limit);
        if (quota > 0 && period > 0) {
                /* In 128 bits: quota * 1000 overflows 64 for quotas past INT64_MAX / 1000. */
                unsigned __int128 millis =
                        ((unsigned __int128)quota * 1000 + (uint64_t)period - 1) / (uint64_t)period;
                ret->cpu_millis = millis > UINT32_MAX ? UINT32_MAX : (uint32_t)millis;
        }
        if (limit > 0)
                ret->memory_bytes = (uint64_t)limit;

        mounts = json_object_get(doc, "mounts");
        ret->mounts = cs_xcalloc(json_array_size(mounts) + 1, sizeof(*ret->mounts));
        json_array_foreach(mounts, i, m)
        {
                const char *dst = json_string_value(json_object_get(m, "destination"));
                const char *src = json_string_value(json_object_get(m, "source"));
                if (!dst || !src || !is_bind(m))
                        continue;
                ret->mounts[ret->n_mounts].destination = cs_xstrdup(dst);
                ret->mounts[ret->n_mounts].source = cs_xstrdup(src);
                ret->n_mounts++;
        }
        json_decref(doc);
        return 0;
}

void kb_container_clear(kb_container *c)
{
        free(c->type);
        free(c->sandbox_id);
        free(c->pod_namespace);
        free(c->pod_name);
        free(c->pod_uid);
        free(c->container_name);
        free(c->image);
        free(c->cgroups_path);
        for (size_t i = 0; i < c->n_mounts; i++) {
                free(c->mounts[i].destination);
                free(c->mounts[i].source);
        }
        free(c->mounts);
        memset(c, 0, sizeof(*c));
}

void kb_container_copy(const kb_container *src, kb_container *dst)
{
        *dst = *src;
        dst->type = cs_xstrdup(src->type);
        dst->sandbox_id = cs_xstrdup(src->sandbox_id);
        dst->pod_namespace = cs_xstrdup(src->pod_namespace);
        dst->pod_name = cs_xstrdup(src->pod_name);
        dst->pod_uid = cs_xstrdup(src->pod_uid);
        dst->container_name = cs_xstrdup(src->container_name);
        dst->image = cs_xstrdup(src->image);
        dst->cgroups_path = cs_xstrdup(src->cgroups_path);
        dst->mounts = cs_xcalloc(src->n_mounts + 1, sizeof(*dst->mounts));
        for (size_t i = 0; i < src->n_mounts; i++) {
                dst->mounts[i].destination = cs_xstrdup(src->mounts[i].destination);
                dst->mounts[i].source = cs_xstrdup(src->mounts[i].source);
        }
}

static void inherit(char **field, const char *from)
{
        if (!(*field)[0] && from[0]) {
                free(*field);
                *field = cs_xstrdup(from);
        }
}

void kb_inherit_pod(kb_container *app, const kb_container *pause)
{
        inherit(&app->pod_namespace, pause->pod_namespace);
        inherit(&app->pod_name, pause->pod_name);
        inherit(&app->pod_uid, pause->pod_uid);
}

bool kb_matches(const kb_container *c, const kb_ref *ref)
{
        if (strcmp(c->type, KB_TYPE_CONTAINER) != 0)
                return false;
        if (!c->pod_namespace[0] || strcmp(c->pod_namespace, ref->pod_namespace) != 0 ||
            strcmp(c->pod_name, ref->pod_name) != 0 ||
            strcmp(c->container_name, ref->container_name) != 0)
                return false;
        return !ref->pod_uid || !ref->pod_uid[0] || strcmp(c->pod_uid, ref->pod_uid) == 0;
}

/* Length of p without trailing slashes (but "/" stays "/"). */
static size_t trimmed_len(const char *p)
{
        size_t n = strlen(p);

        while (n > 1 && p[n - 1] == '/')
                n--;
        return n;
}

const char *kb_mount_source(const kb_container *c, const char *mount_path)
{
        size_t want = trimmed_len(mount_path);

        for (size_t i = c->n_mounts; i-- > 0;) {
                const char *d = c->mounts[i].destination;
                if (trimmed_len(d) == want && strncmp(d, mount_path, want) == 0)
                        return c->mounts[i].source;
        }
        return NULL;
}

/* Whether every component of a cgroupfs path is a plain name. */
static bool components_ok(const char *p)
{
        while (*p) {
                size_t n;
                while (*p == '/')
                        p++;
                n = strcspn(p, "/");
                if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                p += n;
        }
        return true;
}

/* systemd's expansion of a slice unit name into its cgroup path. */
static int slice_path(const char *slice, size_t len, char **ret, cs_error **err)
{
        static const char suffix[] = ".slice";
        size_t sl = sizeof(suffix) - 1, base, levels = 1;
        char *out, *o;

        if (len == sizeof("-.slice") - 1 && strncmp(slice, "-.slice", len) == 0) {
                *ret = cs_xstrdup("");
                return 0;
        }
        if (len <= sl || strncmp(slice + len - sl, suffix, sl) != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "'%.*s' is not a systemd slice name", (int)len, slice);
        base = len - sl;
        for (size_t i = 0; i < base; i++) {
                char ch = slice[i];
                if (ch == '/' || (ch == '-' && (i == 0 || i == base - 1 || slice[i - 1] == '-')))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "'%.*s' is not a valid slice name", (int)len, slice);
                levels += ch == '-';
        }
        /* Each '-' starts a level: "a-b-c" -> /a.slice/a-b.slice/a-b-c.slice. Each level is at
         * most "/" + base + suffix long. */
        out = o = cs_xcalloc(1, levels * (base + sl + 1) + 1);
        for (size_t i = 0; i <= base; i++) {
                if (i == base || slice[i] == '-') {
                        *o++ = '/';
                        memcpy(o, slice, i);
                        o += i;
                        memcpy(o, suffix, sl);
                        o += sl;
                }
        }
        *o = '\0';
        *ret = out;
        return 0;
}

int kb_pod_cgroup(const char *cgroups_path, char **ret, cs_error **err)
{
        const char *p = cgroups_path ? cgroups_path : "";
        const char *colon = strchr(p, ':');

        if (!p[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no linux.cgroupsPath");
        if (colon) {
                /* "slice:prefix:name": the container is <slice path>/<prefix>-<name>.scope;
                 * the pod is the slice. */
                const char *second = strchr(colon + 1, ':');
                if (p[0] == '/' || colon == p || !second || strchr(second + 1, ':') || !second[1])
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "'%s' is not a systemd cgroupsPath (slice:prefix:name)",
                                            p);
                if (slice_path(p, (size_t)(colon - p), ret, err) < 0)
                        return -1;
                if (!(*ret)[0]) {
                        free(*ret);
                        *ret = cs_xstrdup("/");
                }
                return 0;
        }
        if (!components_ok(p))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "cgroupsPath '%s' has '.' or '..' components", p);
        {
                _cleanup_free_ char *abs = cs_xasprintf("%s%s", p[0] == '/' ? "" : "/", p);
                size_t n = trimmed_len(abs);
                char *slash;

                abs[n] = '\0';
                if (n <= 1)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "cgroupsPath '%s' names the root", p);
                slash = strrchr(abs, '/');
                while (slash > abs && slash[-1] == '/')
                        slash--;
                if (slash == abs) { /* one component: no parent to use */
                        *ret = TAKE_PTR(abs);
                        return 0;
                }
                *slash = '\0';
                *ret = TAKE_PTR(abs);
                return 0;
        }
}

char *kb_host_path(const char *host_root, const char *path)
{
        size_t n;

        if (!path || path[0] != '/')
                return NULL;
        if (!host_root || !host_root[0])
                return cs_xstrdup(path);
        n = trimmed_len(host_root);
        if (n == 1 && host_root[0] == '/')
                return cs_xstrdup(path);
        return cs_xasprintf("%.*s%s", (int)n, host_root, path);
}
