/* The sandbox registry (see sandbox.h).
 *
 * Locking: one registry mutex guards every sandbox's fields and the list; it is never held
 * across a runtime call (runsc takes tens to hundreds of milliseconds) or a cgroup read
 * that may block. Long operations mark the sandbox (starting/destroying) and run unlocked. */
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "path.h"
#include "usage_json.h"
#include "util.h"
#include "uuid.h"

struct sb_window {
        struct sb_window *next;
        cgroup_sample start;
        uint64_t file_read, file_written, net_rx, net_tx;
        uint64_t mem_sum, mem_n, mem_max;
        bool peak_reset; /* the kernel high-water mark was reset for this window */
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

        usage_metrics frozen; /* final usage once FAILED or DESTROYED; before: the last reading */
        bool usage_frozen;
        uint64_t mem_sum, mem_n, mem_max; /* memory samples over the sandbox's life */
        uint64_t file_read, file_written;

        sb_window *windows; /* execs being measured */
        int execs;
        int refs;

        /* Kube mode: a container the kubelet made (sb_attach), keyed by container id and
         * mount path; never persisted, stopped or removed by the registry. */
        bool attached;
        bool gone; /* the housekeeping found its container gone */
        char *key;
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
        pthread_t housekeeper;
        bool housekeeper_running;
        int starters; /* starter threads running */
};

static void reg_log(sb_registry *reg, bool warn, const char *id, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void reg_log(sb_registry *reg, bool warn, const char *id, const char *fmt, ...)
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

static void sandbox_free(sandbox *sb)
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
        free(sb->key);
        free(sb);
}

/* Fills the derived paths from the id. */
static void sandbox_paths(sb_registry *reg, sandbox *sb)
{
        sb->dir = cs_xasprintf("%s/%s", reg->sandboxes_dir, sb->id);
        sb->bundle_dir = cs_xasprintf("%s/bundle", sb->dir);
        sb->workspace_dir = cs_xasprintf("%s/workspaces/%s", reg->state_dir, sb->id);
        sb->container_id = cs_xasprintf("cs-%s", sb->id);
        sb->cgroup_path = cs_xasprintf("%s/%s", reg->cgroup_parent, sb->id);
}

static void set_message(sandbox *sb, const char *msg)
{
        free(sb->status_message);
        sb->status_message = cs_xstrdup(msg ? msg : "");
}

static sandbox *find_locked(sb_registry *reg, const char *id)
{
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (!sb->attached && strcmp(sb->id, id) == 0)
                        return sb;
        }
        return NULL;
}

/* --- records on disk ------------------------------------------------------------------- */

/* Builds the record under the lock (cheap); written by record_write() outside it. */
static json_t *record_json_locked(const sandbox *sb)
{
        return json_pack(
                "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:s, "
                "s:b, s:o, s:I, s:I, s:I, s:I, s:I}",
                "id", sb->id, "tenant_id", sb->tenant_id, "session_id", sb->session_id, "image",
                sb->image, "mount_path", sb->mount_path, "cpu_millis", (json_int_t)sb->cpu_millis,
                "memory_bytes", (json_int_t)sb->memory_bytes, "max_runtime_ms",
                (json_int_t)sb->max_runtime_ms, "created_at_ms", (json_int_t)sb->created_at_ms,
                "destroyed_at_ms", (json_int_t)sb->destroyed_at_ms, "delete_after_ms",
                (json_int_t)sb->delete_after_ms, "status", (int)sb->status, "status_message",
                sb->status_message, "usage_frozen", sb->usage_frozen, "usage",
                usage_to_json(&sb->frozen), "mem_sum", (json_int_t)sb->mem_sum, "mem_n",
                (json_int_t)sb->mem_n, "mem_max", (json_int_t)sb->mem_max, "file_read",
                (json_int_t)sb->file_read, "file_written", (json_int_t)sb->file_written);
}

/* Replaces dir/sandbox.json atomically and durably (tmp, fsync, rename, fsync dir). */
static int record_write(const char *dir, json_t *doc, cs_error **err)
{
        _cleanup_free_ char *tmp = cs_xasprintf("%s/.sandbox.json.tmp", dir);
        _cleanup_free_ char *final = cs_xasprintf("%s/sandbox.json", dir);
        _cleanup_free_ char *text = json_dumps(doc, JSON_INDENT(1));
        _cleanup_close_ int fd = -1, dfd = -1;
        size_t len = text ? strlen(text) : 0;

        if (!text)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "cannot encode the record");
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cs_error_errno(err, errno, "cannot write %s", tmp);
        if (write(fd, text, len) != (ssize_t)len || fsync(fd) < 0)
                return cs_error_errno(err, errno ? errno : EIO, "cannot write %s", tmp);
        if (rename(tmp, final) < 0)
                return cs_error_errno(err, errno, "cannot rename %s", tmp);
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
                fsync(dfd);
        return 0;
}

/* Persists sb's record; failures are logged (the in-memory state stays authoritative). */
static void persist(sb_registry *reg, sandbox *sb)
{
        json_t *doc;
        _cleanup_free_ char *dir = NULL;
        cs_error *err = NULL;

        if (sb->attached)
                return; /* kube mode keeps no records */
        pthread_mutex_lock(&reg->lock);
        doc = record_json_locked(sb);
        dir = cs_xstrdup(sb->dir);
        pthread_mutex_unlock(&reg->lock);
        if (record_write(dir, doc, &err) < 0) {
                reg_log(reg, true, sb->id, "cannot save the record: %s", err->msg);
                cs_error_free(err);
        }
        json_decref(doc);
}

