/* 3. Output streaming: bytes written to stdout in the sandbox and received by this process,
 * through the service and through `runsc exec` into a pipe.
 *
 * The writer is `dd bs=1M`, not `head -c`: head writes 8 KiB at a time, and under gVisor's
 * ptrace platform each write costs ~0.1 ms, so head itself tops out near 40 MB/s and would
 * hide whatever the service costs; dd's 1 MiB writes reach the pipe's own limit (~800 MB/s
 * here). */
#include <inttypes.h>
#include <stdio.h>

#include "bench.h"
#include "util.h"

#define STREAM_DD(count) "dd", "if=/dev/zero", "bs=1M", count, "status=none"

static int stream_svc(bench_ctx *b, const char *sid, const char *count, double *ret_mbps,
                      cs_error **err)
{
        const char *const argv[] = { STREAM_DD(count), NULL };
        svc_exec_result res;
        int64_t t0 = bench_now_ns();

        if (svc_exec_ok(b, sid, argv, NULL, NULL, &res, err) < 0)
                return -1;
        *ret_mbps = bench_mbps(res.stdout_bytes, bench_ms_since(t0));
        if (res.stdout_bytes != b->sz.stream_bytes)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "streaming: received %" PRIu64 " bytes of %" PRIu64,
                                    res.stdout_bytes, b->sz.stream_bytes);
        return 0;
}

static int stream_direct(bench_ctx *b, const char *container, const char *count, double *ret_mbps,
                         cs_error **err)
{
        const char *const args[] = { "exec", container, STREAM_DD(count), NULL };
        const char *argv[HOST_MAX_ARGV];
        host_result res;
        int64_t t0;

        host_runsc_argv(b, b->runsc_root, argv, args);
        t0 = bench_now_ns();
        if (host_run_ok(argv, NULL, NULL, &res, err) < 0)
                return -1;
        *ret_mbps = bench_mbps(res.stdout_bytes, bench_ms_since(t0));
        if (res.stdout_bytes != b->sz.stream_bytes)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "runsc exec: received %" PRIu64 " bytes of %" PRIu64,
                                    res.stdout_bytes, b->sz.stream_bytes);
        return 0;
}

int phase_stream(bench_ctx *b, const char *sid, cs_error **err)
{
        _cleanup_free_ char *container = cs_xasprintf("cs-%s", sid);
        _cleanup_free_ char *count = cs_xasprintf("count=%" PRIu64, b->sz.stream_bytes / MIB);
        _cleanup_free_ char *fig = NULL;
        samples svc = { 0 }, direct = { 0 };
        int r = -1;

        report_section(b, "3. output streaming: `dd if=/dev/zero bs=1M` to stdout via ExecCommand "
                          "vs `runsc exec` into a pipe");
        for (int i = 0; i < b->sz.stream_runs; i++) {
                double a, d;
                if (i % 2 == 0) {
                        if (stream_svc(b, sid, count, &a, err) < 0 ||
                            stream_direct(b, container, count, &d, err) < 0)
                                goto out;
                } else {
                        if (stream_direct(b, container, count, &d, err) < 0 ||
                            stream_svc(b, sid, count, &a, err) < 0)
                                goto out;
                }
                samples_add(&svc, a);
                samples_add(&direct, d);
        }
        fig = cs_xasprintf("stdout stream, %" PRIu64 " MiB (median of %d)",
                           b->sz.stream_bytes / MIB, b->sz.stream_runs);
        report_row(b, "stream_mbps", fig, "MB/s", samples_pct(&svc, 50), "runsc exec | pipe",
                   samples_pct(&direct, 50), (bench_goal){ GOAL_RATIO_GE, 0.80 });
        json_object_set_new(b->details, "stream",
                            json_pack("{s:I, s:o, s:o}", "bytes", (json_int_t)b->sz.stream_bytes,
                                      "service_mbps", samples_json(&svc), "runsc_pipe_mbps",
                                      samples_json(&direct)));
        r = 0;
out:
        samples_free(&svc);
        samples_free(&direct);
        return r;
}
