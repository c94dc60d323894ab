/* Unit tests of nodeagent/cgroup.c: fake v1 and v2 trees and fake /proc trees in a temp dir
 * (contents copied from real kernels), plus smoke tests against this machine's /proc and
 * /sys/fs/cgroup (a real v1 cgroup with a child that burns CPU and memory), and libcgroup's
 * paths with a /proc/mounts of the test's own in a private mount namespace: a v2 node (a real
 * cgroup2 mount under a root that lists cpu and memory, which this kernel keeps in v1) and
 * hybrid hosts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include "cgroup.h"
#include "error.h"
#include "util.h"

#define MIB (UINT64_C(1) << 20)

/* ---- fixtures --------------------------------------------------------------------------- */

typedef struct fixture {
        char dir[64]; /* the temp dir every fake tree lives in */
} fixture;

static int setup_tmp(void **state)
{
        fixture *f = cs_xcalloc(1, sizeof(*f));

        snprintf(f->dir, sizeof(f->dir), "/tmp/test_cgroup.XXXXXX");
        if (!mkdtemp(f->dir)) {
                free(f);
                return -1;
        }
        *state = f;
        return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static int teardown_tmp(void **state)
{
        fixture *f = *state;
        int r = nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);

        free(f);
        return r;
}

/* mkdir -p dir/rel */
static void mkdirs(const char *dir, const char *rel)
{
        char path[512];

        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        for (char *p = path + strlen(dir) + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
                *p = '/';
        }
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
}

/* Writes dir/rel (creating its parents) with the given contents and mode. */
static void put_mode(const char *dir, const char *rel, const char *contents, mode_t mode)
{
        char path[512], parent[512];
        char *slash;
        int fd;

        snprintf(parent, sizeof(parent), "%s", rel);
        slash = strrchr(parent, '/');
        if (slash) {
                *slash = '\0';
                mkdirs(dir, parent);
        }
        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, contents, strlen(contents)), (ssize_t)strlen(contents));
        assert_int_equal(close(fd), 0);
}

static void put(const char *dir, const char *rel, const char *contents)
{
        put_mode(dir, rel, contents, 0644);
}

static char *slurp(const char *dir, const char *rel)
{
        char path[512];
        char *buf = cs_xcalloc(1, 4096);
        int fd;

        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_true(read(fd, buf, 4095) >= 0);
        close(fd);
        return buf;
}

/* Asserts that a call failed with code and a message containing needle; frees the error. */
static void check_error(cs_error **err, grpc_status_code code, const char *needle)
{
        assert_non_null(*err);
        if ((*err)->code != code || !strstr((*err)->msg, needle))
                fail_msg("got %s \"%s\", want %s containing \"%s\"", cs_status_name((*err)->code),
                         (*err)->msg, cs_status_name(code), needle);
        cs_error_freep(err);
}

/* ---- realistic file contents ------------------------------------------------------------ */

/* Kernel 6.x, two disks. */
static const char v1_throttle_bytes[] = "8:16 Read 4096\n"
                                        "8:16 Write 1052672\n"
                                        "8:16 Sync 1056768\n"
                                        "8:16 Async 0\n"
                                        "8:16 Discard 0\n"
                                        "8:16 Total 1056768\n"
                                        "8:0 Read 4890624\n"
                                        "8:0 Write 20480\n"
                                        "8:0 Sync 4911104\n"
                                        "8:0 Async 0\n"
                                        "8:0 Discard 0\n"
                                        "8:0 Total 4911104\n"
                                        "Total 5967872\n";

static const char v1_oom_control[] = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";

static const char v2_cpu_stat[] = "usage_usec 1234567\n"
                                  "user_usec 1000000\n"
                                  "system_usec 234567\n"
                                  "nr_periods 0\n"
                                  "nr_throttled 0\n"
                                  "throttled_usec 0\n"
                                  "nr_bursts 0\n"
                                  "burst_usec 0\n";

static const char v2_io_stat[] =
        "253:0 rbytes=1048576 wbytes=4096 rios=256 wios=1 dbytes=0 dios=0\n"
        "8:0 rbytes=2097152 wbytes=8192 rios=512 wios=2 dbytes=0 dios=0\n";

static const char v2_memory_events[] =
        "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";

static const char net_dev_header[] =
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
        "errs drop fifo colls carrier compressed\n";

static const char net_dev_lines[] =
        "    lo: 788042414  196117    0    0    0     0          0         0 788042414  196117 "
        "   0    0    0     0       0          0\n"
        "  eth0: 26798455     676    0    0    0     0          0         0    29101     343 "
        "   0    0    0     0       0          0\n"
        "veth1a2b3c:    1000      10    0    0    0     0          0         0     2000      20 "
        "   0    0    0     0       0          0\n";

/* A fake v1 root with the cpuacct hierarchy under cpuacct_name and cgroup compute/abc. */
static void make_v1_tree(const char *root, const char *cpuacct_name)
{
        char rel[256];

        snprintf(rel, sizeof(rel), "%s/compute/abc/cpuacct.usage", cpuacct_name);
        put(root, rel, "1500000000\n");
        put(root, "memory/compute/abc/memory.usage_in_bytes", "41943040\n");
        put(root, "memory/compute/abc/memory.max_usage_in_bytes", "67108864\n");
        put(root, "memory/compute/abc/memory.oom_control", v1_oom_control);
        put(root, "blkio/compute/abc/blkio.throttle.io_service_bytes", v1_throttle_bytes);
}

static void make_v2_tree(const char *root)
{
        put(root, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
        put(root, "compute/abc/cpu.stat", v2_cpu_stat);
        put(root, "compute/abc/memory.current", "41943040\n");
        put(root, "compute/abc/memory.peak", "67108864\n");
        put(root, "compute/abc/memory.events", v2_memory_events);
        put(root, "compute/abc/io.stat", v2_io_stat);
}

static void detect(const char *root, cgroup_version want, cgroup_fs *fs)
{
        cs_error *err = NULL;

        if (cgroup_fs_detect(root, fs, &err) < 0)
                fail_msg("detect %s: %s", root, err->msg);
        assert_int_equal(fs->version, want);
}

/* ---- children (compute-nodeagent cleanup) ----------------------------------------------- */

static bool has_name(char **names, size_t n, const char *want)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(names[i], want) == 0)
                        return true;
        return false;
}

/* v1: the union over every hierarchy, each name once (a cgroup left in some hierarchies
 * only is found); files are not cgroups; a parent that exists nowhere has none. */