static sandbox *record_load(sb_registry *reg, const char *id, cs_error **err)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/%s/sandbox.json", reg->sandboxes_dir, id);
        json_error_t jerr;
        json_t *doc = json_load_file(path, 0, &jerr);
        sandbox *sb;
        const char *s[6] = { 0 };
        json_int_t n[13] = { 0 };
        int status = 0, frozen = 0;
        json_t *usage = NULL;

        if (!doc) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: %s", path, jerr.text);
                return NULL;
        }
        if (json_unpack(doc,
                        "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s?s, s?b, "
                        "s?o, s?I, s?I, s?I, s?I, s?I}",
                        "id", &s[0], "tenant_id", &s[1], "session_id", &s[2], "image", &s[3],
                        "mount_path", &s[4], "cpu_millis", &n[0], "memory_bytes", &n[1],
                        "max_runtime_ms", &n[2], "created_at_ms", &n[3], "destroyed_at_ms", &n[4],
                        "delete_after_ms", &n[5], "status", &status, "status_message", &s[5],
                        "usage_frozen", &frozen, "usage", &usage, "mem_sum", &n[6], "mem_n", &n[7],
                        "mem_max", &n[8], "file_read", &n[9], "file_written", &n[10]) < 0 ||
            strcmp(s[0], id) != 0 || status < SB_STARTING || status > SB_DESTROYED) {
                json_decref(doc);
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: not a valid sandbox record", path);
                return NULL;
        }
        sb = cs_xcalloc(1, sizeof(*sb));
        snprintf(sb->id, sizeof(sb->id), "%s", id);
        sb->tenant_id = cs_xstrdup(s[1]);
        sb->session_id = cs_xstrdup(s[2]);
        sb->image = cs_xstrdup(s[3]);
        sb->mount_path = cs_xstrdup(s[4]);
        sb->status_message = cs_xstrdup(s[5] ? s[5] : "");
        sb->cpu_millis = (uint32_t)n[0];
        sb->memory_bytes = (uint64_t)n[1];
        sb->max_runtime_ms = n[2];
        sb->created_at_ms = n[3];
        sb->destroyed_at_ms = n[4];
        sb->delete_after_ms = n[5];
        sb->status = (sb_status)status;
        sb->usage_frozen = frozen;
        if (usage)
                usage_from_json(usage, &sb->frozen);
        sb->mem_sum = (uint64_t)n[6];
        sb->mem_n = (uint64_t)n[7];
        sb->mem_max = (uint64_t)n[8];
        sb->file_read = (uint64_t)n[9];
        sb->file_written = (uint64_t)n[10];
        /* Runtime left is measured from now: the monotonic clock did not survive. */
        sb->started_mono_ms = cs_now_monotonic_ms() - (cs_now_realtime_ms() - sb->created_at_ms);
        json_decref(doc);
        sandbox_paths(reg, sb);
        return sb;
}

/* --- usage ----------------------------------------------------------------------------- */

/* Network counters of the sandbox's host process (its own network namespace). */
static void read_net(sandbox *sb, uint64_t *rx, uint64_t *tx)
{
        cs_error *err = NULL;

        *rx = *tx = 0;
        if (sb->host_pid > 0 && proc_read_net("/proc", sb->host_pid, rx, tx, &err) < 0)
                cs_error_free(err);
}

/* Live usage: cgroup counters, memory samples, the agent's own file I/O. Called unlocked
 * with a reference held; reads the sandbox's counters under the lock. */
static void usage_live(sb_registry *reg, sandbox *sb, usage_metrics *ret)
{
        cgroup_sample s = { 0 };
        cs_error *err = NULL;
        uint64_t rx, tx;

        bool have = cgroup_read(reg->cg, sb->cgroup_path, &s, &err) == 0;

        cs_error_free(err);
        read_net(sb, &rx, &tx);
        pthread_mutex_lock(&reg->lock);
        /* Frozen, or the cgroup is gone (a container lost while the agent was down): the last
         * reading is the best there is. */
        if (sb->usage_frozen || !have) {
                *ret = sb->frozen;
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        ret->cpu_ms = s.cpu_ns / 1000000;
        ret->memory_peak_bytes =
                s.memory_peak_bytes > sb->mem_max ? s.memory_peak_bytes : sb->mem_max;
        ret->memory_avg_bytes = sb->mem_n ? sb->mem_sum / sb->mem_n : s.memory_bytes;
        ret->disk_read_bytes = s.io_read_bytes + sb->file_read;
        ret->disk_write_bytes = s.io_write_bytes + sb->file_written;
        /* Cumulative: a counter that cannot be read any more (the sandbox process is gone)
         * keeps its last value rather than going back to 0. */
        ret->network_ingress_bytes =
                rx > sb->frozen.network_ingress_bytes ? rx : sb->frozen.network_ingress_bytes;
        ret->network_egress_bytes =
                tx > sb->frozen.network_egress_bytes ? tx : sb->frozen.network_egress_bytes;
        sb->frozen = *ret; /* the last reading, kept in the record */
        pthread_mutex_unlock(&reg->lock);
}

/* Takes the final usage reading and keeps it from now on. */
static void usage_freeze(sb_registry *reg, sandbox *sb)
{
        usage_metrics u;

        usage_live(reg, sb, &u);
        pthread_mutex_lock(&reg->lock);
        if (!sb->usage_frozen) {
                sb->frozen = u;
                sb->usage_frozen = true;
        }
        pthread_mutex_unlock(&reg->lock);
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
        memset(info, 0, sizeof(*info));
}

static void info_fill_locked(const sandbox *sb, sb_info *ret)
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
}

/* A snapshot with usage (live unless frozen). sb is referenced by the caller. */
static void info_fill(sb_registry *reg, sandbox *sb, sb_info *ret)
{
        usage_metrics u;

        usage_live(reg, sb, &u);
        pthread_mutex_lock(&reg->lock);
        info_fill_locked(sb, ret);
        ret->usage = u;
        pthread_mutex_unlock(&reg->lock);
}

/* --- references ------------------------------------------------------------------------ */

static sandbox *ref_locked(sandbox *sb)
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

const char *sb_id(const sandbox *sb)
{
        return sb->id;
}

/* --- validation ------------------------------------------------------------------------ */

/* An image is a root filesystem directory of images_dir, never a path of the host: no
 * sandbox ever sees the host's root (docs/security.md). */
