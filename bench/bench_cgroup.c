/* bench-cgroup: one usage sample of a real cgroup v1 cgroup, read three ways, in ns per sample
 * (median of RUNS runs of ITERS samples). Prints figures; asserts nothing. Needs root and a v1
 * host: it makes /cs-bench-<pid> in the cpuacct, memory and blkio hierarchies, moves itself
 * in (so that the files hold real values), and removes them at the end.
 *
 *   hand-written  cgroup_read(): what the agent does at each exec's start and end
 *   libcgroup     cgroup_new_cgroup + cgroup_get_cgroup (which reads every file of every
 *                 mounted controller) + cgroup_get_value_uint64/_string of the same values
 *   lc-read-value cgroup_read_value_begin/next/end (one fopen per file) of the same files
 *                 cgroup_read() reads, in its order (the values' parsing not counted)
 *
 * Usage: bench-cgroup [ITERS [RUNS]] (defaults 2000 and 15). Figures (this 2-core VM, busy
 * with other work): 57 / 71 / 878 us per sample for the three. They and the decision (the
 * reads stay hand-written) are in docs/nodeagent.md ("Cgroups"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"

static const char *const hierarchies[] = { "cpuacct", "memory", "blkio" };

static double now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static int sample_hand(const cgroup_fs *fs, const char *path)
{
        cgroup_sample s;
        cs_error *err = NULL;

        if (cgroup_read(fs, path, &s, &err) < 0) {
                fprintf(stderr, "cgroup_read: %s\n", err->msg);
                cs_error_free(err);
                return -1;
        }
        return s.cpu_ns > 0 ? 0 : -1;
}

static int sample_libcgroup(const char *name)
{
        struct cgroup *cg = cgroup_new_cgroup(name);
        struct cgroup_controller *cpu, *mem, *blk;
        uint64_t usage = 0, current = 0, peak = 0;
        char *oom = NULL, *io = NULL;
        int r;

        if (!cg)
                return -1;
        /* cgroup_get_cgroup adds every mounted controller itself (one added before is
         * ECGINVAL) and reads every file of each. */
        r = cgroup_get_cgroup(cg);
        if (r == 0) {
                cpu = cgroup_get_controller(cg, "cpuacct");
                mem = cgroup_get_controller(cg, "memory");
                blk = cgroup_get_controller(cg, "blkio");
                r = !cpu || !mem || !blk || cgroup_get_value_uint64(cpu, "cpuacct.usage", &usage) ||
                    cgroup_get_value_uint64(mem, "memory.usage_in_bytes", &current) ||
                    cgroup_get_value_uint64(mem, "memory.max_usage_in_bytes", &peak) ||
                    cgroup_get_value_string(mem, "memory.oom_control", &oom) ||
                    cgroup_get_value_string(blk, "blkio.throttle.io_service_bytes_recursive", &io);
        }
        if (r != 0)
                fprintf(stderr, "libcgroup: %s\n", cgroup_strerror(r));
        free(oom);
        free(io);
        cgroup_free(&cg);
        return r == 0 && usage > 0 ? 0 : -1;
}

/* One file through cgroup_read_value_*: its lines, as a parser would get them. Returns 1 when
 * a line starts with a device number ("8:0 Read 4096"), 0 when none does, -1 when the file
 * cannot be read (cgroup_read() skips a missing one too). */
static int read_value(const char *controller, const char *name, const char *file)
{
        char line[4096], file_name[128];
        void *handle = NULL;
        int r, device = 0;

        /* its prototype takes a char * it does not write to */
        snprintf(file_name, sizeof(file_name), "%s", file);
        r = cgroup_read_value_begin(controller, name, file_name, &handle, line, sizeof(line));
        while (r == 0) {
                device = device || (line[0] >= '0' && line[0] <= '9');
                r = cgroup_read_value_next(&handle, line, sizeof(line));
        }
        if (handle) /* its end does not check: a failed begin leaves it NULL */
                cgroup_read_value_end(&handle);
        return r == ECGEOF ? device : -1;
}

static int sample_read_value(const char *name)
{
        /* The files cgroup_read() reads on v1, in its order: the blkio ones until one names a
         * device. */
        static const char *const blkio[] = {
                "blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes",
                "blkio.io_service_bytes_recursive",          "blkio.io_service_bytes",
                "blkio.bfq.io_service_bytes_recursive",      "blkio.bfq.io_service_bytes"
        };

        if (read_value("cpuacct", name, "cpuacct.usage") < 0 ||
            read_value("memory", name, "memory.usage_in_bytes") < 0 ||
            read_value("memory", name, "memory.max_usage_in_bytes") < 0 ||
            read_value("memory", name, "memory.oom_control") < 0)
                return -1;
        for (size_t i = 0; i < sizeof(blkio) / sizeof(*blkio); i++)
                if (read_value("blkio", name, blkio[i]) > 0)
                        break;
        return 0;
}

