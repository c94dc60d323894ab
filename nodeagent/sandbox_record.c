/* Local mode's memory on disk: one record per sandbox
 * (STATE_DIR/sandboxes/<id>/sandbox.json, replaced atomically and durably on every change),
 * and what a starting agent does with the records it finds: load them, reconcile each with
 * the runtime (running → READY, lost → FAILED, exec processes of the previous life killed),
 * destroy the containers no record claims.
 *
 * Owns the record's format and sandbox_records_open. May touch: a sandbox's fields under the
 * registry lock (sandbox_persist) or, during the single-threaded opening, without it; the
 * runtime's state/list/destroy/kill_tree; files under the state directory. Attached (kube)
 * entries have no record (sandbox_persist does nothing for them); kube mode's opening shares
 * sandbox_kill_leftover_execs. Locking: sandbox_internal.h. */
#include "sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spawner_link.h"
#include "net.h"
#include "usage_json.h"
#include "util.h"
#include "uuid.h"
#include "volume.h"

/* The policy as the record keeps it: {"egress": "open", "domains": [...], "cidrs": [...]}. */
static json_t *network_json(const cs_netpolicy *p)
{
        json_t *domains = json_array(), *cidrs = json_array();

        for (size_t i = 0; i < p->n_domains; i++)
                json_array_append_new(domains, json_string(p->domains[i]));
        for (size_t i = 0; i < p->n_cidrs; i++) {
                char c[CS_NET_CIDR_STRLEN + 1];
                cs_cidr_format(&p->cidrs[i], c, sizeof(c));
                json_array_append_new(cidrs, json_string(c));
        }
        return json_pack("{s:s, s:o, s:o}", "egress",
                         cs_egress_name(p->egress ? p->egress : CS_EGRESS_NONE), "domains", domains,
                         "cidrs", cidrs);
}

/* Back from the record: checked again like an API call's. Absent (a record older than
 * networking): NONE. */
static int network_from_json(json_t *doc, cs_netpolicy *ret, cs_error **err)
{
        json_t *net = json_object_get(doc, "network"), *domains, *cidrs;
        const char *egress = json_string_value(json_object_get(net, "egress"));
        const char *d[CS_NET_MAX_DOMAINS], *c[CS_NET_MAX_CIDRS];
        size_t nd = 0, nc = 0, i;
        json_t *item;
        int e;

        if (!net) {
                *ret = (cs_netpolicy){ .egress = CS_EGRESS_NONE };
                return 0;
        }
        e = egress ? cs_egress_from_name(egress) : -1;
        domains = json_object_get(net, "domains");
        cidrs = json_object_get(net, "cidrs");
        if (e <= 0 || json_array_size(domains) > CS_NET_MAX_DOMAINS ||
            json_array_size(cidrs) > CS_NET_MAX_CIDRS)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "a bad network policy");
        json_array_foreach(domains, i, item)
        {
                if (!json_is_string(item))
                        return cs_error_set(err, GRPC_STATUS_INTERNAL, "a bad network policy");
                d[nd++] = json_string_value(item);
        }
        json_array_foreach(cidrs, i, item)
        {
                if (!json_is_string(item))
                        return cs_error_set(err, GRPC_STATUS_INTERNAL, "a bad network policy");
                c[nc++] = json_string_value(item);
        }
        return cs_netpolicy_parse((cs_egress)e, d, nd, c, nc, ret, err);
}