static int image_check(sb_registry *reg, const char *image, cs_error **err)
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
        return s && s[0] && strlen(s) <= SB_ID_MAX;
}

/* Checks the spec and fills in defaults into *out (strings borrowed from spec). */
static int spec_validate(sb_registry *reg, const sb_spec *spec, sb_spec *out, cs_error **err)
{
        *out = *spec;
        if (!cs_uuid_valid(spec->id))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "sandbox_id is not a valid UUID");
        if (!id_ok(spec->tenant_id) || !id_ok(spec->session_id))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "tenant_id and session_id must be 1..%d bytes", SB_ID_MAX);
        if (!out->image || !out->image[0])
                out->image = SB_DEFAULT_IMAGE;
        if (image_check(reg, out->image, err) < 0)
                return -1;
        if (!out->mount_path || !out->mount_path[0])
                out->mount_path = SB_DEFAULT_MOUNT_PATH;
        if (cs_mount_path_check(out->mount_path, err) < 0)
                return -1;
        if (!out->cpu_millis)
                out->cpu_millis = SB_DEFAULT_CPU_MILLIS;
        if (out->cpu_millis < SB_MIN_CPU_MILLIS || out->cpu_millis > SB_MAX_CPU_MILLIS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cpu_millis must be %d..%d",
                                    SB_MIN_CPU_MILLIS, SB_MAX_CPU_MILLIS);
        if (!out->memory_bytes)
                out->memory_bytes = SB_DEFAULT_MEMORY;
        if (out->memory_bytes < SB_MIN_MEMORY || out->memory_bytes > SB_MAX_MEMORY)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "memory_bytes must be %llu..%llu", SB_MIN_MEMORY,
                                    SB_MAX_MEMORY);
        if (!out->max_runtime_ms)
                out->max_runtime_ms = SB_DEFAULT_MAX_RUNTIME_MS;
        if (out->max_runtime_ms < 1000 || out->max_runtime_ms > SB_MAX_RUNTIME_MS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "max_runtime must be 1 s..24 h");
        return 0;
}

/* --- lifecycle ------------------------------------------------------------------------- */

static void set_failed_locked(sb_registry *reg, sandbox *sb, const char *why)
{
        sb->status = SB_FAILED;
        set_message(sb, why);
        if (!sb->delete_after_ms)
                sb->delete_after_ms = cs_now_realtime_ms() + reg->cfg.grace_ms;
        pthread_cond_broadcast(&reg->cond);
}

typedef struct starter {
        sb_registry *reg;
        sandbox *sb;
} starter;

/* Runs the container's creation off the caller's thread: CreateSandbox returns at once. */
static void *starter_main(void *arg)
{
        starter *st = arg;
        sb_registry *reg = st->reg;
        sandbox *sb = st->sb;
        rt_sandbox_spec spec;
        _cleanup_free_ char *rootfs = NULL;
        cs_error *err = NULL;
        pid_t pid = 0;
        bool gone;
        int r;

        free(st);
        rootfs = cs_xasprintf("%s/%s", reg->images_dir, sb->image);
        spec = (rt_sandbox_spec){ .container_id = sb->container_id,
                                  .bundle_dir = sb->bundle_dir,
                                  .rootfs = rootfs,
                                  .workspace_dir = sb->workspace_dir,
                                  .mount_path = sb->mount_path,
                                  .cgroup_path = sb->cgroup_path,
                                  .hostname = "sandbox",
                                  .cpu_millis = sb->cpu_millis,
                                  .memory_bytes = sb->memory_bytes };
        r = reg->rt->ops->create(reg->rt, &spec, &pid, &err);

        pthread_mutex_lock(&reg->lock);
        gone = sb->status == SB_DESTROYED || sb->destroying;
        if (!gone && r == 0) {
                sb->status = SB_READY;
                sb->host_pid = pid;
                set_message(sb, "");
                pthread_cond_broadcast(&reg->cond);
        } else if (!gone) {
                set_failed_locked(reg, sb, err->msg);
        }
        pthread_mutex_unlock(&reg->lock);

        if (gone || r < 0) {
                /* Destroyed meanwhile, or a start that failed half-way (runsc may have left
                 * its daemons running): nothing of the container may stay. */
                cs_error *ignored = NULL;
                reg->rt->ops->destroy(reg->rt, sb->container_id, &ignored);
                cs_error_free(ignored);
        }
        if (!gone) {
                if (r < 0) {
                        usage_freeze(reg, sb);
                        reg_log(reg, true, sb->id, "sandbox failed to start: %s", err->msg);
                } else {
                        reg_log(reg, false, sb->id, "sandbox ready");
                }
                persist(reg, sb);
        }
        cs_error_free(err);
        pthread_mutex_lock(&reg->lock);
        sb->refs--;
        reg->starters--;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        return NULL;
}

static int mkdir_one(const char *path, mode_t mode, cs_error **err)
{
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create %s", path);
        return 0;
}

