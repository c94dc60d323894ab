/* 6. Accounting accuracy: ExecCompleted.usage.cpu_ms of a known CPU burn against the CPU time
 * the sandbox's cgroup itself counted over the call. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "bench.h"
#include "util.h"

int phase_usage(bench_ctx *b, const char *sid, cs_error **err)
{
        _cleanup_free_ char *secs = cs_xasprintf("%d", b->sz.usage_burn_s);
        const char *const argv[] = { "timeout", secs, "sh", "-c", "while :; do :; done", NULL };
        samples reported = { 0 }, cgroup = { 0 }, errors = { 0 };
        json_t *runs = json_array();
        int r = -1;

        report_section(b, "6. accounting: ExecCompleted.usage.cpu_ms of a CPU burn vs the "
                          "sandbox cgroup's own CPU time");
        for (int i = 0; i < b->sz.usage_runs; i++) {
                uint64_t before, after;
                svc_exec_result res;
                double cg_ms;

                if (host_cgroup_cpu_ns(b, sid, &before, err) < 0)
                        goto out;
                /* timeout(1) ends the burn with exit status 124. */
                if (svc_exec(b, sid, argv, NULL, NULL, &res, err) < 0)
                        goto out;
                if (host_cgroup_cpu_ns(b, sid, &after, err) < 0)
                        goto out;
                if (res.exit_code != 124) {
                        cs_error_set(err, GRPC_STATUS_INTERNAL, "CPU burn: exit code %d: %s",
                                     res.exit_code, res.stderr_head);
                        goto out;
                }
                cg_ms = (double)(after - before) / 1e6;
                samples_add(&reported, (double)res.cpu_ms);
                samples_add(&cgroup, cg_ms);
                samples_add(&errors, cg_ms > 0 ? fabs((double)res.cpu_ms / cg_ms - 1) * 100 : NAN);
                json_array_append_new(runs, json_pack("{s:I, s:f}", "cpu_ms",
                                                      (json_int_t)res.cpu_ms, "cgroup_ms", cg_ms));
        }
        {
                _cleanup_free_ char *fig = cs_xasprintf("cpu_ms of a %d s burn (median of %d)",
                                                        b->sz.usage_burn_s, b->sz.usage_runs);
                report_row(b, "usage_cpu_ms", fig, "ms", samples_pct(&reported, 50),
                           "cgroup cpuacct.usage delta", samples_pct(&cgroup, 50),
                           (bench_goal){ GOAL_RATIO_WITHIN, 0.05 });
                report_row(b, "usage_cpu_err_max", "cpu_ms error, worst run", "%",
                           samples_pct(&errors, 100), NULL, NAN, (bench_goal){ GOAL_VALUE_LE, 5 });
        }
        json_object_set_new(b->details, "usage",
                            json_pack("{s:i, s:O}", "burn_s", b->sz.usage_burn_s, "runs", runs));
        r = 0;
out:
        json_decref(runs);
        samples_free(&reported);
        samples_free(&cgroup);
        samples_free(&errors);
        return r;
}
