/* Reading a sandbox's resource usage from cgroups (v1 or v2) and /proc, and removing a
 * sandbox's cgroup that its runtime left behind.
 *
 * libcgroup finds the mounts and their version and removes cgroups; the reads below are ours:
 * one openat and read per file, where libcgroup's cgroup_get_cgroup() reads every file of
 * every controller and its cgroup_read_value_*() is a fopen per file (bench/bench_cgroup.c;
 * the figures are in docs/nodeagent.md). Who does what with a sandbox's cgroup: runsc makes it
 * from linux.cgroupsPath and sets its limits from linux.resources (cpu, memory, pids), and
 * runsc delete removes it; the agent reads it, and removes it when the runtime could not.
 *
 * Everything here parses kernel text files. The kernel is trusted to write them, but the
 * parsers still treat them as untrusted bytes: every read is bounded by a named cap, numbers
 * are parsed digit by digit with overflow checks (strtoull would accept "-1" and wrap), and a
 * value that is not what the kernel documents ("max", garbage) is an INTERNAL error naming the
 * file, never a silent 0. A file that does not exist is different: older kernels lack some of
 * them, so its fields stay 0. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <libcgroup.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "util.h"

/* Single-value and keyed files (cpuacct.usage, cpu.stat, memory.events, /proc/<pid>/io) are
 * a few hundred bytes. */
#define CGROUP_SMALL_FILE_MAX (64 * 1024)
/* Files with a line per device, pid or interface: a host with hundreds of block devices or
 * veths, or a cgroup with many processes, stays well below this. */
#define CGROUP_LIST_FILE_MAX (1024 * 1024)
/* A cgroup path longer than this cannot name a real directory. */
#define CGROUP_PATH_MAX PATH_MAX

/* ---- reading files ---------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t n)
{
        void *q = realloc(p, n);

        if (!q)
                abort(); /* like cs_xmalloc: nothing useful can be done without memory */
        return q;
}

/* Reads all of fd (at most cap bytes) into a NUL-terminated buffer. Returns 0, or a negative
 * errno (-EFBIG when the file is larger than cap). */
static int read_fd_all(int fd, size_t cap, char **ret_buf, size_t *ret_len)
{
        size_t size = cap + 2 < 4096 ? cap + 2 : 4096, len = 0;
        _cleanup_free_ char *buf = cs_xmalloc(size);

        for (;;) {
                ssize_t n;

                if (len + 1 == size) {
                        if (len > cap)
                                return -EFBIG;
                        /* Room for one byte over the cap, to tell "exactly cap" from "more". */
                        size = size * 2 < cap + 2 ? size * 2 : cap + 2;
                        buf = xrealloc(buf, size);
                }
                n = read(fd, buf + len, size - 1 - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        if (len > cap)
                return -EFBIG;
        buf[len] = '\0';
        *ret_buf = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* Reads dir/name (dirfd is dir, which is only used in messages). Returns 0 with *ret_buf
 * (NUL-terminated, caller frees), 1 when the file does not exist, -1 with *err. */
static int read_file_at(int dirfd, const char *dir, const char *name, size_t cap, char **ret_buf,
                        cs_error **err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r;

        fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 1;
                return cs_error_errno(err, errno, "opening %s/%s", dir, name);
        }
        r = read_fd_all(fd, cap, &buf, &len);
        if (r == -EFBIG)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/%s is larger than %zu bytes",
                                    dir, name, cap);
        if (r < 0)
                return cs_error_errno(err, -r, "reading %s/%s", dir, name);
        if (memchr(buf, '\0', len))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/%s contains a NUL byte", dir,
                                    name);
        *ret_buf = TAKE_PTR(buf);
        return 0;
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* Parses exactly the n bytes at s as an unsigned decimal: digits only, no sign, no spaces. */
static int parse_u64(const char *s, size_t n, uint64_t *ret)
{
        uint64_t v = 0;

        if (n == 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -1;
                if (__builtin_mul_overflow(v, 10, &v) ||
                    __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v))
                        return -1;
        }
        *ret = v;
        return 0;
}

static int parse_u64_str(const char *s, uint64_t *ret)
{
        return parse_u64(s, strlen(s), ret);
}

/* Cuts the next line out of *cursor (NUL-terminating it) and advances. NULL at the end. */
static char *next_line(char **cursor)
{
        char *line = *cursor, *nl;

        if (!line || *line == '\0')
                return NULL;
        nl = strchr(line, '\n');
        if (nl) {
                *nl = '\0';
                *cursor = nl + 1;
        } else {
                *cursor = line + strlen(line);
        }
        return line;
}

/* Cuts the next space- or tab-separated field out of *cursor. NULL when none is left. */
static char *next_field(char **cursor)
{
        char *p = *cursor + strspn(*cursor, " \t"), *end;

        if (*p == '\0') {
                *cursor = p;
                return NULL;
        }
        end = p + strcspn(p, " \t");
        if (*end != '\0')
                *end++ = '\0';
        *cursor = end;
        return p;
}

/* "8:0", "253:16": the device fields of blkio and io.stat lines. */
static bool is_devnum(const char *s)
{
        const char *colon = strchr(s, ':');
        uint64_t v;

        return colon && parse_u64(s, (size_t)(colon - s), &v) == 0 &&
               parse_u64_str(colon + 1, &v) == 0;
}

static int add_counter(uint64_t *sum, uint64_t v, const char *dir, const char *name, cs_error **err)
{
        if (__builtin_add_overflow(*sum, v, sum))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/%s: counter overflow", dir,
                                    name);
        return 0;
}

/* A file holding one decimal number ("12345\n"). *ret_present says whether the file exists;
 * a missing file leaves *ret untouched. */
static int read_u64_file(int dirfd, const char *dir, const char *name, uint64_t *ret,
                         bool *ret_present, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        const char *value;
        size_t n;
        int r;

        r = read_file_at(dirfd, dir, name, CGROUP_SMALL_FILE_MAX, &buf, err);
        if (r < 0)
                return -1;
        if (ret_present)
                *ret_present = r == 0;
        if (r > 0)
                return 0;
        value = buf + strspn(buf, " \t\n");
        n = strlen(value);
        while (n > 0 && strchr(" \t\n", value[n - 1]))
                n--;
        if (parse_u64(value, n, ret) < 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s/%s: expected one decimal number, got \"%.*s\"", dir, name,
                                    n < 32 ? (int)n : 32, value);
        return 0;
}

