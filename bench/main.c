/* compute-bench: see bench.h and docs/performance.md. Started by scripts/bench, which runs a
 * node agent and a frontend for it and cleans up after it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "config.h"
#include "log.h"
#include "util.h"
#include "uuid.h"

static char *opt_frontend, *opt_state_dir, *opt_runsc_root, *opt_runsc, *opt_cgroup_root,
        *opt_cgroup_parent, *opt_work_dir, *opt_json, *opt_phases, *opt_conc_mix;
static int64_t opt_frontend_pid, opt_agent_pid;
static bool opt_quick;

static const cs_option options[] = {
        { "frontend", NULL, CS_OPT_STRING, "127.0.0.1:50051",
          "The frontend to measure (host:port).", &opt_frontend, 0, 0 },
        { "state-dir", NULL, CS_OPT_STRING, NULL,
          "The node agent's --state-dir (its workspaces are measured directly). Required.",
          &opt_state_dir, 0, 0 },
        { "runsc-root", NULL, CS_OPT_STRING, NULL,
          "The agent's runsc root (default STATE_DIR/runsc).", &opt_runsc_root, 0, 0 },
        { "runsc", NULL, CS_OPT_STRING, "runsc", "The runsc binary.", &opt_runsc, 0, 0 },
        { "cgroup-root", NULL, CS_OPT_STRING, "/sys/fs/cgroup", "Where cgroups are mounted.",
          &opt_cgroup_root, 0, 0 },
        { "cgroup-parent", NULL, CS_OPT_STRING, "/compute",
          "The agent's --cgroup-parent; the direct cold starts use it too.", &opt_cgroup_parent, 0,
          0 },
        { "work-dir", NULL, CS_OPT_STRING, NULL,
          "Scratch directory of the direct baselines (bundles, a runsc root). Required; "
          "short, since runsc puts sockets under it.",
          &opt_work_dir, 0, 0 },
        { "frontend-pid", NULL, CS_OPT_INT, "0", "The frontend's pid, for its peak RSS.",
          &opt_frontend_pid, 0, 1 << 30 },
        { "agent-pid", NULL, CS_OPT_INT, "0", "The node agent's pid, for its peak RSS.",
          &opt_agent_pid, 0, 1 << 30 },
        { "json", NULL, CS_OPT_STRING, NULL,
          "Where to write the results (default bench/results/compute-bench-TIME.json).", &opt_json,
          0, 0 },
        { "quick", NULL, CS_OPT_BOOL, "false",
          "Few repetitions and small sizes: checks that everything runs, in about a minute.",
          &opt_quick, 0, 0 },
        { "phases", NULL, CS_OPT_STRING, "exec,cold,stream,files,conc,usage,resident",
          "Which phases to run, comma-separated (for profiling one of them). warm (the warm "
          "pool: against an agent with --warm-pool) runs only when named.",
          &opt_phases, 0, 0 },
        { "conc-mix", NULL, CS_OPT_STRING, "both",
          "What the concurrency phase's workers do: both (half exec streams, half file calls: "
          "the figures), execs or files (for profiling one of them).",
          &opt_conc_mix, 0, 0 },
};

static const cs_program program = {
        .name = BENCH_NAME,
        .summary = "Measures compute.v1.ComputeService through a frontend and its node agent "
                   "against runsc and the disk used directly, in the same run, and prints a "
                   "table with ratios and a verdict per goal (docs/performance.md). Run it "
                   "through scripts/bench, which starts and cleans up the services.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const bench_sizes full_sizes = {
        .exec_reps = 200,
        .cold_reps = 20,
        .stream_bytes = GIB,
        .stream_runs = 3,
        .file_bytes = GIB,
        .file_runs = 3,
        .execio_bytes = 64 * MIB,
        .execio_runs = 1,
        .conc_levels = { 64, 256 },
        .conc_sandboxes = 16,
        .conc_duration_ms = 10000,
        .conc_file_bytes = 64 * 1024,
        .usage_runs = 3,
        .usage_burn_s = 2,
};

static const bench_sizes quick_sizes = {
        .exec_reps = 10,
        .cold_reps = 2,
        .stream_bytes = 64 * MIB,
        .stream_runs = 1,
        .file_bytes = 64 * MIB,
        .file_runs = 1,
        .execio_bytes = 4 * MIB,
        .execio_runs = 1,
        .conc_levels = { 16, 64 },
        .conc_sandboxes = 4,
        .conc_duration_ms = 1000,
        .conc_file_bytes = 64 * 1024,
        .usage_runs = 1,
        .usage_burn_s = 1,
};

static bool phase_wanted(const char *name)
{
        size_t len = strlen(name);

        for (const char *p = opt_phases; (p = strstr(p, name)); p += len) {
                if ((p == opt_phases || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
                        return true;
        }
        return false;
}

static json_t *sizes_json(const bench_sizes *s)
{
        return json_pack("{s:i, s:i, s:I, s:i, s:I, s:i, s:I, s:i, s:[i, i], s:i, s:I, s:I, "
                         "s:i, s:i}",
                         "exec_reps", s->exec_reps, "cold_reps", s->cold_reps, "stream_bytes",
                         (json_int_t)s->stream_bytes, "stream_runs", s->stream_runs, "file_bytes",
                         (json_int_t)s->file_bytes, "file_runs", s->file_runs, "execio_bytes",
                         (json_int_t)s->execio_bytes, "execio_runs", s->execio_runs, "conc_levels",
                         s->conc_levels[0], s->conc_levels[1], "conc_sandboxes", s->conc_sandboxes,
                         "conc_duration_ms", (json_int_t)s->conc_duration_ms, "conc_file_bytes",
                         (json_int_t)s->conc_file_bytes, "usage_runs", s->usage_runs,
                         "usage_burn_s", s->usage_burn_s);
}

/* The first line of `runsc --version`. */
static json_t *runsc_version(bench_ctx *b)
{
        const char *argv[] = { b->runsc, "--version", NULL };
        text_out out = { .len = 0 };
        host_result res;
        cs_error *err = NULL;

        if (host_run(argv, text_out_keep, &out, &res, &err) < 0) {
                cs_error_free(err);
                return json_null();
        }
        out.buf[strcspn(out.buf, "\n")] = '\0';
        return json_string(out.buf);
}

