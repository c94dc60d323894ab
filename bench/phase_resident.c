/* 7. The resident exec path (docs/performance.md): what a command costs when the sandbox's
 * own spawner starts it, against a `runsc exec` of the same command on the same sandbox.
 *
 * - first stdout byte of `echo hi`: from the call's start to the first output byte;
 * - a burst of 32 concurrent execs of `true`: throughput, and the node's CPU time per exec
 *   (every CPU's busy time from /proc/stat over the burst, divided by the execs it ran).
 *
 * The exec round trip itself is phase 1's figure. Which path served the service's execs is
 * the agent's business (its log says); this phase only measures. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

#define RESIDENT_WARMUP    3
#define RESIDENT_BURST     32 /* concurrent execs */
#define RESIDENT_STACK     (256 * 1024)
#define RESIDENT_FIRST_MAX 15.0 /* ms, the goal for the first byte (p50) */

/* --- first byte -------------------------------------------------------------------------- */

static int first_svc(bench_ctx *b, const char *sid, double *ret_ms, cs_error **err)
{
        static const char *const cmd[] = { "echo", "hi", NULL };
        bench_first_byte f = { .start_ns = bench_now_ns() };
        svc_exec_result res;

        if (svc_exec_ok(b, sid, cmd, bench_note_first, &f, &res, err) < 0)
                return -1;
        if (!f.first_ns)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "echo hi printed nothing");
        *ret_ms = (double)(f.first_ns - f.start_ns) / 1e6;
        return 0;
}

static int first_direct(bench_ctx *b, const char *container, double *ret_ms, cs_error **err)
{
        const char *args[] = { "exec", container, "echo", "hi", NULL };
        const char *argv[HOST_MAX_ARGV];
        bench_first_byte f = { .start_ns = 0 };
        host_result res;

        host_runsc_argv(b, b->runsc_root, argv, args);
        f.start_ns = bench_now_ns();
        if (host_run_ok(argv, bench_note_first, &f, &res, err) < 0)
                return -1;
        if (!f.first_ns)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "runsc exec echo hi printed nothing");
        *ret_ms = (double)(f.first_ns - f.start_ns) / 1e6;
        return 0;
}

static int first_byte_rows(bench_ctx *b, const char *sid, const char *container, cs_error **err)
{
        samples svc = { 0 }, direct = { 0 };
        int reps = b->sz.exec_reps / 2 > 5 ? b->sz.exec_reps / 2 : 5;
        double ms;
        int r = -1;

        for (int i = 0; i < RESIDENT_WARMUP; i++) {
                if (first_svc(b, sid, &ms, err) < 0 || first_direct(b, container, &ms, err) < 0)
                        goto out;
        }
        for (int i = 0; i < reps; i++) {
                double a, d;
                /* Interleaved, alternating which goes first, as phase 1 does. */
                if (i % 2 == 0 ? first_svc(b, sid, &a, err) < 0 ||
                                         first_direct(b, container, &d, err) < 0
                               : first_direct(b, container, &d, err) < 0 ||
                                         first_svc(b, sid, &a, err) < 0)
                        goto out;
                samples_add(&svc, a);
                samples_add(&direct, d);
        }
        report_row(b, "first_byte_p50", "first stdout byte of `echo hi` p50", "ms",
                   samples_pct(&svc, 50), "runsc exec", samples_pct(&direct, 50),
                   (bench_goal){ GOAL_VALUE_LE, RESIDENT_FIRST_MAX });
        report_row(b, "first_byte_p90", "first stdout byte of `echo hi` p90", "ms",
                   samples_pct(&svc, 90), "runsc exec", samples_pct(&direct, 90),
                   (bench_goal){ GOAL_NONE, 0 });
        json_object_set_new(b->details, "first_byte",
                            json_pack("{s:o, s:o}", "service_ms", samples_json(&svc),
                                      "runsc_exec_ms", samples_json(&direct)));
        r = 0;
out:
        samples_free(&svc);
        samples_free(&direct);
        return r;
}

/* --- burst ------------------------------------------------------------------------------- */

