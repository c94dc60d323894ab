/* The node agent's sandboxes: in local mode their records, lifecycle and accounting; in kube
 * mode the accounting of containers the kubelet made, attached on demand (sb_attach).
 *
 * The registry is the agent's memory of every sandbox it created: a record on disk per
 * sandbox (COMPUTE_STATE_DIR/sandboxes/<id>/sandbox.json, replaced atomically on every
 * change) so that a restarted agent, even after kill -9, finds every sandbox, workspace,
 * status and usage total again. A background thread moves STARTING sandboxes to READY, stops
 * those past max_runtime (FAILED), samples memory for averages, and removes workspaces whose
 * soft-delete grace has passed.
 *
 * Library code: no logging except through the registry's log hook, no protobuf. Written as
 * sandbox.c (the registry) and sandbox_{record,usage,housekeep,attach}.c; their structs and
 * the locking rule are in sandbox_internal.h. */
#pragma once

#include "admission.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cgroup.h"
#include "error.h"
#include "netpolicy.h"
#include "runtime.h"
#include "sandbox_limits.h"
#include "usage.h"

/* Same numbers as compute.v1.SandboxStatus. */
typedef enum sb_status {
        SB_STARTING = 1,
        SB_READY = 2,
        SB_FAILED = 3,
        SB_DESTROYED = 4,
} sb_status;

/* The bounds and defaults of a spec: CS_* in sandbox_limits.h, shared with the frontend. */

/* The image of a sandbox whose spec names none: the Debian image scripts/lib.sh builds. */
#define SB_DEFAULT_IMAGE "debian:bookworm-compute"

typedef struct sb_spec {
        const char *id, *tenant_id, *session_id;
        const char *image;        /* a directory of images_dir; "": SB_DEFAULT_IMAGE */
        const char *mount_path;   /* "": CS_DEFAULT_MOUNT_PATH */
        uint32_t cpu_millis;      /* 0: default */
        uint64_t memory_bytes;    /* 0: default */
        int64_t max_runtime_ms;   /* 0: default */
        uint64_t workspace_bytes; /* 0: CS_DEFAULT_WORKSPACE_SIZE; else 16Mi..1Ti */
        /* Its network policy, checked (cs_netpolicy_parse); NULL or egress UNSPECIFIED: the
         * node's default (--egress-default). */
        const cs_netpolicy *network;
} sb_spec;

/* A snapshot of one sandbox, for answers. Strings are owned by the snapshot. */
typedef struct sb_info {
        char *id, *tenant_id, *session_id, *image, *mount_path, *status_message;
        sb_status status;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
        int64_t created_at_ms, destroyed_at_ms, delete_after_ms; /* wall clock; 0: not set */
        usage_metrics usage;
        uint64_t memory_now_bytes;    /* memory.current at the reading of usage; 0 once frozen */
        cs_netpolicy network;         /* the policy in force (egress never UNSPECIFIED here) */
        uint64_t net_dropped_packets; /* dropped by its policy (compute_sandbox_egress_denied_*) */
} sb_info;

void sb_info_clear(sb_info *info);

typedef struct sb_registry sb_registry;
typedef struct sandbox sandbox;