static void test_children_v1(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char **names = NULL;
        size_t n = 99;

        make_v1_tree(f->dir, "cpuacct");
        mkdirs(f->dir, "cpuacct/compute/b");
        mkdirs(f->dir, "memory/compute/b");
        mkdirs(f->dir, "memory/compute/c");
        mkdirs(f->dir, "systemd/compute/d");
        put(f->dir, "memory/compute/memory.limit_in_bytes", "1\n");
        detect(f->dir, CS_CGROUP_V1, &fs);
        assert_int_equal(cgroup_children(&fs, "/compute", &names, &n, &err), 0);
        assert_int_equal(n, 4); /* abc (make_v1_tree), b, c, d */
        assert_true(has_name(names, n, "abc") && has_name(names, n, "b") &&
                    has_name(names, n, "c") && has_name(names, n, "d"));
        cgroup_children_free(names, n);
        assert_int_equal(cgroup_children(&fs, "/nowhere", &names, &n, &err), 0);
        assert_int_equal(n, 0);
        assert_null(names);
        assert_int_equal(cgroup_children(&fs, "/compute/../x", &names, &n, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_freep(&err);
        /* cgroup_exists looks where cgroup_children does: d is in one hierarchy only. */
        assert_true(cgroup_exists(&fs, "/compute"));
        assert_true(cgroup_exists(&fs, "/compute/d"));
        assert_false(cgroup_exists(&fs, "/nowhere"));
        assert_false(cgroup_exists(&fs, "/compute/../compute"));
        cgroup_fs_free(&fs);
}

static void test_children_v2(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char **names = NULL;
        size_t n = 0;

        make_v2_tree(f->dir);
        mkdirs(f->dir, "compute/def");
        mkdirs(f->dir, "other/ghi");
        detect(f->dir, CS_CGROUP_V2, &fs);
        assert_int_equal(cgroup_children(&fs, "compute", &names, &n, &err), 0);
        assert_int_equal(n, 2);
        assert_true(has_name(names, n, "abc") && has_name(names, n, "def"));
        cgroup_children_free(names, n);
        assert_true(cgroup_exists(&fs, "/compute/def"));
        assert_false(cgroup_exists(&fs, "/compute/ghi"));
        cgroup_fs_free(&fs);
}

/* ---- detection -------------------------------------------------------------------------- */

static void test_detect_v1(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        char root[128];

        make_v1_tree(f->dir, "cpuacct");
        snprintf(root, sizeof(root), "%s//", f->dir);
        detect(root, CS_CGROUP_V1, &fs);
        assert_string_equal(fs.root, f->dir); /* trailing slashes dropped */
        assert_false(fs.libcgroup);           /* a plain directory: the files decided */
        assert_false(fs.hybrid);
        cgroup_fs_free(&fs);

        /* systemd's hybrid layout: a cgroup2 hierarchy at root/unified. */
        put(f->dir, "unified/cgroup.controllers", "\n");
        detect(f->dir, CS_CGROUP_V1, &fs);
        assert_true(fs.hybrid);
        cgroup_fs_free(&fs);
        assert_null(fs.root);
        cgroup_fs_free(NULL);
}

static void test_detect_v1_combined_cpuacct(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };

        mkdirs(f->dir, "cpu,cpuacct");
        mkdirs(f->dir, "memory");
        detect(f->dir, CS_CGROUP_V1, &fs);
        cgroup_fs_free(&fs);
}

static void test_detect_v2(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        assert_string_equal(fs.root, f->dir);
        assert_false(fs.libcgroup);
        assert_false(fs.hybrid);
        cgroup_fs_free(&fs);
}

static void test_detect_failures(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char missing[128];

        /* Empty directory. */
        assert_int_equal(cgroup_fs_detect(f->dir, &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, f->dir);

        /* A v2 root without memory (like a hybrid host's unified), and only half of v1. */
        put(f->dir, "cgroup.controllers", "cpu io pids\n");
        mkdirs(f->dir, "cpuacct");
        assert_int_equal(cgroup_fs_detect(f->dir, &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, f->dir);

        /* "cpuset" and "memory_recursiveprot" are not "cpu" and "memory". */
        put(f->dir, "cgroup.controllers", "cpuset memoryx\n");
        assert_int_equal(cgroup_fs_detect(f->dir, &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, f->dir);

        snprintf(missing, sizeof(missing), "%s/nonexistent", f->dir);
        assert_int_equal(cgroup_fs_detect(missing, &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, missing);

        assert_int_equal(cgroup_fs_detect("", &fs, &err), -1);
        check_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "root");
        assert_null(fs.root);
}

static void test_detect_real_v1(void **state)
{
        struct statfs sfs;
        struct stat st;
        cgroup_fs fs = { 0 };

        (void)state;
        if (stat("/sys/fs/cgroup/cpuacct", &st) < 0 || !S_ISDIR(st.st_mode))
                skip();
        detect("/sys/fs/cgroup", CS_CGROUP_V1, &fs);
        assert_string_equal(fs.root, "/sys/fs/cgroup");
        /* The real mounts: libcgroup found them, the hierarchies are its mount points. */
        assert_true(fs.libcgroup);
        assert_non_null(fs.cpuacct_dir);
        assert_string_equal(fs.memory_dir, "/sys/fs/cgroup/memory");
        assert_true(strcmp(fs.cpuacct_dir, "/sys/fs/cgroup/cpuacct") == 0 ||
                    strcmp(fs.cpuacct_dir, "/sys/fs/cgroup/cpu,cpuacct") == 0);
        assert_true(fs.hybrid == (statfs("/sys/fs/cgroup/unified", &sfs) == 0 &&
                                  sfs.f_type == CGROUP2_SUPER_MAGIC));
        cgroup_fs_free(&fs);
}

/* A hybrid host's cgroup2 mount holds no cpu/memory: the statfs path must refuse it. */
static void test_detect_real_hybrid_unified(void **state)
{
        struct statfs sfs;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char *controllers;

        (void)state;
        if (statfs("/sys/fs/cgroup/unified", &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
                skip();
        controllers = slurp("/sys/fs/cgroup/unified", "cgroup.controllers");
        if (strstr(controllers, "memory")) {
                free(controllers);
                skip();
        }
        free(controllers);
        assert_int_equal(cgroup_fs_detect("/sys/fs/cgroup/unified", &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, "cgroup2 mount");
}

/* ---- cgroup_read, v1 -------------------------------------------------------------------- */

static void read_ok(const cgroup_fs *fs, const char *path, cgroup_sample *s)
{
        cs_error *err = NULL;

        if (cgroup_read(fs, path, s, &err) < 0)
                fail_msg("cgroup_read %s: %s", path, err->msg);
}

static void check_v1_full(const cgroup_sample *s)
{
        assert_int_equal(s->cpu_ns, 1500000000);
        assert_int_equal(s->memory_bytes, 40 * MIB);
        assert_int_equal(s->memory_peak_bytes, 64 * MIB);
        assert_true(s->has_peak);
        assert_int_equal(s->io_read_bytes, 4096 + 4890624);
        assert_int_equal(s->io_write_bytes, 1052672 + 20480);
        assert_int_equal(s->oom_kills, 3);
}

static void test_read_v1(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;

        make_v1_tree(f->dir, "cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        memset(&s, 0xff, sizeof(s));
        read_ok(&fs, "/compute/abc", &s);
        check_v1_full(&s);
        memset(&s, 0xff, sizeof(s));
        read_ok(&fs, "compute/abc/", &s); /* no leading slash, trailing slash */
        check_v1_full(&s);
        cgroup_fs_free(&fs);
}

static void test_read_v1_combined_cpuacct(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;

        make_v1_tree(f->dir, "cpu,cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        read_ok(&fs, "/compute/abc", &s);
        check_v1_full(&s);
        cgroup_fs_free(&fs);
}

static void test_read_v1_missing_files(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;

        /* Only the cpuacct cgroup, with no files at all: everything 0. */
        mkdirs(f->dir, "cpuacct/compute/abc");
        mkdirs(f->dir, "memory");
        detect(f->dir, CS_CGROUP_V1, &fs);
        memset(&s, 0xff, sizeof(s));
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.cpu_ns, 0);
        assert_int_equal(s.memory_bytes, 0);
        assert_int_equal(s.memory_peak_bytes, 0);
        assert_false(s.has_peak);
        assert_int_equal(s.io_read_bytes, 0);
        assert_int_equal(s.io_write_bytes, 0);
        assert_int_equal(s.oom_kills, 0);

        /* A memory cgroup without peak, an old kernel's oom_control without oom_kill, a blkio
         * cgroup without files. */
        put(f->dir, "cpuacct/compute/abc/cpuacct.usage", "7\n");
        put(f->dir, "memory/compute/abc/memory.usage_in_bytes", "4096\n");
        put(f->dir, "memory/compute/abc/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
        mkdirs(f->dir, "blkio/compute/abc");
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.cpu_ns, 7);
        assert_int_equal(s.memory_bytes, 4096);
        assert_false(s.has_peak);
        assert_int_equal(s.oom_kills, 0);
        assert_int_equal(s.io_read_bytes, 0);
        cgroup_fs_free(&fs);
}

static void test_read_v1_blkio_fallback(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        char path[256];

        make_v1_tree(f->dir, "cpuacct");
        /* Throttling never saw a bio: only the Total line. The scheduler's file has them. */
        put(f->dir, "blkio/compute/abc/blkio.throttle.io_service_bytes", "Total 0\n");
        put(f->dir, "blkio/compute/abc/blkio.io_service_bytes",
            "8:0 Read 1000\n8:0 Write 2000\n8:0 Sync 3000\n8:0 Async 0\n8:0 Total 3000\n"
            "Total 3000\n");
        detect(f->dir, CS_CGROUP_V1, &fs);
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.io_read_bytes, 1000);
        assert_int_equal(s.io_write_bytes, 2000);

        /* The throttle file missing entirely: same fallback. */
        snprintf(path, sizeof(path), "%s/blkio/compute/abc/blkio.throttle.io_service_bytes",
                 f->dir);
        assert_int_equal(unlink(path), 0);
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.io_read_bytes, 1000);
        assert_int_equal(s.io_write_bytes, 2000);

        /* Devices in the throttle file win: the other file is not added. */
        put(f->dir, "blkio/compute/abc/blkio.throttle.io_service_bytes", v1_throttle_bytes);
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.io_read_bytes, 4096 + 4890624);

        /* The _recursive file (descendants too: a kube pod's processes live in a child
         * cgroup) wins over the cgroup's own counts. */
        put(f->dir, "blkio/compute/abc/blkio.throttle.io_service_bytes_recursive",
            "8:0 Read 7000\n8:0 Write 9000\nTotal 16000\n");
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.io_read_bytes, 7000);
        assert_int_equal(s.io_write_bytes, 9000);
        cgroup_fs_free(&fs);
}

static void test_read_not_found(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;

        make_v1_tree(f->dir, "cpuacct");
        /* A memory cgroup alone does not make the cgroup exist: v1 looks at cpuacct. */
        mkdirs(f->dir, "memory/compute/other");
        detect(f->dir, CS_CGROUP_V1, &fs);
        assert_int_equal(cgroup_read(&fs, "/compute/other", &s, &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "/compute/other");
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/missing", &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "/compute/missing");
        cgroup_fs_free(&fs);
}

static void test_read_bad_path(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;

        make_v1_tree(f->dir, "cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        assert_int_equal(cgroup_read(&fs, "/compute/../../etc", &s, &err), -1);
        check_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "..");
        assert_int_equal(cgroup_read(&fs, "/compute/./abc", &s, &err), -1);
        check_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "..");
        assert_int_equal(cgroup_read(&fs, NULL, &s, &err), -1);
        check_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "path");
        /* "..." is a legal directory name. */
        put(f->dir, "cpuacct/.../cpuacct.usage", "5\n");
        read_ok(&fs, "/...", &s);
        assert_int_equal(s.cpu_ns, 5);
        /* The root cgroup is nobody's sandbox: reading it would report the whole node. */
        put(f->dir, "cpuacct/cpuacct.usage", "6\n");
        assert_int_equal(cgroup_read(&fs, "/", &s, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, "no cgroup of its own");
        assert_int_equal(cgroup_read(&fs, "", &s, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, "no cgroup of its own");
        cgroup_fs_free(&fs);
}

/* Puts contents into rel, expects cgroup_read to fail with INTERNAL naming rel, restores. */
static void expect_garbage(const fixture *f, const cgroup_fs *fs, const char *rel,
                           const char *contents, const char *good)
{
        cgroup_sample s;
        cs_error *err = NULL;
        const char *name = strrchr(rel, '/') + 1;

        put(f->dir, rel, contents);
        if (cgroup_read(fs, "/compute/abc", &s, &err) == 0)
                fail_msg("%s = \"%s\" was accepted", rel, contents);
        check_error(&err, GRPC_STATUS_INTERNAL, name);
        put(f->dir, rel, good);
        read_ok(fs, "/compute/abc", &s);
}

static void test_read_v1_garbage(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };

        make_v1_tree(f->dir, "cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        expect_garbage(f, &fs, "cpuacct/compute/abc/cpuacct.usage", "max\n", "1\n");
        expect_garbage(f, &fs, "cpuacct/compute/abc/cpuacct.usage", "", "1\n");
        expect_garbage(f, &fs, "cpuacct/compute/abc/cpuacct.usage", "-1\n", "1\n");
        expect_garbage(f, &fs, "cpuacct/compute/abc/cpuacct.usage", "1 2\n", "1\n");
        expect_garbage(f, &fs, "cpuacct/compute/abc/cpuacct.usage", "18446744073709551616\n",
                       "18446744073709551615\n");
        expect_garbage(f, &fs, "memory/compute/abc/memory.usage_in_bytes", "12abc\n", "1\n");
        expect_garbage(f, &fs, "memory/compute/abc/memory.max_usage_in_bytes", "0x10\n", "1\n");
        expect_garbage(f, &fs, "memory/compute/abc/memory.oom_control", "oom_kill many\n",
                       v1_oom_control);
        expect_garbage(f, &fs, "blkio/compute/abc/blkio.throttle.io_service_bytes",
                       "8:0 Read 1\n8:0 Write x\nTotal 1\n", v1_throttle_bytes);
        expect_garbage(f, &fs, "blkio/compute/abc/blkio.throttle.io_service_bytes",
                       "garbage here\n", v1_throttle_bytes);
        expect_garbage(f, &fs, "blkio/compute/abc/blkio.throttle.io_service_bytes", "sda Read 1\n",
                       v1_throttle_bytes);
        expect_garbage(f, &fs, "blkio/compute/abc/blkio.throttle.io_service_bytes",
                       "8:0 Read 18446744073709551615\n8:16 Read 1\n", v1_throttle_bytes);
        cgroup_fs_free(&fs);
}

static void test_read_too_large(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        size_t n = 70 * 1024;
        char *big = cs_xmalloc(n + 1);

        memset(big, '1', n);
        big[n] = '\0';
        make_v1_tree(f->dir, "cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        expect_garbage(f, &fs, "memory/compute/abc/memory.usage_in_bytes", big, "1\n");
        free(big);
        cgroup_fs_free(&fs);
}

/* ---- cgroup_read, v2 -------------------------------------------------------------------- */

static void test_read_v2(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        memset(&s, 0xff, sizeof(s));
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.cpu_ns, UINT64_C(1234567) * 1000);
        assert_int_equal(s.memory_bytes, 40 * MIB);
        assert_int_equal(s.memory_peak_bytes, 64 * MIB);
        assert_true(s.has_peak);
        assert_int_equal(s.io_read_bytes, 1048576 + 2097152);
        assert_int_equal(s.io_write_bytes, 4096 + 8192);
        assert_int_equal(s.oom_kills, 1);

        /* The root cgroup's io.stat may carry iocost keys; they are ignored. */
        put(f->dir, "compute/abc/io.stat",
            "8:0 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0 cost.vrate=100.00 "
            "cost.usage=0 cost.wait=0 cost.indebt=0 cost.indelay=0\n\n");
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.io_read_bytes, 10);
        assert_int_equal(s.io_write_bytes, 20);
        cgroup_fs_free(&fs);
}

static void test_read_v2_missing_files(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;

        put(f->dir, "cgroup.controllers", "cpu memory\n");
        mkdirs(f->dir, "compute/abc");
        detect(f->dir, CS_CGROUP_V2, &fs);
        memset(&s, 0xff, sizeof(s));
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.cpu_ns, 0);
        assert_int_equal(s.memory_bytes, 0);
        assert_int_equal(s.memory_peak_bytes, 0);
        assert_false(s.has_peak);
        assert_int_equal(s.io_read_bytes, 0);
        assert_int_equal(s.io_write_bytes, 0);
        assert_int_equal(s.oom_kills, 0);

        /* A pre-5.19 kernel: no memory.peak; an idle cgroup: empty io.stat. */
        put(f->dir, "compute/abc/cpu.stat", v2_cpu_stat);
        put(f->dir, "compute/abc/memory.current", "8192\n");
        put(f->dir, "compute/abc/io.stat", "");
        read_ok(&fs, "/compute/abc", &s);
        assert_int_equal(s.cpu_ns, UINT64_C(1234567000));
        assert_int_equal(s.memory_bytes, 8192);
        assert_false(s.has_peak);
        assert_int_equal(s.io_read_bytes, 0);
        cgroup_fs_free(&fs);
}

static void test_read_v2_not_found(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        assert_int_equal(cgroup_read(&fs, "/compute/nope", &s, &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "/compute/nope");
        /* A path through a file is not a cgroup either, but not NOT_FOUND. */
        assert_int_equal(cgroup_read(&fs, "/compute/abc/cpu.stat", &s, &err), -1);
        assert_non_null(err);
        assert_int_not_equal(err->code, GRPC_STATUS_OK);
        cs_error_freep(&err);
        cgroup_fs_free(&fs);
}

static void test_read_v2_garbage(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        expect_garbage(f, &fs, "compute/abc/memory.current", "max\n", "1\n");
        expect_garbage(f, &fs, "compute/abc/memory.peak", "garbage\n", "1\n");
        expect_garbage(f, &fs, "compute/abc/cpu.stat", "user_usec 5\n", v2_cpu_stat);
        expect_garbage(f, &fs, "compute/abc/cpu.stat", "usage_usec twelve\n", v2_cpu_stat);
        expect_garbage(f, &fs, "compute/abc/cpu.stat", "usage_usec 18446744073709552\n",
                       v2_cpu_stat); /* * 1000 overflows */
        expect_garbage(f, &fs, "compute/abc/memory.events", "oom_kill\n", v2_memory_events);
        expect_garbage(f, &fs, "compute/abc/io.stat", "8:0 rbytes=x wbytes=1\n", v2_io_stat);
        expect_garbage(f, &fs, "compute/abc/io.stat", "8:0 rbytes=1 wbytes\n", v2_io_stat);
        expect_garbage(f, &fs, "compute/abc/io.stat", "rbytes=1 wbytes=2\n", v2_io_stat);
        cgroup_fs_free(&fs);
}

/* A NUL byte would hide the rest of the file from string parsing: refused. */
static void test_read_nul_byte(void **state)
{
        static const char contents[] = "8:0 rbytes=1\0 wbytes=2\n";
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;
        char path[256];
        int fd;

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        snprintf(path, sizeof(path), "%s/compute/abc/io.stat", f->dir);
        fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, contents, sizeof(contents) - 1), sizeof(contents) - 1);
        close(fd);
        assert_int_equal(cgroup_read(&fs, "/compute/abc", &s, &err), -1);
        check_error(&err, GRPC_STATUS_INTERNAL, "io.stat");
        cgroup_fs_free(&fs);
}

/* ---- cgroup_reset_peak ------------------------------------------------------------------ */

static void test_reset_peak_v1(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char *contents;

        make_v1_tree(f->dir, "cpuacct");
        detect(f->dir, CS_CGROUP_V1, &fs);
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/abc", &err), 0);
        assert_null(err);
        contents = slurp(f->dir, "memory/compute/abc/memory.max_usage_in_bytes");
        /* The fake file is not truncated by the write: its first byte is now '0'. A kernel
         * file takes the write as a whole. */
        assert_int_equal(contents[0], '0');
        free(contents);
        put(f->dir, "memory/compute/abc/memory.max_usage_in_bytes", "");
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/abc", &err), 0);
        contents = slurp(f->dir, "memory/compute/abc/memory.max_usage_in_bytes");
        assert_string_equal(contents, "0");
        free(contents);

        /* No memory cgroup, or no file: not supported. */
        mkdirs(f->dir, "cpuacct/compute/nomem");
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/nomem", &err), 1);
        mkdirs(f->dir, "memory/compute/nomem");
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/nomem", &err), 1);
        assert_null(err);
        cgroup_fs_free(&fs);
}

static void test_reset_peak_v2(void **state)
{
        fixture *f = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char path[256], *contents;

        make_v2_tree(f->dir);
        detect(f->dir, CS_CGROUP_V2, &fs);
        /* The reset would be local to the writer's fd: reported as unsupported, file untouched. */
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/abc", &err), 1);
        assert_null(err);
        contents = slurp(f->dir, "compute/abc/memory.peak");
        assert_string_equal(contents, "67108864\n");
        free(contents);

        snprintf(path, sizeof(path), "%s/compute/abc/memory.peak", f->dir);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(cgroup_reset_peak(&fs, "/compute/abc", &err), 1);
        assert_null(err);

        assert_int_equal(cgroup_reset_peak(&fs, "/compute/gone", &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "/compute/gone");
        cgroup_fs_free(&fs);
}

/* ---- /proc ------------------------------------------------------------------------------ */

static void test_proc_net(void **state)
{
        fixture *f = *state;
        cs_error *err = NULL;
        uint64_t rx = 1, tx = 1;
        char buf[2048];

        snprintf(buf, sizeof(buf), "%s%s", net_dev_header, net_dev_lines);
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), 0);
        assert_int_equal(rx, 26798455 + 1000);
        assert_int_equal(tx, 29101 + 2000);

        /* Only loopback. */
        snprintf(buf, sizeof(buf), "%s%s", net_dev_header,
                 "    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n");
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), 0);
        assert_int_equal(rx, 0);
        assert_int_equal(tx, 0);

        /* Old kernels print "%6s:%8llu": a wide counter touches the colon. */
        snprintf(buf, sizeof(buf), "%s%s", net_dev_header,
                 "  eth0:123456789 1 0 0 0 0 0 0 987654321 1 0 0 0 0 0 0\n");
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), 0);
        assert_int_equal(rx, 123456789);
        assert_int_equal(tx, 987654321);

        assert_int_equal(proc_read_net(f->dir, 999, &rx, &tx, &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "999");

        /* Garbage: a short line, a non-number, no header at all. */
        snprintf(buf, sizeof(buf), "%s%s", net_dev_header, "  eth0: 1 2 3\n");
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), -1);
        check_error(&err, GRPC_STATUS_INTERNAL, "net/dev");
        snprintf(buf, sizeof(buf), "%s%s", net_dev_header,
                 "  eth0: 1 1 0 0 0 0 0 0 x 1 0 0 0 0 0 0\n");
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), -1);
        check_error(&err, GRPC_STATUS_INTERNAL, "net/dev");
        snprintf(buf, sizeof(buf), "%s%s", net_dev_header, "  eth0 1 1 0 0 0 0 0 0\n");
        put(f->dir, "1234/net/dev", buf);
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), -1);
        check_error(&err, GRPC_STATUS_INTERNAL, "net/dev");
        put(f->dir, "1234/net/dev", "garbage");
        assert_int_equal(proc_read_net(f->dir, 1234, &rx, &tx, &err), -1);
        check_error(&err, GRPC_STATUS_INTERNAL, "net/dev");
}