static uint32_t live_count_locked(sb_registry *reg)
{
        uint32_t n = 0;

        for (sandbox *sb = reg->list; sb; sb = sb->next)
                n += sb->status != SB_DESTROYED;
        return n;
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

int sb_create(sb_registry *reg, const sb_spec *in, sb_info *ret, bool *ret_created, cs_error **err)
{
        sb_spec spec;
        sandbox *sb, *old;
        starter *st;
        pthread_t thread;
        pthread_attr_t attr;

        if (spec_validate(reg, in, &spec, err) < 0)
                return -1;
        pthread_mutex_lock(&reg->lock);
        old = existing_locked(reg, &spec, err);
        if (old || (err && *err)) {
                if (old)
                        info_fill_locked(old, ret);
                pthread_mutex_unlock(&reg->lock);
                *ret_created = false;
                return old ? 0 : -1;
        }
        if (live_count_locked(reg) >= reg->cfg.max_sandboxes) {
                pthread_mutex_unlock(&reg->lock);
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "this node already runs %u sandboxes", reg->cfg.max_sandboxes);
        }
        sb = cs_xcalloc(1, sizeof(*sb));
        snprintf(sb->id, sizeof(sb->id), "%s", spec.id);
        for (char *c = sb->id; *c; c++)
                *c = (char)((*c >= 'A' && *c <= 'F') ? *c - 'A' + 'a' : *c);
        sb->tenant_id = cs_xstrdup(spec.tenant_id);
        sb->session_id = cs_xstrdup(spec.session_id);
        sb->image = cs_xstrdup(spec.image);
        sb->mount_path = cs_xstrdup(spec.mount_path);
        sb->status_message = cs_xstrdup("starting");
        sb->cpu_millis = spec.cpu_millis;
        sb->memory_bytes = spec.memory_bytes;
        sb->max_runtime_ms = spec.max_runtime_ms;
        sb->created_at_ms = cs_now_realtime_ms();
        sb->started_mono_ms = cs_now_monotonic_ms();
        sb->status = SB_STARTING;
        sandbox_paths(reg, sb);
        /* Listed at once, so a concurrent create for the same session finds it. */
        sb->next = reg->list;
        reg->list = sb;
        sb->refs = 1; /* the starter's */
        reg->starters++;
        info_fill_locked(sb, ret);
        pthread_mutex_unlock(&reg->lock);

        if (mkdir_one(sb->dir, 0700, err) < 0 || mkdir_one(sb->bundle_dir, 0700, err) < 0 ||
            mkdir_one(sb->workspace_dir, 0755, err) < 0) {
                pthread_mutex_lock(&reg->lock);
                set_failed_locked(reg, sb, (*err)->msg);
                sb->refs--;
                reg->starters--;
                pthread_mutex_unlock(&reg->lock);
                return -1;
        }
        persist(reg, sb);

        st = cs_xcalloc(1, sizeof(*st));
        *st = (starter){ .reg = reg, .sb = sb };
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, starter_main, st) != 0) {
                free(st);
                pthread_mutex_lock(&reg->lock);
                set_failed_locked(reg, sb, "cannot start a thread");
                sb->refs--;
                reg->starters--;
                pthread_mutex_unlock(&reg->lock);
                persist(reg, sb);
        }
        pthread_attr_destroy(&attr);
        *ret_created = true;
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
        ref_locked(sb);
        while (sb->destroying)
                pthread_cond_wait(&reg->cond, &reg->lock);
        if (sb->status == SB_DESTROYED) {
                pthread_mutex_unlock(&reg->lock);
                goto done;
        }
        sb->destroying = true;
        pthread_mutex_unlock(&reg->lock);

        usage_freeze(reg, sb);
        r = reg->rt->ops->destroy(reg->rt, sb->container_id, err);

        pthread_mutex_lock(&reg->lock);
        sb->destroying = false;
        if (r == 0) {
                sb->status = SB_DESTROYED;
                set_message(sb, "destroyed");
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
        persist(reg, sb);
        reg_log(reg, false, sb->id, "sandbox destroyed");
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
                ref_locked(sb);
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
                if (include_destroyed || sb->status != SB_DESTROYED)
                        refs[n++] = ref_locked(sb);
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
                *ret_live += sb->status != SB_DESTROYED;
                *ret_ready += sb->status == SB_READY;
                *ret_destroyed += sb->status == SB_DESTROYED;
                *ret_execs += (uint32_t)sb->execs;
        }
        pthread_mutex_unlock(&reg->lock);
}

static bool fd_readable(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return fd >= 0 && poll(&p, 1, 0) == 1;
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
                if (fd_readable(cancel_fd)) {
                        r = cs_error_set(err, GRPC_STATUS_CANCELLED, "cancelled while waiting");
                        break;
                }
                {
                        /* Short slices: the cancel fd cannot wake a condition variable. */
                        struct timespec ts;
                        clock_gettime(CLOCK_MONOTONIC, &ts);
                        ts.tv_nsec += 50 * 1000000;
                        if (ts.tv_nsec >= 1000000000) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000;
                        }
                        pthread_cond_timedwait(&reg->cond, &reg->lock, &ts);
                }
        }
        if (r == 0)
                *ret = ref_locked(sb);
        pthread_mutex_unlock(&reg->lock);
        return r;
}

void sb_count_file_io(sb_registry *reg, sandbox *sb, uint64_t read, uint64_t written)
{
        pthread_mutex_lock(&reg->lock);
        sb->file_read += read;
        sb->file_written += written;
        pthread_mutex_unlock(&reg->lock);
}

void sb_mark_failed(sb_registry *reg, sandbox *sb, const char *why)
{
        if (sb->attached) {
                /* The kubelet owns the container: only the status this agent reports changes
                 * (until the next state check), and usage keeps being read live. */
                pthread_mutex_lock(&reg->lock);
                if (sb->status == SB_READY || sb->status == SB_STARTING) {
                        sb->status = SB_FAILED;
                        set_message(sb, why);
                }
                pthread_mutex_unlock(&reg->lock);
                reg_log(reg, true, sb->id, "container %s failed: %s", sb->container_id, why);
                return;
        }
        pthread_mutex_lock(&reg->lock);
        if (sb->status == SB_READY || sb->status == SB_STARTING)
                set_failed_locked(reg, sb, why);
        pthread_mutex_unlock(&reg->lock);
        usage_freeze(reg, sb);
        persist(reg, sb);
        reg_log(reg, true, sb->id, "sandbox failed: %s", why);
}

/* --- exec windows ---------------------------------------------------------------------- */

static void window_sample_locked(sb_window *w, uint64_t mem)
{
        w->mem_sum += mem;
        w->mem_n++;
        if (mem > w->mem_max)
                w->mem_max = mem;
}

