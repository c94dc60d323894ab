/* 4. Workspace I/O: WriteFile and ReadFile in full 16 MiB calls, against the same bytes
 * written and read directly on the workspace's filesystem, and against moving them the way
 * exec-based tools do (base64 through ExecCommand). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "bench.h"
#include "util.h"

#define SVC_FILE    "bench-io.bin"
#define DIRECT_FILE "bench-direct.bin"
/* One name per run: the sandbox may cache what it saw of a file the host removed. */
#define EXEC_FILE_FMT "bench-exec-%d.bin"

/* Exec-based writes: ExecCommand caps command, arguments and environment at 1 MiB together,
 * and Linux (and gVisor) cap one argument at 128 KiB (MAX_ARG_STRLEN). So each exec carries
 * EXECIO_ARGS arguments of EXECIO_ARG_RAW bytes (a multiple of 3: no padding inside), which
 * `sh` concatenates into `base64 -d`. */
#define EXECIO_ARGS      10
#define EXECIO_ARG_RAW   (3 * 24576)
#define EXECIO_ARG_CHARS (EXECIO_ARG_RAW / 3 * 4)
#define EXECIO_PER_EXEC  ((size_t)EXECIO_ARGS * EXECIO_ARG_RAW)

typedef struct files_ctx {
        bench_ctx *b;
        const char *sid;
        char *ws;     /* the workspace on the host */
        int ws_fd;    /* for syncfs */
        uint8_t *src; /* BENCH_FILE_CHUNK bytes of pattern: every chunk of the big files */
        uint8_t *dst; /* BENCH_FILE_CHUNK */
} files_ctx;

/* Starts each measurement without the previous one's dirty pages in flight. */
static void settle(files_ctx *f)
{
        syncfs(f->ws_fd);
}

static void remove_file(files_ctx *f, const char *name)
{
        unlinkat(f->ws_fd, name, 0);
}

static size_t chunk_at(const files_ctx *f, uint64_t off)
{
        uint64_t left = f->b->sz.file_bytes - off;

        return left < BENCH_FILE_CHUNK ? (size_t)left : BENCH_FILE_CHUNK;
}

static int svc_write_run(files_ctx *f, double *ret_mbps, cs_error **err)
{
        int64_t t0;

        settle(f);
        t0 = bench_now_ns();
        for (uint64_t off = 0; off < f->b->sz.file_bytes; off += BENCH_FILE_CHUNK) {
                if (svc_write(f->b, f->sid, SVC_FILE, f->src, chunk_at(f, off), off > 0, err) < 0)
                        return -1;
        }
        *ret_mbps = bench_mbps(f->b->sz.file_bytes, bench_ms_since(t0));
        return 0;
}

/* Times the calls only: the check of each chunk is not part of the figure. */
static int svc_read_run(files_ctx *f, double *ret_mbps, cs_error **err)
{
        double ms = 0;

        for (uint64_t off = 0; off < f->b->sz.file_bytes; off += BENCH_FILE_CHUNK) {
                size_t want = chunk_at(f, off), got = 0;
                int64_t t0 = bench_now_ns();

                if (svc_read(f->b, f->sid, SVC_FILE, (int64_t)off, f->dst, want, &got, err) < 0)
                        return -1;
                ms += bench_ms_since(t0);
                if (got != want || memcmp(f->dst, f->src, want) != 0)
                        return cs_error_set(err, GRPC_STATUS_DATA_LOSS,
                                            "ReadFile at %" PRIu64 ": %zu bytes, not the %zu "
                                            "written",
                                            off, got, want);
        }
        *ret_mbps = bench_mbps(f->b->sz.file_bytes, ms);
        return 0;
}

