/* The sandbox registry's core (see sandbox.h): opening and freeing the registry, the list and
 * its lookups, create (spec validation, the starter thread that runs the container's
 * creation), destroy, describe, list, counts, acquire/release, snapshots, marking a sandbox
 * FAILED, and the small helpers the other sandbox_*.c files share.
 *
 * Owns struct sb_registry's lifetime, the creation of local sandboxes (the list's other
 * additions are sandbox_record.c's loading and sandbox_attach.c's entries; its removals are
 * sandbox_housekeep.c's until sb_registry_free), the refs, and a local sandbox's status after the
 * opening (STARTING, READY, FAILED, DESTROYED; the opening's reconciliation is sandbox_record.c's).
 * May touch: every field under the registry lock; the runtime's create and destroy,
 * unlocked; the sandbox's directories. sandbox_internal.h lists the other files and states
 * the locking rule. */
#include "sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "net.h"
#include "path.h"
#include "quantity.h"
#include "spawner_link.h"
#include "util.h"
#include "uuid.h"
#include "volume.h"

void sandbox_log(sb_registry *reg, bool warn, const char *id, const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        if (!reg->log)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        reg->log(warn, id, msg);
}

/* --- sandbox objects ------------------------------------------------------------------- */

void sandbox_free(sandbox *sb)
{
        if (!sb)
                return;
        free(sb->tenant_id);
        free(sb->session_id);
        free(sb->image);
        free(sb->mount_path);
        free(sb->status_message);
        free(sb->dir);
        free(sb->bundle_dir);
        free(sb->workspace_dir);
        free(sb->container_id);
        free(sb->cgroup_path);
        free(sb->volume_image);
        free(sb->key);
        cs_netpolicy_clear(&sb->net);
        free(sb);
}

void sandbox_paths(sb_registry *reg, sandbox *sb)
{
        sb->dir = cs_xasprintf("%s/%s", reg->sandboxes_dir, sb->id);
        sb->bundle_dir = cs_xasprintf("%s/bundle", sb->dir);
        sb->workspace_dir = cs_xasprintf("%s/workspaces/%s", reg->state_dir, sb->id);
        sb->container_id = cs_xasprintf("cs-%s", sb->id);
        sb->cgroup_path = cs_xasprintf("%s/%s", reg->cgroup_parent, sb->id);
        sb->volume_image = cs_xasprintf("%s/volumes/%s.img", reg->state_dir, sb->id);
}

void sandbox_unmount_destroyed(sb_registry *reg, sandbox *sb)
{
        cs_error *err = NULL;

        if (!sb->volume || !vol_mounted(sb->workspace_dir))
                return;
        if (vol_unmount(sb->workspace_dir, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot unmount the workspace volume: %s", err->msg);
                cs_error_free(err);
        }
}

void sandbox_set_message_locked(sandbox *sb, const char *msg)
{
        free(sb->status_message);
        sb->status_message = cs_xstrdup(msg ? msg : "");
}

static sandbox *find_locked(sb_registry *reg, const char *id)
{
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (!sb->attached && !sb->pool && strcmp(sb->id, id) == 0)
                        return sb;
        }
        return NULL;
}

/* --- snapshots ------------------------------------------------------------------------- */

void sb_info_clear(sb_info *info)
{
        free(info->id);
        free(info->tenant_id);
        free(info->session_id);
        free(info->image);
        free(info->mount_path);
        free(info->status_message);
        cs_netpolicy_clear(&info->network);
        memset(info, 0, sizeof(*info));
}

void sandbox_info_fill_locked(const sandbox *sb, sb_info *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(sb->id);
        ret->tenant_id = cs_xstrdup(sb->tenant_id);
        ret->session_id = cs_xstrdup(sb->session_id);
        ret->image = cs_xstrdup(sb->image);
        ret->mount_path = cs_xstrdup(sb->mount_path);
        ret->status_message = cs_xstrdup(sb->status_message);
        ret->status = sb->status;
        ret->cpu_millis = sb->cpu_millis;
        ret->memory_bytes = sb->memory_bytes;
        ret->max_runtime_ms = sb->max_runtime_ms;
        ret->created_at_ms = sb->created_at_ms;
        ret->destroyed_at_ms = sb->destroyed_at_ms;
        ret->delete_after_ms = sb->delete_after_ms;
        ret->usage = sb->frozen;
        cs_netpolicy_copy(&ret->network, &sb->net);
        if (ret->network.egress == CS_EGRESS_UNSPECIFIED)
                ret->network.egress = CS_EGRESS_NONE; /* kube mode: pods have no network */
        ret->net_dropped_packets = sb->net_dropped;
}