/* Builds the record under the lock (cheap); written by record_write() outside it. */
static json_t *record_json_locked(const sandbox *sb)
{
        json_t *doc = json_pack(
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

        if (doc &&
            (sb->pool || sb->base_cpu_ns || sb->base_io_read || sb->base_io_written ||
             sb->base_net_rx || sb->base_net_tx) &&
            json_object_update_new(doc,
                                   json_pack("{s:b, s:I, s:I, s:I, s:I, s:I}", "pool", sb->pool,
                                             "base_cpu_ns", (json_int_t)sb->base_cpu_ns,
                                             "base_io_read", (json_int_t)sb->base_io_read,
                                             "base_io_written", (json_int_t)sb->base_io_written,
                                             "base_net_rx", (json_int_t)sb->base_net_rx,
                                             "base_net_tx", (json_int_t)sb->base_net_tx)) < 0) {
                json_decref(doc);
                return NULL;
        }
        if (doc &&
            json_object_update_new(
                    doc, json_pack("{s:I, s:b, s:I, s:I, s:I, s:I}", "workspace_bytes",
                                   (json_int_t)sb->workspace_bytes, "volume", sb->volume,
                                   "vol_base_read", (json_int_t)sb->vol_base_read,
                                   "vol_base_written", (json_int_t)sb->vol_base_written,
                                   "vol_start_read", (json_int_t)sb->vol_start.read,
                                   "vol_start_written", (json_int_t)sb->vol_start.written)) < 0) {
                json_decref(doc);
                return NULL;
        }
        if (doc && json_object_set_new(doc, "network", network_json(&sb->net)) < 0) {
                json_decref(doc);
                return NULL;
        }
        if (doc && sb->net_dropped &&
            json_object_set_new(doc, "net_dropped", json_integer((json_int_t)sb->net_dropped)) <
                    0) {
                json_decref(doc);
                return NULL;
        }
        if (doc && sb->net_has_slot &&
            json_object_set_new(doc, "net_slot", json_integer((json_int_t)sb->net_slot)) < 0) {
                json_decref(doc);
                return NULL;
        }
        return doc;
}

/* Replaces dir/sandbox.json atomically and durably (tmp, fsync, rename, fsync dir). */
static int record_write(const char *dir, json_t *doc, cs_error **err)
{
        _cleanup_free_ char *tmp = cs_xasprintf("%s/.sandbox.json.tmp", dir);
        _cleanup_free_ char *final = cs_xasprintf("%s/sandbox.json", dir);
        _cleanup_free_ char *text = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
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

void sandbox_persist(sb_registry *reg, sandbox *sb)
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
                sandbox_log(reg, true, sb->id, "cannot save the record: %s", err->msg);
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
        json_int_t v[5] = { 0 }, b[5] = { 0 };
        int status = 0, frozen = 0, volume = 0, pool = 0;
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
            /* Records older than workspace volumes have none of these: a plain directory. */
            json_unpack(doc, "{s?I, s?b, s?I, s?I, s?I, s?I}", "workspace_bytes", &v[0], "volume",
                        &volume, "vol_base_read", &v[1], "vol_base_written", &v[2],
                        "vol_start_read", &v[3], "vol_start_written", &v[4]) < 0 ||
            /* The warm pool's (sandbox_pool.c): absent from a sandbox never warm. */
            json_unpack(doc, "{s?b, s?I, s?I, s?I, s?I, s?I}", "pool", &pool, "base_cpu_ns", &b[0],
                        "base_io_read", &b[1], "base_io_written", &b[2], "base_net_rx", &b[3],
                        "base_net_tx", &b[4]) < 0 ||
            strcmp(s[0], id) != 0 || status < SB_STARTING || status > SB_DESTROYED) {
                json_decref(doc);
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: not a valid sandbox record", path);
                return NULL;
        }
        sb = cs_xcalloc(1, sizeof(*sb));
        if (network_from_json(doc, &sb->net, err) < 0) {
                json_decref(doc);
                free(sb);
                return cs_error_prefix(err, "%s", path), NULL;
        }
        {
                json_t *slot = json_object_get(doc, "net_slot");
                sb->net_has_slot = json_is_integer(slot) && json_integer_value(slot) >= 0;
                sb->net_slot = sb->net_has_slot ? (uint32_t)json_integer_value(slot) : 0;
                sb->net_dropped = (uint64_t)json_integer_value(json_object_get(doc, "net_dropped"));
        }
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
        sb->workspace_bytes = (uint64_t)v[0];
        sb->volume = volume;
        sb->vol_base_read = (uint64_t)v[1];
        sb->vol_base_written = (uint64_t)v[2];
        sb->vol_start = (vol_counters){ (uint64_t)v[3], (uint64_t)v[4] };
        sb->pool = pool;
        sb->base_cpu_ns = (uint64_t)b[0];
        sb->base_io_read = (uint64_t)b[1];
        sb->base_io_written = (uint64_t)b[2];
        sb->base_net_rx = (uint64_t)b[3];
        sb->base_net_tx = (uint64_t)b[4];
        /* Runtime left is measured from now: the monotonic clock did not survive. */
        sb->started_mono_ms = cs_now_monotonic_ms() - (cs_now_realtime_ms() - sb->created_at_ms);
        json_decref(doc);
        sandbox_paths(reg, sb);
        return sb;
}

