/* The sandbox registry's insides, shared by its files and by nothing else: the structs, the
 * locking rule, and the functions one file of the registry lends another.
 *
 *   sandbox.c            the registry: open/free, create/destroy/describe/list/counts,
 *                        acquire/release, snapshots, spec validation, the starter threads
 *   sandbox_record.c     sandbox.json on disk (atomic replace) and, at open, the loading of
 *                        records and their reconciliation with the runtime (local mode)
 *   sandbox_usage.c      live usage, frozen usage, memory samples, exec usage windows
 *   sandbox_housekeep.c  the housekeeping thread: max_runtime, dead containers, removal
 *                        of sandboxes whose soft-delete grace has passed
 *   sandbox_attach.c     kube mode: entries for containers the kubelet made (sb_attach) and
 *                        everything the registry does differently for them
 *
 * Only sandbox*.c include this header.
 *
 * LOCKING (the one rule of the registry)
 *
 * - reg->lock (one mutex per registry) guards the list (reg->list and every sb->next),
 *   reg->stopping, reg->starters, and every mutable field of every sandbox: status,
 *   status_message, destroying, destroyed_at_ms, delete_after_ms, host_pid (writes),
 *   frozen, usage_frozen, mem_sum/mem_n/mem_max, file_read/file_written,
 *   vol_base_read/vol_base_written, vol_start, windows (and the windows' contents once
 *   linked), execs, refs, gone.
 *   reg->cond (CLOCK_MONOTONIC) is waited on with it (acquire, destroy, the housekeeping's
 *   sleep, free); status changes, releases, the end of a destroy or of a starter thread,
 *   and stopping broadcast it.
 * - Immutable once the sandbox is listed, so readable without the lock by whoever holds a
 *   reference: tenant_id, session_id, image, mount_path, cpu_millis, memory_bytes,
 *   max_runtime_ms, created_at_ms, started_mono_ms, dir, bundle_dir, workspace_dir,
 *   container_id, cgroup_path, workspace_bytes, volume, volume_image, attached, key. A
 *   local sandbox's id never changes; an attached entry's id (its label) changes only under
 *   the lock while refs == 0, so a holder of a reference reads it unlocked.
 * - Read unlocked although written under the lock (word-sized; a stale value costs one
 *   reading): host_pid (network counters) and an attached entry's status in its
 *   housekeeping.
 * - The registry's own fields (cfg, the directories, rt, cg, log) never change after
 *   sb_registry_open; housekeeper and housekeeper_running belong to open and free.
 * - With the lock held only memory is touched: no runtime call (runsc takes tens to
 *   hundreds of milliseconds), no cgroup or /proc read, no file written, no log hook
 *   called, no thread created or joined. Long operations mark the sandbox (refs,
 *   starters, destroying) and run unlocked.
 * - Functions named *_locked are called with the lock held. The others that touch mutable
 *   fields take the lock themselves and are called without it.
 * - Lock order: reg->lock is innermost. No other lock is ever taken while it is held.
 * - During sb_registry_open, before the housekeeping thread starts, the registry has one
 *   thread: loading and reconciling records touch fields without the lock.
 *
 * REFERENCES
 *
 * - refs counts holders outside the lock: sb_acquire, sb_attach, a starter thread (one for
 *   its life), and the short-lived ones of describe/destroy/list/housekeeping. Taken with
 *   sandbox_ref_locked, dropped with sb_release (which broadcasts).
 * - A sandbox is unlinked and freed only by the housekeeping's removal, which requires
 *   refs == 0 and !destroying, or by sb_registry_free, after the housekeeping thread is
 *   joined and no starter runs (callers must have released theirs).
 * - destroying: sb_destroy's runtime call runs unlocked with it set; another destroy waits
 *   on reg->cond, acquire refuses the sandbox, removal skips it. */
#pragma once

#include <sys/types.h>

#include "metrics.h"
#include "sandbox.h"
#include "uuid.h"
#include "volume.h"

struct sb_window {
        struct sb_window *next;
        cgroup_sample start;
        uint64_t disk_read, disk_written, net_rx, net_tx;
        uint64_t mem_sum, mem_n, mem_max;
        bool peak_reset; /* the kernel high-water mark was reset for this window */
        bool shared;     /* another exec's window was open at some time during this one */
};

