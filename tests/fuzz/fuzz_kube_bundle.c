/* Fuzz target: the bundle config.json reader of kube mode, kb_parse_config() in
 * nodeagent/kube_bundle.c, and the rules applied to what it reads (the pod cgroup from
 * linux.cgroupsPath, the workspace mount's source, the host path of a source).
 *
 * Input: config.json text, as containerd writes it into a container's bundle.
 *
 * Beyond "no crash": the reader accepts exactly the texts that are a JSON object of at most
 * KB_CONFIG_MAX bytes (jansson read separately here); what it returns has every string set,
 * the annotations and cgroupsPath as written, no more mounts than the document lists, each
 * findable again by its destination; a deep copy equals the original; a pod cgroup is
 * absolute, has no "." or ".." component and, for a cgroupfs path, is that path or a parent.
 *
 * Owns: this file. Touches nothing but the code under test. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kube_bundle.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_HOST_ROOT "/host"

static void check_same(const char *a, const char *b)
{
        if (!a || !b || strcmp(a, b) != 0)
                abort();
}

/* The annotation or linux field as the document has it ("" when missing or not a string). */
static const char *doc_string(json_t *doc, const char *obj, const char *key)
{
        const char *s = json_string_value(json_object_get(json_object_get(doc, obj), key));

        return s ? s : "";
}

static void check_fields(json_t *doc, const kb_container *c)
{
        check_same(c->type, doc_string(doc, "annotations", KB_ANN_TYPE));
        check_same(c->sandbox_id, doc_string(doc, "annotations", KB_ANN_SANDBOX_ID));
        check_same(c->pod_namespace, doc_string(doc, "annotations", KB_ANN_NAMESPACE));
        check_same(c->pod_name, doc_string(doc, "annotations", KB_ANN_NAME));
        check_same(c->pod_uid, doc_string(doc, "annotations", KB_ANN_UID));
        check_same(c->container_name, doc_string(doc, "annotations", KB_ANN_CONTAINER_NAME));
        check_same(c->image, doc_string(doc, "annotations", KB_ANN_IMAGE));
        check_same(c->cgroups_path, doc_string(doc, "linux", "cgroupsPath"));
        if (c->n_mounts > json_array_size(json_object_get(doc, "mounts")) || !c->mounts)
                abort();
        for (size_t i = 0; i < c->n_mounts; i++) {
                if (!c->mounts[i].destination || !c->mounts[i].source ||
                    !kb_mount_source(c, c->mounts[i].destination))
                        abort();
        }
}

static void check_copy(const kb_container *c)
{
        kb_container d;

        kb_container_copy(c, &d);
        check_same(d.type, c->type);
        check_same(d.sandbox_id, c->sandbox_id);
        check_same(d.pod_namespace, c->pod_namespace);
        check_same(d.pod_name, c->pod_name);
        check_same(d.pod_uid, c->pod_uid);
        check_same(d.container_name, c->container_name);
        check_same(d.image, c->image);
        check_same(d.cgroups_path, c->cgroups_path);
        if (d.n_mounts != c->n_mounts || d.cpu_millis != c->cpu_millis ||
            d.memory_bytes != c->memory_bytes)
                abort();
        for (size_t i = 0; i < d.n_mounts; i++) {
                check_same(d.mounts[i].destination, c->mounts[i].destination);
                check_same(d.mounts[i].source, c->mounts[i].source);
        }
        kb_container_clear(&d);
}

/* Whether no component of p is "." or "..". */
static bool plain_components(const char *p)
{
        while (*p) {
                size_t n = strcspn(p, "/");
                if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                p += n;
                p += strspn(p, "/");
        }
        return true;
}

static void check_pod_cgroup(const char *path)
{
        char *pod = NULL;
        cs_error *err = NULL;

        if (kb_pod_cgroup(path, &pod, &err) < 0) {
                if (pod || !err || err->code != GRPC_STATUS_INVALID_ARGUMENT)
                        abort();
                cs_error_free(err);
                return;
        }
        if (err || !pod || pod[0] != '/' || !plain_components(pod))
                abort();
        /* cgroupfs style: the pod cgroup is the path itself or one of its parents, so the
         * path (with a leading '/' added if it had none) starts with it. */
        if (!strchr(path, ':')) {
                const char *rest = path[0] == '/' ? pod : pod + 1;
                if (strncmp(rest, path, strlen(rest)) != 0)
                        abort();
        }
        free(pod);
}

/* A mount source seen from the host's root: FUZZ_HOST_ROOT in front of an absolute path. */
static void check_host_paths(const kb_container *c)
{
        for (size_t i = 0; i < c->n_mounts; i++) {
                const char *src = c->mounts[i].source;
                _cleanup_free_ char *h = kb_host_path(FUZZ_HOST_ROOT, src);
                _cleanup_free_ char *want =
                        src[0] == '/' ? cs_xasprintf("%s%s", FUZZ_HOST_ROOT, src) : NULL;

                if (want ? !h || strcmp(h, want) != 0 : h != NULL)
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_t *doc = json_loadb((const char *)data, size, 0, NULL);
        /* What kb_parse_config must accept: a JSON object of at most KB_CONFIG_MAX bytes. */
        bool object = doc && json_is_object(doc) && size <= KB_CONFIG_MAX;
        kb_container c;
        cs_error *err = NULL;

        if (kb_parse_config((const char *)data, size, &c, &err) < 0) {
                if (object || !err || err->code != GRPC_STATUS_INVALID_ARGUMENT)
                        abort();
                cs_error_free(err);
                json_decref(doc);
                return 0;
        }
        if (!object || err)
                abort();
        check_fields(doc, &c);
        check_copy(&c);
        check_pod_cgroup(c.cgroups_path);
        check_host_paths(&c);
        kb_mount_source(&c, "/workspace");
        kb_container_clear(&c);
        json_decref(doc);
        return 0;
}
