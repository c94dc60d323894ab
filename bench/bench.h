/* compute-bench: the service measured against what the same machine does without it.
 *
 * Every figure is measured together with its baseline in the same run (docs/performance.md):
 *
 * main.c          options, set-up, the order of the phases, exit status
 * phase_exec.c    1. exec round trip, 2. cold start
 * phase_stream.c  3. output streaming
 * phase_files.c   4. workspace I/O (direct disk and exec-based baselines)
 * phase_conc.c    5. concurrency (throughput, p99, errors, peak RSS)
 * phase_usage.c   6. accounting accuracy
 * phase_resident.c 7. the resident exec path (first byte, a burst of 32 execs)
 * phase_warm.c    8. the warm pool: CreateSandbox to the first byte, warm claim vs cold
 *                 (only when asked: --phases warm, against an agent with --warm-pool)
 * svc.c           the compute API through the project's RPC client
 * host.c          the baselines' side: runsc processes, files, cgroups, /proc
 * stats.c         samples and percentiles
 * report.c        the table and the JSON file
 *
 * Nothing here asserts a time: figures are printed with a verdict per goal, and the exit
 * status only says whether every phase could be measured. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "compute/v1/compute.pb-c.h"
#include "error.h"
#include "rpc.h"

#define BENCH_NAME         "compute-bench"
#define BENCH_METHOD(name) "/compute.v1.ComputeService/" name

#define MIB ((uint64_t)1024 * 1024)
#define GIB (1024 * MIB)

/* The service moves at most this much data per file call; the benchmark uses full calls. */
#define BENCH_FILE_CHUNK RPC_DATA_MAX_BYTES

/* Deadlines of the benchmark's own calls: generous, since 256 concurrent runsc execs on two
 * cores queue for a long time, and a deadline is an error, not a figure. */
#define BENCH_UNARY_TIMEOUT_MS  120000
#define BENCH_STREAM_TIMEOUT_MS 600000

/* --- run configuration ------------------------------------------------------------------ */

/* The concurrency phase's workers: half exec streams and half file calls (the figure), or
 * all of one kind (to tell one's cost from the other's when profiling). */
enum {
        CONC_MIX_BOTH,
        CONC_MIX_EXECS,
        CONC_MIX_FILES,
};

typedef struct bench_sizes {
        int exec_reps;            /* 1: round trips per side */
        int cold_reps;            /* 2: cold starts per side */
        uint64_t stream_bytes;    /* 3: bytes per streaming run */
        int stream_runs;          /*    runs per side (median) */
        uint64_t file_bytes;      /* 4: bytes per WriteFile/ReadFile run */
        int file_runs;            /*    runs per side (median) */
        uint64_t execio_bytes;    /*    bytes moved the exec-based way */
        int execio_runs;          /*    its runs */
        int conc_levels[2];       /* 5: concurrent calls */
        int conc_sandboxes;       /*    sandboxes they are spread over */
        int64_t conc_duration_ms; /*    how long each level starts new operations */
        uint64_t conc_file_bytes; /*    size of each file call */
        int conc_mix;             /*    CONC_MIX_*: what the workers do */
        int usage_runs;           /* 6: CPU burns */
        int usage_burn_s;         /*    seconds per burn */
} bench_sizes;

typedef struct bench_ctx {
        /* options */
        const char *frontend;      /* host:port */
        const char *state_dir;     /* the agent's --state-dir */
        const char *runsc_root;    /* the agent's runsc root */
        const char *runsc;         /* the runsc binary */
        const char *cgroup_root;   /* /sys/fs/cgroup */
        const char *cgroup_parent; /* the agent's --cgroup-parent */
        const char *work_dir;      /* the benchmark's own scratch (bundles, runsc root) */
        const char *json_path;
        pid_t frontend_pid, agent_pid;
        bool quick;
        bench_sizes sz;

        rpc_channel *ch;
        char tenant[64];
        json_t *meta;    /* the JSON file's top-level fields (mode, host, sizes) */
        json_t *details; /* per phase, into the JSON file */
        int failures;    /* phases that could not be measured */
} bench_ctx;

/* --- stats.c ---------------------------------------------------------------------------- */

