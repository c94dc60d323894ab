/* 1. Exec round trip and 2. cold start, each against runsc run directly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "spawner_paths.h"
#include "util.h"

/* The sandbox flags the node agent gives `runsc run` (nodeagent/runtime_runsc.c) with its
 * default --runsc-network, which scripts/bench keeps, and its default --spawner=on. */
static const char *const agent_run_flags[] = { "--network=none", "--overlay2=root:memory",
                                               "--host-uds=open" };

#define EXEC_WARMUP 3

static void latency_rows(bench_ctx *b, const char *id, const char *what, samples *svc,
                         samples *base, const char *base_name, double goal_p50)
{
        static const double pcts[] = { 50, 90, 99 };

        for (size_t i = 0; i < ARRAY_SIZE(pcts); i++) {
                char rid[64], fig[96];
                bench_goal g = { GOAL_NONE, 0 };

                if (pcts[i] == 50)
                        g = (bench_goal){ GOAL_RATIO_LE, goal_p50 };
                snprintf(rid, sizeof(rid), "%s_p%.0f", id, pcts[i]);
                snprintf(fig, sizeof(fig), "%s p%.0f", what, pcts[i]);
                report_row(b, rid, fig, "ms", samples_pct(svc, pcts[i]), base_name,
                           samples_pct(base, pcts[i]), g);
        }
}

/* --- 1. exec round trip ----------------------------------------------------------------- */

static int time_svc_true(bench_ctx *b, const char *sid, double *ret_ms, cs_error **err)
{
        static const char *const argv[] = { "true", NULL };
        svc_exec_result res;
        int64_t t0 = bench_now_ns();

        if (svc_exec_ok(b, sid, argv, NULL, NULL, &res, err) < 0)
                return -1;
        *ret_ms = bench_ms_since(t0);
        return 0;
}

static int time_direct_exec(bench_ctx *b, const char *container, const char *const *cmd,
                            double *ret_ms, cs_error **err)
{
        const char *args[HOST_MAX_ARGV] = { "exec", container };
        const char *argv[HOST_MAX_ARGV];
        host_result res;
        int64_t t0;
        size_t n = 2;

        for (; *cmd && n < HOST_MAX_ARGV - 1; cmd++)
                args[n++] = *cmd;
        args[n] = NULL;
        host_runsc_argv(b, b->runsc_root, argv, args);
        t0 = bench_now_ns();
        if (host_run_ok(argv, NULL, NULL, &res, err) < 0)
                return -1;
        *ret_ms = bench_ms_since(t0);
        return 0;
}

int phase_exec_rtt(bench_ctx *b, const char *sid, cs_error **err)
{
        static const char *const true_cmd[] = { "true", NULL };
        _cleanup_free_ char *container = cs_xasprintf("cs-%s", sid);
        samples svc = { 0 }, direct = { 0 };
        int r = -1;

        report_section(b, "1. exec round trip: ExecCommand `true` via frontend vs "
                          "`runsc exec` on the same sandbox");
        for (int i = 0; i < EXEC_WARMUP; i++) {
                double ms;
                if (time_svc_true(b, sid, &ms, err) < 0 ||
                    time_direct_exec(b, container, true_cmd, &ms, err) < 0)
                        goto out;
        }
        /* Interleaved, alternating which goes first, so drift hits both sides alike. */
        for (int i = 0; i < b->sz.exec_reps; i++) {
                double a, d;
                if (i % 2 == 0) {
                        if (time_svc_true(b, sid, &a, err) < 0 ||
                            time_direct_exec(b, container, true_cmd, &d, err) < 0)
                                goto out;
                } else {
                        if (time_direct_exec(b, container, true_cmd, &d, err) < 0 ||
                            time_svc_true(b, sid, &a, err) < 0)
                                goto out;
                }
                samples_add(&svc, a);
                samples_add(&direct, d);
        }
        latency_rows(b, "exec_rtt", "exec round trip", &svc, &direct, "runsc exec", 0.5);
        json_object_set_new(b->details, "exec_rtt",
                            json_pack("{s:o, s:o}", "service_ms", samples_json(&svc),
                                      "runsc_exec_ms", samples_json(&direct)));
        r = 0;
out:
        samples_free(&svc);
        samples_free(&direct);
        return r;
}