/* A snapshot with usage (live unless frozen). sb is referenced by the caller. */
static void info_fill(sb_registry *reg, sandbox *sb, sb_info *ret)
{
        usage_metrics u;

        sandbox_usage_live(reg, sb, &u);
        pthread_mutex_lock(&reg->lock);
        sandbox_info_fill_locked(sb, ret);
        ret->usage = u;
        ret->memory_now_bytes = sb->mem_now;
        pthread_mutex_unlock(&reg->lock);
}

/* --- references ------------------------------------------------------------------------ */

sandbox *sandbox_ref_locked(sandbox *sb)
{
        sb->refs++;
        return sb;
}

void sb_release(sb_registry *reg, sandbox *sb)
{
        if (!sb)
                return;
        pthread_mutex_lock(&reg->lock);
        sb->refs--;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
}

const char *sb_container_id(const sandbox *sb)
{
        return sb->container_id;
}

const char *sb_workspace_dir(const sandbox *sb)
{
        return sb->workspace_dir;
}

const char *sb_mount_path(const sandbox *sb)
{
        return sb->mount_path;
}

const char *sb_dir(const sandbox *sb)
{
        return sb->dir;
}

/* --- validation ------------------------------------------------------------------------ */

/* No sandbox ever sees the host's root (docs/security.md). */
int sandbox_image_check(sb_registry *reg, const char *image, cs_error **err)
{
        _cleanup_free_ char *dir = NULL;
        struct stat st;

        if (!image_name_valid(image))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "image '%.64s' is not a valid image name", image);
        dir = cs_xasprintf("%s/%s", reg->images_dir, image);
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "unknown image '%s': this node has no such image (import it "
                                    "with compute-nodeagent image import)",
                                    image);
        return 0;
}

static bool id_ok(const char *s)
{
        return s && s[0] && strlen(s) <= CS_ID_MAX;
}

/* The policies a spec that names none gets (--egress-default). */
static const cs_netpolicy egress_none = { .egress = CS_EGRESS_NONE };
static const cs_netpolicy egress_open = { .egress = CS_EGRESS_OPEN };

/* out->network: the spec's policy, or the node's default; one this node cannot give is
 * refused before anything is made. */
static int network_resolve(sb_registry *reg, sb_spec *out, cs_error **err)
{
        cs_egress def = reg->cfg.net ? na_net_egress_default(reg->cfg.net) : CS_EGRESS_NONE;

        if (!out->network || out->network->egress == CS_EGRESS_UNSPECIFIED)
                out->network = def == CS_EGRESS_OPEN ? &egress_open : &egress_none;
        if (out->network->egress != CS_EGRESS_NONE && !reg->cfg.net)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "egress %s: this node has no sandbox network (its agent "
                                    "runs with --sandbox-network=off)",
                                    cs_egress_name(out->network->egress));
        return 0;
}

int sandbox_spec_validate(sb_registry *reg, const sb_spec *spec, sb_spec *out, cs_error **err)
{
        *out = *spec;
        if (!cs_uuid_valid(spec->id))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "sandbox_id is not a valid UUID");
        if (!id_ok(spec->tenant_id) || !id_ok(spec->session_id))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "tenant_id and session_id must be 1..%d bytes", CS_ID_MAX);
        if (!out->image || !out->image[0])
                out->image = SB_DEFAULT_IMAGE;
        if (sandbox_image_check(reg, out->image, err) < 0)
                return -1;
        if (!out->mount_path || !out->mount_path[0])
                out->mount_path = CS_DEFAULT_MOUNT_PATH;
        if (cs_mount_path_check(out->mount_path, err) < 0)
                return -1;
        if (!out->cpu_millis)
                out->cpu_millis = CS_DEFAULT_CPU_MILLIS;
        if (out->cpu_millis < CS_MIN_CPU_MILLIS || out->cpu_millis > CS_MAX_CPU_MILLIS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cpu_millis must be %d..%d",
                                    CS_MIN_CPU_MILLIS, CS_MAX_CPU_MILLIS);
        if (!out->memory_bytes)
                out->memory_bytes = CS_DEFAULT_MEMORY;
        if (out->memory_bytes < CS_MIN_MEMORY || out->memory_bytes > CS_MAX_MEMORY)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "memory_bytes must be %llu..%llu", CS_MIN_MEMORY,
                                    CS_MAX_MEMORY);
        if (!out->max_runtime_ms)
                out->max_runtime_ms = CS_DEFAULT_RUNTIME_MS;
        if (out->max_runtime_ms < CS_MIN_RUNTIME_MS || out->max_runtime_ms > CS_MAX_RUNTIME_MS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "max_runtime must be 1 s..24 h");
        if (!out->workspace_bytes &&
            cs_quantity_parse(CS_DEFAULT_WORKSPACE_SIZE, &out->workspace_bytes) < 0)
                abort(); /* a constant */
        if (out->workspace_bytes < CS_MIN_WORKSPACE_BYTES ||
            out->workspace_bytes > CS_MAX_WORKSPACE_BYTES)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace_bytes must be 16Mi..1Ti");
        return network_resolve(reg, out, err);
}