typedef struct keyed_field {
        const char *key; /* as it appears, including a trailing ':' in /proc/<pid>/io */
        uint64_t *value;
        bool required; /* the kernel always prints it: its absence means a malformed file */
} keyed_field;

/* Parses "key value" lines (cpu.stat, memory.events, memory.oom_control, /proc/<pid>/io),
 * filling the fields asked for. Other keys are ignored; a wanted key with anything but one
 * decimal value is an error. Returns 0, 1 when the file does not exist (fields untouched),
 * or -1 with *err. */
static int read_keyed_file(int dirfd, const char *dir, const char *name, const keyed_field *fields,
                           size_t n_fields, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        char *cursor, *line;
        uint64_t found = 0; /* bit i: fields[i] seen */
        int r;

        r = read_file_at(dirfd, dir, name, CGROUP_SMALL_FILE_MAX, &buf, err);
        if (r != 0)
                return r;
        cursor = buf;
        while ((line = next_line(&cursor))) {
                char *key = next_field(&line), *value = next_field(&line);

                if (!key)
                        continue;
                for (size_t i = 0; i < n_fields && i < 64; i++) {
                        if (strcmp(key, fields[i].key) != 0)
                                continue;
                        if (!value || next_field(&line) ||
                            parse_u64_str(value, fields[i].value) < 0)
                                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                                    "%s/%s: bad value for %s", dir, name, key);
                        found |= UINT64_C(1) << i;
                }
        }
        for (size_t i = 0; i < n_fields && i < 64; i++)
                if (fields[i].required && !(found & (UINT64_C(1) << i)))
                        return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/%s has no %s", dir, name,
                                            fields[i].key);
        return 0;
}

/* ---- locating cgroups ------------------------------------------------------------------- */

/* Checks a cgroup path ("/compute/abc" or "compute/abc") and returns it relative to the
 * hierarchy root ("." for the root cgroup). "." and ".." components are refused: the path
 * names a cgroup, it must not climb out of the hierarchy. */
static int cgroup_rel_path(const char *path, const char **ret_rel, cs_error **err)
{
        const char *rel, *p;

        if (!path)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no cgroup path");
        if (strlen(path) >= CGROUP_PATH_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "cgroup path longer than %d bytes", CGROUP_PATH_MAX);
        rel = path + strspn(path, "/");
        for (p = rel; *p;) {
                size_t n = strcspn(p, "/");

                if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "cgroup path %s has a . or .. component", path);
                p += n;
                p += strspn(p, "/");
        }
        /* The root is never a sandbox's cgroup: reading it would report the whole node. */
        if (!*rel)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "no cgroup of its own (path '%s')", path);
        *ret_rel = rel;
        return 0;
}

/* Where each hierarchy may be mounted under the root, in order of preference ("" is the root
 * itself, as in v2). */
static const char *const v1_cpuacct_names[] = { "cpuacct", "cpu,cpuacct", NULL };
static const char *const v1_memory_names[] = { "memory", NULL };
static const char *const v1_blkio_names[] = { "blkio", NULL };
static const char *const v2_names[] = { "", NULL };

/* Opens the directory of cgroup rel in the hierarchy mounted at `mount` (v1 with libcgroup:
 * where libcgroup found it, NULL when it is not mounted), or else under root/<first of
 * hierarchies that exists>. Returns 0 with *ret_fd and *ret_dir (its path, for messages;
 * caller frees), 1 when neither the hierarchy nor the cgroup exists, -1 with *err. */
