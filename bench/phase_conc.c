/* 5. Concurrency: N calls in flight at once across a set of sandboxes, half exec streams and
 * half file calls, for a fixed time; the same mix run directly (runsc exec, write/read on the
 * workspace) is the baseline. The figures: throughput, p99, errors, and the peak RSS of the
 * frontend and the agent while the service runs it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

/* Each worker thread only blocks in calls: a small stack is plenty. */
#define CONC_STACK_BYTES (256 * 1024)

typedef struct conc_run {
        bench_ctx *b;
        char (*sids)[37];
        int n_sb, level;
        bool direct;
        int64_t start_ns, stop_ns;
        /* The gate every worker waits at, so that all start at once. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool go;
} conc_run;

typedef struct conc_worker {
        conc_run *run;
        int idx;
        pthread_t thread;
        samples exec_ms, file_ms;
        uint64_t exec_ops, file_ops, errors;
        cs_error *first_error;
        int64_t end_ns;
        uint8_t *data, *back;
} conc_worker;

static int check_echo(const text_out *o, int status, cs_error **err)
{
        if (status != 0 || strcmp(o->buf, "ok\n") != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "echo ok: status %d, output '%s'",
                                    status, o->buf);
        return 0;
}

static int exec_op(conc_worker *w, const char *sid, cs_error **err)
{
        static const char *const cmd[] = { "echo", "ok", NULL };
        text_out o = { .len = 0 };

        if (!w->run->direct) {
                svc_exec_result res;
                if (svc_exec(w->run->b, sid, cmd, text_out_keep, &o, &res, err) < 0)
                        return -1;
                return check_echo(&o, res.exit_code, err);
        } else {
                _cleanup_free_ char *container = cs_xasprintf("cs-%s", sid);
                const char *args[] = { "exec", container, cmd[0], cmd[1], NULL };
                const char *argv[HOST_MAX_ARGV];
                host_result res;

                host_runsc_argv(w->run->b, w->run->b->runsc_root, argv, args);
                if (host_run(argv, text_out_keep, &o, &res, err) < 0)
                        return -1;
                return check_echo(&o, res.status, err);
        }
}

static int direct_file(conc_worker *w, const char *path, bool write_it, cs_error **err)
{
        size_t len = w->run->b->sz.conc_file_bytes;
        _cleanup_close_ int fd = open(
                path, write_it ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_RDONLY | O_CLOEXEC,
                0644);

        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s", path);
        if (write_it ? cs_write_all(fd, w->data, len) < 0
                     : cs_read_full(fd, w->back, len) != (ssize_t)len)
                return cs_error_errno(err, errno ? errno : EIO, "%s", path);
        return 0;
}

/* One file "operation" is two calls, each timed and counted: a write and its read-back. */
static int file_op(conc_worker *w, const char *sid, cs_error **err)
{
        bench_ctx *b = w->run->b;
        size_t len = b->sz.conc_file_bytes, got = len;
        _cleanup_free_ char *path = NULL;
        int64_t t0 = bench_now_ns();

        if (!w->run->direct) {
                path = cs_xasprintf("conc/%d-%d.bin", w->run->level, w->idx);
                if (svc_write(b, sid, path, w->data, len, false, err) < 0)
                        return -1;
        } else {
                _cleanup_free_ char *ws = host_workspace_dir(b, sid);
                path = cs_xasprintf("%s/conc-direct/%d-%d.bin", ws, w->run->level, w->idx);
                if (direct_file(w, path, true, err) < 0)
                        return -1;
        }
        samples_add(&w->file_ms, bench_ms_since(t0));
        w->file_ops++;
        memset(w->back, 0, len);
        t0 = bench_now_ns();
        if (!w->run->direct) {
                if (svc_read(b, sid, path, 0, w->back, len, &got, err) < 0)
                        return -1;
        } else if (direct_file(w, path, false, err) < 0) {
                return -1;
        }
        samples_add(&w->file_ms, bench_ms_since(t0));
        w->file_ops++;
        if (got != len || memcmp(w->back, w->data, len) != 0)
                return cs_error_set(err, GRPC_STATUS_DATA_LOSS, "%s: read back other bytes", path);
        return 0;
}

static void *worker_main(void *arg)
{
        conc_worker *w = arg;
        conc_run *run = w->run;
        const char *sid = run->sids[w->idx % run->n_sb];
        int mix = run->b->sz.conc_mix;
        bool exec_kind = mix == CONC_MIX_EXECS || (mix == CONC_MIX_BOTH && w->idx % 2 == 0);

        pthread_mutex_lock(&run->lock);
        while (!run->go)
                pthread_cond_wait(&run->cond, &run->lock);
        pthread_mutex_unlock(&run->lock);
        do {
                cs_error *err = NULL;
                int64_t t0 = bench_now_ns();

                if (exec_kind) {
                        if (exec_op(w, sid, &err) == 0) {
                                samples_add(&w->exec_ms, bench_ms_since(t0));
                                w->exec_ops++;
                        }
                } else {
                        file_op(w, sid, &err);
                }
                if (err) {
                        w->errors++;
                        if (!w->first_error)
                                w->first_error = err;
                        else
                                cs_error_free(err);
                }
        } while (bench_now_ns() < run->stop_ns);
        w->end_ns = bench_now_ns();
        return NULL;
}

typedef struct conc_figures {
        double exec_ops_s, file_ops_s, exec_p50, exec_p99, file_p50, file_p99, seconds;
        uint64_t exec_ops, file_ops, errors;
        json_t *first_error;
} conc_figures;

static void conc_collect(conc_worker *w, int n, int64_t start_ns, conc_figures *ret)
{
        samples exec_ms = { 0 }, file_ms = { 0 };
        int64_t end = start_ns;

        memset(ret, 0, sizeof(*ret));
        ret->first_error = json_null();
        for (int i = 0; i < n; i++) {
                samples_merge(&exec_ms, &w[i].exec_ms);
                samples_merge(&file_ms, &w[i].file_ms);
                ret->exec_ops += w[i].exec_ops;
                ret->file_ops += w[i].file_ops;
                ret->errors += w[i].errors;
                if (w[i].end_ns > end)
                        end = w[i].end_ns;
                if (w[i].first_error && json_is_null(ret->first_error)) {
                        json_decref(ret->first_error);
                        ret->first_error = json_string(w[i].first_error->msg);
                }
        }
        ret->seconds = (double)(end - start_ns) / 1e9;
        ret->exec_ops_s = (double)ret->exec_ops / ret->seconds;
        ret->file_ops_s = (double)ret->file_ops / ret->seconds;
        ret->exec_p50 = samples_pct(&exec_ms, 50);
        ret->exec_p99 = samples_pct(&exec_ms, 99);
        ret->file_p50 = samples_pct(&file_ms, 50);
        ret->file_p99 = samples_pct(&file_ms, 99);
        samples_free(&exec_ms);
        samples_free(&file_ms);
}

static int conc_level(bench_ctx *b, char (*sids)[37], int level, bool direct, conc_figures *ret,
                      cs_error **err)
{
        conc_run run = { .b = b,
                         .sids = sids,
                         .n_sb = b->sz.conc_sandboxes,
                         .level = level,
                         .direct = direct,
                         .lock = PTHREAD_MUTEX_INITIALIZER,
                         .cond = PTHREAD_COND_INITIALIZER };
        conc_worker *w = cs_xcalloc((size_t)level, sizeof(*w));
        pthread_attr_t attr;
        int started = 0;

        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, CONC_STACK_BYTES);
        for (; started < level; started++) {
                w[started] = (conc_worker){ .run = &run, .idx = started };
                w[started].data = cs_xmalloc(b->sz.conc_file_bytes);
                w[started].back = cs_xmalloc(b->sz.conc_file_bytes);
                host_fill_pattern(w[started].data, b->sz.conc_file_bytes, (uint64_t)started);
                if (pthread_create(&w[started].thread, &attr, worker_main, &w[started]) != 0) {
                        cs_error_errno(err, errno, "cannot start worker %d", started);
                        break;
                }
        }
        pthread_attr_destroy(&attr);
        /* Open the gate. After a failed start, the workers that run do one operation each
         * (stop_ns 0), so that they can be joined. */
        pthread_mutex_lock(&run.lock);
        run.start_ns = bench_now_ns();
        run.stop_ns = started == level ? run.start_ns + b->sz.conc_duration_ms * 1000000 : 0;
        run.go = true;
        pthread_cond_broadcast(&run.cond);
        pthread_mutex_unlock(&run.lock);
        for (int i = 0; i < started; i++)
                pthread_join(w[i].thread, NULL);
        if (started == level)
                conc_collect(w, level, run.start_ns, ret);
        for (int i = 0; i < level; i++) {
                samples_free(&w[i].exec_ms);
                samples_free(&w[i].file_ms);
                cs_error_free(w[i].first_error);
                free(w[i].data);
                free(w[i].back);
        }
        free(w);
        return started == level ? 0 : -1;
}