/* --- 2. cold start ---------------------------------------------------------------------- */

/* The bundle the agent wrote for sid, pointed at another workspace, spawner directory and
 * cgroup: the same root, mounts, capabilities, limits and init process (compute-init, whose
 * spawner finds no agent listening in its own directory and keeps retrying, as a sandbox's
 * does before its agent is there) as the service's sandboxes. */
static json_t *load_agent_bundle(bench_ctx *b, const char *sid, cs_error **err)
{
        _cleanup_free_ char *path =
                cs_xasprintf("%s/sandboxes/%s/bundle/config.json", b->state_dir, sid);
        json_error_t jerr;
        json_t *doc = json_load_file(path, 0, &jerr);

        if (!doc)
                cs_error_set(err, GRPC_STATUS_INTERNAL, "cannot load %s: %s", path, jerr.text);
        return doc;
}

static int write_direct_bundle(bench_ctx *b, const json_t *agent, const char *dir, const char *ws,
                               const char *cgroup, cs_error **err)
{
        json_t *doc = json_deep_copy(agent);
        json_t *mounts = json_object_get(doc, "mounts"), *m;
        _cleanup_free_ char *path = cs_xasprintf("%s/config.json", dir);
        size_t i;
        int r;

        (void)b;
        if (mkdir(dir, 0700) < 0 || mkdir(ws, 0755) < 0) {
                json_decref(doc);
                return cs_error_errno(err, errno, "cannot create %s", dir);
        }
        json_array_foreach(mounts, i, m)
        {
                const char *dest = json_string_value(json_object_get(m, "destination")) ?: "";

                if (strcmp(json_string_value(json_object_get(m, "type")) ?: "", "bind") != 0 ||
                    strcmp(dest, CS_SPAWNER_BIN) == 0)
                        continue; /* compute-init itself is shared, read-only */
                if (strcmp(dest, CS_SPAWNER_DIR) == 0) {
                        _cleanup_free_ char *run = cs_xasprintf("%s/run", dir);
                        if (mkdir(run, 0700) < 0) {
                                json_decref(doc);
                                return cs_error_errno(err, errno, "cannot create %s", run);
                        }
                        json_object_set_new(m, "source", json_string(run));
                } else {
                        json_object_set_new(m, "source", json_string(ws));
                }
        }
        json_object_set_new(json_object_get(doc, "linux"), "cgroupsPath", json_string(cgroup));
        r = json_dump_file(doc, path, JSON_INDENT(1));
        json_decref(doc);
        if (r < 0)
                return cs_error_errno(err, errno ? errno : EIO, "cannot write %s", path);
        return 0;
}

/* rm -r of the little a direct cold start leaves: config.json, runsc.log, an empty ws/. */
static void remove_direct_bundle(const char *dir, const char *ws)
{
        _cleanup_free_ char *config = cs_xasprintf("%s/config.json", dir);
        _cleanup_free_ char *log = cs_xasprintf("%s/runsc.log", dir);
        _cleanup_free_ char *run = cs_xasprintf("%s/run", dir);

        unlink(config);
        unlink(log);
        rmdir(ws);
        rmdir(run);
        rmdir(dir);
}

typedef struct cold_sample {
        double total_ms, create_ms; /* create_ms: CreateSandbox, or runsc run -detach */
} cold_sample;

static int cold_svc(bench_ctx *b, cold_sample *ret, cs_error **err)
{
        static const char *const argv[] = { "true", NULL };
        char id[37];
        svc_exec_result res;
        int64_t t0 = bench_now_ns();
        int r;

        if (svc_create(b, id, err) < 0)
                return -1;
        ret->create_ms = bench_ms_since(t0);
        r = svc_exec_ok(b, id, argv, NULL, NULL, &res, err);
        ret->total_ms = bench_ms_since(t0);
        if (svc_destroy(b, id, r < 0 ? NULL : err) < 0)
                return -1;
        return r;
}