static int open_cgroup_dir(const cgroup_fs *fs, const char *mount, const char *const *hierarchies,
                           const char *rel, int *ret_fd, char **ret_dir, cs_error **err)
{
        _cleanup_close_ int hier_fd = -1, fd = -1;
        _cleanup_free_ char *hier = NULL;

        if (fs->libcgroup && fs->version == CS_CGROUP_V1) {
                _cleanup_free_ char *dir = NULL;

                /* The mount is known: one open instead of the hierarchy's and the cgroup's
                 * (this is on every exec's path). */
                if (!mount)
                        return 1;
                dir = cs_xasprintf("%s/%s", mount, rel);
                fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return errno == ENOENT
                                       ? 1
                                       : cs_error_errno(err, errno, "opening cgroup %s", dir);
                *ret_dir = TAKE_PTR(dir);
                *ret_fd = TAKE_FD(fd);
                return 0;
        }
        for (; *hierarchies && hier_fd < 0; hierarchies++) {
                free(hier);
                hier = **hierarchies ? cs_xasprintf("%s/%s", fs->root, *hierarchies)
                                     : cs_xstrdup(fs->root);
                hier_fd = open(hier, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (hier_fd < 0 && errno != ENOENT)
                        return cs_error_errno(err, errno, "opening %s", hier);
        }
        if (hier_fd < 0)
                return 1;
        fd = openat(hier_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 1;
                return cs_error_errno(err, errno, "opening cgroup %s/%s", hier, rel);
        }
        *ret_dir = strcmp(rel, ".") == 0 ? TAKE_PTR(hier) : cs_xasprintf("%s/%s", hier, rel);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* The directory that proves the cgroup exists: v1's cpuacct cgroup, v2's cgroup. */
static int open_main_dir(const cgroup_fs *fs, const char *path, int *ret_fd, char **ret_dir,
                         cs_error **err)
{
        const char *rel;
        int r;

        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;
        r = open_cgroup_dir(fs, fs->cpuacct_dir,
                            fs->version == CS_CGROUP_V1 ? v1_cpuacct_names : v2_names, rel, ret_fd,
                            ret_dir, err);
        if (r > 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "cgroup %s does not exist under %s",
                                    path, fs->root);
        return r;
}

/* ---- detection -------------------------------------------------------------------------- */

static bool is_dir_at(int dirfd, const char *name)
{
        struct stat st;

        return fstatat(dirfd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

/* Whether root/cgroup.controllers lists both cpu and memory. 1 yes, 0 no (or no such file),
 * -1 with *err. */
static int v2_has_cpu_and_memory(int root_fd, const char *root, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        bool cpu = false, memory = false;
        char *cursor, *line, *field;
        int r;

        r = read_file_at(root_fd, root, "cgroup.controllers", CGROUP_SMALL_FILE_MAX, &buf, err);
        if (r != 0)
                return r < 0 ? -1 : 0;
        cursor = buf;
        while ((line = next_line(&cursor)))
                while ((field = next_field(&line))) {
                        cpu = cpu || strcmp(field, "cpu") == 0;
                        memory = memory || strcmp(field, "memory") == 0;
                }
        return cpu && memory;
}

/* ---- detection through libcgroup --------------------------------------------------------- */

/* The library reports through return codes; its default logger would print to stdout. */
static void lib_log_discard(void *userdata, int level, const char *fmt, va_list ap)
{
        (void)userdata;
        (void)level;
        (void)fmt;
        (void)ap;
}

/* Where libcgroup saw controller mounted (the first mount of its hierarchy, as libcgroup's own
 * operations use), malloc'd; NULL when it is not mounted. */
static char *lib_mount(const char *controller)
{
        char *mount = NULL;

        if (cgroup_get_subsys_mount_point(controller, &mount) != 0)
                return NULL;
        return mount;
}

/* Every cgroup2 directory has cgroup.controllers, no v1 one does. libcgroup 2.0 keeps the
 * version of each mount but only exports it without a declaration (3.0's header has it), and
 * the magic of statfs() would not tell a test's fake cgroup2 mount (a plain directory) apart. */
static bool is_v2_dir(const char *dir)
{
        _cleanup_free_ char *p = cs_xasprintf("%s/cgroup.controllers", dir);

        return access(p, F_OK) == 0;
}

/* dir is root/<one component>: a v1 hierarchy of this root. */
static bool is_hierarchy_of(const char *dir, const char *root)
{
        size_t n = strlen(root);

        return dir && strncmp(dir, root, n) == 0 && dir[n] == '/' && dir[n + 1] != '\0' &&
               !strchr(dir + n + 1, '/');
}

/* Whether libcgroup lists a controller on a cgroup2 mount. */
static bool lib_has_v2_mount(void)
{
        struct cgroup_mount_point info;
        void *handle = NULL;
        bool v2 = false;
        int r;

        for (r = cgroup_get_controller_begin(&handle, &info); r == 0 && !v2;
             r = cgroup_get_controller_next(&handle, &info))
                v2 = is_v2_dir(info.path);
        cgroup_get_controller_end(&handle);
        return v2;
}

/* Fills ret->version and the hierarchies from libcgroup's table when root (canonical) is where
 * it sees them. Returns 0, or 1 when libcgroup has nothing mounted there (the caller then
 * looks at root's files). */
static int lib_detect(const char *root, cgroup_fs *ret)
{
        _cleanup_free_ char *cpu = NULL, *cpuacct = NULL, *memory = NULL, *blkio = NULL;

        cgroup_set_logger(lib_log_discard, CGROUP_LOG_ERROR, NULL);
        if (cgroup_init() != 0)
                return 1; /* ECGROUPNOTMOUNTED, or no /proc/mounts or /proc/cgroups */
        cpu = lib_mount("cpu");
        memory = lib_mount("memory");
        if (cpu && memory && strcmp(cpu, root) == 0 && strcmp(memory, root) == 0 &&
            is_v2_dir(root)) {
                ret->version = CS_CGROUP_V2;
                ret->libcgroup = true;
                return 0;
        }
        cpuacct = lib_mount("cpuacct");
        if (!is_hierarchy_of(cpuacct, root) || !is_hierarchy_of(memory, root) ||
            is_v2_dir(cpuacct) || is_v2_dir(memory))
                return 1;
        blkio = lib_mount("blkio");
        ret->version = CS_CGROUP_V1;
        ret->libcgroup = true;
        ret->hybrid = lib_has_v2_mount();
        ret->cpuacct_dir = TAKE_PTR(cpuacct);
        ret->memory_dir = TAKE_PTR(memory);
        if (is_hierarchy_of(blkio, root) && !is_v2_dir(blkio))
                ret->blkio_dir = TAKE_PTR(blkio);
        return 0;
}

/* ---- detection by the files --------------------------------------------------------------- */

static int files_detect(int root_fd, const char *root, bool is_cgroup2, cgroup_fs *ret,
                        cs_error **err)
{
        int r;

        r = v2_has_cpu_and_memory(root_fd, root, err);
        if (r < 0)
                return -1;
        if (r > 0) {
                ret->version = CS_CGROUP_V2;
                return 0;
        }
        if (is_cgroup2)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "cgroup root %s is a cgroup2 mount without both the cpu and "
                                    "memory controllers",
                                    root);
        if ((is_dir_at(root_fd, "cpuacct") || is_dir_at(root_fd, "cpu,cpuacct")) &&
            is_dir_at(root_fd, "memory")) {
                ret->version = CS_CGROUP_V1;
                return 0;
        }
        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                            "cgroup root %s holds neither a cgroup v2 hierarchy with cpu and "
                            "memory nor cgroup v1 cpuacct and memory hierarchies",
                            root);
}

int cgroup_fs_detect(const char *root, cgroup_fs *ret, cs_error **err)
{
        _cleanup_close_ int root_fd = -1;
        _cleanup_free_ char *clean = NULL, *canonical = NULL;
        cgroup_fs fs = { 0 };
        struct statfs sfs;
        size_t n;

        if (!root || !*root)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no cgroup root");
        clean = cs_xstrdup(root);
        for (n = strlen(clean); n > 1 && clean[n - 1] == '/'; n--)
                clean[n - 1] = '\0';

        root_fd = open(clean, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0 || fstatfs(root_fd, &sfs) < 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "cgroup root %s: %s",
                                    clean, strerror(errno));
        /* /proc/mounts, and so libcgroup, name mounts by their canonical path. */
        canonical = realpath(clean, NULL);
        if (!canonical)
                return cs_error_errno(err, errno, "cgroup root %s", clean);

        if (lib_detect(canonical, &fs) != 0) {
                /* The real v2 case is a cgroup2 mount; a fake tree in a test is a plain
                 * directory with the same files, so the files decide and the magic only
                 * sharpens the error. */
                cgroup_fs_free(&fs);
                if (files_detect(root_fd, clean, sfs.f_type == CGROUP2_SUPER_MAGIC, &fs, err) < 0)
                        return -1;
        }
        /* systemd's hybrid layout; libcgroup 2.0 skips a cgroup2 mount without controllers. */
        if (fs.version == CS_CGROUP_V1 && !fs.hybrid) {
                _cleanup_close_ int ufd =
                        openat(root_fd, "unified", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                fs.hybrid = ufd >= 0 && faccessat(ufd, "cgroup.controllers", F_OK, 0) == 0;
        }
        /* libcgroup's mounts are compared with the root in cgroup_remove(). */
        fs.root = fs.libcgroup ? TAKE_PTR(canonical) : TAKE_PTR(clean);
        *ret = fs;
        return 0;
}

void cgroup_fs_free(cgroup_fs *fs)
{
        if (!fs)
                return;
        free(fs->root);
        free(fs->cpuacct_dir);
        free(fs->memory_dir);
        free(fs->blkio_dir);
        *fs = (cgroup_fs){ 0 };
}

/* ---- cgroup_read ------------------------------------------------------------------------ */

/* blkio.throttle.io_service_bytes and blkio.io_service_bytes:
 *   8:0 Read 4890624
 *   8:0 Write 20480
 *   ... (Sync, Async, Discard, Total per device)
 *   Total 4910592
 * Adds the Read and Write lines of every device; *ret_devices counts device lines. */
static int parse_v1_blkio(char *buf, const char *dir, const char *name, uint64_t *read_bytes,
                          uint64_t *write_bytes, size_t *ret_devices, cs_error **err)
{
        char *cursor = buf, *line;
        size_t devices = 0;

        while ((line = next_line(&cursor))) {
                char *f0 = next_field(&line), *f1 = next_field(&line), *f2 = next_field(&line);
                uint64_t v;

                if (!f0)
                        continue;
                if (strcmp(f0, "Total") == 0 && f1 && !f2 && parse_u64_str(f1, &v) == 0)
                        continue;
                if (!f2 || next_field(&line) || !is_devnum(f0) || parse_u64_str(f2, &v) < 0)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "%s/%s: unexpected line \"%.64s\"", dir, name, f0);
                devices++;
                if (strcmp(f1, "Read") == 0 && add_counter(read_bytes, v, dir, name, err) < 0)
                        return -1;
                if (strcmp(f1, "Write") == 0 && add_counter(write_bytes, v, dir, name, err) < 0)
                        return -1;
        }
        *ret_devices = devices;
        return 0;
}

static int read_v1_blkio(int dirfd, const char *dir, cgroup_sample *s, cs_error **err)
{
        /* The throttle file counts every bio that passes the throttle layer; the others are
         * kept by the I/O scheduler (CFQ-era kernels, and BFQ on current ones, which have no
         * plain blkio.io_service_bytes). The _recursive variants count the descendants too
         * (a kube pod's cgroup has none of the processes itself: its sandbox runs in the
         * pause container's child cgroup). The first that names a device wins. */
        static const char *const names[] = {
                "blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes",
                "blkio.io_service_bytes_recursive",          "blkio.io_service_bytes",
                "blkio.bfq.io_service_bytes_recursive",      "blkio.bfq.io_service_bytes"
        };

        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                _cleanup_free_ char *buf = NULL;
                uint64_t rd = 0, wr = 0;
                size_t devices = 0;
                int r;

                r = read_file_at(dirfd, dir, names[i], CGROUP_LIST_FILE_MAX, &buf, err);
                if (r < 0)
                        return -1;
                if (r > 0)
                        continue;
                if (parse_v1_blkio(buf, dir, names[i], &rd, &wr, &devices, err) < 0)
                        return -1;
                s->io_read_bytes = rd;
                s->io_write_bytes = wr;
                if (devices > 0)
                        break;
        }
        return 0;
}

static int read_v1(const cgroup_fs *fs, const char *path, cgroup_sample *s, cs_error **err)
{
        _cleanup_close_ int cpu_fd = -1, mem_fd = -1, blkio_fd = -1;
        _cleanup_free_ char *cpu_dir = NULL, *mem_dir = NULL, *blkio_dir = NULL;
        const keyed_field oom[] = { { "oom_kill", &s->oom_kills, false } };
        const char *rel;
        int r;

        if (open_main_dir(fs, path, &cpu_fd, &cpu_dir, err) < 0)
                return -1;
        if (read_u64_file(cpu_fd, cpu_dir, "cpuacct.usage", &s->cpu_ns, NULL, err) < 0)
                return -1;
        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;

        r = open_cgroup_dir(fs, fs->memory_dir, v1_memory_names, rel, &mem_fd, &mem_dir, err);
        if (r < 0)
                return -1;
        if (r == 0) {
                if (read_u64_file(mem_fd, mem_dir, "memory.usage_in_bytes", &s->memory_bytes, NULL,
                                  err) < 0 ||
                    read_u64_file(mem_fd, mem_dir, "memory.max_usage_in_bytes",
                                  &s->memory_peak_bytes, &s->has_peak, err) < 0 ||
                    read_keyed_file(mem_fd, mem_dir, "memory.oom_control", oom, ARRAY_SIZE(oom),
                                    err) < 0)
                        return -1;
        }

        r = open_cgroup_dir(fs, fs->blkio_dir, v1_blkio_names, rel, &blkio_fd, &blkio_dir, err);
        if (r < 0)
                return -1;
        if (r == 0 && read_v1_blkio(blkio_fd, blkio_dir, s, err) < 0)
                return -1;
        return 0;
}

/* io.stat: "8:0 rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N" per device (the root cgroup
 * may add cost.* keys); sums rbytes and wbytes. */
static int read_v2_io(int dirfd, const char *dir, cgroup_sample *s, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        char *cursor, *line;
        int r;

        r = read_file_at(dirfd, dir, "io.stat", CGROUP_LIST_FILE_MAX, &buf, err);
        if (r != 0)
                return r < 0 ? -1 : 0;
        cursor = buf;
        while ((line = next_line(&cursor))) {
                char *dev = next_field(&line), *kv;

                if (!dev)
                        continue;
                if (!is_devnum(dev))
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "%s/io.stat: unexpected line \"%.64s\"", dir, dev);
                while ((kv = next_field(&line))) {
                        char *eq = strchr(kv, '=');
                        uint64_t *sum = NULL, v;

                        if (!eq)
                                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                                    "%s/io.stat: unexpected field \"%.64s\"", dir,
                                                    kv);
                        *eq = '\0';
                        if (strcmp(kv, "rbytes") == 0)
                                sum = &s->io_read_bytes;
                        else if (strcmp(kv, "wbytes") == 0)
                                sum = &s->io_write_bytes;
                        if (!sum)
                                continue;
                        if (parse_u64_str(eq + 1, &v) < 0)
                                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                                    "%s/io.stat: bad value for %s on %s", dir, kv,
                                                    dev);
                        if (add_counter(sum, v, dir, "io.stat", err) < 0)
                                return -1;
                }
        }
        return 0;
}