static json_t *figures_json(const conc_figures *f)
{
        json_t *j = json_pack("{s:f, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "seconds",
                              f->seconds, "exec_ops", (json_int_t)f->exec_ops, "file_ops",
                              (json_int_t)f->file_ops, "errors", (json_int_t)f->errors,
                              "exec_ops_per_s", f->exec_ops_s, "file_ops_per_s", f->file_ops_s,
                              "exec_p50_ms", f->exec_p50, "exec_p99_ms", f->exec_p99, "file_p50_ms",
                              f->file_p50, "file_p99_ms", f->file_p99);

        json_object_set(j, "first_error", f->first_error);
        return j;
}

static void level_rows(bench_ctx *b, int level, const conc_figures *s, const conc_figures *d,
                       double fe_mib, double agent_mib)
{
        const bench_goal none = { GOAL_NONE, 0 };
        char id[64], fig[96];

#define ROW(key, what, unit, sv, dv, goal)                                                         \
        do {                                                                                       \
                snprintf(id, sizeof(id), "conc%d_%s", level, key);                                 \
                snprintf(fig, sizeof(fig), "%d concurrent: %s", level, what);                      \
                report_row(b, id, fig, unit, sv, "the same mix run directly", dv, goal);           \
        } while (0)
        ROW("exec_ops", "exec throughput", "op/s", s->exec_ops_s, d->exec_ops_s, none);
        ROW("exec_p99", "exec p99", "ms", s->exec_p99, d->exec_p99, none);
        ROW("file_ops", "file call throughput", "op/s", s->file_ops_s, d->file_ops_s, none);
        ROW("file_p99", "file call p99", "ms", s->file_p99, d->file_p99, none);
        ROW("errors", "errors", "count", (double)s->errors, (double)d->errors,
            ((bench_goal){ GOAL_VALUE_LE, 0 }));
#undef ROW
        snprintf(id, sizeof(id), "conc%d_frontend_rss", level);
        snprintf(fig, sizeof(fig), "%d concurrent: frontend peak RSS", level);
        report_row(b, id, fig, "MiB", fe_mib, NULL, NAN, (bench_goal){ GOAL_VALUE_LT, 64 });
        snprintf(id, sizeof(id), "conc%d_agent_rss", level);
        snprintf(fig, sizeof(fig), "%d concurrent: agent peak RSS", level);
        report_row(b, id, fig, "MiB", agent_mib, NULL, NAN, (bench_goal){ GOAL_VALUE_LT, 64 });
}