typedef struct sb_config {
        const char *state_dir;
        const char *images_dir;     /* image rootfs directories: <images_dir>/<image> */
        const char *cgroup_parent;  /* "/compute": cgroups are <parent>/<id> */
        int64_t grace_ms;           /* soft-delete window after destroy */
        int64_t sample_interval_ms; /* memory sampling and housekeeping period */
        int64_t start_timeout_ms;   /* how long a sandbox may take to reach READY */
        uint32_t max_sandboxes;     /* live (not destroyed) sandboxes at once */
        /* Local mode: runtime creates at once, the others wait in STARTING (0: the default,
         * sb_default_parallel_starts()). */
        uint32_t max_parallel_starts;
        na_capacity capacity; /* admission control (admission.h); memory_bytes 0: off */
        uint64_t pids_max;    /* local mode: the sandbox cgroup's pids.max (0: none) */
        bool volumes;         /* local mode: each workspace is a volume of its size (volume.h); off:
                                 a plain directory of the state directory's filesystem, unbounded */
        bool kube; /* kube mode: no records, no creation; sandboxes come from sb_attach and
                      the registry never stops or removes a container */
        /* The resident exec path (spawner_link.h); NULL: off. Local mode: each new sandbox
         * runs spawner_binary (compute-init) as its init, connected to a listener of this
         * manager in <sandbox dir>/spawner; a restarted agent listens again for every running
         * sandbox that has that directory. */
        struct spawn_mgr *spawner;
        const char *spawner_binary;
        /* Local mode's sandbox networking (net.h); NULL: off, every sandbox's egress is NONE
         * and a create asking for more is FAILED_PRECONDITION. */
        struct na_net *net;
        /* Local mode: warm sandboxes of the default profile kept READY (0..SB_WARM_POOL_MAX;
         * 0: none). A create of that profile claims one (sandbox_pool.c). */
        uint32_t warm_pool;
        /* Run on a warm sandbox once it is running, before it may be claimed (NULL: none):
         * exec_warm_up, with warm_up_data its runtime. */
        void (*warm_up)(sb_registry *reg, sandbox *sb, void *data);
        void *warm_up_data;
} sb_config;

#define SB_WARM_POOL_MAX 64

/* The warm pool, for the operator's metrics. claim_seconds: CreateSandbox's time in the
 * registry for a claim (hits). */
typedef struct sb_pool_stats {
        uint32_t target, ready, starting;
        uint64_t hits, misses;
        const struct cs_histogram *claim_seconds;
} sb_pool_stats;

void sb_pool_stats_read(sb_registry *reg, sb_pool_stats *ret);

/* Local mode: loads every record under state_dir, reconciles it with the runtime (running
 * containers are READY again, lost ones FAILED, exec processes left by a killed agent are killed,
 * containers without a record are destroyed) and starts the housekeeping thread.
 * `log` receives one line per notable event (may be NULL). */
typedef void (*sb_log_fn)(bool warn, const char *sandbox_id, const char *msg);
int sb_registry_open(const sb_config *cfg, runtime *rt, const cgroup_fs *cg, sb_log_fn log,
                     sb_registry **ret, cs_error **err);
/* Kube mode (cfg->kube): nothing is loaded; the exec processes a previous life of the agent
 * left in running containers (their pid files in STATE_DIR/kube/<container id>/) are killed;
 * then the housekeeping thread starts. */
void sb_registry_free(sb_registry *reg);
/* Two per CPU this process may run on (sched_getaffinity). */
uint32_t sb_default_parallel_starts(void);

/* Creates a sandbox (STARTING at once; READY when the runtime reports it running), or returns
 * the existing one: same id → that one (ALREADY_EXISTS if it belongs to another session);
 * a live sandbox of the same (tenant, session) → that one. *ret_created tells which. */
int sb_create(sb_registry *reg, const sb_spec *spec, sb_info *ret, bool *ret_created,
              cs_error **err);

/* Destroys: kills and deletes the container, freezes the usage, keeps the workspace until
 * now + grace_ms (< 0: the configured grace). Idempotent. */
int sb_destroy(sb_registry *reg, const char *id, int64_t grace_ms, sb_info *ret, cs_error **err);

/* A snapshot with live usage. NOT_FOUND for unknown ids. */
int sb_describe(sb_registry *reg, const char *id, sb_info *ret, cs_error **err);

/* Snapshots of every sandbox (destroyed ones too if asked), sorted by creation time. */
int sb_list(sb_registry *reg, bool include_destroyed, sb_info **ret, size_t *ret_n, cs_error **err);
void sb_infos_free(sb_info *infos, size_t n);

/* Counts for the agent info. */
void sb_counts(sb_registry *reg, uint32_t *ret_live, uint32_t *ret_ready, uint32_t *ret_destroyed,
               uint32_t *ret_execs);