static int read_v2(const cgroup_fs *fs, const char *path, cgroup_sample *s, cs_error **err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *dir = NULL;
        uint64_t usage_usec = 0;
        const keyed_field cpu[] = { { "usage_usec", &usage_usec, true } };
        const keyed_field events[] = { { "oom_kill", &s->oom_kills, false } };

        if (open_main_dir(fs, path, &fd, &dir, err) < 0)
                return -1;
        if (read_keyed_file(fd, dir, "cpu.stat", cpu, ARRAY_SIZE(cpu), err) < 0)
                return -1;
        if (__builtin_mul_overflow(usage_usec, 1000, &s->cpu_ns))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/cpu.stat: usage_usec overflows",
                                    dir);
        if (read_u64_file(fd, dir, "memory.current", &s->memory_bytes, NULL, err) < 0 ||
            read_u64_file(fd, dir, "memory.peak", &s->memory_peak_bytes, &s->has_peak, err) < 0 ||
            read_keyed_file(fd, dir, "memory.events", events, ARRAY_SIZE(events), err) < 0 ||
            read_v2_io(fd, dir, s, err) < 0)
                return -1;
        return 0;
}

int cgroup_read(const cgroup_fs *fs, const char *path, cgroup_sample *ret, cs_error **err)
{
        cgroup_sample s = { 0 };
        int r;

        r = fs->version == CS_CGROUP_V1 ? read_v1(fs, path, &s, err) : read_v2(fs, path, &s, err);
        if (r < 0)
                return -1;
        *ret = s;
        return 0;
}

