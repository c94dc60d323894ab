/* Kube mode: finding a pod's gVisor container on this node.
 *
 * The kubelet (containerd + the runsc shim) makes the containers under a runsc root; the
 * agent lists that root through the runtime seam (id, state, host pid, bundle), reads each
 * container's bundle config.json (its CRI annotations, mounts, cgroupsPath, resources: see
 * kube_bundle.h) and matches a pod reference against the annotations.
 *
 * What a bundle says never changes for a given container id, so it is cached: a lookup reads
 * the cache, and lists the root again only on a miss (a new pod) or when a cached container
 * turns out to be gone (its bundle removed, or the runtime no longer knows it); a relist drops
 * the entries of containers that are no longer listed. The agent keeps nothing on disk:
 * a restarted agent finds everything again from the runsc root. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "kube_bundle.h"
#include "runtime.h"

typedef struct kube_config {
        runtime *rt;                   /* the runsc runtime on the kubelet's runsc root */
        const char *host_root;         /* prefix of host paths (bundles, mount sources); "" */
        const char *default_container; /* container name when a reference gives none */
        const char *namespaces;        /* the pod namespaces served, comma-separated; "*": any */
        const char *volume_root;       /* workspaces must lie beneath this host directory */
} kube_config;

typedef struct kube_finder kube_finder;

kube_finder *kube_finder_new(const kube_config *cfg);
void kube_finder_free(kube_finder *kf);

typedef struct kube_ref {
        const char *pod_namespace, *pod_name, *pod_uid; /* uid: "" = any */
        const char *container_name;                     /* "": the configured default */
} kube_ref;

/* One app container as found. */
typedef struct kube_pod {
        char *container_id;
        kb_container c;     /* what its bundle says (the pod's identity, mounts, limits) */
        char *pod_cgroup;   /* where the pod's usage is read ("" if the bundle has none) */
        rt_state state;     /* RT_ABSENT when not asked for (kube_find with want_state false) */
        pid_t pid;          /* the sandbox's host process, 0 if unknown */
        int64_t created_ms; /* when its bundle was written (just before the container was
                               created), wall clock */
} kube_pod;

void kube_pod_clear(kube_pod *p);
void kube_pods_free(kube_pod *p, size_t n);

/* Finds the app container ref names. want_state: also ask the runtime for its state (one
 * `runsc state`, ~20 ms); without it only the bundle's presence is checked (file I/O).
 * When several containers match (a pod recreated under the same name while the old one is
 * not deleted yet, and no uid given), the running one is preferred, then the newest.
 * NOT_FOUND when none matches. */
int kube_find(kube_finder *kf, const kube_ref *ref, bool want_state, kube_pod *ret, cs_error **err);

/* Lists the root afresh: every app container named container_name ("" = the default), with
 * its state, sorted by pod namespace, pod name and container id. */
int kube_list(kube_finder *kf, const char *container_name, kube_pod **ret, size_t *ret_n,
              cs_error **err);

/* The host path of p's workspace mounted at mount_path (host_root applied), NULL if p has no
 * bind mount there. */
char *kube_workspace_dir(kube_finder *kf, const kube_pod *p, const char *mount_path);
/* The host directory of the pod's compute-run emptyDir (mounted at CS_SPAWNER_DIR in the
 * container: the frontend's --spawner-image pods), where the agent listens for compute-init;
 * NULL when the container has none, or its source is not the pod's own emptyDir as the
 * kubelet keeps it (<volume root>/<pod uid>/volumes/kubernetes.io~empty-dir/<name>).
 * Malloc'd. */
char *kube_spawner_dir(kube_finder *kf, const kube_pod *p);

/* Opens a workspace directory kube_workspace_dir gave: only beneath the volume root (the
 * kubelet's pod volumes), resolved with openat2(RESOLVE_BENEATH) from it, so neither a
 * mount of the pod's that is not a volume (a hostPath, /etc/hosts) nor a symlink on the way
 * can lead elsewhere on the host. An O_DIRECTORY fd, or -1 with FAILED_PRECONDITION. */
int kube_open_workspace(kube_finder *kf, const char *workspace_dir, cs_error **err);

/* Whether this agent serves pods of namespace ns (--pod-namespaces). */
bool kube_namespace_served(kube_finder *kf, const char *ns);