static int cold_direct(bench_ctx *b, const json_t *bundle, const char *root, int n,
                       cold_sample *ret, cs_error **err)
{
        static const char *const true_cmd[] = { "true", NULL };
        _cleanup_free_ char *dir = cs_xasprintf("%s/cold-%d", b->work_dir, n);
        _cleanup_free_ char *ws = cs_xasprintf("%s/ws", dir);
        _cleanup_free_ char *log = cs_xasprintf("%s/runsc.log", dir);
        _cleanup_free_ char *cid = cs_xasprintf("bench-cold-%d", n);
        _cleanup_free_ char *cgroup = cs_xasprintf("%s/%s", b->cgroup_parent, cid);
        const char *run_args[] = { agent_run_flags[0],
                                   agent_run_flags[1],
                                   agent_run_flags[2],
                                   "run",
                                   "-detach",
                                   "-bundle",
                                   dir,
                                   cid,
                                   NULL };
        const char *exec_args[] = { "exec", cid, true_cmd[0], NULL };
        const char *kill_args[] = { "kill", cid, "KILL", NULL };
        const char *delete_args[] = { "delete", "-force", cid, NULL };
        const char *argv[HOST_MAX_ARGV];
        host_result res;
        int64_t t0;
        int r;

        if (write_direct_bundle(b, bundle, dir, ws, cgroup, err) < 0)
                return -1;
        t0 = bench_now_ns();
        host_runsc_argv(b, root, argv, run_args);
        r = host_run_logged(argv, log, err);
        ret->create_ms = bench_ms_since(t0);
        if (r == 0) {
                host_runsc_argv(b, root, argv, exec_args);
                r = host_run_ok(argv, NULL, NULL, &res, err);
                ret->total_ms = bench_ms_since(t0);
        }
        /* What the service's DestroySandbox does, untimed on both sides. */
        host_runsc_argv(b, root, argv, kill_args);
        host_run(argv, NULL, NULL, &res, NULL);
        host_runsc_argv(b, root, argv, delete_args);
        host_run(argv, NULL, NULL, &res, NULL);
        remove_direct_bundle(dir, ws);
        return r;
}

int phase_cold_start(bench_ctx *b, const char *sid, cs_error **err)
{
        _cleanup_free_ char *root = cs_xasprintf("%s/runsc", b->work_dir);
        samples svc = { 0 }, direct = { 0 }, svc_create_ms = { 0 }, direct_run_ms = { 0 };
        json_t *bundle;
        int r = -1;

        report_section(b, "2. cold start: CreateSandbox + first ExecCommand `true` vs "
                          "`runsc run -detach` + `runsc exec`");
        if (mkdir(root, 0700) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create %s", root);
        bundle = load_agent_bundle(b, sid, err);
        if (!bundle)
                return -1;
        for (int i = 0; i < b->sz.cold_reps; i++) {
                cold_sample a, d;
                if (i % 2 == 0) {
                        if (cold_svc(b, &a, err) < 0 ||
                            cold_direct(b, bundle, root, i, &d, err) < 0)
                                goto out;
                } else {
                        if (cold_direct(b, bundle, root, i, &d, err) < 0 ||
                            cold_svc(b, &a, err) < 0)
                                goto out;
                }
                samples_add(&svc, a.total_ms);
                samples_add(&svc_create_ms, a.create_ms);
                samples_add(&direct, d.total_ms);
                samples_add(&direct_run_ms, d.create_ms);
        }
        latency_rows(b, "cold_start", "cold start", &svc, &direct, "runsc run -detach + exec",
                     1.20);
        json_object_set_new(b->details, "cold_start",
                            json_pack("{s:o, s:o, s:o, s:o}", "service_ms", samples_json(&svc),
                                      "service_create_rpc_ms", samples_json(&svc_create_ms),
                                      "runsc_ms", samples_json(&direct), "runsc_run_detach_ms",
                                      samples_json(&direct_run_ms)));
        r = 0;
out:
        json_decref(bundle);
        samples_free(&svc);
        samples_free(&direct);
        samples_free(&svc_create_ms);
        samples_free(&direct_run_ms);
        return r;
}