/* --- kube mode: containers found by the kube discovery ------------------------------------ */

typedef struct sb_attach_spec {
        const char *container_id;
        const char *mount_path;    /* the workspace as the call names it (part of the key) */
        const char *workspace_dir; /* its host side; "" when the container has no such mount */
        const char *spawner_dir;   /* host side of its compute-run emptyDir (the resident exec
                                      path: the agent listens there); "" or NULL: none */
        const char *cgroup_path;   /* where usage is read: the pod cgroup */
        const char *label;         /* the call's sandbox_id (logs, snapshots); "" if none */
        const char *image;
        pid_t host_pid;        /* the sandbox's host process (network counters), 0 if none */
        int64_t created_at_ms; /* wall clock */
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        sb_status status; /* from the runtime's state, just read; 0: not read */
        const char *status_message;
} sb_attach_spec;

/* Kube mode: the registry's entry for (container_id, mount_path), made on first use and kept
 * while the container exists (its memory samples and the agent's file I/O accumulate there),
 * updated with the spec's status, pid and label. Returns it referenced, like sb_acquire
 * (release with sb_release). Entries whose container the housekeeping finds gone are dropped
 * once unreferenced. */
int sb_attach(sb_registry *reg, const sb_attach_spec *spec, sandbox **ret, cs_error **err);

/* A snapshot (live usage) of a sandbox the caller holds. */
void sb_snapshot(sb_registry *reg, sandbox *sb, sb_info *ret);

/* --- using a sandbox (exec, file I/O) ---------------------------------------------------- */

/* Takes a reference to a sandbox for the duration of an operation. wait_ready_ms > 0 waits
 * that long for a STARTING sandbox (DEADLINE_EXCEEDED if it never gets READY); need_ready
 * demands READY (FAILED_PRECONDITION for FAILED or DESTROYED), otherwise any state but
 * DESTROYED is accepted. `cancel_fd` (>= 0) ends the wait early with CANCELLED. */
int sb_acquire(sb_registry *reg, const char *id, bool need_ready, int64_t wait_ready_ms,
               int cancel_fd, sandbox **ret, cs_error **err);
void sb_release(sb_registry *reg, sandbox *sb);

const char *sb_container_id(const sandbox *sb);
const char *sb_workspace_dir(const sandbox *sb);
const char *sb_mount_path(const sandbox *sb);
const char *sb_dir(const sandbox *sb); /* per-sandbox scratch directory on the host */
/* The registry's spawner manager (sb_config.spawner), NULL when off. */
struct spawn_mgr *sb_registry_spawner(sb_registry *reg);

/* Counts bytes moved by the agent's own file API (they are workspace disk I/O too) for a
 * sandbox without a volume; a volume's block counters see them already. */
void sb_count_file_io(sb_registry *reg, sandbox *sb, uint64_t read, uint64_t written);

/* An exec's measurement window: usage between sb_window_begin and sb_window_end, with memory
 * peak and average from the samples taken meanwhile. */
typedef struct sb_window sb_window;
sb_window *sb_window_begin(sb_registry *reg, sandbox *sb);
/* Whether another exec's window was open at some time during w (call before its end): the
 * sandbox's counters over w then hold that exec's use too. */
bool sb_window_shared(sb_registry *reg, sb_window *w);
/* Ends the window and fills *ret; *ret_oom tells whether the cgroup saw an OOM kill in it. */
void sb_window_end(sb_registry *reg, sandbox *sb, sb_window *w, usage_metrics *ret, bool *ret_oom);

/* Marks a sandbox FAILED (e.g. its container died of OOM); usage is frozen. */
void sb_mark_failed(sb_registry *reg, sandbox *sb, const char *why);

/* Marks a sandbox whose container died of the memory cgroup's OOM kill FAILED, with the one
 * message a client sees for it ("the sandbox ran out of memory (limit N MiB)"). */
void sb_mark_out_of_memory(sb_registry *reg, sandbox *sb);