static void test_proc_real_self(void **state)
{
        cs_error *err = NULL;
        char buf[256];
        uint64_t rx, tx;
        int fd;

        (void)state;
        /* Make sure this process has read something. */
        fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_true(read(fd, buf, sizeof(buf)) > 0);
        close(fd);
        if (proc_read_net("/proc", getpid(), &rx, &tx, &err) < 0)
                fail_msg("proc_read_net self: %s", err->msg);
}

static int count_fds(void)
{
        char path[64];
        int n = 0;

        for (int fd = 0; fd < 1024; fd++) {
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
                n += access(path, F_OK) == 0;
        }
        return n;
}

/* Every path, successful or not, closes what it opened. */
static void test_no_fd_leaks(void **state)
{
        fixture *f = *state;
        cgroup_fs v1 = { 0 }, v2 = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;
        uint64_t rx, tx;
        char root1[128], root2[128];
        int before;

        snprintf(root1, sizeof(root1), "%s/v1", f->dir);
        snprintf(root2, sizeof(root2), "%s/v2", f->dir);
        mkdirs(f->dir, "v1");
        mkdirs(f->dir, "v2");
        make_v1_tree(root1, "cpuacct");
        put(root1, "cpuacct/compute/abc/cgroup.procs", "1\n");
        make_v2_tree(root2);
        before = count_fds();
        detect(root1, CS_CGROUP_V1, &v1);
        detect(root2, CS_CGROUP_V2, &v2);
        read_ok(&v1, "/compute/abc", &s);
        read_ok(&v2, "/compute/abc", &s);
        assert_int_equal(cgroup_read(&v1, "/compute/none", &s, &err), -1);
        cs_error_freep(&err);
        put(root2, "compute/abc/io.stat", "bad\n");
        assert_int_equal(cgroup_read(&v2, "/compute/abc", &s, &err), -1);
        cs_error_freep(&err);
        assert_int_equal(cgroup_reset_peak(&v1, "/compute/abc", &err), 0);
        assert_int_equal(cgroup_reset_peak(&v2, "/compute/abc", &err), 1);
        assert_int_equal(cgroup_fs_detect(f->dir, &v2, &err), -1);
        cs_error_freep(&err);
        assert_int_equal(proc_read_net("/proc", getpid(), &rx, &tx, &err), 0);
        assert_int_equal(proc_read_net(f->dir, 4321, &rx, &tx, &err), -1);
        cs_error_freep(&err);
        assert_int_equal(count_fds(), before);
        cgroup_fs_free(&v1);
        cgroup_fs_free(&v2);
}

