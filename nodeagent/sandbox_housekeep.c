/* The housekeeping thread: every sample_interval_ms it samples the memory of READY sandboxes,
 * notices dead containers (every HOUSEKEEP_STATE_EVERY ticks), stops sandboxes past their
 * max_runtime (FAILED), saves live records (every HOUSEKEEP_PERSIST_EVERY ticks), and removes
 * sandboxes whose soft-delete grace has passed, with their workspaces.
 *
 * Owns the thread's loop and the removal. May touch: the list (unlinking, under the registry
 * lock), the runtime's state and destroy (unlocked, with a reference held), the cgroup,
 * workspace and sandbox directories of removed sandboxes, their workspace volumes
 * (vol_remove). Attached (kube) entries are handed to sandbox_attach.c. Locking:
 * sandbox_internal.h. */
#include "sandbox_internal.h"

#include <inttypes.h>
#include <stdio.h>

#include "spawner_link.h"
#include "util.h"
#include "volume.h"

/* Kills what is left of a sandbox through its cgroup and removes the cgroup: for a sandbox
 * whose runtime could not stop it, or left its cgroup behind (runsc delete removes it
 * otherwise). A failure is logged; the removal of the sandbox tries again. */
void sandbox_remove_cgroup(sb_registry *reg, sandbox *sb)
{
        cs_error *err = NULL;

        if (cgroup_remove(reg->cg, sb->cgroup_path, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot remove the sandbox's cgroup: %s", err->msg);
                cs_error_free(err);
        }
}

/* A sandbox marked lost at the agent's start whose container shows up afterwards: a `runsc
 * create` the previous agent started, not killed with it, finished after the new agent had
 * looked. Nothing will start it, and a created container holds a sandbox process: it is
 * destroyed. Watched for SB_LOST_WATCH_MS after the start. */
static void destroy_late_container(sb_registry *reg, sandbox *sb)
{
        rt_state st = RT_ABSENT;
        cs_error *err = NULL;

        if (reg->rt->ops->state(reg->rt, sb->container_id, &st, NULL, &err) < 0) {
                cs_error_free(err);
                return;
        }
        if (st == RT_ABSENT)
                return;
        sandbox_log(reg, true, sb->id,
                    "a container appeared for this sandbox, lost while the agent was down (a "
                    "runtime call of the previous agent finishing): destroying it");
        if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                sandbox_log(reg, true, sb->id, "cannot destroy it: %s", err->msg);
                cs_error_free(err);
        }
}

/* One sandbox's periodic work: sample memory, notice a dead container, enforce max_runtime. */
static void housekeep_one(sb_registry *reg, sandbox *sb, bool check_state)
{
        cgroup_sample s = { 0 };
        cs_error *err = NULL;
        bool expired, watch_lost, dead = false;
        sb_status status;

        if (sb->attached) {
                sandbox_attach_housekeep(reg, sb, check_state);
                return;
        }
        pthread_mutex_lock(&reg->lock);
        status = sb->status;
        /* A warm sandbox's max_runtime counts from its claim. */
        expired = !sb->pool && cs_now_monotonic_ms() - sb->started_mono_ms > sb->max_runtime_ms;
        if (sb->lost_watch_until_ms && cs_now_monotonic_ms() > sb->lost_watch_until_ms)
                sb->lost_watch_until_ms = 0;
        watch_lost = sb->lost_watch_until_ms != 0;
        pthread_mutex_unlock(&reg->lock);
        if (status == SB_FAILED && watch_lost && check_state)
                destroy_late_container(reg, sb);
        if (status != SB_READY)
                return;

        if (sandbox_sample_memory(reg, sb, &s, &err) < 0) {
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
                sandbox_usage_freeze(reg, sb);
                if (reg->rt->ops->destroy(reg->rt, sb->container_id, &err) < 0) {
                        sandbox_log(reg, true, sb->id, "cannot stop the sandbox: %s", err->msg);
                        cs_error_freep(&err);
                }
                /* Stopped or not: what is left in the cgroup is killed through it. */
                sandbox_remove_cgroup(reg, sb);
                sb_mark_failed(reg, sb, why);
        } else if (dead && s.oom_kills) {
                sb_mark_out_of_memory(reg, sb);
        } else if (dead) {
                sb_mark_failed(reg, sb, "the sandbox's container exited");
        }
}