/* Busy time of all CPUs (user, nice, system, irq, softirq, steal) in clock ticks. */
static int node_busy_ticks(uint64_t *ret, cs_error **err)
{
        _cleanup_free_ char *text = NULL;
        uint64_t v[8] = { 0 };

        if (cs_read_file("/proc/stat", 64 * 1024, &text, NULL, NULL) < 0)
                return cs_error_errno(err, errno, "cannot read /proc/stat");
        if (sscanf(text,
                   "cpu %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                   " %" SCNu64 " %" SCNu64,
                   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "/proc/stat: unexpected format");
        /* v[3] idle and v[4] iowait are not busy. */
        *ret = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        return 0;
}

typedef struct burst {
        bench_ctx *b;
        const char *sid, *container;
        bool direct;
        int per_worker;
        pthread_mutex_t lock;
        cs_error *first_error;
        int done;
} burst;

static int burst_one(burst *u, cs_error **err)
{
        static const char *const cmd[] = { "true", NULL };

        if (!u->direct) {
                svc_exec_result res;
                return svc_exec_ok(u->b, u->sid, cmd, NULL, NULL, &res, err);
        } else {
                const char *args[] = { "exec", u->container, cmd[0], NULL };
                const char *argv[HOST_MAX_ARGV];
                host_result res;

                host_runsc_argv(u->b, u->b->runsc_root, argv, args);
                return host_run_ok(argv, NULL, NULL, &res, err);
        }
}

static void *burst_worker(void *arg)
{
        burst *u = arg;

        for (int i = 0; i < u->per_worker; i++) {
                cs_error *err = NULL;
                bool ok = burst_one(u, &err) == 0;

                pthread_mutex_lock(&u->lock);
                if (ok)
                        u->done++;
                else if (!u->first_error)
                        u->first_error = err, err = NULL;
                pthread_mutex_unlock(&u->lock);
                cs_error_free(err);
                if (!ok)
                        break;
        }
        return NULL;
}

typedef struct burst_figures {
        double per_s;      /* execs per second */
        double cpu_ms;     /* node CPU per exec */
        double elapsed_ms; /* the whole burst */
} burst_figures;

static int run_burst(bench_ctx *b, const char *sid, const char *container, bool direct,
                     burst_figures *ret, cs_error **err)
{
        burst u = { .b = b,
                    .sid = sid,
                    .container = container,
                    .direct = direct,
                    .per_worker = b->quick ? 2 : 10 };
        pthread_t threads[RESIDENT_BURST];
        pthread_attr_t attr;
        uint64_t busy0, busy1;
        long hz = sysconf(_SC_CLK_TCK);
        int started = 0;
        int64_t t0;

        pthread_mutex_init(&u.lock, NULL);
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, RESIDENT_STACK);
        if (node_busy_ticks(&busy0, err) < 0)
                goto fail;
        t0 = bench_now_ns();
        for (; started < RESIDENT_BURST; started++) {
                if (pthread_create(&threads[started], &attr, burst_worker, &u) != 0)
                        break;
        }
        for (int i = 0; i < started; i++)
                pthread_join(threads[i], NULL);
        ret->elapsed_ms = bench_ms_since(t0);
        if (node_busy_ticks(&busy1, err) < 0)
                goto fail;
        if (u.first_error) {
                *err = u.first_error;
                u.first_error = NULL;
                cs_error_prefix(err, direct ? "runsc exec burst" : "service exec burst");
                goto fail;
        }
        if (started < RESIDENT_BURST || u.done == 0) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "burst: %d of %d threads started", started,
                             RESIDENT_BURST);
                goto fail;
        }
        ret->per_s = u.done / (ret->elapsed_ms / 1000.0);
        ret->cpu_ms = (double)(busy1 - busy0) * 1000.0 / (double)hz / u.done;
        pthread_attr_destroy(&attr);
        pthread_mutex_destroy(&u.lock);
        return 0;
fail:
        pthread_attr_destroy(&attr);
        pthread_mutex_destroy(&u.lock);
        return -1;
}

static int burst_rows(bench_ctx *b, const char *sid, const char *container, cs_error **err)
{
        burst_figures svc, direct;

        /* The baseline first: the service's figures are not helped by its warm-up. */
        if (run_burst(b, sid, container, true, &direct, err) < 0 ||
            run_burst(b, sid, container, false, &svc, err) < 0)
                return -1;
        report_row(b, "burst32_rate", "32 concurrent execs: throughput", "execs/s", svc.per_s,
                   "runsc exec", direct.per_s, (bench_goal){ GOAL_RATIO_GE, 3.0 });
        report_row(b, "burst32_cpu", "32 concurrent execs: node CPU per exec", "ms", svc.cpu_ms,
                   "runsc exec", direct.cpu_ms, (bench_goal){ GOAL_RATIO_LE, 1.0 / 3.0 });
        json_object_set_new(
                b->details, "burst32",
                json_pack("{s:i, s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f}}", "execs_per_side",
                          RESIDENT_BURST * (b->quick ? 2 : 10), "service", "per_s", svc.per_s,
                          "cpu_ms", svc.cpu_ms, "elapsed_ms", svc.elapsed_ms, "runsc_exec", "per_s",
                          direct.per_s, "cpu_ms", direct.cpu_ms, "elapsed_ms", direct.elapsed_ms));
        return 0;
}

int phase_resident(bench_ctx *b, const char *sid, cs_error **err)
{
        _cleanup_free_ char *container = cs_xasprintf("cs-%s", sid);

        report_section(b, "7. resident exec path: first byte and a burst of 32 execs, service vs "
                          "`runsc exec` on the same sandbox");
        if (first_byte_rows(b, sid, container, err) < 0)
                return -1;
        return burst_rows(b, sid, container, err);
}