/* Volumes on and no loop device: refused before the sandbox is listed, so no FAILED sandbox
 * takes the session (no silent fallback to an unbounded directory either). */
static int volumes_check(sb_registry *reg, cs_error **err)
{
        struct stat st;

        if (!reg->cfg.volumes)
                return 0;
        if (stat("/dev/loop-control", &st) == 0 && !S_ISCHR(st.st_mode))
                errno = ENODEV;
        else if (access("/dev/loop-control", R_OK | W_OK) == 0)
                return 0;
        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                            "this node has no loop devices (/dev/loop-control: %s) for "
                            "workspace volumes; run the agent with --workspace-volumes=off for "
                            "plain, unbounded workspace directories",
                            strerror(errno));
}

/* --- lifecycle ------------------------------------------------------------------------- */

void sandbox_set_failed_locked(sb_registry *reg, sandbox *sb, const char *why)
{
        sb->status = SB_FAILED;
        sandbox_set_message_locked(sb, why);
        if (!sb->delete_after_ms)
                sb->delete_after_ms = cs_now_realtime_ms() + reg->cfg.grace_ms;
        pthread_cond_broadcast(&reg->cond);
}

typedef struct starter {
        sb_registry *reg;
        sandbox *sb;
} starter;

/* The resident exec path of a new sandbox: its spawner's listener, bound before the container
 * starts so that compute-init finds it at once. Returns the socket's directory, or NULL when
 * the spawner is off or the listener cannot be made (the sandbox then gets the plain init
 * and every exec goes through the runtime). */
char *sandbox_spawner_listen(sb_registry *reg, sandbox *sb)
{
        _cleanup_free_ char *dir = NULL;
        cs_error *err = NULL;

        if (!reg->cfg.spawner || reg->cfg.kube)
                return NULL;
        dir = cs_xasprintf("%s/" SB_SPAWNER_DIR, sb->dir);
        if (spawn_mgr_listen(reg->cfg.spawner, sb->container_id, dir, &err) < 0) {
                sandbox_log(reg, true, sb->id, "no resident exec path for this sandbox: %s",
                            err->msg);
                cs_error_free(err);
                return NULL;
        }
        return TAKE_PTR(dir);
}

struct spawn_mgr *sb_registry_spawner(sb_registry *reg)
{
        return reg->cfg.spawner;
}

/* At most cfg.max_parallel_starts runtime creates at once: a burst of creates (50 sessions
 * starting together) queues in STARTING rather than running 50 `runsc run` side by side on a
 * few CPUs, where each took longer than the runtime's 30 s timeout and failed (measured in
 * docs/nodeagent.md). Returns 0 with a slot taken, or 1 without one: the sandbox was
 * destroyed meanwhile (nothing to start), or -1 with *err: the agent stops. */
static int start_slot_take(sb_registry *reg, sandbox *sb, cs_error **err)
{
        int r = 0;

        pthread_mutex_lock(&reg->lock);
        while (reg->starts_running >= reg->cfg.max_parallel_starts && !reg->stopping &&
               sb->status != SB_DESTROYED && !sb->destroying)
                pthread_cond_wait(&reg->cond, &reg->lock);
        if (sb->status == SB_DESTROYED || sb->destroying)
                r = 1;
        else if (reg->stopping && reg->starts_running >= reg->cfg.max_parallel_starts)
                r = cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                                 "the node agent stopped before the sandbox could start");
        else
                reg->starts_running++;
        pthread_mutex_unlock(&reg->lock);
        return r;
}

static void start_slot_give_locked(sb_registry *reg)
{
        reg->starts_running--;
        pthread_cond_broadcast(&reg->cond);
}

/* A networked sandbox's network, made before its container (net.h): the namespace file and
 * resolv.conf its bundle names (NULL, NULL without one). */
static int sandbox_net_up(sb_registry *reg, sandbox *sb, char **ret_netns, char **ret_resolv,
                          cs_error **err)
{
        na_net_sandbox ns = { .id = sb->id, .dir = sb->dir, .policy = &sb->net };
        bool has;

        pthread_mutex_lock(&reg->lock);
        has = sb->net_has_slot;
        ns.slot = sb->net_slot;
        pthread_mutex_unlock(&reg->lock);
        if (!has)
                return 0;
        if (na_net_up(reg->cfg.net, &ns, err) < 0)
                return -1;
        *ret_netns = na_net_netns_path(sb->dir);
        *ret_resolv = na_net_resolv_conf_path(sb->dir);
        return 0;
}