static int make_direct_dirs(bench_ctx *b, char (*sids)[37], int n, cs_error **err)
{
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *ws = host_workspace_dir(b, sids[i]);
                _cleanup_free_ char *dir = cs_xasprintf("%s/conc-direct", ws);

                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return cs_error_errno(err, errno, "cannot create %s", dir);
        }
        return 0;
}

static int run_levels(bench_ctx *b, char (*sids)[37], json_t *levels, cs_error **err)
{
        for (size_t l = 0; l < ARRAY_SIZE(b->sz.conc_levels); l++) {
                int level = b->sz.conc_levels[l];
                conc_figures s, d;
                double fe, agent;
                /* What the services hold before the level starts (the peaks cannot be lower). */
                double fe_start = (double)host_rss(b->frontend_pid) / MIB;
                double agent_start = (double)host_rss(b->agent_pid) / MIB;

                /* The peaks are of this level alone: clear_refs resets VmHWM. */
                host_reset_peak_rss(b->frontend_pid);
                host_reset_peak_rss(b->agent_pid);
                if (conc_level(b, sids, level, false, &s, err) < 0)
                        return -1;
                fe = (double)host_peak_rss(b->frontend_pid) / MIB;
                agent = (double)host_peak_rss(b->agent_pid) / MIB;
                if (conc_level(b, sids, level, true, &d, err) < 0) {
                        json_decref(s.first_error);
                        return -1;
                }
                level_rows(b, level, &s, &d, fe, agent);
                json_array_append_new(
                        levels, json_pack("{s:i, s:o, s:o, s:f, s:f, s:f, s:f}", "concurrent",
                                          level, "service", figures_json(&s), "direct",
                                          figures_json(&d), "frontend_peak_rss_mib", fe,
                                          "agent_peak_rss_mib", agent, "frontend_rss_at_start_mib",
                                          fe_start, "agent_rss_at_start_mib", agent_start));
                json_decref(s.first_error);
                json_decref(d.first_error);
        }
        return 0;
}