static int direct_write_run(files_ctx *f, double *ret_mbps, cs_error **err)
{
        int64_t t0;
        int fd;

        settle(f);
        t0 = bench_now_ns();
        fd = openat(f->ws_fd, DIRECT_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return cs_error_errno(err, errno, "cannot create %s/%s", f->ws, DIRECT_FILE);
        for (uint64_t off = 0; off < f->b->sz.file_bytes; off += BENCH_FILE_CHUNK) {
                if (cs_write_all(fd, f->src, chunk_at(f, off)) < 0) {
                        int e = errno;
                        close(fd);
                        return cs_error_errno(err, e, "write %s", DIRECT_FILE);
                }
        }
        close(fd);
        *ret_mbps = bench_mbps(f->b->sz.file_bytes, bench_ms_since(t0));
        return 0;
}

static int direct_read_run(files_ctx *f, double *ret_mbps, cs_error **err)
{
        int64_t t0 = bench_now_ns();
        _cleanup_close_ int fd = openat(f->ws_fd, DIRECT_FILE, O_RDONLY | O_CLOEXEC);
        double ms = bench_ms_since(t0);

        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s/%s", f->ws, DIRECT_FILE);
        for (uint64_t off = 0; off < f->b->sz.file_bytes; off += BENCH_FILE_CHUNK) {
                size_t want = chunk_at(f, off);
                ssize_t got;

                t0 = bench_now_ns();
                got = cs_read_full(fd, f->dst, want);
                ms += bench_ms_since(t0);
                if (got != (ssize_t)want || memcmp(f->dst, f->src, want) != 0)
                        return cs_error_set(err, GRPC_STATUS_DATA_LOSS,
                                            "%s at %" PRIu64 ": not the bytes written", DIRECT_FILE,
                                            off);
        }
        *ret_mbps = bench_mbps(f->b->sz.file_bytes, ms);
        return 0;
}

/* --- the exec-based way ---------------------------------------------------------------- */

static int execio_write(files_ctx *f, const char *name, const uint8_t *data, uint64_t len,
                        double *ret_mbps, cs_error **err)
{
        static const char *const scripts[] = {
                "f=$1; shift; for a; do printf %s \"$a\"; done | base64 -d > \"$f\"",
                "f=$1; shift; for a; do printf %s \"$a\"; done | base64 -d >> \"$f\"",
        };
        _cleanup_free_ char *text = cs_xmalloc((size_t)EXECIO_ARGS * (EXECIO_ARG_CHARS + 1));
        int64_t t0 = bench_now_ns();

        for (uint64_t off = 0; off < len; off += EXECIO_PER_EXEC) {
                const char *argv[5 + EXECIO_ARGS + 1] = { "sh", "-c", scripts[off > 0], "sh",
                                                          name };
                size_t n = 5;
                svc_exec_result res;

                for (uint64_t p = off; p < len && p < off + EXECIO_PER_EXEC; p += EXECIO_ARG_RAW) {
                        size_t raw = len - p < EXECIO_ARG_RAW ? (size_t)(len - p) : EXECIO_ARG_RAW;
                        char *arg = text + (n - 5) * (EXECIO_ARG_CHARS + 1);

                        if (raw % 3)
                                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                                    "exec-based size must be a multiple of 3");
                        cs_base64_encode(data + p, raw, arg);
                        argv[n++] = arg;
                }
                argv[n] = NULL;
                if (svc_exec_ok(f->b, f->sid, argv, NULL, NULL, &res, err) < 0)
                        return -1;
        }
        *ret_mbps = bench_mbps(len, bench_ms_since(t0));
        return 0;
}

/* The decoder keeps its first error: execio_read() reports it from the finish. */
static void decode_output(void *userdata, const uint8_t *data, size_t len)
{
        cs_base64_decoder_feed(userdata, (const char *)data, len, NULL);
}

static int execio_read(files_ctx *f, const char *name, const uint8_t *expect, uint64_t len,
                       double *ret_mbps, cs_error **err)
{
        const char *const argv[] = { "base64", name, NULL };
        _cleanup_free_ uint8_t *out = cs_xmalloc(len);
        cs_base64_decoder d;
        svc_exec_result res;
        int64_t t0 = bench_now_ns();
        size_t n;

        /* `base64` wraps its output in lines. */
        cs_base64_decoder_init(&d, CS_BASE64_SKIP_SPACE, out, len);
        if (svc_exec_ok(f->b, f->sid, argv, decode_output, &d, &res, err) < 0)
                return -1;
        *ret_mbps = bench_mbps(len, bench_ms_since(t0));
        if (cs_base64_decoder_finish(&d, &n, err) < 0)
                return cs_error_prefix(err, "exec-based read");
        if (n != len || memcmp(out, expect, len) != 0)
                return cs_error_set(
                        err, GRPC_STATUS_DATA_LOSS,
                        "exec-based read: %zu bytes decoded, not the %" PRIu64 " written", n, len);
        return 0;
}