sb_window *sb_window_begin(sb_registry *reg, sandbox *sb)
{
        sb_window *w = cs_xcalloc(1, sizeof(*w));
        cs_error *err = NULL;
        uint64_t rx, tx;
        bool alone;

        pthread_mutex_lock(&reg->lock);
        alone = sb->windows == NULL;
        pthread_mutex_unlock(&reg->lock);
        if (cgroup_read(reg->cg, sb->cgroup_path, &w->start, &err) < 0)
                cs_error_freep(&err);
        /* Alone in the sandbox, the exec can have the kernel's own high-water mark: fold the
         * sandbox's peak so far into its record, then reset the mark. Not in kube mode: the
         * pod cgroup is the kubelet's, and its peak is the pod's lifetime peak. */
        if (alone && w->start.has_peak && !sb->attached) {
                pthread_mutex_lock(&reg->lock);
                if (w->start.memory_peak_bytes > sb->mem_max)
                        sb->mem_max = w->start.memory_peak_bytes;
                pthread_mutex_unlock(&reg->lock);
                w->peak_reset = cgroup_reset_peak(reg->cg, sb->cgroup_path, &err) == 0;
                cs_error_free(err);
        }
        read_net(sb, &rx, &tx);
        pthread_mutex_lock(&reg->lock);
        w->file_read = sb->file_read;
        w->file_written = sb->file_written;
        w->net_rx = rx;
        w->net_tx = tx;
        window_sample_locked(w, w->start.memory_bytes);
        w->next = sb->windows;
        sb->windows = w;
        sb->execs++;
        pthread_mutex_unlock(&reg->lock);
        return w;
}

static uint64_t delta(uint64_t end, uint64_t start)
{
        return end > start ? end - start : 0;
}

void sb_window_end(sb_registry *reg, sandbox *sb, sb_window *w, usage_metrics *ret, bool *ret_oom)
{
        cgroup_sample end = { 0 };
        cs_error *err = NULL;
        bool have = cgroup_read(reg->cg, sb->cgroup_path, &end, &err) == 0;
        uint64_t rx, tx;

        cs_error_free(err);
        read_net(sb, &rx, &tx);
        pthread_mutex_lock(&reg->lock);
        for (sb_window **p = &sb->windows; *p; p = &(*p)->next) {
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        }
        sb->execs--;
        if (have)
                window_sample_locked(w, end.memory_bytes);
        else
                end = w->start; /* the container is gone: no growth can be measured */
        *ret = (usage_metrics){
                .cpu_ms = delta(end.cpu_ns, w->start.cpu_ns) / 1000000,
                .memory_peak_bytes = w->mem_max,
                .memory_avg_bytes = w->mem_n ? w->mem_sum / w->mem_n : 0,
                .disk_read_bytes = delta(end.io_read_bytes, w->start.io_read_bytes) +
                                   delta(sb->file_read, w->file_read),
                .disk_write_bytes = delta(end.io_write_bytes, w->start.io_write_bytes) +
                                    delta(sb->file_written, w->file_written),
                .network_ingress_bytes = delta(rx, w->net_rx),
                .network_egress_bytes = delta(tx, w->net_tx),
        };
        if (w->peak_reset && end.has_peak && end.memory_peak_bytes > ret->memory_peak_bytes)
                ret->memory_peak_bytes = end.memory_peak_bytes;
        if (ret->memory_peak_bytes > sb->mem_max)
                sb->mem_max = ret->memory_peak_bytes;
        *ret_oom = end.oom_kills > w->start.oom_kills;
        pthread_mutex_unlock(&reg->lock);
        free(w);
}

/* --- housekeeping ---------------------------------------------------------------------- */

/* Removes a tree without following symlinks (a workspace may hold links to anywhere) or
 * entering another mount; best effort (what cannot go stays). */
static void rm_tree(const char *path)
{
        (void)cs_remove_tree(AT_FDCWD, path);
}

static sb_status status_of(rt_state st)
{
        switch (st) {
        case RT_RUNNING:
                return SB_READY;
        case RT_CREATED:
                return SB_STARTING;
        default:
                return SB_FAILED;
        }
}

/* Kube mode: sample memory while running, follow the container's state. */
/* Reads the sandbox's cgroup now (into *ret) and adds its memory to the sandbox's average,
 * peak and open usage windows. */
static int sample_memory(sb_registry *reg, sandbox *sb, cgroup_sample *ret, cs_error **err)
{
        cgroup_sample s;

        if (cgroup_read(reg->cg, sb->cgroup_path, &s, err) < 0)
                return -1;
        *ret = s;
        pthread_mutex_lock(&reg->lock);
        sb->mem_sum += s.memory_bytes;
        sb->mem_n++;
        if (s.memory_bytes > sb->mem_max)
                sb->mem_max = s.memory_bytes;
        for (sb_window *w = sb->windows; w; w = w->next)
                window_sample_locked(w, s.memory_bytes);
        pthread_mutex_unlock(&reg->lock);
        return 0;
}

static void housekeep_attached(sb_registry *reg, sandbox *sb, bool check_state)
{
        cgroup_sample s;
        cs_error *err = NULL;
        rt_state st = RT_RUNNING;

        if (sb->status == SB_READY && sample_memory(reg, sb, &s, &err) < 0)
                cs_error_freep(&err);
        if (!check_state)
                return;
        if (reg->rt->ops->state(reg->rt, sb->container_id, &st, NULL, &err) < 0) {
                cs_error_free(err);
                return;
        }
        pthread_mutex_lock(&reg->lock);
        if (st == RT_ABSENT) {
                sb->gone = true;
        } else if (status_of(st) != sb->status) {
                sb->status = status_of(st);
                set_message(sb, st == RT_STOPPED ? "the container has exited" : "");
                if (st == RT_STOPPED)
                        sb->host_pid = 0; /* its pid may be anyone's by now */
                pthread_cond_broadcast(&reg->cond);
        }
        pthread_mutex_unlock(&reg->lock);
}