/* ---- a real v1 cgroup ------------------------------------------------------------------- */

typedef struct real_cgroup {
        char name[64];
        char cpuacct[128], memory[128], systemd[128];
        bool made_cpuacct, made_memory, made_systemd;
        pid_t child;
        int release[2]; /* parent writes a byte when the child may start working */
} real_cgroup;

static int setup_real(void **state)
{
        real_cgroup *rc = cs_xcalloc(1, sizeof(*rc));

        rc->child = -1;
        rc->release[0] = rc->release[1] = -1;
        snprintf(rc->name, sizeof(rc->name), "cs-test-%d", (int)getpid());
        snprintf(rc->cpuacct, sizeof(rc->cpuacct), "/sys/fs/cgroup/cpuacct/%s", rc->name);
        snprintf(rc->memory, sizeof(rc->memory), "/sys/fs/cgroup/memory/%s", rc->name);
        snprintf(rc->systemd, sizeof(rc->systemd), "/sys/fs/cgroup/systemd/%s", rc->name);
        *state = rc;
        return 0;
}

static int teardown_real(void **state)
{
        real_cgroup *rc = *state;
        int status;

        if (rc->child > 0) {
                kill(rc->child, SIGKILL);
                waitpid(rc->child, &status, 0);
        }
        cs_closep(&rc->release[0]);
        cs_closep(&rc->release[1]);
        /* A task leaves its cgroups when reaped, so the dirs are empty now. */
        if (rc->made_cpuacct && rmdir(rc->cpuacct) < 0)
                fprintf(stderr, "rmdir %s: %s\n", rc->cpuacct, strerror(errno));
        if (rc->made_memory && rmdir(rc->memory) < 0)
                fprintf(stderr, "rmdir %s: %s\n", rc->memory, strerror(errno));
        if (rc->made_systemd && rmdir(rc->systemd) < 0)
                fprintf(stderr, "rmdir %s: %s\n", rc->systemd, strerror(errno));
        free(rc);
        return 0;
}