struct sandbox {
        sandbox *next;
        char id[CS_UUID_STRLEN + 1];
        char *tenant_id, *session_id, *image, *mount_path, *status_message;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
        int64_t created_at_ms, destroyed_at_ms, delete_after_ms;
        int64_t started_mono_ms; /* monotonic, for max_runtime (wall clock may jump) */
        sb_status status;
        bool destroying;

        char *dir, *bundle_dir, *workspace_dir, *container_id, *cgroup_path;
        pid_t host_pid; /* the sandbox's host process, for network counters */
        /* Its network policy (egress never UNSPECIFIED), and its place in the sandbox subnet
         * while its network is up or being made (net.h), when net_has_slot. A slot is taken
         * at create and given back once the network is down, both under the lock. */
        cs_netpolicy net;
        bool net_has_slot;
        bool net_going; /* sandbox_net_down is taking it down */
        uint32_t net_slot;
        uint64_t net_dropped; /* packets its policy dropped, at the last reading */

        usage_metrics frozen; /* final usage once FAILED or DESTROYED; before: the last reading */
        bool usage_frozen;
        /* Monotonic: until then, a container of this sandbox, marked lost while the agent was
         * down, is destroyed when one appears (a runtime call the previous agent made, still
         * finishing after it died: sandbox_record.c, sandbox_housekeep.c). 0: not watched. */
        int64_t lost_watch_until_ms;
        uint64_t mem_sum, mem_n, mem_max; /* memory samples over the sandbox's life */
        uint64_t mem_now;                 /* memory.current at the last live reading */
        uint64_t file_read, file_written; /* the agent's file I/O: sandboxes without a volume */

        /* Local mode's workspace volume (volume.h). Its disk I/O is vol_base (the totals of
         * its earlier attachments: a re-attach after a reboot gets another loop device) plus
         * the device's counters now minus vol_start (their values when it was attached:
         * loop devices are reused and their counters never restart). */
        uint64_t workspace_bytes;
        bool volume; /* the workspace is a volume (the agent's --workspace-volumes at create) */
        char *volume_image;
        uint64_t vol_base_read, vol_base_written;
        vol_counters vol_start;

        sb_window *windows; /* execs being measured */
        int execs;
        int refs;

        /* Kube mode: a container the kubelet made (sb_attach), keyed by container id and
         * mount path; never persisted, stopped or removed by the registry. */
        bool attached;
        bool spawner_tried; /* kube: the agent listened (or tried to) in its compute-run dir */
        bool gone;          /* the housekeeping found its container gone */
        char *key;

        /* The warm pool (sandbox_pool.c). pool: a warm sandbox no session has claimed; it is
         * invisible to every lookup by id or listing, never expires and never counts against
         * a tenant. claiming: sb_create is turning it into a session's sandbox (tenant_id and
         * session_id are set, usage is being rebased); a create for the same session waits
         * for the end. Both under the lock. A pool sandbox's tenant_id, session_id,
         * max_runtime_ms, created_at_ms and started_mono_ms change once, at its claim, under
         * the lock, while only the registry's own threads hold it. */
        bool pool, claiming;
        /* A warm sandbox running its warm-up command (sb_config.warm_up): READY, not yet
         * claimable. Under the lock. */
        bool warming;
        /* Counters at the claim, subtracted from the cgroup's and network's (the warm idle
         * time is the operator's): 0 for a sandbox that was never warm. Under the lock. */
        uint64_t base_cpu_ns, base_io_read, base_io_written, base_net_rx, base_net_tx;
};

struct sb_registry {
        sb_config cfg;
        char *state_dir, *images_dir, *cgroup_parent, *sandboxes_dir;
        runtime *rt;
        const cgroup_fs *cg;
        sb_log_fn log;

        pthread_mutex_t lock;
        pthread_cond_t cond; /* status changes, housekeeping wake-ups */
        sandbox *list;
        bool stopping;
        bool opened; /* the records are loaded and reconciled */
        pthread_t housekeeper;
        bool housekeeper_running;
        int starters;            /* starter threads running */
        uint32_t starts_running; /* of which in the runtime's create (start_slot_take) */