/* One sandbox's periodic work: sample memory, notice a dead container, enforce max_runtime. */
static void housekeep_one(sb_registry *reg, sandbox *sb, bool check_state)
{
        cgroup_sample s = { 0 };
        cs_error *err = NULL;
        bool expired, dead = false;
        sb_status status;

        if (sb->attached) {
                housekeep_attached(reg, sb, check_state);
                return;
        }
        pthread_mutex_lock(&reg->lock);
        status = sb->status;
        expired = cs_now_monotonic_ms() - sb->started_mono_ms > sb->max_runtime_ms;
        pthread_mutex_unlock(&reg->lock);
        if (status != SB_READY)
                return;

        if (sample_memory(reg, sb, &s, &err) < 0) {
                cs_error_freep(&err);
                dead = true;
        }
        if (!dead && check_state) {
                rt_state st = RT_RUNNING;
                if (reg->rt->ops->state(reg->rt, sb->container_id, &st, NULL, &err) < 0)
                        cs_error_freep(&err);
                dead = st != RT_RUNNING;
        }
        if (expired) {
                char why[96];
                snprintf(why, sizeof(why), "max_runtime of %" PRId64 " s exceeded",
                         sb->max_runtime_ms / 1000);
                usage_freeze(reg, sb);
                if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                        reg_log(reg, true, sb->id, "cannot stop the sandbox: %s", err->msg);
                        cs_error_freep(&err);
                }
                sb_mark_failed(reg, sb, why);
        } else if (dead) {
                sb_mark_failed(reg, sb,
                               s.oom_kills ? "the sandbox ran out of memory"
                                           : "the sandbox's container exited");
        }
}

/* Removes sandboxes whose soft-delete window has passed (DESTROYED, or FAILED and never
 * destroyed), with their workspaces. */
static void collect_garbage(sb_registry *reg)
{
        int64_t now = cs_now_realtime_ms();
        sandbox *dead = NULL;

        pthread_mutex_lock(&reg->lock);
        for (sandbox **p = &reg->list; *p;) {
                sandbox *sb = *p;
                bool expired = !sb->attached &&
                               (sb->status == SB_DESTROYED || sb->status == SB_FAILED) &&
                               sb->delete_after_ms && now >= sb->delete_after_ms;
                if ((expired || (sb->attached && sb->gone)) && sb->refs == 0 && !sb->destroying) {
                        *p = sb->next;
                        sb->next = dead;
                        dead = sb;
                } else {
                        p = &sb->next;
                }
        }
        pthread_mutex_unlock(&reg->lock);
        while (dead) {
                sandbox *next = dead->next;
                cs_error *ignored = NULL;
                if (dead->attached) {
                        bool shared = false;
                        pthread_mutex_lock(&reg->lock);
                        for (sandbox *o = reg->list; o && !shared; o = o->next)
                                shared = o->attached &&
                                         strcmp(o->container_id, dead->container_id) == 0;
                        pthread_mutex_unlock(&reg->lock);
                        if (!shared)
                                rm_tree(dead->dir); /* exec scratch files, if any */
                        reg_log(reg, false, dead->id, "container %s is gone: forgotten",
                                dead->container_id);
                        sandbox_free(dead);
                        dead = next;
                        continue;
                }
                /* A FAILED sandbox may still have a stopped container to delete. */
                reg->rt->ops->destroy(reg->rt, dead->container_id, &ignored);
                cs_error_free(ignored);
                rm_tree(dead->workspace_dir);
                rm_tree(dead->dir);
                reg_log(reg, false, dead->id, "workspace removed after its grace period");
                sandbox_free(dead);
                dead = next;
        }
}

#define HOUSEKEEP_STATE_EVERY   5  /* ticks between runtime state checks */
#define HOUSEKEEP_PERSIST_EVERY 10 /* ticks between saving live records */

static void *housekeeper_main(void *arg)
{
        sb_registry *reg = arg;

        for (unsigned tick = 1;; tick++) {
                struct timespec ts;
                sandbox **refs;
                size_t n = 0, cap = 0;
                int64_t wake = cs_now_monotonic_ms() + reg->cfg.sample_interval_ms;

                pthread_mutex_lock(&reg->lock);
                while (!reg->stopping && cs_now_monotonic_ms() < wake) {
                        ts.tv_sec = wake / 1000;
                        ts.tv_nsec = (wake % 1000) * 1000000;
                        pthread_cond_timedwait(&reg->cond, &reg->lock, &ts);
                }
                if (reg->stopping) {
                        pthread_mutex_unlock(&reg->lock);
                        return NULL;
                }
                for (sandbox *sb = reg->list; sb; sb = sb->next)
                        cap++;
                refs = cs_xcalloc(cap, sizeof(*refs));
                for (sandbox *sb = reg->list; sb; sb = sb->next) {
                        if ((sb->status == SB_READY || sb->attached) && !sb->destroying)
                                refs[n++] = ref_locked(sb);
                }
                pthread_mutex_unlock(&reg->lock);

                for (size_t i = 0; i < n; i++) {
                        housekeep_one(reg, refs[i], tick % HOUSEKEEP_STATE_EVERY == 0);
                        if (tick % HOUSEKEEP_PERSIST_EVERY == 0) {
                                usage_metrics ignored;
                                usage_live(reg, refs[i], &ignored);
                                persist(reg, refs[i]);
                        }
                        sb_release(reg, refs[i]);
                }
                free(refs);
                collect_garbage(reg);
        }
}

/* --- opening: records, reconciliation -------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix)
{
        size_t a = strlen(s), b = strlen(suffix);

        return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Kills the exec processes a previous life of the agent left running (their pid files). */
