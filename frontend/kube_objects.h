/* The Kubernetes objects of a sandbox, as plain JSON: their names, labels and annotations
 * (docs/kube.md), the Pod and workspace PVC a create POSTs, the record a destroy writes on
 * the PVC, the checks a spec passes first, and the readings of those objects back (status,
 * mount path, the destroyed view). Pure functions: no API server, no locks, no state; every
 * json_t handed in is borrowed and read only, every json_t returned is the caller's
 * (json_decref), every string returned points into the object it was read from.
 *
 * Used by the kube scheduler (scheduler_kube.c and the files of its split) and unit-tested
 * alone (tests/unit/test_kube_objects.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "scheduler.h"
#include "usage.h"

#define LABEL_MANAGED_BY "app.kubernetes.io/managed-by"
#define LABEL_APP_NAME   "app.kubernetes.io/name"
#define LABEL_SANDBOX_ID "compute.paper-board.io/sandbox-id"
#define LABEL_TENANT_ID  "compute.paper-board.io/tenant-id"
#define LABEL_SESSION_ID "compute.paper-board.io/session-id"
#define ANN_TENANT_ID    "compute.paper-board.io/tenant-id"
/* A warm pool pod's and its PVC's: the profile it was made for (kube_pool.c). */
#define LABEL_POOL   "compute.paper-board.io/pool"
#define POOL_PROFILE "default"
/* A claimed pool pod's (kube_pool.c): when it was claimed (the sandbox's created_at), how old
 * the pod was then in whole seconds (its activeDeadlineSeconds is that plus max_runtime), and
 * the usage its idle warm time had used (subtracted from what the agent reads). */
#define ANN_CLAIMED_AT   "compute.paper-board.io/claimed-at"
#define ANN_CLAIM_OFFSET "compute.paper-board.io/claim-offset-s"
/* When a retried create took over a claim an earlier attempt left without its guard: the
 * patch that writes it changes the pod's resourceVersion, which is what makes the take-over
 * and the GC's removal of an abandoned claim exclude each other (kube_pool.c, kube_gc.c). */
#define ANN_ADOPTED_AT "compute.paper-board.io/adopted-at"
/* A session guard's (a ConfigMap named as the session's pod, kube_pool.c) data key of its
 * sandbox id. */
#define GUARD_KEY          "sandbox-id"
#define ANN_USAGE_BASELINE "compute.paper-board.io/usage-baseline"
#define ANN_SESSION_ID     "compute.paper-board.io/session-id"
#define ANN_SANDBOX_ID     "compute.paper-board.io/sandbox-id"
#define ANN_MOUNT_PATH     "compute.paper-board.io/mount-path"
#define ANN_DELETE_AFTER   "compute.paper-board.io/delete-after"
#define ANN_DESTROYED_AT   "compute.paper-board.io/destroyed-at"
#define ANN_FINAL_USAGE    "compute.paper-board.io/final-usage"
/* Not in the contract's list, harmless beside it: the pod's creation time, kept on the PVC
 * at destroy so a DESTROYED sandbox reports the created_at it always had. */
#define ANN_CREATED_AT    "compute.paper-board.io/created-at"
#define MANAGED_BY        "compute-frontend"
#define SANDBOX_APP_NAME  "compute-sandbox"
#define SANDBOX_CONTAINER "sandbox"
#define WORKSPACE_VOLUME  "workspace"
/* The resident exec path's parts of a pod (kobj_pod_build): where compute-init is in the
 * spawner image (the node agent's, deploy/Dockerfile), the init container that installs it,
 * and the two emptyDirs. */
#define SPAWNER_IMAGE_BIN      "/usr/local/bin/compute-init"
#define SPAWNER_IMAGE_AGENT    "agent" /* --spawner-image: the node agent pods' image */
#define SPAWNER_INIT_CONTAINER "compute-init"
#define SPAWNER_BIN_VOLUME     "compute-bin"
#define SPAWNER_RUN_VOLUME     "compute-run"
#define SANDBOX_SELECTOR       LABEL_MANAGED_BY "=" MANAGED_BY

#define _cleanup_json_ _cleanup_(json_decrefp) /* jansson's own json_auto_t cleanup */

/* "sbx-" and 32 hex digits. */
#define KOBJ_POD_NAME_LEN (4 + 32)

/* A create's spec with every default filled in (strings borrowed from the fe_spec and the
 * defaults it was normalised with). */
typedef struct kobj_spec {
        const char *tenant_id, *session_id, *image, *storage_class, *size, *mount_path;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
} kobj_spec;

/* The session's pod name: "sbx-" and the first 16 bytes of sha256(tenant NUL session), in
 * hex, so a retried or concurrent create on any replica POSTs the same name. */
void kobj_pod_name(const char *tenant, const char *session, char ret[static KOBJ_POD_NAME_LEN + 1]);

/* in with the defaults filled in (the sandbox_limits.h ones, and default_storage_class and
 * default_size for the workspace), checked as the node agent checks it in local mode:
 * INVALID_ARGUMENT saying which field, rather than the API server's 422. Egress allowlist or
 * open: FAILED_PRECONDITION (kube mode's pods have no network yet). */
int kobj_spec_normalise(const char *default_storage_class, const char *default_size,
                        const fe_spec *in, kobj_spec *out, cs_error **err);