static void write_pid(const char *dir, pid_t pid)
{
        char path[192], buf[32];
        int fd, n;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        if (write(fd, buf, (size_t)n) != n)
                fail_msg("moving %d to %s: %s", (int)pid, dir, strerror(errno));
        close(fd);
}

static int64_t cpu_time_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child: waits for the parent to move it, burns 250 ms of CPU, touches 32 MiB, exits. */
static void __attribute__((noreturn)) child_work(int release_fd)
{
        volatile uint64_t x = 0;
        size_t size = 32 * MIB;
        int64_t start;
        char c;
        char *mem;

        if (read(release_fd, &c, 1) != 1)
                _exit(2);
        start = cpu_time_ms();
        while (cpu_time_ms() - start < 250)
                for (int i = 0; i < 100000; i++)
                        x += (uint64_t)i * 7;
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
                _exit(3);
        for (size_t i = 0; i < size; i += 4096)
                mem[i] = (char)i | 1;
        _exit(0);
}

/* The real tests' start: root (a fail in CI, a skip elsewhere) and a v1 hierarchy (else a
 * skip); real_v1_start also makes the test's cpuacct and memory cgroups (teardown_real
 * removes them). */
static void real_v1_fs(cgroup_fs *fs)
{
        cs_error *err = NULL;

        if (geteuid() != 0) {
                if (getenv("CI")) /* CI runs as root: a skip there would hide a pass */
                        fail_msg("this test needs root");
                skip();
        }
        if (cgroup_fs_detect("/sys/fs/cgroup", fs, &err) < 0 || fs->version != CS_CGROUP_V1) {
                cs_error_freep(&err);
                cgroup_fs_free(fs);
                skip();
        }
        assert_true(fs->libcgroup); /* what follows goes through libcgroup's mounts */
}