typedef struct samples {
        double *v;
        size_t n, cap;
} samples;

void samples_add(samples *s, double x);
void samples_merge(samples *into, const samples *from);
/* Percentile p (0..100) with linear interpolation between closest ranks; NAN when empty. */
double samples_pct(const samples *s, double p);
void samples_free(samples *s);
/* {"n", "min", "p50", "p90", "p99", "max", "mean"} */
json_t *samples_json(const samples *s);

/* Monotonic clock in nanoseconds and milliseconds (as a double, for figures). */
int64_t bench_now_ns(void);
double bench_ms_since(int64_t start_ns);
/* When the first output byte came (phases 7 and 8): an output callback's userdata, filled by
 * bench_note_first (first_ns 0 until then). */
typedef struct bench_first_byte {
        int64_t start_ns, first_ns;
} bench_first_byte;
void bench_note_first(void *userdata, const uint8_t *data, size_t len);
/* MB/s (10^6 bytes per second, as dd prints) of bytes moved in ms. */
double bench_mbps(uint64_t bytes, double ms);

/* --- report.c --------------------------------------------------------------------------- */

typedef enum goal_kind {
        GOAL_NONE,
        GOAL_RATIO_LE,     /* service/baseline <= target */
        GOAL_RATIO_GE,     /* service/baseline >= target */
        GOAL_RATIO_WITHIN, /* |service/baseline - 1| <= target */
        GOAL_VALUE_LT,     /* service < target */
        GOAL_VALUE_LE,     /* service <= target */
} goal_kind;

typedef struct bench_goal {
        goal_kind kind;
        double target;
} bench_goal;

/* One line of the table (and of the JSON file's "rows"). Strings are copied; baseline and
 * ratio may be NAN when the figure has none. */
void report_row(bench_ctx *b, const char *id, const char *figure, const char *unit, double service,
                const char *baseline_name, double baseline, bench_goal goal);
/* A section heading in the table. */
void report_section(bench_ctx *b, const char *title);
/* A phase that could not be measured: printed in the table, recorded, counted. */
void report_failure(bench_ctx *b, const char *phase, const cs_error *err);

void report_print(FILE *out);
/* Writes the JSON file: the rows, the goals, the run's configuration and each phase's
 * details. Returns 0 or -1 with *err. */
int report_write_json(bench_ctx *b, cs_error **err);
void report_free(void);

/* --- svc.c: the service --------------------------------------------------------------- */

/* Called with every stdout chunk of an exec, in order. */
typedef void (*svc_output_fn)(void *userdata, const uint8_t *data, size_t len);

typedef struct svc_exec_result {
        int32_t exit_code;
        bool cancelled, timed_out;
        uint64_t stdout_bytes, stderr_bytes;
        uint64_t cpu_ms;       /* ExecCompleted.usage */
        char stderr_head[256]; /* the first bytes of stderr, for error messages */
} svc_exec_result;

/* Creates a sandbox for a new session of b's tenant; *ret_id (36 characters + NUL) receives
 * its id. Retries UNAVAILABLE for a while: the frontend refuses creates until it has reached
 * every node agent once. */
int svc_create(bench_ctx *b, char ret_id[static 37], cs_error **err);
/* Like svc_create, with a CPU limit (0: the default). */
int svc_create_ex(bench_ctx *b, uint32_t cpu_millis, char ret_id[static 37], cs_error **err);
/* DescribeSandbox's status of the sandbox (a compute.v1.SandboxStatus) in *ret_status. */
int svc_status(bench_ctx *b, const char *id, int *ret_status, cs_error **err);
/* Polls DescribeSandbox until the sandbox is READY (or fails). */
int svc_wait_ready(bench_ctx *b, const char *id, cs_error **err);
int svc_destroy(bench_ctx *b, const char *id, cs_error **err);

/* ExecCommand of argv[0] with argv[1..] (NULL-terminated) on sandbox id, reading the stream
 * to its end. on_stdout may be NULL. A stream without ExecCompleted is an error. */
/* Keeps the first bytes of a command's output as text (the rest is dropped): pass
 * text_out_keep with a text_out as the output callback. */