/* ---- cgroup_reset_peak ------------------------------------------------------------------ */

/* v2 (memory.peak, kernels >= 6.12): a write resets the high-water mark only for later reads
 * through the same open file; every other reader, and every later open(), still sees the
 * global peak since the cgroup was created (the kernel chose fd-local resets on purpose).
 * This module keeps no fds between calls, so a v2 "reset" would have no visible effect on
 * cgroup_read(): we report it as not supported (1) instead of claiming a reset. */
int cgroup_reset_peak(const cgroup_fs *fs, const char *path, cs_error **err)
{
        _cleanup_close_ int main_fd = -1, mem_fd = -1, fd = -1;
        _cleanup_free_ char *main_dir = NULL, *mem_dir = NULL;
        const char *rel;
        ssize_t n;
        int r;

        if (open_main_dir(fs, path, &main_fd, &main_dir, err) < 0)
                return -1;
        if (fs->version == CS_CGROUP_V2)
                return 1;

        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;
        r = open_cgroup_dir(fs, fs->memory_dir, v1_memory_names, rel, &mem_fd, &mem_dir, err);
        if (r != 0)
                return r; /* 1: no memory cgroup, nothing to reset */
        fd = openat(mem_fd, "memory.max_usage_in_bytes",
                    O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 1;
                return cs_error_errno(err, errno, "opening %s/memory.max_usage_in_bytes", mem_dir);
        }
        /* Any write resets the v1 watermark to the current usage. */
        do
                n = write(fd, "0", 1);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return cs_error_errno(err, errno, "writing %s/memory.max_usage_in_bytes", mem_dir);
        if (n != 1)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "short write to %s/memory.max_usage_in_bytes", mem_dir);
        return 0;
}

/* ---- removal ---------------------------------------------------------------------------- */

/* Tries and pause between rmdir attempts: SIGKILLed tasks leave the cgroup asynchronously. */
#define CGROUP_RMDIR_TRIES    50
#define CGROUP_RMDIR_PAUSE_US (20 * 1000)

/* SIGKILLs every task of the cgroup open at fd: cgroup.kill where the kernel has it (v2,
 * >= 5.14), and each pid of cgroup.procs (v1, older kernels, and what a fork raced in). */