/* Runs the container's creation off the caller's thread: CreateSandbox returns at once. */
static void *starter_main(void *arg)
{
        starter *st = arg;
        sb_registry *reg = st->reg;
        sandbox *sb = st->sb;
        rt_sandbox_spec spec;
        cgroup_limits limits = { .cpu_millis = sb->cpu_millis,
                                 .memory_bytes = sb->memory_bytes,
                                 .pids_max = reg->cfg.pids_max };
        _cleanup_free_ char *rootfs = NULL, *spawner_dir = NULL, *netns = NULL, *resolv_conf = NULL;
        cs_error *err = NULL;
        pid_t pid = 0;
        bool gone;
        int r, slot;

        free(st);
        rootfs = cs_xasprintf("%s/%s", reg->images_dir, sb->image);
        spawner_dir = sandbox_spawner_listen(reg, sb);
        spec = (rt_sandbox_spec){ .container_id = sb->container_id,
                                  .bundle_dir = sb->bundle_dir,
                                  .rootfs = rootfs,
                                  .workspace_dir = sb->workspace_dir,
                                  .mount_path = sb->mount_path,
                                  .cgroup_path = sb->cgroup_path,
                                  .hostname = "sandbox",
                                  .cpu_millis = sb->cpu_millis,
                                  .memory_bytes = sb->memory_bytes,
                                  .init_binary = spawner_dir ? reg->cfg.spawner_binary : NULL,
                                  .spawner_dir = spawner_dir };
        slot = start_slot_take(reg, sb, &err);
        r = slot == 0 ? 0 : -1;
        /* The agent makes the cgroup with its limits and owns it; runsc only joins it. */
        if (r == 0 && cgroup_create(reg->cg, sb->cgroup_path, &limits, &err) < 0)
                r = -1;
        if (r == 0 && sandbox_net_up(reg, sb, &netns, &resolv_conf, &err) < 0)
                r = -1;
        spec.netns = netns;
        spec.resolv_conf = resolv_conf;
        if (r == 0)
                r = reg->rt->ops->create(reg->rt, &spec, &pid, &err);

        pthread_mutex_lock(&reg->lock);
        if (slot == 0)
                start_slot_give_locked(reg);
        gone = sb->status == SB_DESTROYED || sb->destroying;
        if (!gone && r == 0) {
                sb->status = SB_READY;
                sb->host_pid = pid;
                sb->warming = sb->pool && reg->cfg.warm_up;
                sandbox_set_message_locked(sb, "");
                pthread_cond_broadcast(&reg->cond);
        } else if (!gone) {
                sandbox_set_failed_locked(reg, sb, err->msg);
        }
        if (sb->pool && !gone && r < 0)
                sandbox_pool_failed_locked(reg, sb);
        else if (sb->pool && r == 0)
                reg->pool_fail_streak = 0;
        pthread_mutex_unlock(&reg->lock);

        if (gone || r < 0) {
                /* Destroyed meanwhile, or a start that failed half-way (runsc may have left
                 * its daemons running): nothing of the container may stay. */
                cs_error *ignored = NULL;
                reg->rt->ops->destroy(reg->rt, sb->container_id, &ignored);
                cs_error_free(ignored);
                sandbox_usage_freeze(reg, sb);
                sandbox_net_down(reg, sb);
                sandbox_remove_cgroup(reg, sb);
                if (spawner_dir)
                        spawn_mgr_forget(reg->cfg.spawner, sb->container_id);
        }
        if (!gone) {
                if (r < 0) {
                        sandbox_log(reg, true, sb->id, "sandbox failed to start: %s", err->msg);
                } else {
                        sandbox_log(reg, false, sb->id, "sandbox ready");
                }
                sandbox_persist(reg, sb);
        }
        cs_error_free(err);
        if (!gone && r == 0 && sb->warming) {
                reg->cfg.warm_up(reg, sb, reg->cfg.warm_up_data);
                pthread_mutex_lock(&reg->lock);
                sb->warming = false;
                pthread_cond_broadcast(&reg->cond);
                pthread_mutex_unlock(&reg->lock);
        }
        pthread_mutex_lock(&reg->lock);
        sb->refs--;
        reg->starters--;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        return NULL;
}

int sandbox_mkdir(const char *path, mode_t mode, cs_error **err)
{
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create %s", path);
        return 0;
}

/* A workspace may hold links to anywhere: cs_remove_tree follows none; what cannot go
 * stays. */
void sandbox_rm_tree(const char *path)
{
        (void)cs_remove_tree(AT_FDCWD, path);
}

uint32_t sandbox_live_count_locked(sb_registry *reg, bool with_pool)
{
        uint32_t n = 0;

        for (sandbox *sb = reg->list; sb; sb = sb->next)
                n += sb->status != SB_DESTROYED && (with_pool || !sb->pool);
        return n;
}

/* Under the lock: admission control against the limits the live sandboxes hold (summed
 * from the registry, so a destroy gives them back and a restart finds them again). Warm
 * sandboxes count only for the pool's own refills: they never refuse a tenant's create. */