static json_t *host_json(bench_ctx *b)
{
        struct utsname u;
        char model[256] = "";
        FILE *f = fopen("/proc/cpuinfo", "re");

        if (f) {
                char line[512];
                while (fgets(line, sizeof(line), f)) {
                        char *colon = strchr(line, ':');
                        if (strncmp(line, "model name", 10) == 0 && colon) {
                                snprintf(model, sizeof(model), "%s", colon + 2);
                                model[strcspn(model, "\n")] = '\0';
                                break;
                        }
                }
                fclose(f);
        }
        uname(&u);
        return json_pack("{s:i, s:s, s:s, s:o}", "cpus", (int)sysconf(_SC_NPROCESSORS_ONLN),
                         "cpu_model", model, "kernel", u.release, "runsc_version",
                         runsc_version(b));
}

/* The time in UTC, ISO 8601; compact (for file names) or with separators. */
/* The 1, 5 and 15 minute load averages: a busy machine skews every figure, so the JSON
 * records how busy it was. */
static json_t *loadavg_json(void)
{
        double l[3] = { 0, 0, 0 };
        FILE *f = fopen("/proc/loadavg", "re");

        if (f) {
                if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
                        l[0] = l[1] = l[2] = 0;
                fclose(f);
        }
        return json_pack("[f, f, f]", l[0], l[1], l[2]);
}