/* What the exec-based write left on disk, checked from the host. */
static int execio_check(files_ctx *f, const char *name, const uint8_t *expect, uint64_t len,
                        cs_error **err)
{
        _cleanup_close_ int fd = openat(f->ws_fd, name, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ uint8_t *got = cs_xmalloc(len + 1);
        ssize_t n;

        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s", name);
        n = cs_read_full(fd, got, len + 1);
        if (n != (ssize_t)len || memcmp(got, expect, len) != 0)
                return cs_error_set(err, GRPC_STATUS_DATA_LOSS,
                                    "exec-based write: the file does not hold the bytes sent");
        return 0;
}

static int execio_runs(files_ctx *f, samples *ret_w, samples *ret_r, cs_error **err)
{
        /* Rounded down to whole base64 quanta. */
        uint64_t len = f->b->sz.execio_bytes / 3 * 3;
        _cleanup_free_ uint8_t *data = cs_xmalloc(len);

        host_fill_pattern(data, len, 0xe1ec);
        for (int i = 0; i < f->b->sz.execio_runs; i++) {
                char name[64];
                double wm = 0, rm = 0;
                bool failed;

                snprintf(name, sizeof(name), EXEC_FILE_FMT, i);
                settle(f);
                failed = execio_write(f, name, data, len, &wm, err) < 0 ||
                         execio_check(f, name, data, len, err) < 0 ||
                         execio_read(f, name, data, len, &rm, err) < 0;
                remove_file(f, name);
                if (failed)
                        return -1;
                samples_add(ret_w, wm);
                samples_add(ret_r, rm);
        }
        return 0;
}

/* --- the phase ------------------------------------------------------------------------- */

static int service_and_direct_runs(files_ctx *f, samples *sw, samples *sr, samples *dw, samples *dr,
                                   cs_error **err)
{
        for (int i = 0; i < f->b->sz.file_runs; i++) {
                double a = 0, c = 0, d = 0, e = 0;
                bool svc_first = i % 2 == 0;

                for (int side = 0; side < 2; side++) {
                        if (svc_first == (side == 0)) {
                                if (svc_write_run(f, &a, err) < 0 || svc_read_run(f, &c, err) < 0)
                                        return -1;
                                remove_file(f, SVC_FILE);
                        } else {
                                if (direct_write_run(f, &d, err) < 0 ||
                                    direct_read_run(f, &e, err) < 0)
                                        return -1;
                                remove_file(f, DIRECT_FILE);
                        }
                }
                samples_add(sw, a);
                samples_add(sr, c);
                samples_add(dw, d);
                samples_add(dr, e);
        }
        return 0;
}

static void files_rows(bench_ctx *b, samples *sw, samples *sr, samples *dw, samples *dr,
                       samples *ew, samples *er)
{
        uint64_t mib = b->sz.file_bytes / MIB;
        char fig[128];

        snprintf(fig, sizeof(fig), "WriteFile %" PRIu64 " MiB vs direct write", mib);
        report_row(b, "write_vs_disk", fig, "MB/s", samples_pct(sw, 50), "direct write(2)",
                   samples_pct(dw, 50), (bench_goal){ GOAL_RATIO_GE, 0.80 });
        snprintf(fig, sizeof(fig), "ReadFile %" PRIu64 " MiB vs direct read", mib);
        report_row(b, "read_vs_disk", fig, "MB/s", samples_pct(sr, 50), "direct read(2)",
                   samples_pct(dr, 50), (bench_goal){ GOAL_RATIO_GE, 0.80 });
        snprintf(fig, sizeof(fig), "WriteFile vs exec+base64 (%" PRIu64 " MiB)",
                 b->sz.execio_bytes / MIB);
        report_row(b, "write_vs_exec", fig, "MB/s", samples_pct(sw, 50),
                   "ExecCommand sh -c 'printf | base64 -d >> f'", samples_pct(ew, 50),
                   (bench_goal){ GOAL_RATIO_GE, 10 });
        snprintf(fig, sizeof(fig), "ReadFile vs exec `base64 f` (%" PRIu64 " MiB)",
                 b->sz.execio_bytes / MIB);
        report_row(b, "read_vs_exec", fig, "MB/s", samples_pct(sr, 50), "ExecCommand base64 f",
                   samples_pct(er, 50), (bench_goal){ GOAL_RATIO_GE, 10 });
        json_object_set_new(
                b->details, "files",
                json_pack("{s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "bytes",
                          (json_int_t)b->sz.file_bytes, "call_bytes", (json_int_t)BENCH_FILE_CHUNK,
                          "exec_based_bytes", (json_int_t)b->sz.execio_bytes, "writefile_mbps",
                          samples_json(sw), "readfile_mbps", samples_json(sr), "direct_write_mbps",
                          samples_json(dw), "direct_read_mbps", samples_json(dr), "exec_write_mbps",
                          samples_json(ew), "exec_read_mbps", samples_json(er)));
}

int phase_files(bench_ctx *b, const char *sid, cs_error **err)
{
        files_ctx f = { .b = b, .sid = sid, .ws_fd = -1 };
        samples sw = { 0 }, sr = { 0 }, dw = { 0 }, dr = { 0 }, ew = { 0 }, er = { 0 };
        int r = -1;

        report_section(b, "4. workspace I/O: WriteFile/ReadFile in 16 MiB calls vs the same "
                          "filesystem directly, and vs exec-based transfer");
        f.ws = host_workspace_dir(b, sid);
        f.ws_fd = open(f.ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (f.ws_fd < 0) {
                cs_error_errno(err, errno, "cannot open the workspace %s", f.ws);
                goto out;
        }
        f.src = cs_xmalloc(BENCH_FILE_CHUNK);
        f.dst = cs_xmalloc(BENCH_FILE_CHUNK);
        host_fill_pattern(f.src, BENCH_FILE_CHUNK, 0xf11e);
        if (service_and_direct_runs(&f, &sw, &sr, &dw, &dr, err) < 0 ||
            execio_runs(&f, &ew, &er, err) < 0)
                goto out;
        files_rows(b, &sw, &sr, &dw, &dr, &ew, &er);
        r = 0;
out:
        if (f.ws_fd >= 0) {
                remove_file(&f, SVC_FILE);
                remove_file(&f, DIRECT_FILE);
                close(f.ws_fd);
        }
        free(f.ws);
        free(f.src);
        free(f.dst);
        samples_free(&sw);
        samples_free(&sr);
        samples_free(&dw);
        samples_free(&dr);
        samples_free(&ew);
        samples_free(&er);
        return r;
}
