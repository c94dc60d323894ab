/* Kube mode: the registry's entries for containers the kubelet made (sb_attach), keyed by
 * (container id, mount path), and everything the registry does differently for them: kube
 * mode's opening (leftover execs of a previous life, scratch directories under
 * STATE_DIR/kube/), their housekeeping (state followed, never stopped), how they fail (the
 * status only) and how they are forgotten once their container is gone.
 *
 * Owns the attached entries' key, label and scratch directory. May touch: attached entries'
 * fields and the list under the registry lock; the runtime's state (never create or destroy:
 * the kubelet owns the containers); STATE_DIR/kube/. Never a local sandbox.
 * Locking: sandbox_internal.h. */
#include "sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "spawner_link.h"
#include "util.h"

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

/* The exec processes of the agent's previous life, in containers still running, are killed
 * (as in local mode); scratch directories of containers that are gone go. */
int sandbox_attach_open(sb_registry *reg, cs_error **err)
{
        _cleanup_free_ char *dir = kube_dir(reg, NULL);
        DIR *d;
        struct dirent *e;

        if (sandbox_mkdir(dir, 0700, err) < 0)
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
                        sandbox_log(reg, true, NULL, "cannot query container %s: %s", e->d_name,
                                    qerr->msg);
                        cs_error_free(qerr);
                        st = RT_RUNNING; /* keep its files for the next start */
                } else {
                        sandbox_kill_leftover_execs(reg, &tmp, st == RT_RUNNING);
                }
                if (st == RT_ABSENT)
                        sandbox_rm_tree(tmp.dir);
                free(tmp.dir);
        }
        closedir(d);
        return 0;
}

/* Under the lock: the entry for key, or NULL. */
static sandbox *find_attached_locked(sb_registry *reg, const char *key)
{
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (sb->attached && strcmp(sb->key, key) == 0)
                        return sb;
        }
        return NULL;
}

/* Under the lock: a new entry for the spec's container, listed. Takes key. */
static sandbox *attached_new_locked(sb_registry *reg, const sb_attach_spec *spec, char *key)
{
        sandbox *sb = cs_xcalloc(1, sizeof(*sb));

        sb->attached = true;
        sb->key = key;
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
        return sb;
}

/* Under the lock: what the caller just read (label, status, pid) into the entry. */
static void attached_update_locked(sandbox *sb, const sb_attach_spec *spec)
{
        /* The label is read unlocked by users of the entry: changed only while it has none. */
        if (sb->refs == 0)
                snprintf(sb->id, sizeof(sb->id), "%s", spec->label ? spec->label : "");
        /* What the caller just read is the freshest there is (0: not read; a new entry is
         * STARTING until the housekeeping's next state check). */
        if (spec->status) {
                sb->status = spec->status;
                sandbox_set_message_locked(sb, spec->status_message);
        } else if (!sb->status) {
                sb->status = SB_STARTING;
        }
        if (spec->host_pid > 0)
                sb->host_pid = spec->host_pid;
        if (spec->status == SB_FAILED)
                sb->host_pid = 0; /* exited: its pid may be anyone's by now */
        sb->gone = false;
}

/* The resident exec path of a pod that runs compute-init: the agent listens in the pod's
 * compute-run emptyDir, once per entry (a restarted agent listens again: the spawner
 * reconnects to the new socket). The first exec waits briefly for the spawner's Hello. */
static void attach_spawner(sb_registry *reg, sandbox *sb, const char *dir)
{
        cs_error *err = NULL;
        bool first, listening = false, connected = false;

        if (!reg->cfg.spawner || !dir || !dir[0])
                return;
        /* One listener per container, whichever of its entries (mount paths) made it. */
        spawn_mgr_status(reg->cfg.spawner, sb->container_id, &listening, &connected);
        if (listening)
                return;
        pthread_mutex_lock(&reg->lock);
        first = !sb->spawner_tried;
        sb->spawner_tried = true;
        pthread_mutex_unlock(&reg->lock);
        if (!first)
                return;
        if (spawn_mgr_listen(reg->cfg.spawner, sb->container_id, dir, &err) < 0) {
                sandbox_log(reg, true, sb->id, "container %s: no resident exec path: %s",
                            sb->container_id, err->msg);
                cs_error_free(err);
        }
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
        sb = find_attached_locked(reg, key);
        if (!sb)
                sb = attached_new_locked(reg, spec, TAKE_PTR(key));
        attached_update_locked(sb, spec);
        sandbox_ref_locked(sb);
        pthread_mutex_unlock(&reg->lock);
        /* The exec scratch directory (pid files that let a restarted agent kill leftovers). */
        if (sandbox_mkdir(sb->dir, 0700, err) < 0) {
                sb_release(reg, sb);
                return -1;
        }
        attach_spawner(reg, sb, spec->spawner_dir);
        *ret = sb;
        return 0;
}

/* --- what the registry does differently for attached entries --------------------------- */

void sandbox_attach_mark_failed(sb_registry *reg, sandbox *sb, const char *why)
{
        /* The kubelet owns the container: only the status this agent reports changes (until
         * the next state check), and usage keeps being read live. */
        pthread_mutex_lock(&reg->lock);
        if (sb->status == SB_READY || sb->status == SB_STARTING) {
                sb->status = SB_FAILED;
                sandbox_set_message_locked(sb, why);
        }
        pthread_mutex_unlock(&reg->lock);
        sandbox_log(reg, true, sb->id, "container %s failed: %s", sb->container_id, why);
}

/* The status an attached entry shows for its container's state. */
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

/* Sample memory while running, follow the container's state. */
void sandbox_attach_housekeep(sb_registry *reg, sandbox *sb, bool check_state)
{
        cgroup_sample s;
        cs_error *err = NULL;
        rt_state st = RT_RUNNING;

        if (sb->status == SB_READY && sandbox_sample_memory(reg, sb, &s, &err) < 0)
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
                sandbox_set_message_locked(sb, st == RT_STOPPED ? "the container has exited" : "");
                if (st == RT_STOPPED)
                        sb->host_pid = 0; /* its pid may be anyone's by now */
                pthread_cond_broadcast(&reg->cond);
        }
        pthread_mutex_unlock(&reg->lock);
}

bool sandbox_attach_collectable_locked(const sandbox *sb)
{
        return sb->gone;
}

void sandbox_attach_forget(sb_registry *reg, sandbox *sb)
{
        bool shared = false;

        pthread_mutex_lock(&reg->lock);
        for (sandbox *o = reg->list; o && !shared; o = o->next)
                shared = o->attached && strcmp(o->container_id, sb->container_id) == 0;
        pthread_mutex_unlock(&reg->lock);
        if (!shared) {
                sandbox_rm_tree(sb->dir); /* exec scratch files, if any */
                if (reg->cfg.spawner)
                        spawn_mgr_forget(reg->cfg.spawner, sb->container_id);
        }
        sandbox_log(reg, false, sb->id, "container %s is gone: forgotten", sb->container_id);
        sandbox_free(sb);
}