static void kill_leftover_execs(sb_registry *reg, sandbox *sb, bool running)
{
        DIR *d = opendir(sb->dir);
        struct dirent *e;

        if (!d)
                return;
        while ((e = readdir(d))) {
                _cleanup_free_ char *path = NULL;
                rt_exec ex = { 0 };
                int pid;

                if (strncmp(e->d_name, RT_EXEC_PID_PREFIX, strlen(RT_EXEC_PID_PREFIX)) != 0 ||
                    !ends_with(e->d_name, RT_EXEC_PID_SUFFIX))
                        continue;
                path = cs_xasprintf("%s/%s", sb->dir, e->d_name);
                ex.pid_file = path;
                pid = rt_exec_internal_pid(&ex);
                if (running && pid > 1) {
                        cs_error *err = NULL;
                        int n = rt_kill_tree(reg->rt, sb->container_id, pid, SIGKILL, &err);
                        reg_log(reg, true, sb->id,
                                "killed %d process(es) of exec pid %d left by the agent's "
                                "previous run",
                                n < 0 ? 0 : n, pid);
                        cs_error_free(err);
                }
                unlink(path);
        }
        closedir(d);
        /* Their process specs too. */
        d = opendir(sb->dir);
        if (!d)
                return;
        while ((e = readdir(d))) {
                if (strncmp(e->d_name, RT_EXEC_PID_PREFIX, strlen(RT_EXEC_PID_PREFIX)) == 0 &&
                    ends_with(e->d_name, ".json")) {
                        _cleanup_free_ char *path = cs_xasprintf("%s/%s", sb->dir, e->d_name);
                        unlink(path);
                }
        }
        closedir(d);
}

static void reconcile_one(sb_registry *reg, sandbox *sb)
{
        rt_state st = RT_ABSENT;
        pid_t pid = 0;
        cs_error *err = NULL;

        if (sb->status == SB_DESTROYED)
                return;
        if (reg->rt->ops->state(reg->rt, sb->container_id, &st, &pid, &err) < 0) {
                reg_log(reg, true, sb->id, "cannot query the container: %s", err->msg);
                cs_error_freep(&err);
        }
        kill_leftover_execs(reg, sb, st == RT_RUNNING);
        if (sb->status == SB_FAILED)
                return;
        if (st == RT_RUNNING && image_check(reg, sb->image, &err) < 0) {
                /* E.g. a sandbox of an older agent whose image was the host's root: it must
                 * not go on seeing the host. */
                reg_log(reg, true, sb->id, "stopping a sandbox found running: %s", err->msg);
                set_failed_locked(reg, sb, "its image is not an image of this node: stopped");
                cs_error_freep(&err);
                if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                        reg_log(reg, true, sb->id, "cannot destroy it: %s", err->msg);
                        cs_error_free(err);
                }
                return;
        }
        if (st == RT_RUNNING) {
                sb->status = SB_READY;
                sb->host_pid = pid;
                reg_log(reg, false, sb->id, "sandbox found running after restart");
                return;
        }
        set_failed_locked(reg, sb, "the container was lost while the agent was down");
        sb->usage_frozen = true; /* the last reading in the record is all there is */
        reg_log(reg, true, sb->id, "sandbox lost while the agent was down: FAILED");
}

/* Destroys containers under the runtime's root that no record claims. */
static void destroy_strays(sb_registry *reg)
{
        char **ids = NULL;
        size_t n = 0;
        cs_error *err = NULL;

        if (reg->rt->ops->list(reg->rt, &ids, &n, &err) < 0) {
                reg_log(reg, true, NULL, "cannot list containers: %s", err->msg);
                cs_error_free(err);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                bool known = false;
                for (sandbox *sb = reg->list; sb && !known; sb = sb->next)
                        known = strcmp(sb->container_id, ids[i]) == 0 && sb->status != SB_DESTROYED;
                if (!known) {
                        reg_log(reg, true, NULL,
                                "container %s has no sandbox record: destroying it", ids[i]);
                        if (reg->rt->ops->destroy(reg->rt, ids[i], &err) < 0) {
                                reg_log(reg, true, NULL, "cannot destroy %s: %s", ids[i], err->msg);
                                cs_error_freep(&err);
                        }
                }
                free(ids[i]);
        }
        free(ids);
}

static int load_records(sb_registry *reg, cs_error **err)
{
        DIR *d = opendir(reg->sandboxes_dir);
        struct dirent *e;

        if (!d)
                return cs_error_errno(err, errno, "cannot read %s", reg->sandboxes_dir);
        while ((e = readdir(d))) {
                cs_error *bad = NULL;
                sandbox *sb;

                if (!cs_uuid_valid(e->d_name))
                        continue;
                sb = record_load(reg, e->d_name, &bad);
                if (!sb) {
                        reg_log(reg, true, e->d_name, "skipping a record: %s", bad->msg);
                        cs_error_free(bad);
                        continue;
                }
                sb->next = reg->list;
                reg->list = sb;
        }
        closedir(d);
        return 0;
}

/* --- kube mode ------------------------------------------------------------------------ */

static char *kube_dir(sb_registry *reg, const char *container_id)
{
        return container_id ? cs_xasprintf("%s/kube/%s", reg->state_dir, container_id)
                            : cs_xasprintf("%s/kube", reg->state_dir);
}

/* Container ids are the runtime's (64 hex digits under containerd); anything that could
 * leave the scratch directory is refused. */