        /* The warm pool (sandbox_pool.c): its filler thread, the failures in a row that back
         * its refills off, and its counters. Under the lock, but for the histogram (atomic). */
        pthread_t pool_filler;
        bool pool_filler_running;
        int pool_fail_streak;
        int64_t pool_retry_at_ms;   /* monotonic: no refill before (failures' backoff) */
        int64_t pool_hold_until_ms; /* monotonic: no refill before (a claim's hold) */
        uint64_t pool_hits, pool_misses;
        cs_histogram pool_claim_seconds;
};

/* --- sandbox.c ------------------------------------------------------------------------- */

/* Takes the sandbox's network down (net.h) if it has one and gives its slot back; the usage
 * must be frozen first (its counters go with it). */
void sandbox_net_down(sb_registry *reg, sandbox *sb);

/* One line to the registry's log hook (never called with the lock held). */
void sandbox_log(sb_registry *reg, bool warn, const char *id, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
void sandbox_free(sandbox *sb);                    /* accepts NULL; the sandbox must be unlinked */
void sandbox_paths(sb_registry *reg, sandbox *sb); /* fills the derived paths from the id */
/* A destroyed sandbox's volume leaves its mount (and loop device) at once: nothing reads a
 * DESTROYED workspace, and a mount left for its soft-delete grace outlived the agent (a
 * stopped service kept every one mounted). Its image stays until the grace ends. */
void sandbox_unmount_destroyed(sb_registry *reg, sandbox *sb);
/* The entry's fields into *ret (malloc'd copies; usage: the frozen one). Under the lock. */
void sandbox_info_fill_locked(const sandbox *sb, sb_info *ret);
void sandbox_set_message_locked(sandbox *sb, const char *msg);
/* FAILED with `why`; starts the soft-delete grace unless it runs already. Broadcasts. */
void sandbox_set_failed_locked(sb_registry *reg, sandbox *sb, const char *why);
sandbox *sandbox_ref_locked(sandbox *sb);
/* An image is a root filesystem directory of images_dir, never a path of the host. */
int sandbox_image_check(sb_registry *reg, const char *image, cs_error **err);
int sandbox_mkdir(const char *path, mode_t mode, cs_error **err); /* EEXIST is fine */
/* Removes a tree without following symlinks or entering another mount; best effort. */
void sandbox_rm_tree(const char *path);
/* The spawner's socket directory, under the sandbox's directory (never the workspace: the
 * tenant must not reach it). */
#define SB_SPAWNER_DIR "spawner"
/* How long after the agent's start a sandbox marked lost is watched for a container that a
 * runtime call of the previous agent creates late (sandbox_housekeep.c). */
#define SB_LOST_WATCH_MS 60000
/* Listens for the sandbox's spawner (local mode, spawner on): returns the socket's directory
 * (malloc'd), or NULL (off, or it failed: logged) when the sandbox has no resident exec
 * path. */
char *sandbox_spawner_listen(sb_registry *reg, sandbox *sb);
/* Checks a spec and fills in the defaults (strings borrowed from spec). */
int sandbox_spec_validate(sb_registry *reg, const sb_spec *spec, sb_spec *out, cs_error **err);
/* Under the lock: a new STARTING sandbox for a validated spec, listed and referenced for its
 * starter. */
sandbox *sandbox_new_locked(sb_registry *reg, const sb_spec *spec);
/* Unlocked: makes the directories and workspace of a sandbox sandbox_new_locked listed, and
 * starts its starter thread. -1 with *err (the sandbox is then FAILED) when it could not. */
int sandbox_start(sb_registry *reg, sandbox *sb, cs_error **err);
/* Under the lock: live sandboxes; with_pool counts the warm ones too. */
uint32_t sandbox_live_count_locked(sb_registry *reg, bool with_pool);
/* Under the lock: admission control of spec on top of the live sandboxes' limits (with_pool:
 * the warm ones' too). */
int sandbox_admit_locked(sb_registry *reg, const sb_spec *spec, bool with_pool, cs_error **err);

/* --- sandbox_pool.c -------------------------------------------------------------------- */

/* Whether a validated spec is the pool's profile (default image, mount path, limits and
 * workspace size; any max_runtime). */
bool sandbox_pool_matches(const sb_spec *spec);
/* Under the lock, pool on and spec matching: takes a READY warm sandbox for spec's session
 * (claiming, referenced) or NULL (a miss). */
sandbox *sandbox_pool_take_locked(sb_registry *reg, const sb_spec *spec);
/* Unlocked: ends a claim sandbox_pool_take_locked began (usage rebased, created_at and
 * max_runtime from now, record written) and fills *ret; t0_ns: monotonic start of the
 * create, for the claim latency. Drops the claim's reference. */
void sandbox_pool_finish(sb_registry *reg, sandbox *sb, int64_t t0_ns, sb_info *ret);
/* A warm sandbox failed (to start, or its container died): it goes at once, and the refills
 * back off. Locked. */
void sandbox_pool_failed_locked(sb_registry *reg, sandbox *sb);
/* Starts the filler thread (cfg.warm_pool > 0) after checking the profile can be made. */
int sandbox_pool_open(sb_registry *reg, cs_error **err);
/* Stops the filler (reg->stopping is set). Unlocked. */
void sandbox_pool_stop(sb_registry *reg);

/* --- sandbox_record.c ------------------------------------------------------------------ */

/* Persists sb's record (nothing for an attached entry); failures are logged, the in-memory
 * state stays authoritative. Takes the lock to build the record, writes it unlocked. */
void sandbox_persist(sb_registry *reg, sandbox *sb);
/* Local mode's opening: makes the directories, loads every record into reg->list, reconciles
 * each with the runtime, destroys containers no record claims. Single-threaded (see above). */
int sandbox_records_open(sb_registry *reg, cs_error **err);
/* Kills the exec processes a previous life of the agent left (their pid files in sb->dir)
 * when `running`, and removes their pid files and process specs. Reads only sb->dir,
 * sb->container_id and sb->id. */
void sandbox_kill_leftover_execs(sb_registry *reg, sandbox *sb, bool running);

/* --- sandbox_usage.c ------------------------------------------------------------------- */

/* Live usage (cgroup, network, the agent's file I/O) into *ret, kept as the last reading;
 * the frozen usage once frozen. Called unlocked with a reference held. */
void sandbox_usage_live(sb_registry *reg, sandbox *sb, usage_metrics *ret);
/* Takes the final usage reading and keeps it from now on. */
void sandbox_usage_freeze(sb_registry *reg, sandbox *sb);
/* Removes the sandbox's cgroup (local mode: the agent made it, runsc only joined it), logging
 * a failure. Its usage must have been frozen first. */
void sandbox_remove_cgroup(sb_registry *reg, sandbox *sb);
/* Claim of a warm sandbox: reads its counters now as the base later readings subtract, resets
 * the memory peak where the kernel can (cgroup v1), forgets its memory samples and file I/O,
 * and restarts its volume's disk counters. Unlocked, with a reference held. */
void sandbox_usage_rebase(sb_registry *reg, sandbox *sb);
/* Reads the cgroup now (into *ret) and adds its memory to the sandbox's average, peak and
 * open usage windows. */
int sandbox_sample_memory(sb_registry *reg, sandbox *sb, cgroup_sample *ret, cs_error **err);

/* --- sandbox_housekeep.c --------------------------------------------------------------- */

/* The housekeeping thread's body (arg: the registry); returns once reg->stopping is set. */
void *sandbox_housekeeper_main(void *arg);
/* Frees an unlinked local sandbox with its container, cgroup, volume, workspace and
 * directory (record included), logging `why`. */
void sandbox_remove(sb_registry *reg, sandbox *sb, const char *why);

/* --- sandbox_attach.c ------------------------------------------------------------------ */

/* Kube mode's opening: kills what a previous life left in running containers, removes the
 * scratch directories of containers that are gone. */
int sandbox_attach_open(sb_registry *reg, cs_error **err);
/* An attached entry's periodic work: sample memory while READY, follow the container's
 * state (check_state), mark it gone when the container is. */
void sandbox_attach_housekeep(sb_registry *reg, sandbox *sb, bool check_state);
/* sb_mark_failed of an attached entry: only the status reported changes. */
void sandbox_attach_mark_failed(sb_registry *reg, sandbox *sb, const char *why);
/* Under the lock: whether the housekeeping may unlink this attached entry now. */
bool sandbox_attach_collectable_locked(const sandbox *sb);
/* Frees an attached entry the housekeeping unlinked, with its scratch directory unless
 * another entry of the same container remains. Called unlocked. */
void sandbox_attach_forget(sb_registry *reg, sandbox *sb);