static void kill_tasks(int fd, const char *dir)
{
        _cleanup_close_ int kfd = openat(fd, "cgroup.kill", O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_free_ char *buf = NULL;
        cs_error *ignored = NULL;

        if (kfd >= 0 && write(kfd, "1", 1) < 0) {
                /* Best effort: the per-pid kill below still runs. */
        }
        if (read_file_at(fd, dir, "cgroup.procs", CGROUP_LIST_FILE_MAX, &buf, &ignored) != 0) {
                cs_error_free(ignored);
                return;
        }
        for (char *cur = buf, *line; (line = next_line(&cur));) {
                uint64_t pid;
                if (parse_u64_str(line, &pid) == 0 && pid > 1 && pid <= INT_MAX)
                        kill((pid_t)pid, SIGKILL);
        }
}

/* Kills what is left in cgroup rel of the hierarchy open at hier_fd and removes it. */
static int remove_in(int hier_fd, const char *hier, const char *rel, cs_error **err)
{
        _cleanup_close_ int fd =
                openat(hier_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_free_ char *dir = NULL;

        if (fd < 0) {
                if (errno == ENOENT)
                        return 0;
                return cs_error_errno(err, errno, "opening cgroup %s/%s", hier, rel);
        }
        dir = cs_xasprintf("%s/%s", hier, rel);
        for (int i = 0; i < CGROUP_RMDIR_TRIES; i++) {
                kill_tasks(fd, dir);
                if (unlinkat(hier_fd, rel, AT_REMOVEDIR) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY)
                        break;
                usleep(CGROUP_RMDIR_PAUSE_US);
        }
        return cs_error_errno(err, errno, "removing cgroup %s", dir);
}

/* Kills what is left in the cgroup at dir, which may not exist. */
static void kill_tasks_at(const char *dir)
{
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

        if (fd >= 0)
                kill_tasks(fd, dir);
}

static void lib_cgroup_freep(struct cgroup **cg)
{
        if (*cg)
                cgroup_free(cg);
}

typedef struct lib_hierarchies {
        char **dirs; /* mount/rel of each hierarchy the cgroup is removed from */
        size_t n;
} lib_hierarchies;

static void lib_hierarchies_done(lib_hierarchies *h)
{
        for (size_t i = 0; i < h->n; i++)
                free(h->dirs[i]);
        free(h->dirs);
}

/* Adds to cg every controller libcgroup lists in fs's hierarchies (v2: the root mount; v1:
 * each mount directly under the root, as runsc makes the cgroup under each) but `skip` (NULL:
 * none) and, with v1_only, a v1 root's cgroup2 mount (a hybrid host's "unified": runsc makes
 * nothing there, and a controller the kernel left to it, such as hugetlb, cannot be enabled
 * in a new child: libcgroup's write of "+hugetlb" fails with ENOENT), and to h the cgroup's
 * directory in each distinct mount. */
static int lib_collect(const cgroup_fs *fs, const char *rel, const char *skip, bool v1_only,
                       struct cgroup *cg, lib_hierarchies *h, cs_error **err)
{
        struct cgroup_mount_point info;
        void *handle = NULL;
        int r;

        for (r = cgroup_get_controller_begin(&handle, &info); r == 0;
             r = cgroup_get_controller_next(&handle, &info)) {
                bool seen = false;
                char *dir;

                if (fs->version == CS_CGROUP_V2 ? strcmp(info.path, fs->root) != 0
                                                : !is_hierarchy_of(info.path, fs->root))
                        continue;
                if (skip && strcmp(info.name, skip) == 0)
                        continue;
                if (v1_only && fs->version == CS_CGROUP_V1 && is_v2_dir(info.path))
                        continue;
                if (!cgroup_add_controller(cg, info.name)) {
                        cgroup_get_controller_end(&handle);
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "libcgroup: cannot add controller %s", info.name);
                }
                dir = cs_xasprintf("%s/%s", info.path, rel);
                for (size_t i = 0; i < h->n && !seen; i++)
                        seen = strcmp(h->dirs[i], dir) == 0;
                if (seen) {
                        free(dir);
                        continue;
                }
                h->dirs = xrealloc(h->dirs, (h->n + 1) * sizeof(*h->dirs));
                h->dirs[h->n++] = dir;
        }
        cgroup_get_controller_end(&handle);
        if (r != ECGEOF)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "libcgroup: listing mounts: %s",
                                    cgroup_strerror(r));
        return 0;
}

static bool lib_all_gone(const lib_hierarchies *h)
{
        for (size_t i = 0; i < h->n; i++)
                if (access(h->dirs[i], F_OK) == 0 || errno != ENOENT)
                        return false;
        return true;
}

/* cgroup_remove through libcgroup: the same kills, then its rmdir in every hierarchy. */
static int lib_remove(const cgroup_fs *fs, const char *rel, cs_error **err)
{
        _cleanup_(lib_cgroup_freep) struct cgroup *cg = NULL;
        _cleanup_(lib_hierarchies_done) lib_hierarchies h = { 0 };
        int r = 0;

        /* libcgroup builds "<mount>/<name>/" in FILENAME_MAX bytes and would cut it short. */
        if (strlen(fs->root) + strlen(rel) + 64 >= FILENAME_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cgroup path too long");
        cg = cgroup_new_cgroup(rel);
        if (!cg)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "libcgroup: cannot name %s", rel);
        if (lib_collect(fs, rel, NULL, false, cg, &h, err) < 0)
                return -1;
        if (h.n == 0)
                return 0; /* nothing mounted under the root any more */
        for (int i = 0; i < CGROUP_RMDIR_TRIES; i++) {
                for (size_t j = 0; j < h.n; j++)
                        kill_tasks_at(h.dirs[j]);
                /* EMPTY_ONLY: rmdir and nothing else. Without it libcgroup moves the tasks to
                 * the parent cgroup first, where a survivor would escape the removal. */
                r = cgroup_delete_cgroup_ext(cg, CGFLAG_DELETE_EMPTY_ONLY);
                /* libcgroup 2.0 returns 0 when EBUSY (ECGNONEMPTY) was its only error: what
                 * is gone is checked here. */
                if (r == 0)
                        r = lib_all_gone(&h) ? 0 : ECGNONEMPTY;
                if (r == 0)
                        return 0;
                if (r != ECGNONEMPTY)
                        break;
                usleep(CGROUP_RMDIR_PAUSE_US);
        }
        if (r == ECGNONEMPTY || r == ECGOTHER)
                return cs_error_errno(err, r == ECGNONEMPTY ? EBUSY : cgroup_get_last_errno(),
                                      "removing cgroup %s", rel);
        return cs_error_set(err, GRPC_STATUS_INTERNAL, "removing cgroup %s: %s", rel,
                            cgroup_strerror(r));
}