int sandbox_admit_locked(sb_registry *reg, const sb_spec *spec, bool with_pool, cs_error **err)
{
        na_committed used = { 0 };

        if (reg->cfg.capacity.memory_bytes == 0)
                return 0;
        for (sandbox *sb = reg->list; sb; sb = sb->next)
                if (sb->status != SB_DESTROYED && (with_pool || !sb->pool)) {
                        used.cpu_millis += sb->cpu_millis;
                        used.memory_bytes += sb->memory_bytes;
                }
        return na_admit(&reg->cfg.capacity, &used, spec->cpu_millis, spec->memory_bytes, err);
}

/* Under the lock: the sandbox a create must return instead of making one, if any. */
static sandbox *existing_locked(sb_registry *reg, const sb_spec *spec, cs_error **err)
{
        sandbox *sb = find_locked(reg, spec->id);

        if (sb) {
                if (strcmp(sb->tenant_id, spec->tenant_id) != 0 ||
                    strcmp(sb->session_id, spec->session_id) != 0) {
                        cs_error_set(err, GRPC_STATUS_ALREADY_EXISTS,
                                     "sandbox %s belongs to another session", spec->id);
                        return NULL;
                }
                return sb;
        }
        for (sb = reg->list; sb; sb = sb->next) {
                if (sb->status != SB_DESTROYED && !sb->destroying &&
                    strcmp(sb->tenant_id, spec->tenant_id) == 0 &&
                    strcmp(sb->session_id, spec->session_id) == 0)
                        return sb;
        }
        return NULL;
}

/* The lowest slot of the sandbox subnet no sandbox holds (its network up, or coming up or
 * down). None left: the start fails (na_net_up refuses a slot past the pool). */
static void net_slot_take_locked(sb_registry *reg, sandbox *sb)
{
        uint32_t n = na_net_slots(reg->cfg.net), slot = 0;

        for (bool clash = true; clash && slot < n;) {
                clash = false;
                for (sandbox *o = reg->list; o && !clash; o = o->next)
                        clash = o->net_has_slot && o->net_slot == slot;
                if (clash)
                        slot++;
        }
        sb->net_slot = slot;
        sb->net_has_slot = true;
}

void sandbox_net_down(sb_registry *reg, sandbox *sb)
{
        na_net_sandbox ns = { .id = sb->id, .dir = sb->dir, .policy = &sb->net };

        pthread_mutex_lock(&reg->lock);
        if (!sb->net_has_slot || sb->net_going || !reg->cfg.net) {
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        ns.slot = sb->net_slot;
        sb->net_going = true;
        pthread_mutex_unlock(&reg->lock);
        na_net_down(reg->cfg.net, &ns);
        /* Not while the records are being opened: a sandbox found later may still have its
         * rules and counters in the table. sandbox_records_open drops it after. */
        if (reg->opened)
                na_net_drop_if_unused(reg->cfg.net);
        pthread_mutex_lock(&reg->lock);
        sb->net_has_slot = sb->net_going = false;
        pthread_mutex_unlock(&reg->lock);
}

/* Under the lock: a new STARTING sandbox for a validated spec, listed at once (so a
 * concurrent create for the same session finds it) and referenced for its starter. */
sandbox *sandbox_new_locked(sb_registry *reg, const sb_spec *spec)
{
        sandbox *sb = cs_xcalloc(1, sizeof(*sb));

        snprintf(sb->id, sizeof(sb->id), "%s", spec->id);
        for (char *c = sb->id; *c; c++)
                *c = (char)((*c >= 'A' && *c <= 'F') ? *c - 'A' + 'a' : *c);
        sb->tenant_id = cs_xstrdup(spec->tenant_id);
        sb->session_id = cs_xstrdup(spec->session_id);
        sb->image = cs_xstrdup(spec->image);
        sb->mount_path = cs_xstrdup(spec->mount_path);
        sb->status_message = cs_xstrdup("starting");
        sb->cpu_millis = spec->cpu_millis;
        sb->memory_bytes = spec->memory_bytes;
        sb->max_runtime_ms = spec->max_runtime_ms;
        sb->workspace_bytes = spec->workspace_bytes;
        sb->volume = reg->cfg.volumes;
        cs_netpolicy_copy(&sb->net, spec->network ? spec->network : &egress_none);
        if (sb->net.egress != CS_EGRESS_NONE)
                net_slot_take_locked(reg, sb);
        sb->created_at_ms = cs_now_realtime_ms();
        sb->started_mono_ms = cs_now_monotonic_ms();
        sb->status = SB_STARTING;
        sandbox_paths(reg, sb);
        sb->next = reg->list;
        reg->list = sb;
        sb->refs = 1; /* the starter's */
        reg->starters++;
        return sb;
}

/* A start that ends before its starter thread runs: FAILED, the starter's share given back. */
static void start_abandon(sb_registry *reg, sandbox *sb, const char *why)
{
        pthread_mutex_lock(&reg->lock);
        sandbox_set_failed_locked(reg, sb, why);
        if (sb->pool)
                sandbox_pool_failed_locked(reg, sb);
        sb->refs--;
        reg->starters--;
        pthread_mutex_unlock(&reg->lock);
}

int sandbox_start(sb_registry *reg, sandbox *sb, cs_error **err)
{
        vol_counters start = { 0 };
        starter *st;
        pthread_t thread;
        pthread_attr_t attr;

        /* An agent killed before the record's first write below leaves a directory without
         * a record: the next one removes it with what it holds (sandbox_record.c). */
        if (sandbox_mkdir(sb->dir, 0700, err) < 0 || sandbox_mkdir(sb->bundle_dir, 0700, err) < 0 ||
            sandbox_mkdir(sb->workspace_dir, 0755, err) < 0 ||
            (sb->volume &&
             vol_create(sb->volume_image, sb->workspace_bytes, sb->workspace_dir, &start, err) < 0))
                goto fail;
        pthread_mutex_lock(&reg->lock);
        sb->vol_start = start;
        pthread_mutex_unlock(&reg->lock);
        sandbox_persist(reg, sb);

        st = cs_xcalloc(1, sizeof(*st));
        *st = (starter){ .reg = reg, .sb = sb };
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, starter_main, st) != 0) {
                free(st);
                start_abandon(reg, sb, "cannot start a thread");
                sandbox_persist(reg, sb);
        }
        pthread_attr_destroy(&attr);
        return 0;