/* --- opening: records, reconciliation -------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix)
{
        size_t a = strlen(s), b = strlen(suffix);

        return a >= b && strcmp(s + a - b, suffix) == 0;
}

void sandbox_kill_leftover_execs(sb_registry *reg, sandbox *sb, bool running)
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
                        sandbox_log(reg, true, sb->id,
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

/* A volume the kernel no longer has mounted (a reboot, an unmount by hand) is attached and
 * mounted again from its image, never formatted. Its loop device counts from 0 again: what
 * the record last read becomes the base. A running container keeps its own bind mount of
 * the workspace and never sees an unmounted volume, so this is for the restart case. */
static void reattach_volume(sb_registry *reg, sandbox *sb)
{
        cs_error *err = NULL;

        if (!sb->volume || vol_mounted(sb->workspace_dir))
                return;
        if (vol_attach(sb->volume_image, sb->workspace_dir, &sb->vol_start, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot mount the workspace volume again: %s",
                            err->msg);
                cs_error_free(err);
                return;
        }
        sb->vol_base_read = sb->frozen.disk_read_bytes;
        sb->vol_base_written = sb->frozen.disk_write_bytes;
        sandbox_persist(reg, sb);
        sandbox_log(reg, false, sb->id, "workspace volume mounted again");
}

/* A running sandbox made with the resident exec path (it has the spawner's directory): its
 * compute-init lost its connection when the previous agent went and retries; listen again at
 * the same path so it finds this agent. One made without it keeps using the runtime's exec. */
static void relisten_spawner(sb_registry *reg, sandbox *sb)
{
        _cleanup_free_ char *dir = cs_xasprintf("%s/" SB_SPAWNER_DIR, sb->dir);
        struct stat st;

        if (!reg->cfg.spawner || lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return;
        free(sandbox_spawner_listen(reg, sb));
}

/* A running networked sandbox: its rules, counters and resolver again (its namespace and
 * veth outlived the agent). One whose network cannot be had again is stopped: it must never
 * run without its policy. */
static int restore_network(sb_registry *reg, sandbox *sb)
{
        na_net_sandbox ns = {
                .id = sb->id, .dir = sb->dir, .slot = sb->net_slot, .policy = &sb->net
        };
        cs_error *err = NULL;
        const char *why = NULL;

        if (sb->net.egress == CS_EGRESS_NONE)
                return 0;
        if (!reg->cfg.net)
                why = "this agent runs with --sandbox-network=off";
        else if (!sb->net_has_slot)
                why = "its network was taken down";
        else if (na_net_restore(reg->cfg.net, &ns, &err) < 0)
                why = err->msg;
        if (!why)
                return 0;
        sandbox_log(reg, true, sb->id, "stopping a sandbox found running: its network: %s", why);
        sandbox_set_failed_locked(reg, sb, "its network was lost while the agent was down");
        cs_error_freep(&err);
        if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot destroy it: %s", err->msg);
                cs_error_free(err);
        }
        sandbox_net_down(reg, sb);
        return -1;
}

static void reconcile_one(sb_registry *reg, sandbox *sb)
{
        rt_state st = RT_ABSENT;
        pid_t pid = 0;
        cs_error *err = NULL;

        if (sb->status == SB_DESTROYED) {
                /* An older agent kept destroyed volumes mounted for their grace. */
                sandbox_unmount_destroyed(reg, sb);
                sandbox_net_down(reg, sb); /* an agent that died in the destroy */
                return;
        }
        reattach_volume(reg, sb);
        if (reg->rt->ops->state(reg->rt, sb->container_id, &st, &pid, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot query the container: %s", err->msg);
                cs_error_freep(&err);
        }
        sandbox_kill_leftover_execs(reg, sb, st == RT_RUNNING);
        if (sb->status == SB_FAILED || st != RT_RUNNING) {
                sandbox_net_down(reg, sb);
                if (sb->status == SB_FAILED)
                        return;
        }
        if (st == RT_RUNNING && sandbox_image_check(reg, sb->image, &err) < 0) {
                /* E.g. a sandbox of an older agent whose image was the host's root: it must
                 * not go on seeing the host. */
                sandbox_log(reg, true, sb->id, "stopping a sandbox found running: %s", err->msg);
                sandbox_set_failed_locked(reg, sb,
                                          "its image is not an image of this node: stopped");
                cs_error_freep(&err);
                if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                        sandbox_log(reg, true, sb->id, "cannot destroy it: %s", err->msg);
                        cs_error_free(err);
                }
                return;
        }
        if (st == RT_RUNNING && restore_network(reg, sb) < 0)
                return;
        if (st == RT_RUNNING) {
                sb->status = SB_READY;
                sb->host_pid = pid;
                sandbox_log(reg, false, sb->id, "sandbox found running after restart");
                relisten_spawner(reg, sb);
                return;
        }
        sandbox_set_failed_locked(reg, sb, "the container was lost while the agent was down");
        sb->usage_frozen = true; /* the last reading in the record is all there is */
        sb->lost_watch_until_ms = cs_now_monotonic_ms() + SB_LOST_WATCH_MS;
        sandbox_log(reg, true, sb->id, "sandbox lost while the agent was down: FAILED");
        /* Created but never started (the agent died inside the start), or stopped: nothing
         * will run in it again, and a created one still holds its sandbox process. The record
         * and the workspace stay for the client's Describe, ReadFile and Destroy. */
        if (st != RT_ABSENT && reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot destroy its container: %s", err->msg);
                cs_error_free(err);
        }
}