/* Under the lock: whether the removal may unlink sb now. A local sandbox goes once its
 * soft-delete window has passed (DESTROYED, or FAILED and never destroyed). */
static bool collectable_locked(const sandbox *sb, int64_t now)
{
        bool due;

        if (sb->attached)
                due = sandbox_attach_collectable_locked(sb);
        else
                due = (sb->status == SB_DESTROYED || sb->status == SB_FAILED) &&
                      sb->delete_after_ms && now >= sb->delete_after_ms;
        return due && sb->refs == 0 && !sb->destroying;
}

void sandbox_remove(sb_registry *reg, sandbox *sb, const char *why)
{
        cs_error *ignored = NULL;

        /* A FAILED sandbox may still have a stopped container to delete. */
        reg->rt->ops->destroy(reg->rt, sb->container_id, &ignored);
        cs_error_freep(&ignored);
        sandbox_net_down(reg, sb);
        sandbox_remove_cgroup(reg, sb);
        /* The volume's mount and image go first: the tree removal never enters a mount. */
        if (sb->volume && vol_remove(sb->volume_image, sb->workspace_dir, &ignored) < 0) {
                sandbox_log(reg, true, sb->id, "cannot remove the workspace volume: %s",
                            ignored->msg);
                cs_error_freep(&ignored);
        }
        if (reg->cfg.spawner)
                spawn_mgr_forget(reg->cfg.spawner, sb->container_id);
        sandbox_rm_tree(sb->workspace_dir);
        sandbox_rm_tree(sb->dir);
        sandbox_log(reg, false, sb->id, "%s", why);
        sandbox_free(sb);
}

/* Removes sandboxes whose soft-delete window has passed, with their workspaces, and attached
 * entries whose container is gone. */
static void collect_garbage(sb_registry *reg)
{
        int64_t now = cs_now_realtime_ms();
        sandbox *dead = NULL;

        pthread_mutex_lock(&reg->lock);
        for (sandbox **p = &reg->list; *p;) {
                sandbox *sb = *p;
                if (collectable_locked(sb, now)) {
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
                if (dead->attached)
                        sandbox_attach_forget(reg, dead);
                else
                        sandbox_remove(reg, dead,
                                       dead->pool ? "warm sandbox that failed to start removed"
                                                  : "workspace removed after its grace period");
                dead = next;
        }
}

#define HOUSEKEEP_STATE_EVERY   5  /* ticks between runtime state checks */
#define HOUSEKEEP_PERSIST_EVERY 10 /* ticks between saving live records */

void *sandbox_housekeeper_main(void *arg)
{
        sb_registry *reg = arg;

        for (unsigned tick = 1;; tick++) {
                sandbox **refs;
                size_t n = 0, cap = 0;
                int64_t wake = cs_now_monotonic_ms() + reg->cfg.sample_interval_ms;

                pthread_mutex_lock(&reg->lock);
                while (!reg->stopping && cs_now_monotonic_ms() < wake)
                        cs_cond_wait_until(&reg->cond, &reg->lock, wake);
                if (reg->stopping) {
                        pthread_mutex_unlock(&reg->lock);
                        return NULL;
                }
                for (sandbox *sb = reg->list; sb; sb = sb->next)
                        cap++;
                refs = cs_xcalloc(cap, sizeof(*refs));
                for (sandbox *sb = reg->list; sb; sb = sb->next) {
                        /* Attached entries in every state: their container's is followed.
                         * Lost ones for a while: a container may appear late. */
                        if ((sb->status == SB_READY || sb->attached ||
                             (sb->status == SB_FAILED && sb->lost_watch_until_ms)) &&
                            !sb->destroying)
                                refs[n++] = sandbox_ref_locked(sb);
                }
                pthread_mutex_unlock(&reg->lock);

                for (size_t i = 0; i < n; i++) {
                        housekeep_one(reg, refs[i], tick % HOUSEKEEP_STATE_EVERY == 0);
                        if (tick % HOUSEKEEP_PERSIST_EVERY == 0) {
                                usage_metrics ignored;
                                sandbox_usage_live(reg, refs[i], &ignored);
                                sandbox_persist(reg, refs[i]);
                        }
                        sb_release(reg, refs[i]);
                }
                free(refs);
                collect_garbage(reg);
        }
}