/* The limits as the files of the controller that keeps each, v1 or v2. */
static int lib_set_limits(const cgroup_fs *fs, struct cgroup *cg, const cgroup_limits *lim,
                          cs_error **err)
{
        bool v2 = fs->version == CS_CGROUP_V2;
        struct cgroup_controller *c;
        int r = 0;

        if (lim->cpu_millis) {
                if (!(c = cgroup_get_controller(cg, "cpu")))
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "no cpu controller under %s", fs->root);
                if (v2) {
                        char max[48];
                        snprintf(max, sizeof(max), "%" PRIu64 " 100000",
                                 (uint64_t)lim->cpu_millis * 100);
                        r = cgroup_add_value_string(c, "cpu.max", max);
                } else {
                        r = cgroup_add_value_uint64(c, "cpu.cfs_period_us", 100000);
                        if (r == 0)
                                r = cgroup_add_value_int64(c, "cpu.cfs_quota_us",
                                                           (int64_t)lim->cpu_millis * 100);
                }
        }
        if (r == 0 && lim->memory_bytes) {
                if (!(c = cgroup_get_controller(cg, "memory")))
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "no memory controller under %s", fs->root);
                r = cgroup_add_value_uint64(c, v2 ? "memory.max" : "memory.limit_in_bytes",
                                            lim->memory_bytes);
        }
        if (r == 0 && lim->pids_max) {
                if (!(c = cgroup_get_controller(cg, "pids")))
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "no pids controller under %s", fs->root);
                r = cgroup_add_value_uint64(c, "pids.max", lim->pids_max);
        }
        if (r != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "libcgroup: %s", cgroup_strerror(r));
        return 0;
}

int cgroup_create(const cgroup_fs *fs, const char *path, const cgroup_limits *lim, cs_error **err)
{
        _cleanup_(lib_cgroup_freep) struct cgroup *cg = NULL;
        _cleanup_(lib_hierarchies_done) lib_hierarchies h = { 0 };
        const char *rel;
        int r;

        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;
        if (!fs->libcgroup)
                return 0;
        if (strlen(fs->root) + strlen(rel) + 64 >= FILENAME_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cgroup path too long");
        cg = cgroup_new_cgroup(rel);
        if (!cg)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "libcgroup: cannot name %s", rel);
        /* Not a v1 cpuset: a new one has no CPUs and no memory nodes, and nothing can join it
         * until they are copied from the parent, which runsc does when it makes it. */
        if (lib_collect(fs, rel, fs->version == CS_CGROUP_V1 ? "cpuset" : NULL, true, cg, &h, err) <
                    0 ||
            lib_set_limits(fs, cg, lim, err) < 0)
                return -1;
        if (h.n == 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "no cgroup hierarchy mounted under %s", fs->root);
        /* Parents are made as needed (with no limits of their own); the files of controllers
         * not in this hierarchy's kernel (e.g. no pids) are refused above, not here. */
        r = cgroup_create_cgroup(cg, 0);
        if (r != 0) {
                int e = r == ECGOTHER ? cgroup_get_last_errno() : 0;
                cs_error *ignored = NULL;

                /* Half made is not left behind. */
                if (cgroup_remove(fs, path, &ignored) < 0)
                        cs_error_free(ignored);
                if (e)
                        return cs_error_errno(err, e, "creating cgroup %s", rel);
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "creating cgroup %s: %s", rel,
                                    cgroup_strerror(r));
        }
        return 1;
}

int cgroup_remove(const cgroup_fs *fs, const char *path, cs_error **err)
{
        _cleanup_close_ int root_fd = -1;
        DIR *d;
        const char *rel;
        struct dirent *e;
        int r = 0;

        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;
        if (fs->libcgroup) {
                if (lib_remove(fs, rel, err) < 0)
                        return -1;
                if (fs->version == CS_CGROUP_V2)
                        return 0;
                /* v1: libcgroup does not list every hierarchy. Debian builds it with
                 * name=systemd as its "opaque hierarchy", which it skips, and runsc makes the
                 * cgroup there too: the sweep below finds it (and ENOENT, fine, where
                 * libcgroup removed it). */
        }

        /* By hand (also every hierarchy when root is not where libcgroup sees the mounts):
         * every directory under the root is taken for a hierarchy. */
        root_fd = open(fs->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0)
                return cs_error_errno(err, errno, "opening %s", fs->root);
        if (fs->version == CS_CGROUP_V2)
                return remove_in(root_fd, fs->root, rel, err);

        /* v1: the cgroup may exist under every hierarchy (runsc makes it under each). Links
         * such as cpu -> cpu,cpuacct are skipped: their target is listed too. */
        d = fdopendir(TAKE_FD(root_fd));
        if (!d)
                return cs_error_errno(err, errno, "listing %s", fs->root);
        while ((e = readdir(d))) {
                _cleanup_close_ int hfd = -1;
                _cleanup_free_ char *hier = NULL;

                if (e->d_name[0] == '.' || e->d_type != DT_DIR)
                        continue;
                hfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (hfd < 0)
                        continue;
                hier = cs_xasprintf("%s/%s", fs->root, e->d_name);
                if (remove_in(hfd, hier, rel, err) < 0)
                        r = -1; /* the first error is kept; the other hierarchies still go */
        }
        closedir(d);
        return r;
}

/* Calls fn(dir, ctx, err) with dir = rel under each v1 hierarchy: every directory under the
 * root is taken for one (as in cgroup_remove); links such as cpu -> cpu,cpuacct are skipped,
 * their target is listed too. Stops at fn's first nonzero answer and returns it; -1 with *err
 * when the root cannot be listed. */
static int each_v1_hierarchy(const cgroup_fs *fs, const char *rel,
                             int (*fn)(const char *dir, void *ctx, cs_error **err), void *ctx,
                             cs_error **err)
{
        DIR *d = opendir(fs->root);
        struct dirent *e;
        int r = 0;

        if (!d)
                return cs_error_errno(err, errno, "listing %s", fs->root);
        while (r == 0 && (e = readdir(d))) {
                _cleanup_free_ char *dir = NULL;

                if (e->d_name[0] == '.' || e->d_type != DT_DIR)
                        continue;
                dir = cs_xasprintf("%s/%s/%s", fs->root, e->d_name, rel);
                r = fn(dir, ctx, err);
        }
        closedir(d);
        return r;
}

typedef struct name_list {
        char **names;
        size_t n;
} name_list;