fail:
        start_abandon(reg, sb, (*err)->msg);
        sandbox_persist(reg, sb);
        return -1;
}

int sb_create(sb_registry *reg, const sb_spec *in, sb_info *ret, bool *ret_created, cs_error **err)
{
        int64_t t0 = cs_now_monotonic_ns();
        sb_spec spec;
        sandbox *sb, *old;

        if (sandbox_spec_validate(reg, in, &spec, err) < 0 || volumes_check(reg, err) < 0)
                return -1;
        pthread_mutex_lock(&reg->lock);
        old = existing_locked(reg, &spec, err);
        /* A warm sandbox being claimed for this session: the same one, once claimed. */
        while (old && old->claiming)
                pthread_cond_wait(&reg->cond, &reg->lock);
        if (old || (err && *err)) {
                if (old)
                        sandbox_info_fill_locked(old, ret);
                pthread_mutex_unlock(&reg->lock);
                *ret_created = false;
                return old ? 0 : -1;
        }
        if (sandbox_live_count_locked(reg, false) >= reg->cfg.max_sandboxes) {
                pthread_mutex_unlock(&reg->lock);
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "this node already runs %u sandboxes", reg->cfg.max_sandboxes);
        }
        if (sandbox_admit_locked(reg, &spec, false, err) < 0) {
                pthread_mutex_unlock(&reg->lock);
                return -1;
        }
        if (reg->cfg.warm_pool && sandbox_pool_matches(&spec)) {
                sb = sandbox_pool_take_locked(reg, &spec);
                if (sb) {
                        pthread_mutex_unlock(&reg->lock);
                        sandbox_pool_finish(reg, sb, t0, ret);
                        *ret_created = true;
                        return 0;
                }
                reg->pool_misses++;
                pthread_cond_broadcast(&reg->cond); /* the filler: the pool may be short */
        }
        sb = sandbox_new_locked(reg, &spec);
        sandbox_info_fill_locked(sb, ret);
        pthread_mutex_unlock(&reg->lock);

        *ret_created = true;
        if (sandbox_start(reg, sb, err) < 0) {
                sb_info_clear(ret);
                return -1;
        }
        return 0;
}

int sb_destroy(sb_registry *reg, const char *id, int64_t grace_ms, sb_info *ret, cs_error **err)
{
        sandbox *sb;
        int r;

        pthread_mutex_lock(&reg->lock);
        sb = find_locked(reg, id);
        if (!sb) {
                pthread_mutex_unlock(&reg->lock);
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        }
        sandbox_ref_locked(sb);
        while (sb->destroying)
                pthread_cond_wait(&reg->cond, &reg->lock);
        if (sb->status == SB_DESTROYED) {
                pthread_mutex_unlock(&reg->lock);
                goto done;
        }
        sb->destroying = true;
        pthread_mutex_unlock(&reg->lock);

        sandbox_usage_freeze(reg, sb);
        r = reg->rt->ops->destroy(reg->rt, sb->container_id, err);

        pthread_mutex_lock(&reg->lock);
        sb->destroying = false;
        if (r == 0) {
                sb->status = SB_DESTROYED;
                sandbox_set_message_locked(sb, "destroyed");
                sb->destroyed_at_ms = cs_now_realtime_ms();
                sb->delete_after_ms =
                        sb->destroyed_at_ms + (grace_ms >= 0 ? grace_ms : reg->cfg.grace_ms);
        }
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        if (r < 0) {
                sb_release(reg, sb);
                return cs_error_prefix(err, "cannot destroy sandbox %s", id);
        }
        sandbox_net_down(reg, sb);
        sandbox_remove_cgroup(reg, sb);
        if (reg->cfg.spawner)
                spawn_mgr_forget(reg->cfg.spawner, sb->container_id);
        sandbox_unmount_destroyed(reg, sb);
        sandbox_persist(reg, sb);
        sandbox_log(reg, false, sb->id, "sandbox destroyed");
done:
        info_fill(reg, sb, ret);
        sb_release(reg, sb);
        return 0;
}