static bool container_id_ok(const char *id)
{
        size_t n = strlen(id);

        if (n == 0 || n > 256 || id[0] == '.')
                return false;
        for (; *id; id++) {
                if (!((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') ||
                      (*id >= '0' && *id <= '9') || *id == '-' || *id == '_' || *id == '.'))
                        return false;
        }
        return true;
}

/* At start: the exec processes of the agent's previous life, in containers still running,
 * are killed (as in local mode); scratch directories of containers that are gone go. */
static int kube_open(sb_registry *reg, cs_error **err)
{
        _cleanup_free_ char *dir = kube_dir(reg, NULL);
        DIR *d;
        struct dirent *e;

        if (mkdir_one(dir, 0700, err) < 0)
                return -1;
        d = opendir(dir);
        if (!d)
                return cs_error_errno(err, errno, "cannot read %s", dir);
        while ((e = readdir(d))) {
                sandbox tmp = { 0 };
                rt_state st = RT_ABSENT;
                cs_error *qerr = NULL;

                if (!container_id_ok(e->d_name))
                        continue;
                tmp.container_id = e->d_name;
                tmp.dir = kube_dir(reg, e->d_name);
                if (reg->rt->ops->state(reg->rt, e->d_name, &st, NULL, &qerr) < 0) {
                        reg_log(reg, true, NULL, "cannot query container %s: %s", e->d_name,
                                qerr->msg);
                        cs_error_free(qerr);
                        st = RT_RUNNING; /* keep its files for the next start */
                } else {
                        kill_leftover_execs(reg, &tmp, st == RT_RUNNING);
                }
                if (st == RT_ABSENT)
                        rm_tree(tmp.dir);
                free(tmp.dir);
        }
        closedir(d);
        return 0;
}

int sb_attach(sb_registry *reg, const sb_attach_spec *spec, sandbox **ret, cs_error **err)
{
        _cleanup_free_ char *key = NULL;
        sandbox *sb;

        if (!reg->cfg.kube)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "containers are attached in kube mode only");
        if (!container_id_ok(spec->container_id))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "container id '%.80s' is not valid",
                                    spec->container_id);
        key = cs_xasprintf("%s:%s", spec->container_id, spec->mount_path);
        pthread_mutex_lock(&reg->lock);
        for (sb = reg->list; sb; sb = sb->next) {
                if (sb->attached && strcmp(sb->key, key) == 0)
                        break;
        }
        if (!sb) {
                sb = cs_xcalloc(1, sizeof(*sb));
                sb->attached = true;
                sb->key = TAKE_PTR(key);
                sb->container_id = cs_xstrdup(spec->container_id);
                sb->mount_path = cs_xstrdup(spec->mount_path);
                sb->workspace_dir = cs_xstrdup(spec->workspace_dir);
                sb->cgroup_path = cs_xstrdup(spec->cgroup_path);
                sb->dir = kube_dir(reg, spec->container_id);
                sb->bundle_dir = cs_xstrdup("");
                sb->tenant_id = cs_xstrdup("");
                sb->session_id = cs_xstrdup("");
                sb->image = cs_xstrdup(spec->image ? spec->image : "");
                sb->cpu_millis = spec->cpu_millis;
                sb->memory_bytes = spec->memory_bytes;
                sb->created_at_ms = spec->created_at_ms;
                sb->status_message = cs_xstrdup("");
                sb->next = reg->list;
                reg->list = sb;
        }
        /* The label is read unlocked by users of the entry: changed only while it has none. */
        if (sb->refs == 0)
                snprintf(sb->id, sizeof(sb->id), "%s", spec->label ? spec->label : "");
        /* What the caller just read is the freshest there is (0: not read; a new entry is
         * STARTING until the housekeeping's next state check). */
        if (spec->status) {
                sb->status = spec->status;
                set_message(sb, spec->status_message);
        } else if (!sb->status) {
                sb->status = SB_STARTING;
        }
        if (spec->host_pid > 0)
                sb->host_pid = spec->host_pid;
        if (spec->status == SB_FAILED)
                sb->host_pid = 0; /* exited: its pid may be anyone's by now */
        sb->gone = false;
        ref_locked(sb);
        pthread_mutex_unlock(&reg->lock);
        /* The exec scratch directory (pid files that let a restarted agent kill leftovers). */
        if (mkdir_one(sb->dir, 0700, err) < 0) {
                sb_release(reg, sb);
                return -1;
        }
        *ret = sb;
        return 0;
}

void sb_snapshot(sb_registry *reg, sandbox *sb, sb_info *ret)
{
        info_fill(reg, sb, ret);
}

int sb_registry_open(const sb_config *cfg, runtime *rt, const cgroup_fs *cg, sb_log_fn log,
                     sb_registry **ret, cs_error **err)
{
        sb_registry *reg = cs_xcalloc(1, sizeof(*reg));
        _cleanup_free_ char *ws = NULL;
        pthread_condattr_t ca;

        reg->cfg = *cfg;
        reg->state_dir = cs_xstrdup(cfg->state_dir);
        reg->images_dir = cs_xstrdup(cfg->images_dir);
        reg->cgroup_parent = cs_xstrdup(cfg->cgroup_parent);
        /* The caller's strings need not outlive this call: point at our copies. */
        reg->cfg.state_dir = reg->state_dir;
        reg->cfg.images_dir = reg->images_dir;
        reg->cfg.cgroup_parent = reg->cgroup_parent;
        reg->sandboxes_dir = cs_xasprintf("%s/sandboxes", cfg->state_dir);
        reg->rt = rt;
        reg->cg = cg;
        reg->log = log;
        pthread_mutex_init(&reg->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&reg->cond, &ca);
        pthread_condattr_destroy(&ca);

        if (cfg->kube) {
                if (kube_open(reg, err) < 0) {
                        sb_registry_free(reg);
                        return -1;
                }
        } else {
                ws = cs_xasprintf("%s/workspaces", cfg->state_dir);
                if (mkdir_one(reg->sandboxes_dir, 0700, err) < 0 || mkdir_one(ws, 0700, err) < 0 ||
                    load_records(reg, err) < 0) {
                        sb_registry_free(reg);
                        return -1;
                }
                for (sandbox *sb = reg->list; sb; sb = sb->next) {
                        sb_status before = sb->status;
                        reconcile_one(reg, sb);
                        if (sb->status != before)
                                persist(reg, sb);
                }
                destroy_strays(reg);
        }
        if (pthread_create(&reg->housekeeper, NULL, housekeeper_main, reg) != 0) {
                cs_error_errno(err, errno, "cannot start the housekeeping thread");
                sb_registry_free(reg);
                return -1;
        }
        reg->housekeeper_running = true;
        *ret = reg;
        return 0;
}

/* Stops the agent's threads and forgets the sandboxes; their containers keep running and a
 * new agent finds them again. */
void sb_registry_free(sb_registry *reg)
{
        if (!reg)
                return;
        pthread_mutex_lock(&reg->lock);
        reg->stopping = true;
        pthread_cond_broadcast(&reg->cond);
        while (reg->starters > 0)
                pthread_cond_wait(&reg->cond, &reg->lock);
        pthread_mutex_unlock(&reg->lock);
        if (reg->housekeeper_running)
                pthread_join(reg->housekeeper, NULL);
        while (reg->list) {
                sandbox *next = reg->list->next;
                persist(reg, reg->list);
                sandbox_free(reg->list);
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