typedef enum {
        HAND,
        LIBCGROUP,
        READ_VALUE
} way;

static double run(way w, const cgroup_fs *fs, const char *name, long iters)
{
        double t0 = now_ns();

        for (long i = 0; i < iters; i++) {
                int r = w == HAND        ? sample_hand(fs, name)
                        : w == LIBCGROUP ? sample_libcgroup(name)
                                         : sample_read_value(name);
                if (r < 0)
                        return -1;
        }
        return (now_ns() - t0) / (double)iters;
}

static int enter(const char *root, const char *name, int *made)
{
        char dir[256], procs[300], pid[32];
        int fd, n;

        for (size_t i = 0; i < sizeof(hierarchies) / sizeof(*hierarchies); i++) {
                snprintf(dir, sizeof(dir), "%s/%s/%s", root, hierarchies[i], name);
                if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                        fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
                        return -1;
                }
                made[i] = 1;
                snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
                n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
                fd = open(procs, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || write(fd, pid, (size_t)n) != n) {
                        fprintf(stderr, "joining %s: %s\n", dir, strerror(errno));
                        if (fd >= 0)
                                close(fd);
                        return -1;
                }
                close(fd);
        }
        return 0;
}

/* Back to the root cgroups, and the bench's cgroups removed. */
static void leave(const char *root, const char *name, const int *made)
{
        char dir[256], pid[32];
        int fd, n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());

        for (size_t i = 0; i < sizeof(hierarchies) / sizeof(*hierarchies); i++) {
                if (!made[i])
                        continue;
                snprintf(dir, sizeof(dir), "%s/%s/cgroup.procs", root, hierarchies[i]);
                fd = open(dir, O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                        if (write(fd, pid, (size_t)n) != n)
                                fprintf(stderr, "leaving %s: %s\n", dir, strerror(errno));
                        close(fd);
                }
                snprintf(dir, sizeof(dir), "%s/%s/%s", root, hierarchies[i], name);
                if (rmdir(dir) < 0)
                        fprintf(stderr, "rmdir %s: %s\n", dir, strerror(errno));
        }
}

int main(int argc, char **argv)
{
        const char *root = "/sys/fs/cgroup";
        long iters = argc > 1 ? atol(argv[1]) : 2000, runs = argc > 2 ? atol(argv[2]) : 15;
        static const char *const names[] = { "hand-written", "libcgroup", "lc-read-value" };
        int made[3] = { 0 }, rc = 1;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char name[64];
        double *t;

        if (iters < 1 || runs < 1 || runs > 1000) {
                fprintf(stderr, "usage: bench-cgroup [ITERS [RUNS]]\n");
                return 2;
        }
        if (cgroup_fs_detect(root, &fs, &err) < 0 || fs.version != CS_CGROUP_V1 || !fs.libcgroup) {
                fprintf(stderr, "needs cgroup v1 mounts at %s that libcgroup sees%s%s\n", root,
                        err ? ": " : "", err ? err->msg : "");
                cs_error_free(err);
                cgroup_fs_free(&fs);
                return 1;
        }
        snprintf(name, sizeof(name), "cs-bench-%d", (int)getpid());
        if (enter(root, name, made) < 0)
                goto out;
        {
                /* Some page cache and a write, so that memory and blkio hold values. */
                char tmp[] = "/tmp/bench-cgroup.XXXXXX", buf[65536] = { 1 };
                int fd = mkstemp(tmp);

                if (fd >= 0) {
                        for (int i = 0; i < 64; i++)
                                if (write(fd, buf, sizeof(buf)) < 0)
                                        break;
                        fsync(fd);
                        close(fd);
                        unlink(tmp);
                }
        }
        t = calloc((size_t)runs * 3, sizeof(*t));
        if (!t)
                goto out;
        printf("one usage sample of a v1 cgroup (cpuacct, memory, blkio), %ld x %ld runs:\n", iters,
               runs);
        /* The ways take turns in each run, so that a busy moment of the machine does not fall
         * on one way only. */
        for (long r = 0; r < runs; r++)
                for (way w = HAND; w <= READ_VALUE; w++) {
                        t[w * runs + r] = run(w, &fs, name, iters);
                        if (t[w * runs + r] < 0) {
                                fprintf(stderr, "%s failed\n", names[w]);
                                free(t);
                                goto out;
                        }
                }
        for (way w = HAND; w <= READ_VALUE; w++) {
                double *tw = t + w * runs;

                qsort(tw, (size_t)runs, sizeof(*tw), cmp_double);
                printf("  %-14s median %8.0f ns/sample (min %.0f, max %.0f)\n", names[w],
                       tw[runs / 2], tw[0], tw[runs - 1]);
        }
        free(t);
        rc = 0;
out:
        leave(root, name, made);
        cgroup_fs_free(&fs);
        return rc;
}