/* Adds the subdirectory names of dir (which may not exist) to the name_list ctx, each once. */
static int children_in(const char *dir, void *ctx, cs_error **err)
{
        name_list *l = ctx;

        DIR *d = opendir(dir);
        struct dirent *e;

        if (!d) {
                if (errno == ENOENT || errno == ENOTDIR)
                        return 0;
                return cs_error_errno(err, errno, "listing cgroup %s", dir);
        }
        while ((e = readdir(d))) {
                bool seen = false;

                if (e->d_name[0] == '.' || e->d_type != DT_DIR)
                        continue;
                for (size_t i = 0; i < l->n && !seen; i++)
                        seen = strcmp(l->names[i], e->d_name) == 0;
                if (seen)
                        continue;
                l->names = xrealloc(l->names, (l->n + 1) * sizeof(*l->names));
                l->names[l->n++] = cs_xstrdup(e->d_name);
        }
        closedir(d);
        return 0;
}

int cgroup_children(const cgroup_fs *fs, const char *path, char ***ret, size_t *ret_n,
                    cs_error **err)
{
        _cleanup_(lib_hierarchies_done) lib_hierarchies h = { 0 };
        name_list l = { 0 };
        const char *rel;
        int r = 0;

        *ret = NULL;
        *ret_n = 0;
        if (cgroup_rel_path(path, &rel, err) < 0)
                return -1;
        if (fs->libcgroup) {
                _cleanup_(lib_cgroup_freep) struct cgroup *cg = cgroup_new_cgroup(rel);

                if (!cg)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL, "libcgroup: cannot name %s",
                                            rel);
                if (lib_collect(fs, rel, NULL, false, cg, &h, err) < 0)
                        return -1;
                for (size_t i = 0; i < h.n && r == 0; i++)
                        r = children_in(h.dirs[i], &l, err);
        }
        if (r == 0 && fs->version == CS_CGROUP_V2 && !fs->libcgroup) {
                _cleanup_free_ char *dir = cs_xasprintf("%s/%s", fs->root, rel);
                r = children_in(dir, &l, err);
        } else if (r == 0 && fs->version == CS_CGROUP_V1) {
                r = each_v1_hierarchy(fs, rel, children_in, &l, err);
        }
        if (r < 0) {
                cgroup_children_free(l.names, l.n);
                return -1;
        }
        *ret = l.names;
        *ret_n = l.n;
        return 0;
}

static int exists_in(const char *dir, void *ctx, cs_error **err)
{
        (void)ctx;
        (void)err;
        return access(dir, F_OK) == 0 ? 1 : 0;
}

bool cgroup_exists(const cgroup_fs *fs, const char *path)
{
        _cleanup_free_ char *v2 = NULL;
        cs_error *err = NULL;
        const char *rel;
        int r;

        if (cgroup_rel_path(path, &rel, &err) < 0) {
                cs_error_free(err);
                return false;
        }
        if (fs->version == CS_CGROUP_V2) {
                v2 = cs_xasprintf("%s/%s", fs->root, rel);
                return access(v2, F_OK) == 0;
        }
        r = each_v1_hierarchy(fs, rel, exists_in, NULL, &err);
        if (r < 0)
                cs_error_free(err);
        return r == 1;
}

void cgroup_children_free(char **names, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* ---- /proc ------------------------------------------------------------------------------ */

/* Opens proc_root/<pid> for reading the files below it. */
static int open_proc_pid(const char *proc_root, pid_t pid, int *ret_fd, char **ret_dir,
                         cs_error **err)
{
        _cleanup_free_ char *dir = NULL;
        int fd;

        if (!proc_root || pid <= 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "bad pid %d", (int)pid);
        dir = cs_xasprintf("%s/%d", proc_root, (int)pid);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return cs_error_errno(err, errno, "opening %s", dir); /* ENOENT: NOT_FOUND */
        *ret_fd = fd;
        *ret_dir = TAKE_PTR(dir);
        return 0;
}

/* One "iface: rx_bytes rx_packets ... (8 rx fields) tx_bytes ... (8 tx fields)" line. The
 * kernel prints "%6s:%8llu", so a wide counter can follow the colon without a space. */
static int parse_net_dev_line(char *line, const char *dir, uint64_t *rx, uint64_t *tx,
                              cs_error **err)
{
        char *colon = strchr(line, ':'), *name, *cursor, *field;
        uint64_t values[16];
        size_t n = 0;

        if (!colon)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s/net/dev: unexpected line \"%.64s\"", dir, line);
        *colon = '\0';
        cursor = line;
        name = next_field(&cursor);
        if (!name || next_field(&cursor))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/net/dev: bad interface name",
                                    dir);
        cursor = colon + 1;
        while ((field = next_field(&cursor)) && n < ARRAY_SIZE(values))
                if (parse_u64_str(field, &values[n++]) < 0)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "%s/net/dev: bad counter for %s", dir, name);
        if (n < ARRAY_SIZE(values))
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s/net/dev: %zu counters for %s, expected 16", dir, n, name);
        if (strcmp(name, "lo") == 0)
                return 0;
        if (add_counter(rx, values[0], dir, "net/dev", err) < 0 ||
            add_counter(tx, values[8], dir, "net/dev", err) < 0)
                return -1;
        return 0;
}

int proc_read_net(const char *proc_root, pid_t pid, uint64_t *ret_rx, uint64_t *ret_tx,
                  cs_error **err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *dir = NULL, *buf = NULL;
        uint64_t rx = 0, tx = 0;
        char *cursor, *line;
        int r, lineno = 0;

        if (open_proc_pid(proc_root, pid, &fd, &dir, err) < 0)
                return -1;
        r = read_file_at(fd, dir, "net/dev", CGROUP_LIST_FILE_MAX, &buf, err);
        if (r < 0)
                return -1;
        if (r > 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "%s/net/dev does not exist", dir);
        cursor = buf;
        while ((line = next_line(&cursor))) {
                if (++lineno <= 2)
                        continue; /* "Inter-|   Receive ..." and " face |bytes ..." */
                if (line[strspn(line, " \t")] == '\0')
                        continue;
                if (parse_net_dev_line(line, dir, &rx, &tx, err) < 0)
                        return -1;
        }
        if (lineno < 2)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s/net/dev: no header", dir);
        *ret_rx = rx;
        *ret_tx = tx;
        return 0;
}