static void real_v1_start(real_cgroup *rc, cgroup_fs *fs)
{
        real_v1_fs(fs);
        if (mkdir(rc->cpuacct, 0755) < 0)
                fail_msg("mkdir %s: %s", rc->cpuacct, strerror(errno));
        rc->made_cpuacct = true;
        if (mkdir(rc->memory, 0755) < 0)
                fail_msg("mkdir %s: %s", rc->memory, strerror(errno));
        rc->made_memory = true;
}

/* cgroup_remove on the real hierarchy: a process left in the sandbox's cgroups (as a sentry
 * whose stop failed) is killed and the cgroups are gone from every hierarchy; again is fine. */
static void test_real_v1_remove(void **state)
{
        real_cgroup *rc = *state;
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char path[80];
        int status;

        real_v1_start(rc, &fs);
        rc->child = fork();
        assert_true(rc->child >= 0);
        if (rc->child == 0) {
                for (;;)
                        pause();
        }
        write_pid(rc->cpuacct, rc->child);
        write_pid(rc->memory, rc->child);
        /* systemd's named hierarchy, which libcgroup does not list (Debian's opaque one):
         * runsc makes the sandbox's cgroup there too. */
        if (mkdir(rc->systemd, 0755) == 0) {
                rc->made_systemd = true;
                write_pid(rc->systemd, rc->child);
        }

        snprintf(path, sizeof(path), "/%s", rc->name);
        if (cgroup_remove(&fs, path, &err) < 0)
                fail_msg("cgroup_remove: %s", err->msg);
        assert_int_equal(waitpid(rc->child, &status, 0), rc->child);
        rc->child = -1;
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(access(rc->cpuacct, F_OK), -1);
        assert_int_equal(access(rc->memory, F_OK), -1);
        assert_int_equal(access(rc->systemd, F_OK), -1);
        rc->made_cpuacct = rc->made_memory = rc->made_systemd = false;
        assert_int_equal(cgroup_remove(&fs, path, &err), 0);
        assert_int_equal(cgroup_remove(&fs, "/", &err), -1); /* never the root */
        cs_error_freep(&err);
        cgroup_fs_free(&fs);
}

/* The first line of a cgroup file of the test's cgroup in hierarchy hier. */
static void cgroup_file_is(const real_cgroup *rc, const char *hier, const char *name,
                           const char *want)
{
        char path[192], buf[64] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s/%s", hier, rc->name, name);
        f = fopen(path, "re");
        if (!f)
                fail_msg("%s: %s", path, strerror(errno));
        if (!fgets(buf, sizeof(buf), f))
                buf[0] = '\0';
        fclose(f);
        buf[strcspn(buf, "\n")] = '\0';
        if (strcmp(buf, want) != 0)
                fail_msg("%s is '%s', not '%s'", path, buf, want);
}

/* cgroup_create on the real hierarchy: the cgroup is made under every controller libcgroup
 * lists but cpuset (runsc makes that one), with the limits in their v1 files; made again (a
 * sandbox re-made) it takes the new limits; cgroup_remove takes it from everywhere. */
static void test_real_v1_create(void **state)
{
        real_cgroup *rc = *state;
        cgroup_limits lim = { .cpu_millis = 1500, .memory_bytes = 64 * MIB, .pids_max = 300 };
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char path[80], cpuset[128];

        real_v1_fs(&fs);
        snprintf(path, sizeof(path), "/%s", rc->name);
        snprintf(cpuset, sizeof(cpuset), "/sys/fs/cgroup/cpuset/%s", rc->name);
        if (cgroup_create(&fs, path, &lim, &err) != 1)
                fail_msg("cgroup_create: %s", err ? err->msg : "not made");
        rc->made_cpuacct = rc->made_memory = true; /* teardown's, should the test fail */
        assert_int_equal(access(rc->cpuacct, F_OK), 0);
        assert_int_equal(access(cpuset, F_OK), -1);
        cgroup_file_is(rc, "cpu", "cpu.cfs_period_us", "100000");
        cgroup_file_is(rc, "cpu", "cpu.cfs_quota_us", "150000");
        cgroup_file_is(rc, "memory", "memory.limit_in_bytes", "67108864");
        cgroup_file_is(rc, "pids", "pids.max", "300");

        lim.memory_bytes = 32 * MIB;
        assert_int_equal(cgroup_create(&fs, path, &lim, &err), 1);
        cgroup_file_is(rc, "memory", "memory.limit_in_bytes", "33554432");

        if (cgroup_remove(&fs, path, &err) < 0)
                fail_msg("cgroup_remove: %s", err->msg);
        rc->made_cpuacct = rc->made_memory = false;
        assert_int_equal(access(rc->cpuacct, F_OK), -1);
        assert_int_equal(access(rc->memory, F_OK), -1);
        snprintf(cpuset, sizeof(cpuset), "/sys/fs/cgroup/pids/%s", rc->name);
        assert_int_equal(access(cpuset, F_OK), -1);
        /* A fake tree (no libcgroup) leaves the making to the runtime. */
        fs.libcgroup = false;
        assert_int_equal(cgroup_create(&fs, path, &lim, &err), 0);
        assert_int_equal(access(rc->cpuacct, F_OK), -1);
        cgroup_fs_free(&fs);
}