int phase_concurrency(bench_ctx *b, cs_error **err)
{
        int n = b->sz.conc_sandboxes;
        char(*sids)[37] = cs_xcalloc((size_t)n, sizeof(*sids));
        json_t *levels = json_array();
        int created = 0, r = -1;
        /* What the earlier phases (16 MiB file calls, 1 GiB streams) left as peaks. */
        double fe_before = (double)host_peak_rss(b->frontend_pid) / MIB;
        double agent_before = (double)host_peak_rss(b->agent_pid) / MIB;

        report_section(b, "5. concurrency: half exec streams (`echo ok`), half file calls "
                          "(write + read back), across the sandboxes");
        for (; created < n; created++) {
                if (svc_create(b, sids[created], err) < 0)
                        goto out;
        }
        for (int i = 0; i < n; i++) {
                if (svc_wait_ready(b, sids[i], err) < 0)
                        goto out;
        }
        if (make_direct_dirs(b, sids, n, err) < 0 || run_levels(b, sids, levels, err) < 0)
                goto out;
        report_row(b, "peak_rss_frontend_phases_1_4", "frontend peak RSS in phases 1-4", "MiB",
                   fe_before, NULL, NAN, (bench_goal){ GOAL_NONE, 0 });
        report_row(b, "peak_rss_agent_phases_1_4", "agent peak RSS in phases 1-4", "MiB",
                   agent_before, NULL, NAN, (bench_goal){ GOAL_NONE, 0 });
        json_object_set_new(b->details, "concurrency",
                            json_pack("{s:i, s:s, s:I, s:I, s:O, s:f, s:f}", "sandboxes", n, "mix",
                                      b->sz.conc_mix == CONC_MIX_BOTH    ? "both"
                                      : b->sz.conc_mix == CONC_MIX_EXECS ? "execs"
                                                                         : "files",
                                      "duration_ms", (json_int_t)b->sz.conc_duration_ms,
                                      "file_call_bytes", (json_int_t)b->sz.conc_file_bytes,
                                      "levels", levels, "frontend_peak_rss_mib_phases_1_4",
                                      fe_before, "agent_peak_rss_mib_phases_1_4", agent_before));
        r = 0;
out:
        json_decref(levels);
        for (int i = 0; i < created; i++) {
                cs_error *e = NULL;
                if (svc_destroy(b, sids[i], &e) < 0 && r == 0) {
                        *err = e;
                        r = -1;
                } else {
                        cs_error_free(e);
                }
        }
        free(sids);
        return r;
}