static void utc_now(char *buf, size_t size, bool compact)
{
        time_t now = time(NULL);
        struct tm tm;

        gmtime_r(&now, &tm);
        if (compact)
                strftime(buf, size, "%Y%m%dT%H%M%SZ", &tm);
        else
                strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int bench_setup(bench_ctx *b, int argc, char **argv, cs_error **err)
{
        char session_tenant[CS_UUID_STRLEN + 1];
        char started[32];
        int r = cs_config_parse(&program, argc, argv, NULL, err);

        if (r != 0)
                return r;
        if (!opt_state_dir || !opt_state_dir[0] || !opt_work_dir || !opt_work_dir[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--state-dir and --work-dir are required");
        b->frontend = opt_frontend;
        b->state_dir = opt_state_dir;
        if (!opt_runsc_root || !opt_runsc_root[0]) {
                free(opt_runsc_root);
                opt_runsc_root = cs_xasprintf("%s/runsc", opt_state_dir);
        }
        b->runsc_root = opt_runsc_root;
        b->runsc = opt_runsc;
        b->cgroup_root = opt_cgroup_root;
        b->cgroup_parent = opt_cgroup_parent;
        b->work_dir = opt_work_dir;
        b->frontend_pid = (pid_t)opt_frontend_pid;
        b->agent_pid = (pid_t)opt_agent_pid;
        b->quick = opt_quick;
        b->sz = opt_quick ? quick_sizes : full_sizes;
        if (strcmp(opt_conc_mix, "execs") == 0)
                b->sz.conc_mix = CONC_MIX_EXECS;
        else if (strcmp(opt_conc_mix, "files") == 0)
                b->sz.conc_mix = CONC_MIX_FILES;
        else if (strcmp(opt_conc_mix, "both") != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--conc-mix: '%s' is not both, execs or files", opt_conc_mix);
        if (!opt_json || !opt_json[0]) {
                char stamp[32];
                utc_now(stamp, sizeof(stamp), true);
                free(opt_json);
                opt_json = cs_xasprintf("bench/results/compute-bench-%s.json", stamp);
        }
        b->json_path = opt_json;
        if (mkdir(b->work_dir, 0700) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create %s", b->work_dir);
        cs_uuid_generate(session_tenant);
        snprintf(b->tenant, sizeof(b->tenant), "bench-%.8s", session_tenant);
        utc_now(started, sizeof(started), false);
        b->details = json_object();
        b->meta = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:o, s:o, s:o}", "tool", BENCH_NAME,
                            "format", 1, "mode", opt_quick ? "quick" : "full", "started_at",
                            started, "frontend", b->frontend, "cgroup_parent", b->cgroup_parent,
                            "host", host_json(b), "sizes", sizes_json(&b->sz), "loadavg_start",
                            loadavg_json());
        return 0;
}

typedef int (*phase_fn)(bench_ctx *b, const char *sid, cs_error **err);

static int conc_phase(bench_ctx *b, const char *sid, cs_error **err)
{
        (void)sid;
        return phase_concurrency(b, err);
}

static const struct {
        const char *name;
        phase_fn run;
} phases[] = {
        { "exec", phase_exec_rtt },     { "cold", phase_cold_start }, { "stream", phase_stream },
        { "files", phase_files },       { "conc", conc_phase },       { "usage", phase_usage },
        { "resident", phase_resident }, { "warm", phase_warm },
};

/* The sandbox the phases share; READY when this returns. */
static int main_sandbox(bench_ctx *b, char sid[static 37], cs_error **err)
{
        static const char *const argv[] = { "true", NULL };
        svc_exec_result res;

        if (svc_create(b, sid, err) < 0 || svc_wait_ready(b, sid, err) < 0)
                return -1;
        return svc_exec_ok(b, sid, argv, NULL, NULL, &res, err);
}

static void run_phases(bench_ctx *b)
{
        char sid[37];
        cs_error *err = NULL;

        if (main_sandbox(b, sid, &err) < 0) {
                report_failure(b, "setup", err);
                cs_error_free(err);
                return;
        }
        json_object_set_new(b->meta, "sandbox_id", json_string(sid));
        for (size_t i = 0; i < ARRAY_SIZE(phases); i++) {
                if (!phase_wanted(phases[i].name))
                        continue;
                if (phases[i].run(b, sid, &err) < 0) {
                        report_failure(b, phases[i].name, err);
                        cs_error_freep(&err);
                }
        }
        if (svc_destroy(b, sid, &err) < 0) {
                report_failure(b, "teardown", err);
                cs_error_free(err);
        }
}

int main(int argc, char **argv)
{
        bench_ctx b = { 0 };
        cs_error *err = NULL;
        int64_t t0 = bench_now_ns();
        int r;

        signal(SIGPIPE, SIG_IGN);
        cs_log_setup(CS_LOG_WARN, false);
        r = bench_setup(&b, argc, argv, &err);
        if (r != 0) {
                if (r < 0)
                        fprintf(stderr, BENCH_NAME ": %s\n", err->msg);
                cs_error_free(err);
                cs_config_free(&program);
                json_decref(b.meta);
                json_decref(b.details);
                return r < 0 ? 2 : 0;
        }
        rpc_global_init();
        b.ch = rpc_channel_new(b.frontend);
        fprintf(stderr, BENCH_NAME ": %s run against %s\n", b.quick ? "quick" : "full", b.frontend);
        run_phases(&b);
        rpc_channel_free(b.ch);
        rpc_global_shutdown();

        json_object_set_new(b.meta, "duration_s", json_real(bench_ms_since(t0) / 1e3));
        json_object_set_new(b.meta, "loadavg_end", loadavg_json());
        printf("\ncompute-bench (%s) against %s, %ld CPUs, %.0f s\n", b.quick ? "quick" : "full",
               b.frontend, sysconf(_SC_NPROCESSORS_ONLN), bench_ms_since(t0) / 1e3);
        report_print(stdout);
        if (report_write_json(&b, &err) < 0) {
                fprintf(stderr, BENCH_NAME ": %s\n", err->msg);
                cs_error_free(err);
                b.failures++;
        } else {
                printf("results: %s\n", b.json_path);
        }
        fflush(stdout);
        r = b.failures ? 1 : 0;
        report_free();
        json_decref(b.meta);
        json_decref(b.details);
        cs_config_free(&program);
        return r;
}