static void test_real_v1_cgroup(void **state)
{
        real_cgroup *rc = *state;
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;
        char path[80];
        int status;

        real_v1_start(rc, &fs);

        assert_int_equal(pipe2(rc->release, O_CLOEXEC), 0);
        rc->child = fork();
        assert_true(rc->child >= 0);
        if (rc->child == 0) {
                close(rc->release[1]);
                child_work(rc->release[0]);
        }
        cs_closep(&rc->release[0]);
        rc->release[0] = -1;
        write_pid(rc->cpuacct, rc->child);
        write_pid(rc->memory, rc->child);

        snprintf(path, sizeof(path), "/%s", rc->name);

        assert_int_equal(write(rc->release[1], "x", 1), 1);
        assert_int_equal(waitpid(rc->child, &status, 0), rc->child);
        rc->child = -1;
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);

        read_ok(&fs, path, &s);
        if (s.cpu_ns <= 100 * UINT64_C(1000000) || s.memory_peak_bytes < 32 * MIB)
                fail_msg("cpu_ns %llu, memory_peak_bytes %llu", (unsigned long long)s.cpu_ns,
                         (unsigned long long)s.memory_peak_bytes);
        assert_true(s.has_peak);

        /* The child is gone and its memory with it: a reset brings the peak down. */
        assert_int_equal(cgroup_reset_peak(&fs, path, &err), 0);
        read_ok(&fs, path, &s);
        assert_true(s.memory_peak_bytes < 32 * MIB);
        cgroup_fs_free(&fs);
}

/* ---- libcgroup with a /proc/mounts of the test's own ------------------------------------- */

/* libcgroup reads /proc/mounts (cgroup_init()); these tests bind a file of their own over
 * /proc/self/mounts, in a private mount namespace that the whole test process enters once
 * (mounts made there vanish with it), so the host's mounts are never touched. */
typedef struct ns_fixture {
        char dir[64];
        char mounts[4][160]; /* what the test mounted, unmounted in reverse */
        int n_mounts;
        bool proc_mounts; /* /proc/self/mounts is bound over */
        pid_t child;
} ns_fixture;

