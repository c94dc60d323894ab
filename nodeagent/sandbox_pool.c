/* The warm pool (local mode, --warm-pool=N): N sandboxes of the default profile (default
 * image, mount path, CPU and memory limits, workspace size) kept READY by a filler thread, so
 * that a CreateSandbox of that profile answers with a running sandbox and its first exec
 * needs no wait.
 *
 * Why here, in the agent's registry, and not in the frontend: the claim is one step under
 * the registry's lock (sandbox_pool_take_locked: a READY warm sandbox gets the session's
 * tenant_id and session_id), the same lock and the same session check that make a cold
 * create idempotent. Two concurrent creates can never take the same warm sandbox, and a
 * create retried for the same session finds the claimed one like a cold one; its record
 * (written before CreateSandbox answers) carries the session, so a restarted agent or
 * frontend finds it too. A warm sandbox whose claim never reached its record is still
 * "pool": true on disk and is removed by the next agent's opening: never double-claimed,
 * never leaked. The frontend keeps no pool state: it never sees warm sandboxes.
 *
 * A warm sandbox (sb->pool): tenant_id and session_id "", invisible to lookups by id,
 * listings and counts (so to every tenant, placement and admission), never expires; once
 * READY it runs its warm-up (sb_config.warm_up, in its starter thread) and is claimable only
 * after that (sb->warming). Its
 * claim (sandbox_pool_finish) rebases its usage on its counters at the claim
 * (sandbox_usage_rebase: cgroup CPU and block I/O, network, volume counters subtracted;
 * memory samples forgotten; memory peak reset on cgroup v1), and sets created_at and
 * max_runtime's start to the claim's time: the warm idle time is the operator's.
 *
 * Refills: at most POOL_PARALLEL starts at once; only while the node has room for one more
 * default sandbox counting the warm ones (--max-sandboxes and admission control); a warm
 * sandbox that fails to start is removed at once and the refills back off (1 s doubling to
 * 60 s, reset by a start that succeeds); after a claim they wait POOL_REFILL_HOLD_MS. Warm
 * sandboxes are removed, workspace, volume, cgroup and container, when the agent stops
 * (sb_registry_free) and at the next opening.
 *
 * May touch: the list and the pool fields under the lock; the starts through sandbox.c.
 * Locking: sandbox_internal.h. */
#include "sandbox_internal.h"

#include <errno.h>
#include <string.h>

#include "path.h"
#include "quantity.h"
#include "util.h"
#include "uuid.h"

#define POOL_PARALLEL      2     /* warm sandboxes starting at once */
#define POOL_BACKOFF_MS    1000  /* after the first failure in a row; doubles */
#define POOL_BACKOFF_MAX   60000 /* ms */
#define POOL_IDLE_CHECK_MS 500   /* the filler's sleep when nothing wakes it */
/* After a claim, the refill it calls for waits this long: the claimed sandbox's first calls
 * come right after its create (a session's first tool call), and a sandbox start takes the
 * CPUs of a small node for a few hundred ms. Measured (docs/performance.md, the warm pool):
 * create to the first byte of `echo hi` 2 to 7 ms faster at p50 in three paired runs. A
 * claim does not extend a hold already running, so claims in a steady stream cannot hold
 * the refills off for good. */
#define POOL_REFILL_HOLD_MS 500

/* Claim latencies: from well under a millisecond to a slow agent's second. */
static const double claim_bounds[] = {
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1
};

bool sandbox_pool_matches(const sb_spec *spec)
{
        uint64_t ws = 0;

        if (cs_quantity_parse(CS_DEFAULT_WORKSPACE_SIZE, &ws) < 0)
                abort(); /* a constant */
        return strcmp(spec->image, SB_DEFAULT_IMAGE) == 0 &&
               strcmp(spec->mount_path, CS_DEFAULT_MOUNT_PATH) == 0 &&
               spec->cpu_millis == CS_DEFAULT_CPU_MILLIS &&
               spec->memory_bytes == CS_DEFAULT_MEMORY && spec->workspace_bytes == ws &&
               (!spec->network || spec->network->egress == CS_EGRESS_NONE);
}

