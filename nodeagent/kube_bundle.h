/* Kube mode, the pure part: what the agent reads from a container's OCI bundle (config.json)
 * as containerd's CRI plugin writes it, and the rules that turn it into a pod's container,
 * workspace and cgroup. No I/O beyond parsing a buffer, no runtime: unit-tested on its own.
 *
 * The CRI annotations (containerd pkg/cri/annotations):
 *   io.kubernetes.cri.container-type     "sandbox" (the pause container) or "container"
 *   io.kubernetes.cri.sandbox-id         the pause container's id
 *   io.kubernetes.cri.sandbox-namespace  the pod's namespace
 *   io.kubernetes.cri.sandbox-name       the pod's name
 *   io.kubernetes.cri.sandbox-uid        the pod's UID
 *   io.kubernetes.cri.container-name     the container's name in the pod (app containers)
 *   io.kubernetes.cri.image-name         the image (app containers) */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define KB_ANN_TYPE           "io.kubernetes.cri.container-type"
#define KB_ANN_SANDBOX_ID     "io.kubernetes.cri.sandbox-id"
#define KB_ANN_NAMESPACE      "io.kubernetes.cri.sandbox-namespace"
#define KB_ANN_NAME           "io.kubernetes.cri.sandbox-name"
#define KB_ANN_UID            "io.kubernetes.cri.sandbox-uid"
#define KB_ANN_CONTAINER_NAME "io.kubernetes.cri.container-name"
#define KB_ANN_IMAGE          "io.kubernetes.cri.image-name"

#define KB_TYPE_SANDBOX   "sandbox"
#define KB_TYPE_CONTAINER "container"

/* The bundles this agent reads are small; anything larger is not containerd's. */
#define KB_CONFIG_MAX (4u << 20)

typedef struct kb_mount {
        char *destination, *source;
} kb_mount;

/* One container as its bundle describes it. Every string is malloc'd, "" when absent. */
typedef struct kb_container {
        char *type, *sandbox_id, *pod_namespace, *pod_name, *pod_uid, *container_name, *image;
        char *cgroups_path; /* linux.cgroupsPath as written */
        kb_mount *mounts;   /* bind mounts only, in the bundle's order */
        size_t n_mounts;
        uint32_t cpu_millis;   /* linux.resources.cpu quota/period, 0 if unlimited */
        uint64_t memory_bytes; /* linux.resources.memory.limit, 0 if unlimited */
} kb_container;

/* Parses config.json text. INVALID_ARGUMENT when it is not a JSON object; missing fields
 * are left empty (a container that is not a CRI one has no annotations). */
int kb_parse_config(const char *text, size_t len, kb_container *ret, cs_error **err);
void kb_container_clear(kb_container *c);
/* Deep copy. */
void kb_container_copy(const kb_container *src, kb_container *dst);

/* An app container that lacks the pod's namespace/name/uid (older containerd versions set
 * them on the pause container only) takes them from its pause container. */
void kb_inherit_pod(kb_container *app, const kb_container *pause);

typedef struct kb_ref {
        const char *pod_namespace, *pod_name;
        const char *pod_uid;        /* "" or NULL: any */
        const char *container_name; /* the resolved name (never empty) */
} kb_ref;

/* Whether c is the app container (type "container") that ref names. */
bool kb_matches(const kb_container *c, const kb_ref *ref);

/* The host source of the bind mount whose destination is mount_path (trailing slashes
 * ignored on both sides; the last one wins, as later mounts cover earlier ones). NULL if
 * there is none. */
const char *kb_mount_source(const kb_container *c, const char *mount_path);

/* The pod cgroup (cgroupfs path, leading '/') of a container, from its linux.cgroupsPath:
 *   cgroupfs style "/kubepods/burstable/pod<uid>/<id>" -> "/kubepods/burstable/pod<uid>"
 *   systemd style  "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>"
 *                  -> "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice"
 * (systemd expands a slice name a-b-c.slice into a.slice/a-b.slice/a-b-c.slice; "-.slice" is
 * the root). A cgroupfs path with one component has no parent: the path itself. INVALID_ARGUMENT
 * for an empty path, "." or ".." components, or a malformed systemd triple. */
int kb_pod_cgroup(const char *cgroups_path, char **ret, cs_error **err);

/* host_root + path ("" host_root: path itself); path must be absolute (NULL otherwise). */
char *kb_host_path(const char *host_root, const char *path);