static int setup_ns(void **state)
{
        static bool unshared;
        ns_fixture *nf;

        if (geteuid() != 0)
                return 0; /* the test skips (or fails in CI) */
        if (!unshared) {
                if (unshare(CLONE_NEWNS) < 0 ||
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                        return -1;
                unshared = true;
        }
        nf = cs_xcalloc(1, sizeof(*nf));
        nf->child = -1;
        snprintf(nf->dir, sizeof(nf->dir), "/tmp/test_cgroup.XXXXXX");
        if (!mkdtemp(nf->dir)) {
                free(nf);
                return -1;
        }
        *state = nf;
        return 0;
}

static int teardown_ns(void **state)
{
        ns_fixture *nf = *state;
        int status, r;

        if (!nf)
                return 0;
        if (nf->child > 0) {
                kill(nf->child, SIGKILL);
                waitpid(nf->child, &status, 0);
        }
        if (nf->proc_mounts && umount2("/proc/self/mounts", MNT_DETACH) < 0)
                fprintf(stderr, "umount /proc/self/mounts: %s\n", strerror(errno));
        for (int i = nf->n_mounts - 1; i >= 0; i--) {
                char cg[192];

                /* A cgroup a failed test left in its cgroup2 mount (rmdir: empty by now). */
                snprintf(cg, sizeof(cg), "%s/abc", nf->mounts[i]);
                rmdir(cg);
                if (umount2(nf->mounts[i], MNT_DETACH) < 0)
                        fprintf(stderr, "umount %s: %s\n", nf->mounts[i], strerror(errno));
        }
        r = nftw(nf->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(nf);
        return r;
}

static ns_fixture *ns_start(void **state)
{
        if (geteuid() != 0) {
                if (getenv("CI"))
                        fail_msg("this test needs root");
                skip();
        }
        return *state;
}

/* Mounts a real cgroup2 hierarchy at nf->dir/rel (this kernel's: only the controllers v1
 * does not hold, hugetlb here). */
static void mount_cgroup2(ns_fixture *nf, const char *rel)
{
        char path[sizeof(nf->mounts[0])];

        assert_true(nf->n_mounts < (int)ARRAY_SIZE(nf->mounts));
        mkdirs(nf->dir, rel);
        snprintf(path, sizeof(path), "%s/%s", nf->dir, rel);
        if (mount("cgroup2", path, "cgroup2", 0, NULL) < 0)
                fail_msg("mount -t cgroup2 %s: %s", path, strerror(errno));
        memcpy(nf->mounts[nf->n_mounts++], path, sizeof(path));
}

/* Makes contents the /proc/mounts that libcgroup reads from now on. */
static void fake_proc_mounts(ns_fixture *nf, const char *contents)
{
        char path[128];
        char *seen;

        put(nf->dir, "mounts", contents);
        snprintf(path, sizeof(path), "%s/mounts", nf->dir);
        if (nf->proc_mounts)
                assert_int_equal(umount2("/proc/self/mounts", MNT_DETACH), 0);
        if (mount(path, "/proc/self/mounts", NULL, MS_BIND, NULL) < 0)
                fail_msg("binding %s over /proc/self/mounts: %s", path, strerror(errno));
        nf->proc_mounts = true;
        seen = slurp("/proc", "mounts");
        assert_string_equal(seen, contents);
        free(seen);
}

/* The host's v1 mount lines ("cgroup" type) of the real /proc/mounts. */
static char *host_v1_mount_lines(void)
{
        _cleanup_free_ char *all = NULL;
        char *out = cs_xcalloc(1, 4096), *cur, *line;
        size_t n = 0;

        all = slurp("/proc", "mounts");
        for (cur = all; (line = strsep(&cur, "\n"));)
                if (strstr(line, " cgroup ") && n + strlen(line) + 2 < 4096)
                        n += (size_t)snprintf(out + n, 4096 - n, "%s\n", line);
        return out;
}

/* A v2 node as libcgroup sees it: its /proc/mounts has a cgroup2 mount at root whose
 * cgroup.controllers lists cpu and memory. The kernel cannot give this host's cgroup2
 * hierarchy those (they are bound to v1), so root is a plain directory with the files a v2
 * node's root has, and the sandbox cgroups live on a real cgroup2 mount at root/compute: the
 * kernel's cpu.stat, cgroup.procs, cgroup.kill and rmdir. A child burns CPU in /compute/abc;
 * cgroup_read sees it from the kernel's cpu.stat; cgroup_remove kills it (cgroup.kill) and
 * removes the cgroup through libcgroup. */
static void test_lib_v2_node(void **state)
{
        ns_fixture *nf = ns_start(state);
        cgroup_fs fs = { 0 };
        cgroup_sample s;
        cs_error *err = NULL;
        char root[96], mounts[256], cg[128];
        int to_child[2], from_child[2], status;
        char c;

        snprintf(root, sizeof(root), "%s/v2", nf->dir);
        put(nf->dir, "v2/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
        mount_cgroup2(nf, "v2/compute");
        snprintf(mounts, sizeof(mounts),
                 "cgroup2 %s cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n", root);
        fake_proc_mounts(nf, mounts);

        detect(root, CS_CGROUP_V2, &fs);
        assert_true(fs.libcgroup);
        assert_false(fs.hybrid);
        assert_string_equal(fs.root, root);

        snprintf(cg, sizeof(cg), "%s/compute/abc", root);
        assert_int_equal(mkdir(cg, 0755), 0);
        assert_int_equal(pipe2(to_child, O_CLOEXEC), 0);
        assert_int_equal(pipe2(from_child, O_CLOEXEC), 0);
        nf->child = fork();
        assert_true(nf->child >= 0);
        if (nf->child == 0) {
                volatile uint64_t x = 0;
                int64_t start;

                if (read(to_child[0], &c, 1) != 1)
                        _exit(2);
                start = cpu_time_ms();
                while (cpu_time_ms() - start < 150)
                        for (int i = 0; i < 100000; i++)
                                x += (uint64_t)i * 7;
                if (write(from_child[1], "x", 1) != 1)
                        _exit(3);
                for (;;)
                        pause();
        }
        close(to_child[0]);
        close(from_child[1]);
        write_pid(cg, nf->child);
        assert_int_equal(write(to_child[1], "x", 1), 1);
        assert_int_equal(read(from_child[0], &c, 1), 1);
        close(to_child[1]);
        close(from_child[0]);

        read_ok(&fs, "/compute/abc", &s);
        if (s.cpu_ns < 100 * UINT64_C(1000000))
                fail_msg("cpu_ns %llu from the kernel's cpu.stat", (unsigned long long)s.cpu_ns);
        assert_int_equal(s.memory_bytes, 0); /* no memory controller on this hierarchy */
        assert_false(s.has_peak);

        if (cgroup_remove(&fs, "/compute/abc", &err) < 0)
                fail_msg("cgroup_remove: %s", err->msg);
        assert_int_equal(waitpid(nf->child, &status, 0), nf->child);
        nf->child = -1;
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(access(cg, F_OK), -1);
        assert_int_equal(cgroup_remove(&fs, "/compute/abc", &err), 0); /* again: fine */
        assert_int_equal(cgroup_read(&fs, "/compute/abc", &s, &err), -1);
        check_error(&err, GRPC_STATUS_NOT_FOUND, "does not exist");
        cgroup_fs_free(&fs);

        /* Without cpu and memory in that root, libcgroup has nothing there: the root's files
         * decide, and a real cgroup2 mount without them is refused. */
        snprintf(root, sizeof(root), "%s/v2/compute", nf->dir);
        snprintf(mounts, sizeof(mounts), "cgroup2 %s cgroup2 rw 0 0\n", root);
        fake_proc_mounts(nf, mounts);
        assert_int_equal(cgroup_fs_detect(root, &fs, &err), -1);
        check_error(&err, GRPC_STATUS_FAILED_PRECONDITION, "cgroup2 mount without");
}

/* Hybrid hosts through libcgroup: the host's v1 mounts, and a cgroup2 mount elsewhere that
 * libcgroup lists (it holds hugetlb here). The host's /sys/fs/cgroup/unified is unmounted in
 * this namespace, so only libcgroup can tell. */
static void test_lib_hybrid(void **state)
{
        ns_fixture *nf = ns_start(state);
        _cleanup_free_ char *v1 = host_v1_mount_lines();
        _cleanup_free_ char *controllers = NULL;
        cgroup_fs fs = { 0 };
        struct statfs sfs;
        char mounts[4096 + 256];

        if (!strstr(v1, " /sys/fs/cgroup/memory "))
                skip(); /* not a v1 host */
        if (statfs("/sys/fs/cgroup/unified", &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC &&
            umount2("/sys/fs/cgroup/unified", MNT_DETACH) < 0)
                fail_msg("umount /sys/fs/cgroup/unified: %s", strerror(errno));

        fake_proc_mounts(nf, v1);
        detect("/sys/fs/cgroup", CS_CGROUP_V1, &fs);
        assert_true(fs.libcgroup);
        assert_false(fs.hybrid);
        cgroup_fs_free(&fs);

        mount_cgroup2(nf, "unified");
        controllers = slurp(nf->mounts[0], "cgroup.controllers");
        if (controllers[0] == '\n' || controllers[0] == '\0')
                skip(); /* libcgroup 2.0 skips a cgroup2 mount without controllers */
        snprintf(mounts, sizeof(mounts), "%scgroup2 %s cgroup2 rw 0 0\n", v1, nf->mounts[0]);
        fake_proc_mounts(nf, mounts);
        detect("/sys/fs/cgroup", CS_CGROUP_V1, &fs);
        assert_true(fs.libcgroup);
        assert_true(fs.hybrid);
        cgroup_fs_free(&fs);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_detect_v1, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_detect_v1_combined_cpuacct, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_detect_v2, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_detect_failures, setup_tmp, teardown_tmp),
                cmocka_unit_test(test_detect_real_v1),
                cmocka_unit_test(test_detect_real_hybrid_unified),
                cmocka_unit_test_setup_teardown(test_read_v1, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v1_combined_cpuacct, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v1_missing_files, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v1_blkio_fallback, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_not_found, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_bad_path, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v1_garbage, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_too_large, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_children_v1, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_children_v2, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v2, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v2_missing_files, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v2_not_found, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_v2_garbage, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_read_nul_byte, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_reset_peak_v1, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_reset_peak_v2, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_proc_net, setup_tmp, teardown_tmp),
                cmocka_unit_test(test_proc_real_self),
                cmocka_unit_test_setup_teardown(test_no_fd_leaks, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_real_v1_cgroup, setup_real, teardown_real),
                cmocka_unit_test_setup_teardown(test_real_v1_remove, setup_real, teardown_real),
                cmocka_unit_test_setup_teardown(test_real_v1_create, setup_real, teardown_real),
                /* Last: these run the process in a mount namespace of its own. */
                cmocka_unit_test_setup_teardown(test_lib_v2_node, setup_ns, teardown_ns),
                cmocka_unit_test_setup_teardown(test_lib_hybrid, setup_ns, teardown_ns),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