typedef struct text_out {
        char buf[128];
        size_t len;
} text_out;
void text_out_keep(void *userdata, const uint8_t *data, size_t len);

int svc_exec(bench_ctx *b, const char *id, const char *const *argv, svc_output_fn on_stdout,
             void *userdata, svc_exec_result *ret, cs_error **err);
/* Like svc_exec, and an exit code other than 0 is an error too. */
int svc_exec_ok(bench_ctx *b, const char *id, const char *const *argv, svc_output_fn on_stdout,
                void *userdata, svc_exec_result *ret, cs_error **err);

int svc_write(bench_ctx *b, const char *id, const char *path, const uint8_t *data, size_t len,
              bool append, cs_error **err);
/* ReadFile of up to max bytes at offset into buf (which holds max); *ret_len gets the count. */
int svc_read(bench_ctx *b, const char *id, const char *path, int64_t offset, uint8_t *buf,
             size_t max, size_t *ret_len, cs_error **err);

/* --- host.c: the baselines' side ------------------------------------------------------- */

typedef struct host_result {
        int status; /* exit status, or 128+n when killed by signal n */
        uint64_t stdout_bytes;
        char stderr_head[256];
} host_result;

/* Runs argv (argv[0] looked up in PATH) with stdin from /dev/null and stdout and stderr into
 * pipes that this process reads until both close, then waits for it: how the node agent runs
 * `runsc exec`. on_stdout may be NULL. Returns 0 once the process has ended, whatever its
 * status; -1 with *err when it could not be started. */
int host_run(const char *const *argv, svc_output_fn on_stdout, void *userdata, host_result *ret,
             cs_error **err);
/* Like host_run, and a status other than 0 is an error. */
int host_run_ok(const char *const *argv, svc_output_fn on_stdout, void *userdata, host_result *ret,
                cs_error **err);
/* Runs argv with stdout and stderr appended to log_path and waits for it; `runsc run -detach`
 * leaves daemons holding them, so they must not be pipes. A non-zero status is an error. */
int host_run_logged(const char *const *argv, const char *log_path, cs_error **err);

/* The `runsc --root ROOT exec CONTAINER` prefix and friends: argv vectors whose strings live
 * in a caller-provided array of at most HOST_MAX_ARGV entries. */
#define HOST_MAX_ARGV 64
void host_runsc_argv(const bench_ctx *b, const char *root, const char **argv,
                     const char *const *args);

/* The workspace directory of a sandbox on the host (STATE_DIR/workspaces/ID). Caller frees. */
char *host_workspace_dir(const bench_ctx *b, const char *id);

/* CPU time of a sandbox's cgroup in nanoseconds (cpuacct.usage on v1, cpu.stat usage_usec on
 * v2). */
int host_cgroup_cpu_ns(const bench_ctx *b, const char *id, uint64_t *ret, cs_error **err);

/* VmHWM (peak) and VmRSS (current) of pid in bytes (0 if they cannot be read), and the
 * reset of the peak (clear_refs "5"). */
uint64_t host_peak_rss(pid_t pid);
uint64_t host_rss(pid_t pid);
void host_reset_peak_rss(pid_t pid);

/* write(2)/read(2) loops. */

/* Fills buf with a deterministic pseudo-random pattern (incompressible, verifiable). */
void host_fill_pattern(uint8_t *buf, size_t len, uint64_t seed);

/* --- the phases ------------------------------------------------------------------------ */

/* Each measures one figure against its baseline, adds rows to the report and details to
 * b->details. `sid` is a READY sandbox the phase may use (and leaves as it found it). Returns
 * 0, or -1 with *err when the figure could not be measured. */
int phase_exec_rtt(bench_ctx *b, const char *sid, cs_error **err);
int phase_cold_start(bench_ctx *b, const char *sid, cs_error **err);
int phase_stream(bench_ctx *b, const char *sid, cs_error **err);
int phase_files(bench_ctx *b, const char *sid, cs_error **err);
int phase_concurrency(bench_ctx *b, cs_error **err);
int phase_usage(bench_ctx *b, const char *sid, cs_error **err);
int phase_resident(bench_ctx *b, const char *sid, cs_error **err);
int phase_warm(bench_ctx *b, const char *sid, cs_error **err);