/* Destroys containers under the runtime's root that no record claims. */
static void destroy_strays(sb_registry *reg)
{
        rt_container *cs = NULL;
        size_t n = 0;
        cs_error *err = NULL;

        if (reg->rt->ops->list_details(reg->rt, &cs, &n, &err) < 0) {
                sandbox_log(reg, true, NULL, "cannot list containers: %s", err->msg);
                cs_error_free(err);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                const char *id = cs[i].id;
                bool known = false;

                for (sandbox *sb = reg->list; sb && !known; sb = sb->next)
                        known = strcmp(sb->container_id, id) == 0 && sb->status != SB_DESTROYED;
                if (known)
                        continue;
                sandbox_log(reg, true, NULL, "container %s has no sandbox record: destroying it",
                            id);
                if (reg->rt->ops->destroy(reg->rt, id, &err) < 0) {
                        sandbox_log(reg, true, NULL, "cannot destroy %s: %s", id, err->msg);
                        cs_error_freep(&err);
                }
        }
        rt_containers_free(cs, n);
}

/* A sandbox directory without its record: an agent killed in the middle of a create, before
 * the record's first write (sandbox_start); CreateSandbox never answered with it. Whatever
 * the create made goes (its container, if any, with the strays). */
static bool record_missing(sb_registry *reg, const char *id)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/%s/sandbox.json", reg->sandboxes_dir, id);
        sandbox *sb;

        if (access(path, F_OK) == 0 || errno != ENOENT)
                return false;
        sb = cs_xcalloc(1, sizeof(*sb));
        snprintf(sb->id, sizeof(sb->id), "%.*s", CS_UUID_STRLEN, id);
        sb->tenant_id = cs_xstrdup("");
        sb->session_id = cs_xstrdup("");
        sb->volume = true; /* vol_remove of no volume does nothing */
        sandbox_paths(reg, sb);
        sandbox_remove(reg, sb, "removed what a create left without a record");
        return true;
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
                if (record_missing(reg, e->d_name))
                        continue;
                sb = record_load(reg, e->d_name, &bad);
                if (!sb) {
                        sandbox_log(reg, true, e->d_name, "skipping a record: %s", bad->msg);
                        cs_error_free(bad);
                        continue;
                }
                sb->next = reg->list;
                reg->list = sb;
        }
        closedir(d);
        return 0;
}

int sandbox_records_open(sb_registry *reg, cs_error **err)
{
        _cleanup_free_ char *ws = cs_xasprintf("%s/workspaces", reg->state_dir);
        _cleanup_free_ char *vols = cs_xasprintf("%s/volumes", reg->state_dir);

        if (sandbox_mkdir(reg->sandboxes_dir, 0700, err) < 0 || sandbox_mkdir(ws, 0700, err) < 0 ||
            sandbox_mkdir(vols, 0700, err) < 0 || load_records(reg, err) < 0)
                return -1;
        /* Warm sandboxes of a previous life (claimed ones have "pool": false in their record):
         * gone with everything they have; the pool is made again. */
        for (sandbox **p = &reg->list; *p;) {
                sandbox *sb = *p;
                if (sb->pool) {
                        *p = sb->next;
                        sandbox_remove(reg, sb, "warm sandbox of the agent's previous run removed");
                } else {
                        p = &sb->next;
                }
        }
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                sb_status before = sb->status;
                reconcile_one(reg, sb);
                if (sb->status != before)
                        sandbox_persist(reg, sb);
        }
        destroy_strays(reg);
        return 0;
}