sandbox *sandbox_pool_take_locked(sb_registry *reg, const sb_spec *spec)
{
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (!sb->pool || sb->claiming || sb->destroying || sb->warming ||
                    sb->status != SB_READY)
                        continue;
                sb->claiming = true;
                free(sb->tenant_id);
                free(sb->session_id);
                sb->tenant_id = cs_xstrdup(spec->tenant_id);
                sb->session_id = cs_xstrdup(spec->session_id);
                sb->max_runtime_ms = spec->max_runtime_ms;
                if (reg->pool_hold_until_ms < cs_now_monotonic_ms())
                        reg->pool_hold_until_ms = cs_now_monotonic_ms() + POOL_REFILL_HOLD_MS;
                pthread_cond_broadcast(&reg->cond); /* the filler: one fewer */
                return sandbox_ref_locked(sb);
        }
        return NULL;
}

void sandbox_pool_finish(sb_registry *reg, sandbox *sb, int64_t t0_ns, sb_info *ret)
{
        sandbox_usage_rebase(reg, sb);
        pthread_mutex_lock(&reg->lock);
        sb->created_at_ms = cs_now_realtime_ms();
        sb->started_mono_ms = cs_now_monotonic_ms();
        sb->pool = false;
        pthread_mutex_unlock(&reg->lock);
        /* On disk before the answer: a retry after a crash finds the session's sandbox. */
        sandbox_persist(reg, sb);
        pthread_mutex_lock(&reg->lock);
        sb->claiming = false;
        reg->pool_hits++;
        sandbox_info_fill_locked(sb, ret);
        sb->refs--;
        pthread_cond_broadcast(&reg->cond);
        pthread_mutex_unlock(&reg->lock);
        cs_histogram_observe(&reg->pool_claim_seconds, cs_now_monotonic_ns() - t0_ns);
        sandbox_log(reg, false, sb->id, "warm sandbox claimed");
}

void sandbox_pool_failed_locked(sb_registry *reg, sandbox *sb)
{
        int64_t backoff = POOL_BACKOFF_MS;

        sb->delete_after_ms = cs_now_realtime_ms(); /* the housekeeping removes it now */
        if (reg->pool_fail_streak < 30)
                reg->pool_fail_streak++;
        for (int i = 1; i < reg->pool_fail_streak && backoff < POOL_BACKOFF_MAX; i++)
                backoff *= 2;
        if (backoff > POOL_BACKOFF_MAX)
                backoff = POOL_BACKOFF_MAX;
        reg->pool_retry_at_ms = cs_now_monotonic_ms() + backoff;
}

void sb_pool_stats_read(sb_registry *reg, sb_pool_stats *ret)
{
        *ret = (sb_pool_stats){ .target = reg->cfg.warm_pool,
                                .claim_seconds = &reg->pool_claim_seconds };
        pthread_mutex_lock(&reg->lock);
        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (!sb->pool || sb->claiming || sb->destroying)
                        continue;
                ret->ready += sb->status == SB_READY && !sb->warming;
                ret->starting += sb->status == SB_STARTING || sb->warming;
        }
        ret->hits = reg->pool_hits;
        ret->misses = reg->pool_misses;
        pthread_mutex_unlock(&reg->lock);
}

/* The spec of a warm sandbox: the defaults, with a fresh id and no session. */
static int pool_spec(sb_registry *reg, char id[static CS_UUID_STRLEN + 1], sb_spec *ret,
                     cs_error **err)
{
        /* Warm sandboxes have no network: a create that asks for one makes its own. */
        static const cs_netpolicy none = { .egress = CS_EGRESS_NONE };
        sb_spec in = { .id = id, .tenant_id = "-", .session_id = "-", .network = &none };

        cs_uuid_generate(id);
        if (sandbox_spec_validate(reg, &in, ret, err) < 0)
                return -1;
        ret->tenant_id = ret->session_id = "";
        ret->max_runtime_ms = CS_MAX_RUNTIME_MS; /* unused: a warm sandbox never expires */
        return 0;
}

/* Under the lock: whether the filler should start one more warm sandbox now. */
static bool want_one_locked(sb_registry *reg, const sb_spec *spec)
{
        uint32_t warm = 0, starting = 0;
        cs_error *err = NULL;

        for (sandbox *sb = reg->list; sb; sb = sb->next) {
                if (!sb->pool || sb->claiming || sb->destroying)
                        continue;
                warm += sb->status == SB_STARTING || sb->status == SB_READY;
                starting += sb->status == SB_STARTING || sb->warming;
        }
        if (warm >= reg->cfg.warm_pool || starting >= POOL_PARALLEL ||
            cs_now_monotonic_ms() < reg->pool_retry_at_ms ||
            cs_now_monotonic_ms() < reg->pool_hold_until_ms ||
            sandbox_live_count_locked(reg, true) >= reg->cfg.max_sandboxes)
                return false;
        if (sandbox_admit_locked(reg, spec, true, &err) < 0) {
                cs_error_free(err);
                return false;
        }
        return true;
}