int sb_describe(sb_registry *reg, const char *id, sb_info *ret, cs_error **err)
{
        sandbox *sb;

        pthread_mutex_lock(&reg->lock);
        sb = find_locked(reg, id);
        if (sb)
                sandbox_ref_locked(sb);
        pthread_mutex_unlock(&reg->lock);
        if (!sb)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        info_fill(reg, sb, ret);
        sb_release(reg, sb);
        return 0;
}

static int info_cmp(const void *a, const void *b)
{
        const sb_info *x = a, *y = b;

        if (x->created_at_ms != y->created_at_ms)
                return x->created_at_ms < y->created_at_ms ? -1 : 1;
        return strcmp(x->id, y->id);
}

int sb_list(sb_registry *reg, bool include_destroyed, sb_info **ret, size_t *ret_n, cs_error **err)
{
        sandbox **refs;
        sb_info *infos;
        size_t n = 0, cap = 0;

        (void)err;
        pthread_mutex_lock(&reg->lock);
        for (sandbox *sb = reg->list; sb; sb = sb->next)
                cap++;
        refs = cs_xcalloc(cap, sizeof(*refs));
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if ((include_destroyed || sb->status != SB_DESTROYED) && !sb->pool)
                        refs[n++] = sandbox_ref_locked(sb);
        }
        pthread_mutex_unlock(&reg->lock);
        infos = cs_xcalloc(n, sizeof(*infos));
        for (size_t i = 0; i < n; i++) {
                info_fill(reg, refs[i], &infos[i]);
                sb_release(reg, refs[i]);
        }
        free(refs);
        qsort(infos, n, sizeof(*infos), info_cmp);
        *ret = infos;
        *ret_n = n;
        return 0;
}

void sb_infos_free(sb_info *infos, size_t n)
{
        for (size_t i = 0; i < n; i++)
                sb_info_clear(&infos[i]);
        free(infos);
}

void sb_counts(sb_registry *reg, uint32_t *ret_live, uint32_t *ret_ready, uint32_t *ret_destroyed,
               uint32_t *ret_execs)
{
        *ret_live = *ret_ready = *ret_destroyed = *ret_execs = 0;
        pthread_mutex_lock(&reg->lock);
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (sb->pool)
                        continue; /* the operator's: sb_pool_stats_read */
                *ret_live += sb->status != SB_DESTROYED;
                *ret_ready += sb->status == SB_READY;
                *ret_destroyed += sb->status == SB_DESTROYED;
                *ret_execs += (uint32_t)sb->execs;
        }
        pthread_mutex_unlock(&reg->lock);
}

int sb_acquire(sb_registry *reg, const char *id, bool need_ready, int64_t wait_ready_ms,
               int cancel_fd, sandbox **ret, cs_error **err)
{
        int64_t deadline = cs_now_monotonic_ms() + (wait_ready_ms > 0 ? wait_ready_ms : 0);
        sandbox *sb;
        int r = 0;

        pthread_mutex_lock(&reg->lock);
        sb = find_locked(reg, id);
        if (!sb) {
                pthread_mutex_unlock(&reg->lock);
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no sandbox %s", id);
        }
        for (;;) {
                if (sb->status == SB_DESTROYED || sb->destroying) {
                        r = cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                         "sandbox %s is destroyed", id);
                        break;
                }
                if (sb->status == SB_FAILED && need_ready) {
                        r = cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                         "sandbox %s has failed: %s", id, sb->status_message);
                        break;
                }
                if (sb->status != SB_STARTING || !need_ready)
                        break;
                if (cs_now_monotonic_ms() >= deadline) {
                        r = cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                         "sandbox %s is still starting", id);
                        break;
                }
                if (cs_fd_readable(cancel_fd)) {
                        r = cs_error_set(err, GRPC_STATUS_CANCELLED, "cancelled while waiting");
                        break;
                }
                /* Short slices: the cancel fd cannot wake a condition variable. */
                cs_cond_wait_until(&reg->cond, &reg->lock, cs_now_monotonic_ms() + 50);
        }
        if (r == 0)
                *ret = sandbox_ref_locked(sb);
        pthread_mutex_unlock(&reg->lock);
        return r;
}