/* The sandbox Pod named name in namespace ns (runtime_class "": none). With a spawner_image
 * (NULL or "": none) the pod runs compute-init as its init, installed by an init container of
 * that image from SPAWNER_IMAGE_BIN: the resident exec path. */
json_t *kobj_pod_build(const char *ns, const char *runtime_class, const char *spawner_image,
                       const kobj_spec *spec, const char *name, const char *id);

/* The workspace PVC "ws-<id>"; with annotations (borrowed) when given (a destroy that found
 * no PVC), else the tenant and session ids of spec (those not empty). */
json_t *kobj_pvc_build(const char *ns, const kobj_spec *spec, const char *id, json_t *annotations);

/* The annotations a destroy records on the PVC at now (wall clock): delete-after now +
 * grace_s, destroyed-at, the final usage, the created-at of the pod (else of the PVC, else
 * now), and the tenant and session ids of the pod (else of the PVC) when known. */
json_t *kobj_destroy_annotations(int64_t grace_s, json_t *pod, json_t *pvc, const usage_metrics *u,
                                 int64_t now);

/* The contract's mapping: Pending -> STARTING, Running and Ready -> READY, Running not
 * ready -> STARTING, Failed or Succeeded -> FAILED; a pod being deleted is FAILED. */
fe_status kobj_pod_status(json_t *pod);

/* Why a pod's sandbox is not READY, from what the API server says of it (malloc'd, raw: the
 * caller cleans it with fe_reason_clean), or NULL when READY or there is nothing to say:
 * the pod's deletion or eviction, its node lost, the phase Failed's reason (DeadlineExceeded
 * read as max_runtime, Evicted...), the sandbox container's termination (OOMKilled read as
 * out of memory with its limit) or waiting reason (ErrImagePull, ImagePullBackOff,
 * CreateContainerConfigError... with the kubelet's message), PodScheduled=False
 * (Unschedulable with the scheduler's message). */
char *kobj_pod_reason(json_t *pod);

/* The sandbox's created_at: its claim (a warm pool pod's ANN_CLAIMED_AT), else the pod's
 * creation; 0 when neither is readable. */
int64_t kobj_pod_created_at(json_t *pod);

/* Subtracts the pod's ANN_USAGE_BASELINE (a claimed warm pool pod's idle usage) from u, the
 * agent's cumulative reading: cpu, disk and network counters (never below 0); the memory
 * peak and average are the sandbox cgroup's own and stay as read. */
void kobj_usage_subtract_baseline(json_t *pod, usage_metrics *u);

/* The view of a sandbox whose pod exists, from the pod alone (no usage: the agent has it):
 * status, created_at, tenant and session (annotations), limits (the sandbox container's
 * resources and the pod's activeDeadlineSeconds) and the cleaned reason. ret->id is the
 * caller's (id copied). */
void kobj_view_of_pod(const char *id, json_t *pod, fe_view *ret);

/* Whether a PVC (NULL: none) records its sandbox's destruction. */
bool kobj_pvc_destroyed(json_t *pvc);

/* The view of a sandbox whose PVC records its destruction (ret->id is the caller's), with
 * its tenant and session when the PVC says. */
void kobj_view_destroyed(const char *id, json_t *pvc, fe_view *ret);

/* The tenant a PVC belongs to (its annotation, else its label), or NULL. */
const char *kobj_pvc_tenant(json_t *pvc);

/* Where the pod mounts its workspace (the sandbox container's mount of the workspace
 * volume), or NULL. */
const char *kobj_workspace_mount_path(json_t *pod);

/* A quantity as a PVC size takes it ("10Gi", "500M", "1.5Ti"). */
bool kobj_quantity_ok(const char *s);

/* A DNS subdomain name (what a StorageClass is named by). */
bool kobj_dns_subdomain_ok(const char *s);

/* Readers of an object's metadata: NULL (or false, or 0) when absent. */
const char *kobj_label(json_t *obj, const char *key);
const char *kobj_annotation(json_t *obj, const char *key);
bool kobj_being_deleted(json_t *obj);
/* An RFC 3339 time in ms since the epoch; 0 for NULL or a malformed one. */
int64_t kobj_time_of(const char *s);
/* a and b both set and equal. */
bool kobj_streq0(const char *a, const char *b);

/* What the caches keep of an object (and the GC of what it lists): a copy of obj with only
 * the fields some reader of that kind reads (the whitelist in kube_objects.c, which says why
 * each is kept; add a field there when adding a reader of it). Robust to any JSON: fields of
 * an unexpected type are dropped. NULL when obj is not an object; else the caller's. A
 * frontend holds 11 MiB per 1,000 sandboxes so, against 29 whole (docs/performance.md). */
typedef enum kobj_kind {
        KOBJ_SANDBOX_POD,
        KOBJ_AGENT_POD,
        KOBJ_WORKSPACE_PVC,
        KOBJ_GUARD,
} kobj_kind;
json_t *kobj_trim(json_t *obj, kobj_kind kind);
/* The same, as a kube_cache_config.trim. */
json_t *kobj_trim_sandbox_pod(json_t *obj);
json_t *kobj_trim_agent_pod(json_t *obj);
json_t *kobj_trim_workspace_pvc(json_t *obj);