static void *filler_main(void *arg)
{
        sb_registry *reg = arg;
        char id[CS_UUID_STRLEN + 1];
        cs_error *err = NULL;
        bool need_id = false;
        sb_spec spec;

        /* Checked once (sandbox_pool_open did too): an image removed later makes the starts
         * fail, and the refills back off. */
        if (pool_spec(reg, id, &spec, &err) < 0) {
                sandbox_log(reg, true, NULL, "warm pool: %s", err->msg);
                cs_error_free(err);
                return NULL;
        }
        pthread_mutex_lock(&reg->lock);
        while (!reg->stopping) {
                int64_t wake;

                if (need_id) {
                        pthread_mutex_unlock(&reg->lock); /* getrandom: not under the lock */
                        cs_uuid_generate(id);
                        pthread_mutex_lock(&reg->lock);
                        need_id = false;
                        continue;
                }
                if (want_one_locked(reg, &spec)) {
                        sandbox *sb = sandbox_new_locked(reg, &spec);

                        sb->pool = true;
                        sandbox_set_message_locked(sb, "warm");
                        need_id = true;
                        pthread_mutex_unlock(&reg->lock);
                        if (sandbox_start(reg, sb, &err) < 0) {
                                sandbox_log(reg, true, sb->id, "warm sandbox failed to start: %s",
                                            err->msg);
                                cs_error_freep(&err);
                        }
                        pthread_mutex_lock(&reg->lock);
                        continue;
                }
                wake = cs_now_monotonic_ms() + POOL_IDLE_CHECK_MS;
                if (reg->pool_retry_at_ms > cs_now_monotonic_ms() && reg->pool_retry_at_ms < wake)
                        wake = reg->pool_retry_at_ms;
                if (reg->pool_hold_until_ms > cs_now_monotonic_ms() &&
                    reg->pool_hold_until_ms < wake)
                        wake = reg->pool_hold_until_ms;
                cs_cond_wait_until(&reg->cond, &reg->lock, wake);
        }
        pthread_mutex_unlock(&reg->lock);
        return NULL;
}

int sandbox_pool_open(sb_registry *reg, cs_error **err)
{
        char id[CS_UUID_STRLEN + 1];
        sb_spec spec;

        cs_histogram_init(&reg->pool_claim_seconds, claim_bounds, ARRAY_SIZE(claim_bounds));
        if (!reg->cfg.warm_pool)
                return 0;
        if (reg->cfg.warm_pool > SB_WARM_POOL_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--warm-pool: %u warm sandboxes asked, at most %d",
                                    reg->cfg.warm_pool, SB_WARM_POOL_MAX);
        if (reg->cfg.warm_pool > reg->cfg.max_sandboxes)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--warm-pool: %u warm sandboxes asked, more than "
                                    "--max-sandboxes (%u)",
                                    reg->cfg.warm_pool, reg->cfg.max_sandboxes);
        /* The profile must be one this node can make: its image, its workspace volume. */
        if (pool_spec(reg, id, &spec, err) < 0)
                return cs_error_prefix(err, "--warm-pool: the default profile");
        if (pthread_create(&reg->pool_filler, NULL, filler_main, reg) != 0)
                return cs_error_errno(err, errno, "cannot start the warm pool's thread");
        reg->pool_filler_running = true;
        sandbox_log(reg, false, NULL,
                    "warm pool: %u sandboxes of the default profile (image %s, %u m CPU, %llu "
                    "MiB, workspace %s)",
                    reg->cfg.warm_pool, spec.image, spec.cpu_millis,
                    (unsigned long long)(spec.memory_bytes >> 20), CS_DEFAULT_WORKSPACE_SIZE);
        return 0;
}

void sandbox_pool_stop(sb_registry *reg)
{
        if (!reg->pool_filler_running)
                return;
        pthread_join(reg->pool_filler, NULL);
        reg->pool_filler_running = false;
}