void sb_mark_failed(sb_registry *reg, sandbox *sb, const char *why)
{
        if (sb->attached) {
                sandbox_attach_mark_failed(reg, sb, why);
                return;
        }
        pthread_mutex_lock(&reg->lock);
        /* A sandbox being destroyed loses its container on purpose (the housekeeper may see
         * it go first), and one FAILED already keeps its first reason. */
        if ((sb->status != SB_READY && sb->status != SB_STARTING) || sb->destroying) {
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        sandbox_set_failed_locked(reg, sb, why);
        /* A warm sandbox that died: removed now, not after a grace (nobody's). */
        if (sb->pool)
                sandbox_pool_failed_locked(reg, sb);
        pthread_mutex_unlock(&reg->lock);
        sandbox_usage_freeze(reg, sb);
        sandbox_net_down(reg, sb);
        sandbox_persist(reg, sb);
        sandbox_log(reg, true, sb->id, "sandbox failed: %s", why);
}

void sb_mark_out_of_memory(sb_registry *reg, sandbox *sb)
{
        char why[96];

        if (sb->memory_bytes)
                snprintf(why, sizeof(why), "the sandbox ran out of memory (limit %" PRIu64 " MiB)",
                         sb->memory_bytes >> 20);
        else
                snprintf(why, sizeof(why), "the sandbox ran out of memory");
        sb_mark_failed(reg, sb, why);
}

void sb_snapshot(sb_registry *reg, sandbox *sb, sb_info *ret)
{
        info_fill(reg, sb, ret);
}

uint32_t sb_default_parallel_starts(void)
{
        cpu_set_t set;
        int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

        return (uint32_t)(2 * (n > 0 ? n : 1));
}

int sb_registry_open(const sb_config *cfg, runtime *rt, const cgroup_fs *cg, sb_log_fn log,
                     sb_registry **ret, cs_error **err)
{
        sb_registry *reg = cs_xcalloc(1, sizeof(*reg));

        reg->cfg = *cfg;
        reg->state_dir = cs_xstrdup(cfg->state_dir);
        reg->images_dir = cs_xstrdup(cfg->images_dir);
        reg->cgroup_parent = cs_xstrdup(cfg->cgroup_parent);
        /* The caller's strings need not outlive this call: point at our copies. */
        reg->cfg.state_dir = reg->state_dir;
        reg->cfg.images_dir = reg->images_dir;
        reg->cfg.cgroup_parent = reg->cgroup_parent;
        if (!reg->cfg.max_parallel_starts)
                reg->cfg.max_parallel_starts = sb_default_parallel_starts();
        reg->sandboxes_dir = cs_xasprintf("%s/sandboxes", cfg->state_dir);
        reg->rt = rt;
        reg->cg = cg;
        reg->log = log;
        pthread_mutex_init(&reg->lock, NULL);
        cs_cond_init_monotonic(&reg->cond);

        /* Kube mode keeps no records: its entries come from sb_attach. */
        if ((cfg->kube ? sandbox_attach_open(reg, err) : sandbox_records_open(reg, err)) < 0) {
                sb_registry_free(reg);
                return -1;
        }
        if (cfg->net)
                na_net_drop_if_unused(cfg->net);
        reg->opened = true;
        if (pthread_create(&reg->housekeeper, NULL, sandbox_housekeeper_main, reg) != 0) {
                cs_error_errno(err, errno, "cannot start the housekeeping thread");
                sb_registry_free(reg);
                return -1;
        }
        reg->housekeeper_running = true;
        if (!cfg->kube && sandbox_pool_open(reg, err) < 0) {
                sb_registry_free(reg);
                return -1;
        }
        *ret = reg;
        return 0;
}

/* Stops the agent's threads and forgets the sandboxes; their containers keep running and a
 * new agent finds them again. Warm sandboxes go with everything they have: no session has
 * them, and the next agent makes its own. */
void sb_registry_free(sb_registry *reg)
{
        if (!reg)
                return;
        pthread_mutex_lock(&reg->lock);
        reg->stopping = true;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        sandbox_pool_stop(reg);
        pthread_mutex_lock(&reg->lock);
        while (reg->starters > 0)
                pthread_cond_wait(&reg->cond, &reg->lock);
        pthread_mutex_unlock(&reg->lock);
        if (reg->housekeeper_running)
                pthread_join(reg->housekeeper, NULL);
        while (reg->list) {
                sandbox *next = reg->list->next;
                if (reg->list->pool) {
                        sandbox_remove(reg, reg->list, "warm sandbox removed at shutdown");
                } else {
                        sandbox_persist(reg, reg->list);
                        sandbox_free(reg->list);
                }
                reg->list = next;
        }
        pthread_cond_destroy(&reg->cond);
        pthread_mutex_destroy(&reg->lock);
        free(reg->state_dir);
        free(reg->images_dir);
        free(reg->cgroup_parent);
        free(reg->sandboxes_dir);
        free(reg);
}
