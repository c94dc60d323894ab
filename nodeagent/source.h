/* The agent's sandbox sources: where the sandboxes a call names come from.
 *
 * One ops table per source, chosen once at start (main.c), as crun has one cgroup manager per
 * cgroup version: the local source (source_local.c: the registry's own sandboxes, named by
 * sandbox_id, created and destroyed here) and the kube source (source_kube.c: a pod's gVisor
 * container found under the kubelet's runsc root by kube.c and attached to the registry with
 * sb_attach; creation and destruction are the frontend's, through the Kubernetes API).
 * service.c turns protobuf into the plain structs below and back, and calls through the ops;
 * nothing else of the agent asks which source it runs.
 *
 * Owns: the seam (source_ops), its structs, and the paging shared by both sources (source.c).
 * May touch: the registry's public API (sandbox.h) and the kube finder (kube.h); never
 * protobuf, never the RPC layer (a source reaches its call only through src_call).
 *
 * Errors carry the gRPC status and message the call answers with. Library code: no logging.
 * Locking: a source holds no lock of its own; the registry and the finder lock themselves,
 * and every op may run on several threads at once. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "kube.h"
#include "sandbox.h"

/* Same numbers as nodeagent.v1.AgentMode. */
typedef enum src_kind {
        SRC_LOCAL = 1,
        SRC_KUBE = 2,
} src_kind;

/* What a source may do to the call it serves. Borrowed for the op's duration. */
typedef struct src_call {
        int cancel_fd; /* readable once the call is cancelled; -1: never */
        /* Names the call's sandbox (its logs) once the source has checked the id; may be NULL. */
        void (*set_sandbox_id)(void *userdata, const char *sandbox_id);
        void *userdata;
} src_call;

/* A reference to a sandbox, as a call gives it. Strings are borrowed, never NULL ("": not
 * given). A call that gives no reference at all passes a NULL src_ref. */
typedef struct src_ref {
        const char *sandbox_id;
        /* Kube: the pod's container (name, uid, container "": any / the default) and the
         * workspace's mount path ("": CS_DEFAULT_MOUNT_PATH). */
        const char *pod_namespace, *pod_name, *pod_uid, *container_name, *mount_path;
} src_ref;

/* The pod a kube sandbox is in, as found. Owned strings; all NULL for a local sandbox. */
typedef struct src_pod {
        char *pod_namespace, *pod_name, *pod_uid, *container_name, *mount_path;
} src_pod;

/* One sandbox as a source reports it (describe, list). Owns its strings. */
typedef struct src_entry {
        sb_info info;
        src_pod pod;
} src_entry;

void src_entry_clear(src_entry *e);
void src_entries_free(src_entry *e, size_t n);

/* ListSandboxes' page: token as an earlier answer gave it ("": the first page), size 0: the
 * default, above SRC_PAGE_MAX: the cap. */
typedef struct src_page {
        const char *token;
        uint32_t size;
        bool include_destroyed; /* local only: the kube source lists containers, never records */
} src_page;

/* For GetAgentInfo. */
typedef struct src_counts {
        uint32_t max_sandboxes; /* 0: no cap of the agent's own (kube: the scheduler's) */
        uint32_t live, ready, destroyed, execs_running;
        uint32_t warm_ready; /* warm sandboxes ready to be claimed (local mode's pool) */
        uint32_t cpu_millis_allocated;
        uint64_t memory_bytes_allocated;
        /* Set (owned by the caller, who logs and frees it) when the counts are incomplete but
         * the call should still answer: GetAgentInfo is the link's readiness probe. */
        cs_error *partial;
} src_counts;

typedef struct source source;

typedef struct source_ops {
        const char *name;
        src_kind kind;
        /* CreateSandbox; *ret_created tells a new sandbox from the existing one of the spec's
         * id or session (sb_create). *ret filled only on success. */
        int (*create)(source *s, const src_call *c, const sb_spec *spec, sb_info *ret,
                      bool *ret_created, cs_error **err);
        /* DestroySandbox; grace_ms NULL: the configured grace (a negative one is refused). */
        int (*destroy)(source *s, const src_call *c, const src_ref *ref, const int64_t *grace_ms,
                       sb_info *ret, cs_error **err);
        /* The sandbox ref names, referenced (release with sb_release). need_ready (exec): a
         * starting sandbox is waited for up to wait_ready_ms (c->cancel_fd ends the wait),
         * anything else that is not ready is FAILED_PRECONDITION. */
        int (*acquire)(source *s, const src_call *c, const src_ref *ref, bool need_ready,
                       int64_t wait_ready_ms, sandbox **ret, cs_error **err);
        /* Opens a workspace directory (sb_workspace_dir of an acquired sandbox, not ""):
         * an O_DIRECTORY fd the caller closes, or -1. */
        int (*open_workspace)(source *s, const char *workspace_dir, cs_error **err);
        /* The sandbox ref names, with live status and usage. *ret filled only on success. */
        int (*describe)(source *s, const src_call *c, const src_ref *ref, src_entry *ret,
                        cs_error **err);
        /* One page of the sandboxes, in the source's order; *ret_next_token (owned, NULL when
         * this is the last page) continues it. *ret filled only on success. */
        int (*list)(source *s, const src_page *page, src_entry **ret, size_t *ret_n,
                    char **ret_next_token, cs_error **err);
        /* Fills *ret (zeroed by the op); -1 fails the call. */
        int (*counts)(source *s, src_counts *ret, cs_error **err);
        void (*free)(source *s);
} source_ops;

struct source {
        const source_ops *ops;
};

/* The local source over reg (borrowed: it must outlive the source). */
source *source_local_new(sb_registry *reg, uint32_t max_sandboxes);

/* The kube source: the finder is owned (freed with the source); reg and rt are borrowed. */
source *source_kube_new(kube_finder *kf, sb_registry *reg, runtime *rt);

/* Frees a source of either kind; NULL is fine. */
void source_free(source *s);

/* --- paging, shared by both sources (source.c) ------------------------------------------ */

#define SRC_PAGE_MAX     1000
#define SRC_PAGE_DEFAULT 500

/* How many of n sorted items the page starting at start holds (0 if start >= n). */
size_t src_page_count(size_t n, size_t start, uint32_t asked);

/* The answer to a page token that no answer of this agent gave: INVALID_ARGUMENT, -1. */
int src_page_token_invalid(cs_error **err);

/* The local source's token: the offset of the next page, in decimal (at most 1000000). */
int src_offset_token_parse(const char *token, size_t *ret_offset, cs_error **err);

/* The kube source's token: the last item returned, "namespace/name/container id". The
 * three parts are copied into *ret_key (free with free(ret_key->buf)). */
typedef struct src_pod_key {
        char *buf;
        const char *pod_namespace, *pod_name, *container_id;
} src_pod_key;
int src_pod_key_parse(const char *token, src_pod_key *ret_key, cs_error **err);
/* The first of n pods (sorted as kube_list sorts them) that comes after key. */
size_t src_pod_key_start(const kube_pod *pods, size_t n, const src_pod_key *key);
