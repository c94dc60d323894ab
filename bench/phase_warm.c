/* 8. The warm pool (docs/performance.md, docs/nodeagent.md "Warm pool"): what an agent waits
 * for on a session's first tool call, CreateSandbox and then ExecCommand of `echo hi`, from
 * the create's start to the first stdout byte, when the create claims a warm sandbox against
 * the cold path, side by side in one run.
 *
 * Warm: a create of the default profile (the agent must run with --warm-pool; a create that
 * answers STARTING found the pool empty and is counted as a miss, not as a warm figure).
 * Cold: the same create with a CPU limit of 1001m, which matches no pool profile and takes
 * the cold path unchanged. Interleaved (warm, then cold: the cold one's start gives the pool
 * time to refill), each sandbox destroyed after its measurement. Only when asked
 * (--phases warm): with a pool, phase 2's cold starts would be claims. */
#include <stdio.h>
#include <time.h>

#include "bench.h"
#include "util.h"

#define WARM_COLD_CPU   1001 /* millicores: no pool profile */
#define WARM_RATIO_GOAL 0.25 /* the goal: warm <= 0.25 x cold (p50) */
#define WARM_REFILL_MS  1500 /* pause before each warm create: the pool refills */
#define WARM_ABS_GOAL   30.0 /* the goal on this machine kind: warm p50 <= 30 ms */

/* One session's first call: create, exec, first byte (*ret_ms; *ret_create_ms: the create's
 * own part). *ret_warm (may be NULL): whether the create claimed a warm sandbox, READY for
 * the DescribeSandbox that follows it (CreateSandbox answers STARTING either way); that
 * describe's own time is left out of *ret_ms. */
static int first_call(bench_ctx *b, uint32_t cpu_millis, double *ret_ms, double *ret_create_ms,
                      bool *ret_warm, cs_error **err)
{
        static const char *const cmd[] = { "echo", "hi", NULL };
        bench_first_byte f = { 0 };
        int64_t start = bench_now_ns(), described = 0;
        svc_exec_result res;
        char sid[37];
        int r, status;

        if (svc_create_ex(b, cpu_millis, sid, err) < 0)
                return -1;
        *ret_create_ms = (double)(bench_now_ns() - start) / 1e6;
        r = 0;
        if (ret_warm) {
                int64_t t = bench_now_ns();
                r = svc_status(b, sid, &status, err);
                *ret_warm = r == 0 && status == COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY;
                described = bench_now_ns() - t;
        }
        if (r == 0)
                r = svc_exec_ok(b, sid, cmd, bench_note_first, &f, &res, err);
        if (r == 0 && !f.first_ns)
                r = cs_error_set(err, GRPC_STATUS_INTERNAL, "`echo hi` printed nothing");
        if (r == 0)
                *ret_ms = (double)(f.first_ns - start - described) / 1e6;
        if (r == 0)
                return svc_destroy(b, sid, err);
        {
                cs_error *ignored = NULL;
                if (svc_destroy(b, sid, &ignored) < 0)
                        cs_error_free(ignored);
        }
        return r;
}

int phase_warm(bench_ctx *b, const char *sid, cs_error **err)
{
        samples warm = { 0 }, cold = { 0 }, warm_create = { 0 }, cold_create = { 0 };
        int reps = b->quick ? 3 : 24, misses = 0, r = -1;
        struct timespec pause = { .tv_sec = WARM_REFILL_MS / 1000,
                                  .tv_nsec = (WARM_REFILL_MS % 1000) * 1000000L };

        (void)sid;
        report_section(b, "8. warm pool: CreateSandbox -> first stdout byte of `echo hi`");
        for (int i = 0; i < reps; i++) {
                double w, c, wc, cc;
                bool claimed = false;

                nanosleep(&pause, NULL);
                if (first_call(b, 0, &w, &wc, &claimed, err) < 0 ||
                    first_call(b, WARM_COLD_CPU, &c, &cc, NULL, err) < 0)
                        goto out;
                if (claimed) {
                        samples_add(&warm, w);
                        samples_add(&warm_create, wc);
                } else {
                        misses++;
                }
                samples_add(&cold, c);
                samples_add(&cold_create, cc);
        }
        if (warm.n == 0) {
                r = cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                 "no create claimed a warm sandbox: run the agent with "
                                 "--warm-pool (e.g. COMPUTE_WARM_POOL=2 scripts/bench -- "
                                 "--phases warm)");
                goto out;
        }
        report_row(b, "warm_first_byte_p50", "create -> first byte, warm claim p50", "ms",
                   samples_pct(&warm, 50), "cold path", samples_pct(&cold, 50),
                   (bench_goal){ GOAL_RATIO_LE, WARM_RATIO_GOAL });
        report_row(b, "warm_first_byte_p50_abs", "create -> first byte, warm claim p50", "ms",
                   samples_pct(&warm, 50), "cold path", samples_pct(&cold, 50),
                   (bench_goal){ GOAL_VALUE_LE, WARM_ABS_GOAL });
        report_row(b, "warm_first_byte_p90", "create -> first byte, warm claim p90", "ms",
                   samples_pct(&warm, 90), "cold path", samples_pct(&cold, 90),
                   (bench_goal){ GOAL_NONE, 0 });
        /* Where the first call's time goes: the create alone (the rest is the exec). */
        report_row(b, "warm_create_p50", "CreateSandbox alone, warm claim p50", "ms",
                   samples_pct(&warm_create, 50), "cold path", samples_pct(&cold_create, 50),
                   (bench_goal){ GOAL_NONE, 0 });
        json_object_set_new(b->details, "warm_pool",
                            json_pack("{s:o, s:o, s:o, s:o, s:i}", "warm_ms", samples_json(&warm),
                                      "cold_ms", samples_json(&cold), "warm_create_ms",
                                      samples_json(&warm_create), "cold_create_ms",
                                      samples_json(&cold_create), "warm_misses", misses));
        r = 0;
out:
        samples_free(&warm);
        samples_free(&cold);
        samples_free(&warm_create);
        samples_free(&cold_create);
        return r;
}
