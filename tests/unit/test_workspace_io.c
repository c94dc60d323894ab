/* Unit tests for nodeagent/workspace_io.c: ReadFile/WriteFile/ListFiles on a real directory.
 *
 * Each test gets a fresh temp dir holding the workspace ("ws", mounted at /workspace) and,
 * beside it, things an escape would reach: "secret" and "outdir/f.txt". The teardown checks
 * that the test left no fd open. Tests run as root, so no test relies on permission bits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"
#include "workspace_io.h"

#define MOUNT  "/workspace"
#define INSIDE "INSIDE\n"

static const char secret_content[] = "TOP SECRET\n";

typedef struct fx {
        char base[256];        /* the temp dir */
        char ws[PATH_MAX];     /* base/ws: the workspace */
        char secret[PATH_MAX]; /* base/secret */
        char outdir[PATH_MAX]; /* base/outdir, holding f.txt */
        int wsfd;
        ws_root root;
        int fds_before;
} fx;

/* ---- helpers ------------------------------------------------------------------------- */

static int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        assert_non_null(d);
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n - 1; /* the DIR's own fd */
}

static void write_file_at(int dfd, const char *path, const void *data, size_t len, mode_t mode)
{
        int fd = openat(dfd, path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, mode);

        assert_true(fd >= 0);
        assert_int_equal(write(fd, data, len), (ssize_t)len);
        assert_int_equal(close(fd), 0);
}

/* Whole file, NUL-terminated; *ret_len gets its size. */
static char *slurp_at(int dfd, const char *path, size_t *ret_len)
{
        int fd = openat(dfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        char *buf;

        assert_true(fd >= 0);
        assert_int_equal(fstat(fd, &st), 0);
        buf = cs_xmalloc((size_t)st.st_size + 1);
        assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
        buf[st.st_size] = '\0';
        close(fd);
        if (ret_len)
                *ret_len = (size_t)st.st_size;
        return buf;
}

static void assert_file_at(int dfd, const char *path, const char *want)
{
        _cleanup_free_ char *got = slurp_at(dfd, path, NULL);

        assert_string_equal(got, want);
}

static bool exists_at(int dfd, const char *path)
{
        struct stat st;

        return fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void mkdir_at(int dfd, const char *path)
{
        assert_int_equal(mkdirat(dfd, path, 0755), 0);
}

/* Makes the directory dir in dfd with n empty files "f<i>", i zero-padded to digits, made from
 * n - 1 down to 0 (descending, so that directory order is unlikely to be sorted). */
static void make_dir_of_files(int dfd, const char *dir, int n, int digits)
{
        int ddfd;

        mkdir_at(dfd, dir);
        ddfd = openat(dfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(ddfd >= 0);
        for (int i = n - 1; i >= 0; i--) {
                char name[32];
                int fd;

                snprintf(name, sizeof(name), "f%0*d", digits, i);
                fd = openat(ddfd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                assert_true(fd >= 0);
                close(fd);
        }
        close(ddfd);
}

static void symlink_at(int dfd, const char *target, const char *path)
{
        assert_int_equal(symlinkat(target, dfd, path), 0);
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
        uint32_t x = seed | 1;

        for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                p[i] = (uint8_t)x;
        }
}

static void check_code(int rc, cs_error *err, grpc_status_code want, const char *want_msg,
                       const char *what, int line)
{
        if (rc == -1 && err && err->code == want && (!want_msg || strstr(err->msg, want_msg)))
                return;
        fail_msg("line %d: %s: rc %d, status %s (%s); want %s%s%s", line, what, rc,
                 err ? cs_status_name(err->code) : "none", err ? err->msg : "-",
                 cs_status_name(want), want_msg ? " with message containing " : "",
                 want_msg ? want_msg : "");
}

/* `expr` is a call that takes &err_ last. */
#define EXPECT_CODE_MSG(expr, want, msg)                                                           \
        do {                                                                                       \
                cs_error *err_ = NULL;                                                             \
                int rc_ = (expr);                                                                  \
                check_code(rc_, err_, (want), (msg), #expr, __LINE__);                             \
                cs_error_free(err_);                                                               \
        } while (0)
#define EXPECT_CODE(expr, want) EXPECT_CODE_MSG(expr, want, NULL)

#define EXPECT_OK(expr)                                                                            \
        do {                                                                                       \
                cs_error *err_ = NULL;                                                             \
                int rc_ = (expr);                                                                  \
                if (rc_ != 0)                                                                      \
                        fail_msg("line %d: %s failed: %s: %s", __LINE__, #expr,                    \
                                 err_ ? cs_status_name(err_->code) : "?",                          \
                                 err_ ? err_->msg : "no error set");                               \
                assert_null(err_);                                                                 \
        } while (0)

static int rd_all(fx *f, const char *path, ws_read_result *r, cs_error **err)
{
        return ws_read(&f->root, path, 0, 0, r, err);
}

static int wr_str(fx *f, const char *path, const char *s, bool append, cs_error **err)
{
        return ws_write(&f->root, path, (const uint8_t *)s, strlen(s), append, 0, NULL, err);
}

static int ls_discard(fx *f, const char *path, bool recursive, cs_error **err)
{
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = false;
        int r = ws_list(&f->root, path, recursive, 0, &e, &n, &trunc, err);

        ws_entries_free(e, n);
        return r;
}

/* Reads the whole file through ws_read and compares it with want. */
static void expect_read(fx *f, const char *path, const char *want)
{
        ws_read_result r;

        EXPECT_OK(rd_all(f, path, &r, &err_));
        assert_int_equal(r.len, strlen(want));
        if (r.len)
                assert_memory_equal(r.data, want, r.len);
        assert_true(r.eof);
        free(r.data);
}

static char *join_paths(const ws_entry *e, size_t n)
{
        size_t total = 1, w = 0;
        char *s;

        for (size_t i = 0; i < n; i++)
                total += strlen(e[i].path) + 1;
        s = cs_xmalloc(total);
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(e[i].path);

                if (i)
                        s[w++] = ',';
                memcpy(s + w, e[i].path, l);
                w += l;
        }
        s[w] = '\0';
        return s;
}

/* Lists and compares the comma-joined entry paths and the truncated flag. */
static void expect_list(fx *f, const char *path, bool recursive, uint32_t max, const char *want,
                        bool want_truncated)
{
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = !want_truncated;
        _cleanup_free_ char *got = NULL;

        EXPECT_OK(ws_list(&f->root, path, recursive, max, &e, &n, &trunc, &err_));
        got = join_paths(e, n);
        ws_entries_free(e, n);
        if (strcmp(got, want) != 0 || trunc != want_truncated)
                fail_msg("list '%s' (recursive %d, max %u): got [%s] truncated %d, want [%s] "
                         "truncated %d",
                         path, recursive, max, got, trunc, want, want_truncated);
}

/* A listing cut at max: max entries, truncated, and the cut keeps the full listing's shape.
 * Reading stops at the cap, so which entries come is readdir's order, not the smallest names
 * (docs/api.md); but what is listed is a subsequence of the full listing (each directory's
 * names sorted, depth-first) whose every entry's parent directory is listed before it. */
static void expect_list_cut(fx *f, const char *path, bool recursive, uint32_t max, const char *full)
{
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = false;
        _cleanup_free_ char *got = NULL;
        const char *at = full;

        EXPECT_OK(ws_list(&f->root, path, recursive, max, &e, &n, &trunc, &err_));
        got = join_paths(e, n);
        if (n != max || !trunc)
                fail_msg("list '%s' max %u: got [%s] truncated %d", path, max, got, trunc);
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(e[i].path);
                const char *slash = strrchr(e[i].path, '/');
                bool parent = !slash;

                /* In order: the next occurrence of ",path," in ",full,". */
                for (; *at; at = strchr(at, ',') ? strchr(at, ',') + 1 : at + strlen(at))
                        if (strncmp(at, e[i].path, l) == 0 && (at[l] == ',' || !at[l]))
                                break;
                if (!*at)
                        fail_msg("list '%s' max %u: [%s] is not a cut of [%s]", path, max, got,
                                 full);
                for (size_t j = 0; j < i && !parent; j++)
                        parent = strlen(e[j].path) == (size_t)(slash - e[i].path) &&
                                 strncmp(e[j].path, e[i].path, (size_t)(slash - e[i].path)) == 0;
                if (!parent)
                        fail_msg("list '%s' max %u: [%s] lists %s without its directory", path, max,
                                 got, e[i].path);
                at += l;
        }
        ws_entries_free(e, n);
}

static mode_t mode_at(int dfd, const char *path)
{
        struct stat st;

        assert_int_equal(fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW), 0);
        return st.st_mode & 07777;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
        return a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
               a->st_mode == b->st_mode;
}

/* No temp file (".<name>.tmp-...") left in the directory. */
static void assert_no_temp_files(int dfd, const char *dir)
{
        int fd = openat(dfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;

        assert_true(fd >= 0);
        d = fdopendir(fd);
        assert_non_null(d);
        while ((de = readdir(d)))
                if (strstr(de->d_name, ".tmp-"))
                        fail_msg("temp file '%s' left behind in '%s'", de->d_name, dir);
        closedir(d);
}

/* The directory's names, sorted and comma-joined. */
static char *dir_names(const char *dir)
{
        struct dirent **list = NULL;
        size_t total = 1, w = 0;
        int n = scandir(dir, &list, NULL, alphasort);
        char *s;

        assert_true(n >= 0);
        for (int i = 0; i < n; i++)
                total += strlen(list[i]->d_name) + 1;
        s = cs_xmalloc(total);
        for (int i = 0; i < n; i++) {
                if (strcmp(list[i]->d_name, ".") != 0 && strcmp(list[i]->d_name, "..") != 0) {
                        size_t l = strlen(list[i]->d_name);

                        if (w)
                                s[w++] = ',';
                        memcpy(s + w, list[i]->d_name, l);
                        w += l;
                }
                free(list[i]);
        }
        free(list);
        s[w] = '\0';
        return s;
}

static void assert_outside_untouched(fx *f)
{
        _cleanup_free_ char *base = dir_names(f->base);
        _cleanup_free_ char *out = dir_names(f->outdir);

        assert_file_at(AT_FDCWD, f->secret, secret_content);
        assert_string_equal(base, "outdir,secret,ws");
        assert_string_equal(out, "f.txt");
        {
                char p[PATH_MAX + 8];

                snprintf(p, sizeof(p), "%s/f.txt", f->outdir);
                assert_file_at(AT_FDCWD, p, secret_content);
        }
}

/* ---- fixture ------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)st;
        (void)type;
        (void)ftw;
        return remove(path);
}

static int setup(void **state)
{
        fx *f = cs_xcalloc(1, sizeof(*f));
        const char *tmp = getenv("TMPDIR");
        char p[PATH_MAX + 8];

        if (snprintf(f->base, sizeof(f->base), "%s/wsio-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
                    (int)sizeof(f->base) ||
            !mkdtemp(f->base))
                return -1;
        snprintf(f->ws, sizeof(f->ws), "%s/ws", f->base);
        snprintf(f->secret, sizeof(f->secret), "%s/secret", f->base);
        snprintf(f->outdir, sizeof(f->outdir), "%s/outdir", f->base);
        if (mkdir(f->ws, 0755) < 0 || mkdir(f->outdir, 0755) < 0)
                return -1;
        write_file_at(AT_FDCWD, f->secret, secret_content, strlen(secret_content), 0644);
        snprintf(p, sizeof(p), "%s/f.txt", f->outdir);
        write_file_at(AT_FDCWD, p, secret_content, strlen(secret_content), 0644);

        f->fds_before = count_fds();
        f->wsfd = open(f->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (f->wsfd < 0)
                return -1;
        f->root = (ws_root){ .dirfd = f->wsfd, .mount_path = MOUNT };
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fx *f = *state;
        int leaked;

        close(f->wsfd);
        leaked = count_fds() - f->fds_before;
        nftw(f->base, rm_entry, 64, FTW_DEPTH | FTW_PHYS);
        free(f);
        if (leaked != 0) {
                print_error("the test leaked %d fd(s)\n", leaked);
                return -1;
        }
        return 0;
}

/* ---- ws_path_clean ------------------------------------------------------------------- */

static void test_path_clean(void **state)
{
        static const struct {
                const char *in, *mount, *out;
        } ok[] = {
                { "", MOUNT, "" },
                { ".", MOUNT, "" },
                { "a", MOUNT, "a" },
                { "a/b/../c", MOUNT, "a/c" },
                { "./a//b/", MOUNT, "a/b" },
                { "a/./b/.", MOUNT, "a/b" },
                { "a/..", MOUNT, "" },
                { "...", MOUNT, "..." },
                { "..a/b..", MOUNT, "..a/b.." },
                { "/workspace", MOUNT, "" },
                { "/workspace/", MOUNT, "" },
                { "/workspace/a/../b", MOUNT, "b" },
                { "/workspace/../workspace/x", MOUNT, "x" },
                { "/../workspace/x", MOUNT, "x" },
                { "//workspace//x", MOUNT, "x" },
                { "/workspace/x", "/workspace/", "x" },
                { "/etc/x", "/", "etc/x" },
                { "/", "/", "" },
        };
        static const struct {
                const char *in, *mount;
        } bad[] = {
                { "/", MOUNT },
                { "/etc/passwd", MOUNT },
                { "/workspacex", MOUNT },
                { "/workspacex/y", MOUNT },
                { "/workspace/../secret", MOUNT },
                { "..", MOUNT },
                { "../x", MOUNT },
                { "a/../../x", MOUNT },
                { "./../x", MOUNT },
                { "a/b/../../../x", MOUNT },
                { "/workspace/x", NULL },
        };
        char long_ok[WS_PATH_MAX + 2];
        char comps[2 * (WS_DEPTH_MAX + 1) + 1];

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
                _cleanup_free_ char *out = NULL;

                EXPECT_OK(ws_path_clean(ok[i].in, ok[i].mount, &out, &err_));
                if (strcmp(out, ok[i].out) != 0)
                        fail_msg("clean '%s' (mount %s): got '%s', want '%s'", ok[i].in,
                                 ok[i].mount, out, ok[i].out);
        }
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                char *out = NULL;

                EXPECT_CODE_MSG(ws_path_clean(bad[i].in, bad[i].mount, &out, &err_),
                                GRPC_STATUS_INVALID_ARGUMENT, "escapes the workspace");
                assert_null(out);
        }
        EXPECT_CODE(ws_path_clean(NULL, MOUNT, &(char *){ NULL }, &err_),
                    GRPC_STATUS_INVALID_ARGUMENT);

        /* Length: exactly WS_PATH_MAX bytes is fine lexically, one more is not. */
        memset(long_ok, 'a', WS_PATH_MAX);
        long_ok[WS_PATH_MAX] = '\0';
        {
                _cleanup_free_ char *out = NULL;

                EXPECT_OK(ws_path_clean(long_ok, MOUNT, &out, &err_));
        }
        long_ok[WS_PATH_MAX] = 'a';
        long_ok[WS_PATH_MAX + 1] = '\0';
        EXPECT_CODE_MSG(ws_path_clean(long_ok, MOUNT, &(char *){ NULL }, &err_),
                        GRPC_STATUS_INVALID_ARGUMENT, "bytes");

        /* Components: WS_DEPTH_MAX is fine, one more is not; what counts is the cleaned path. */
        for (size_t i = 0; i < WS_DEPTH_MAX; i++)
                memcpy(comps + 2 * i, "a/", 2);
        comps[2 * WS_DEPTH_MAX - 1] = '\0';
        {
                _cleanup_free_ char *out = NULL;

                EXPECT_OK(ws_path_clean(comps, MOUNT, &out, &err_));
        }
        comps[2 * WS_DEPTH_MAX - 1] = '/';
        comps[2 * WS_DEPTH_MAX] = 'a';
        comps[2 * WS_DEPTH_MAX + 1] = '\0';
        EXPECT_CODE_MSG(ws_path_clean(comps, MOUNT, &(char *){ NULL }, &err_),
                        GRPC_STATUS_INVALID_ARGUMENT, "components");
        {
                /* 300 "a/.." pairs clean to the root. */
                char pairs[300 * 5 + 1] = "";
                _cleanup_free_ char *out = NULL;

                for (int i = 0; i < 300; i++)
                        strcat(pairs, "a/../");
                EXPECT_OK(ws_path_clean(pairs, MOUNT, &out, &err_));
                assert_string_equal(out, "");
        }
}

/* ---- ReadFile / WriteFile basics ----------------------------------------------------- */

static void roundtrip(fx *f, const char *path, size_t size)
{
        _cleanup_free_ uint8_t *data = cs_xmalloc(size ? size : 1);
        _cleanup_free_ char *disk = NULL;
        ws_read_result r;
        int64_t written = -1;
        size_t disk_len;

        fill_pattern(data, size, (uint32_t)size + 7);
        EXPECT_OK(ws_write(&f->root, path, size ? data : NULL, size, false, 0, &written, &err_));
        assert_int_equal(written, (int64_t)size);
        EXPECT_OK(ws_read(&f->root, path, 0, 0, &r, &err_));
        assert_int_equal(r.len, size);
        assert_int_equal(r.total_size, (int64_t)size);
        assert_true(r.eof);
        if (size == 0)
                assert_null(r.data);
        else
                assert_memory_equal(r.data, data, size);
        free(r.data);
        disk = slurp_at(f->wsfd, path, &disk_len);
        assert_int_equal(disk_len, size);
        assert_memory_equal(disk, data, size);
}

static void test_roundtrip_sizes(void **state)
{
        fx *f = *state;

        roundtrip(f, "zero.bin", 0);
        roundtrip(f, "one.bin", 1);
        roundtrip(f, "max.bin", WS_DATA_MAX);
        /* Replacing with a shorter content leaves no tail of the old one. */
        roundtrip(f, "max.bin", 1);
        roundtrip(f, "max.bin", 0);
        assert_no_temp_files(f->wsfd, ".");
}

static void test_read_offsets(void **state)
{
        fx *f = *state;
        static const struct {
                int64_t off, max;
                const char *want;
                bool eof;
        } cases[] = {
                { 0, 0, "0123456789", true }, { 3, 4, "3456", false },
                { 6, 4, "6789", true },       { 8, 100, "89", true },
                { 9, 1, "9", true },          { 0, 9, "012345678", false },
                { 10, 0, "", true },          { 11, 5, "", true },
                { 1000, 0, "", true },        { INT64_MAX, INT64_MAX, "", true },
        };
        size_t big_len = WS_DATA_MAX + 10;
        _cleanup_free_ uint8_t *big = cs_xmalloc(big_len);
        ws_read_result r;

        write_file_at(f->wsfd, "digits", "0123456789", 10, 0644);
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                EXPECT_OK(ws_read(&f->root, "digits", cases[i].off, cases[i].max, &r, &err_));
                assert_int_equal(r.total_size, 10);
                if (r.len != strlen(cases[i].want) ||
                    (r.len && memcmp(r.data, cases[i].want, r.len) != 0) || r.eof != cases[i].eof)
                        fail_msg("read off %lld max %lld: got %zu bytes eof %d, want '%s' eof %d",
                                 (long long)cases[i].off, (long long)cases[i].max, r.len, r.eof,
                                 cases[i].want, cases[i].eof);
                if (r.len == 0)
                        assert_null(r.data);
                free(r.data);
        }

        /* A file over the cap: max_bytes 0 and max_bytes > 16 MiB both give 16 MiB. */
        fill_pattern(big, big_len, 3);
        write_file_at(f->wsfd, "big", big, big_len, 0644);
        EXPECT_OK(ws_read(&f->root, "big", 0, 0, &r, &err_));
        assert_int_equal(r.len, WS_DATA_MAX);
        assert_int_equal(r.total_size, (int64_t)big_len);
        assert_false(r.eof);
        assert_memory_equal(r.data, big, r.len);
        free(r.data);
        EXPECT_OK(ws_read(&f->root, "big", 0, (int64_t)WS_DATA_MAX + 5, &r, &err_));
        assert_int_equal(r.len, WS_DATA_MAX);
        assert_false(r.eof);
        free(r.data);
        EXPECT_OK(ws_read(&f->root, "big", 5, 0, &r, &err_));
        assert_int_equal(r.len, WS_DATA_MAX);
        assert_false(r.eof);
        assert_memory_equal(r.data, big + 5, r.len);
        free(r.data);
        EXPECT_OK(ws_read(&f->root, "big", 10, 0, &r, &err_));
        assert_int_equal(r.len, WS_DATA_MAX);
        assert_true(r.eof);
        assert_memory_equal(r.data, big + 10, r.len);
        free(r.data);
        EXPECT_OK(ws_read(&f->root, "big", WS_DATA_MAX, 0, &r, &err_));
        assert_int_equal(r.len, 10);
        assert_true(r.eof);
        assert_memory_equal(r.data, big + WS_DATA_MAX, 10);
        free(r.data);

        /* Negative values. */
        EXPECT_CODE(ws_read(&f->root, "digits", -1, 0, &r, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        assert_null(r.data);
        EXPECT_CODE(ws_read(&f->root, "digits", 0, -1, &r, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(ws_read(&f->root, "digits", INT64_MIN, INT64_MIN, &r, &err_),
                    GRPC_STATUS_INVALID_ARGUMENT);
}

static void test_read_errors(void **state)
{
        fx *f = *state;
        ws_read_result r;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "file.txt", "x", 1, 0644);
        EXPECT_CODE_MSG(rd_all(f, "missing.txt", &r, &err_), GRPC_STATUS_NOT_FOUND, "missing.txt");
        EXPECT_CODE_MSG(rd_all(f, "nodir/deeper/x", &r, &err_), GRPC_STATUS_NOT_FOUND,
                        "nodir/deeper/x");
        EXPECT_CODE_MSG(rd_all(f, "sub", &r, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "is a directory");
        EXPECT_CODE_MSG(rd_all(f, "", &r, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "is a directory");
        EXPECT_CODE_MSG(rd_all(f, "/workspace", &r, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "is a directory");
        EXPECT_CODE_MSG(rd_all(f, "file.txt/x", &r, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a directory");
        assert_false(exists_at(f->wsfd, "nodir"));
}

static void test_append(void **state)
{
        fx *f = *state;
        int64_t written = -1;

        /* New file (and its parents) created by an append, with the given mode. */
        EXPECT_OK(ws_write(&f->root, "logs/new.log", (const uint8_t *)"a", 1, true, 0600, &written,
                           &err_));
        assert_int_equal(written, 1);
        assert_file_at(f->wsfd, "logs/new.log", "a");
        assert_int_equal(mode_at(f->wsfd, "logs/new.log"), 0600);
        EXPECT_OK(ws_write(&f->root, "logs/new.log", (const uint8_t *)"bc", 2, true, 0777, &written,
                           &err_));
        assert_int_equal(written, 2);
        assert_file_at(f->wsfd, "logs/new.log", "abc");
        assert_int_equal(mode_at(f->wsfd, "logs/new.log"), 0600);

        /* Existing file made outside the service: appended in place, mode and inode kept. */
        write_file_at(f->wsfd, "old.txt", "hello", 5, 0640);
        assert_int_equal(fchmodat(f->wsfd, "old.txt", 0640, 0), 0);
        {
                struct stat before, after;

                assert_int_equal(fstatat(f->wsfd, "old.txt", &before, 0), 0);
                EXPECT_OK(wr_str(f, "old.txt", " world", true, &err_));
                EXPECT_OK(wr_str(f, "old.txt", "", true, &err_));
                assert_int_equal(fstatat(f->wsfd, "old.txt", &after, 0), 0);
                assert_int_equal(before.st_ino, after.st_ino);
                assert_int_equal(after.st_mode & 07777, 0640);
        }
        assert_file_at(f->wsfd, "old.txt", "hello world");
        expect_read(f, "old.txt", "hello world");
        /* Append-created with mode 0: the default mode. */
        EXPECT_OK(wr_str(f, "dflt.log", "x", true, &err_));
        assert_int_equal(mode_at(f->wsfd, "dflt.log"), WS_DEFAULT_FILE_MODE);
}

static void test_replace_mode_and_owner(void **state)
{
        fx *f = *state;
        mode_t old_umask = umask(077); /* modes must not depend on the agent's umask */
        struct stat before, after;

        EXPECT_OK(wr_str(f, "dflt.txt", "x", false, &err_));
        assert_int_equal(mode_at(f->wsfd, "dflt.txt"), WS_DEFAULT_FILE_MODE);
        EXPECT_OK(
                ws_write(&f->root, "m640.txt", (const uint8_t *)"x", 1, false, 0640, NULL, &err_));
        assert_int_equal(mode_at(f->wsfd, "m640.txt"), 0640);
        /* File-type bits in `mode` are ignored. */
        EXPECT_OK(ws_write(&f->root, "m751.txt", (const uint8_t *)"x", 1, false, 0100751, NULL,
                           &err_));
        assert_int_equal(mode_at(f->wsfd, "m751.txt"), 0751);
        /* Missing parents get WS_DEFAULT_DIR_MODE, whatever the umask. */
        EXPECT_OK(wr_str(f, "d1/d2/f", "x", false, &err_));
        assert_int_equal(mode_at(f->wsfd, "d1"), WS_DEFAULT_DIR_MODE);
        assert_int_equal(mode_at(f->wsfd, "d1/d2"), WS_DEFAULT_DIR_MODE);

        /* An existing file keeps owner and mode (set-id bits included); `mode` is ignored. */
        write_file_at(f->wsfd, "owned.txt", "old", 3, 0644);
        assert_int_equal(fchownat(f->wsfd, "owned.txt", 1234, 4321, 0), 0);
        assert_int_equal(fchmodat(f->wsfd, "owned.txt", 04750, 0), 0);
        assert_int_equal(fstatat(f->wsfd, "owned.txt", &before, 0), 0);
        EXPECT_OK(ws_write(&f->root, "owned.txt", (const uint8_t *)"new content", 11, false, 0777,
                           NULL, &err_));
        assert_int_equal(fstatat(f->wsfd, "owned.txt", &after, 0), 0);
        assert_file_at(f->wsfd, "owned.txt", "new content");
        assert_int_equal(after.st_mode & 07777, 04750);
        assert_int_equal(after.st_uid, 1234);
        assert_int_equal(after.st_gid, 4321);
        assert_int_not_equal(after.st_ino, before.st_ino); /* replaced by rename, not rewritten */
        assert_no_temp_files(f->wsfd, ".");
        umask(old_umask);
}

static void test_write_errors(void **state)
{
        fx *f = *state;
        int64_t written = 42;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "file.txt", "keep", 4, 0644);
        EXPECT_CODE_MSG(wr_str(f, "sub", "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "is a directory");
        EXPECT_CODE_MSG(wr_str(f, "sub", "x", true, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "is a directory");
        EXPECT_CODE(wr_str(f, "", "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION);
        EXPECT_CODE(wr_str(f, ".", "x", true, &err_), GRPC_STATUS_FAILED_PRECONDITION);
        EXPECT_CODE(wr_str(f, "/workspace/", "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION);
        /* A trailing '/' names a directory: never a file of that name. */
        EXPECT_CODE_MSG(wr_str(f, "newdir/", "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT,
                        "ends with '/'");
        EXPECT_CODE(wr_str(f, "sub/new/", "x", true, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, "sub/", "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        assert_false(exists_at(f->wsfd, "newdir"));
        assert_false(exists_at(f->wsfd, "sub/new"));
        EXPECT_CODE_MSG(wr_str(f, "file.txt/x", "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a directory");
        EXPECT_CODE(ws_write(&f->root, "nodata", NULL, 5, false, 0, &written, &err_),
                    GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(written, 0);
        assert_false(exists_at(f->wsfd, "nodata"));
        assert_file_at(f->wsfd, "file.txt", "keep");
        assert_no_temp_files(f->wsfd, ".");
        assert_no_temp_files(f->wsfd, "sub");
}

static void test_write_too_big(void **state)
{
        fx *f = *state;
        size_t len = (size_t)WS_DATA_MAX + 1;
        _cleanup_free_ uint8_t *data = cs_xcalloc(1, len);
        int64_t written = 42;

        write_file_at(f->wsfd, "exists.bin", "old", 3, 0644);
        EXPECT_CODE(ws_write(&f->root, "newdir/big.bin", data, len, false, 0, &written, &err_),
                    GRPC_STATUS_RESOURCE_EXHAUSTED);
        assert_int_equal(written, 0);
        EXPECT_CODE(ws_write(&f->root, "newdir/big.bin", data, len, true, 0, &written, &err_),
                    GRPC_STATUS_RESOURCE_EXHAUSTED);
        EXPECT_CODE(ws_write(&f->root, "exists.bin", data, len, false, 0, NULL, &err_),
                    GRPC_STATUS_RESOURCE_EXHAUSTED);
        EXPECT_CODE(ws_write(&f->root, "exists.bin", data, len, true, 0, NULL, &err_),
                    GRPC_STATUS_RESOURCE_EXHAUSTED);
        assert_false(exists_at(f->wsfd, "newdir"));
        assert_file_at(f->wsfd, "exists.bin", "old");
        assert_no_temp_files(f->wsfd, ".");
}

/* A write that fails half way (EFBIG under RLIMIT_FSIZE) leaves the old content and no temp. */
static void test_write_failure_keeps_old(void **state)
{
        fx *f = *state;
        struct rlimit old_lim, lim;
        uint8_t data[4000];
        void (*old_sig)(int);

        memset(data, 'n', sizeof(data));
        write_file_at(f->wsfd, "keep.txt", "old content", 11, 0644);
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
        lim = old_lim;
        lim.rlim_cur = 1000;
        old_sig = signal(SIGXFSZ, SIG_IGN);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        {
                cs_error *err_ = NULL;
                int rc = ws_write(&f->root, "keep.txt", data, sizeof(data), false, 0, NULL, &err_);

                setrlimit(RLIMIT_FSIZE, &old_lim);
                signal(SIGXFSZ, old_sig);
                check_code(rc, err_, GRPC_STATUS_RESOURCE_EXHAUSTED, "keep.txt", "over rlimit",
                           __LINE__);
                cs_error_free(err_);
        }
        assert_file_at(f->wsfd, "keep.txt", "old content");
        assert_no_temp_files(f->wsfd, ".");
}

/* An append that fails half way (EFBIG under RLIMIT_FSIZE, as ENOSPC on a full workspace)
 * puts the file back as it was, and removes a file it created: the old code left the part
 * that fitted (989 bytes here) appended. */
static void test_append_failure_keeps_old(void **state)
{
        fx *f = *state;
        struct rlimit old_lim, lim;
        uint8_t data[4000];
        void (*old_sig)(int);
        int rc[2];
        cs_error *errs[2] = { NULL, NULL };

        memset(data, 'n', sizeof(data));
        write_file_at(f->wsfd, "keep.txt", "old content", 11, 0644);
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
        lim = old_lim;
        lim.rlim_cur = 1000;
        old_sig = signal(SIGXFSZ, SIG_IGN);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        rc[0] = ws_write(&f->root, "keep.txt", data, sizeof(data), true, 0, NULL, &errs[0]);
        rc[1] = ws_write(&f->root, "new.txt", data, sizeof(data), true, 0, NULL, &errs[1]);
        setrlimit(RLIMIT_FSIZE, &old_lim);
        signal(SIGXFSZ, old_sig);
        check_code(rc[0], errs[0], GRPC_STATUS_RESOURCE_EXHAUSTED, "keep.txt", "append", __LINE__);
        check_code(rc[1], errs[1], GRPC_STATUS_RESOURCE_EXHAUSTED, "new.txt", "append", __LINE__);
        cs_error_free(errs[0]);
        cs_error_free(errs[1]);
        assert_file_at(f->wsfd, "keep.txt", "old content");
        assert_false(exists_at(f->wsfd, "new.txt"));
}

/* ---- atomic replacement -------------------------------------------------------------- */

#define ATOM_A_LEN (256 * 1024)
#define ATOM_B_LEN (384 * 1024)

typedef struct atom_reader {
        fx *f;
        atomic_bool done;
        long reads, bad, errors;
} atom_reader;

static bool all_bytes(const uint8_t *p, size_t n, uint8_t c)
{
        for (size_t i = 0; i < n; i++)
                if (p[i] != c)
                        return false;
        return true;
}

static void *atom_read_loop(void *arg)
{
        atom_reader *a = arg;

        while (!atomic_load(&a->done)) {
                ws_read_result r;
                cs_error *err = NULL;

                if (ws_read(&a->f->root, "atom.bin", 0, 0, &r, &err) < 0) {
                        a->errors++;
                        cs_error_free(err);
                        continue;
                }
                a->reads++;
                if (!((r.len == ATOM_A_LEN && all_bytes(r.data, r.len, 'A')) ||
                      (r.len == ATOM_B_LEN && all_bytes(r.data, r.len, 'B'))))
                        a->bad++;
                free(r.data);
        }
        return NULL;
}

static void test_replace_atomic(void **state)
{
        fx *f = *state;
        _cleanup_free_ uint8_t *a = cs_xmalloc(ATOM_A_LEN);
        _cleanup_free_ uint8_t *b = cs_xmalloc(ATOM_B_LEN);
        atom_reader rd = { .f = f };
        pthread_t th;

        memset(a, 'A', ATOM_A_LEN);
        memset(b, 'B', ATOM_B_LEN);
        write_file_at(f->wsfd, "atom.bin", a, ATOM_A_LEN, 0644);
        assert_int_equal(pthread_create(&th, NULL, atom_read_loop, &rd), 0);
        for (int i = 0; i < 300; i++) {
                cs_error *err = NULL;
                bool odd = i % 2;

                if (ws_write(&f->root, "atom.bin", odd ? a : b, odd ? ATOM_A_LEN : ATOM_B_LEN,
                             false, 0, NULL, &err) < 0) {
                        atomic_store(&rd.done, true);
                        pthread_join(th, NULL);
                        fail_msg("write %d: %s", i, err->msg);
                }
        }
        atomic_store(&rd.done, true);
        assert_int_equal(pthread_join(th, NULL), 0);
        print_message("atomic: %ld reads during 300 replacements\n", rd.reads);
        assert_true(rd.reads > 0);
        assert_int_equal(rd.bad, 0);
        assert_int_equal(rd.errors, 0);
        assert_no_temp_files(f->wsfd, ".");
}

/* ---- ListFiles ----------------------------------------------------------------------- */

static void make_list_tree(fx *f)
{
        write_file_at(f->wsfd, "b.txt", "bbb", 3, 0644);
        write_file_at(f->wsfd, "c.txt", "", 0, 0600);
        write_file_at(f->wsfd, "A.txt", "AAAAA", 5, 0644);
        mkdir_at(f->wsfd, "a");
        write_file_at(f->wsfd, "a/z.txt", "zz", 2, 0644);
        mkdir_at(f->wsfd, "a/c");
        write_file_at(f->wsfd, "a/c/d.txt", "d", 1, 0644);
        mkdir_at(f->wsfd, "zz"); /* empty, and the last entry overall */
}

static void test_list_recursive(void **state)
{
        fx *f = *state;
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = true;

        make_list_tree(f);
        assert_int_equal(fchmodat(f->wsfd, "a/c", 0710, 0), 0);
        EXPECT_OK(ws_list(&f->root, "", true, 0, &e, &n, &trunc, &err_));
        {
                _cleanup_free_ char *got = join_paths(e, n);

                assert_string_equal(got, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz");
        }
        assert_false(trunc);
        for (size_t i = 0; i < n; i++) {
                struct stat st;

                assert_int_equal(fstatat(f->wsfd, e[i].path, &st, AT_SYMLINK_NOFOLLOW), 0);
                assert_int_equal(e[i].is_dir, S_ISDIR(st.st_mode));
                assert_int_equal(e[i].size, S_ISDIR(st.st_mode) ? 0 : (uint64_t)st.st_size);
                assert_int_equal(e[i].mode, st.st_mode & 07777);
                assert_int_equal(e[i].mtime_sec, st.st_mtim.tv_sec);
                assert_int_equal(e[i].mtime_nsec, st.st_mtim.tv_nsec);
        }
        assert_int_equal(e[0].size, 5);
        assert_int_equal(e[2].mode, 0710);
        assert_int_equal(e[6].mode, 0600);
        ws_entries_free(e, n);

        /* Truncation: true only if at least one more entry existed. */
        for (uint32_t max = 1; max <= 7; max++)
                expect_list_cut(f, "", true, max, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz");
        expect_list(f, "", true, 8, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz", false);
        expect_list(f, "", true, 9, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz", false);
        /* The last entry's children count: now zz is not empty. */
        write_file_at(f->wsfd, "zz/inner", "", 0, 0644);
        expect_list_cut(f, "", true, 8, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz,zz/inner");
        expect_list(f, "", true, 9, "A.txt,a,a/c,a/c/d.txt,a/z.txt,b.txt,c.txt,zz,zz/inner", false);
        /* A subdirectory: paths relative to it. */
        expect_list(f, "a", true, 0, "c,c/d.txt,z.txt", false);
        expect_list(f, "a/c", true, 0, "d.txt", false);
        expect_list(f, "zz/..//a/./c", true, 0, "d.txt", false);
}

static void test_list_nonrecursive(void **state)
{
        fx *f = *state;

        make_list_tree(f);
        expect_list(f, "", false, 0, "A.txt,a,b.txt,c.txt,zz", false);
        expect_list(f, "", false, 5, "A.txt,a,b.txt,c.txt,zz", false);
        expect_list_cut(f, "", false, 2, "A.txt,a,b.txt,c.txt,zz");
        expect_list_cut(f, "", false, 4, "A.txt,a,b.txt,c.txt,zz");
        expect_list(f, "a", false, 0, "c,z.txt", false);
        expect_list(f, "zz", false, 0, "", false);
        expect_list(f, "zz", true, 0, "", false);
}

/* Names made inside the sandbox that are not UTF-8 (Linux allows any bytes) are left out of
 * a listing, with what is under them: a proto3 string must be UTF-8 (docs/api.md). */
static void test_list_skips_names_not_utf8(void **state)
{
        fx *f = *state;

        mkdir_at(f->wsfd, "n");
        write_file_at(f->wsfd, "n/ok.txt", "ok", 2, 0644);
        write_file_at(f->wsfd, "n/bad\xff\xfe.txt", "x", 1, 0644);
        mkdir_at(f->wsfd, "n/dir\xc0\xaf");
        write_file_at(f->wsfd, "n/dir\xc0\xaf/inner", "x", 1, 0644);
        write_file_at(f->wsfd, "n/caf\xc3\xa9", "x", 1, 0644);
        expect_list(f, "n", false, 0, "caf\xc3\xa9,ok.txt", false);
        expect_list(f, "n", true, 0, "caf\xc3\xa9,ok.txt", false);
}

static void test_list_default_and_cap(void **state)
{
        fx *f = *state;
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = false;

        make_dir_of_files(f->wsfd, "many", 10050, 5);

        EXPECT_OK(ws_list(&f->root, "many", false, 0, &e, &n, &trunc, &err_));
        assert_int_equal(n, WS_LIST_DEFAULT);
        assert_true(trunc);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(strlen(e[i].path), 6);
                assert_int_equal(e[i].path[0], 'f');
                if (i > 0)
                        assert_true(strcmp(e[i - 1].path, e[i].path) < 0);
        }
        ws_entries_free(e, n);

        for (uint32_t max = WS_LIST_MAX; max <= WS_LIST_MAX + 100; max += 50) {
                EXPECT_OK(ws_list(&f->root, "many", false, max, &e, &n, &trunc, &err_));
                assert_int_equal(n, WS_LIST_MAX);
                assert_true(trunc);
                ws_entries_free(e, n);
        }
        EXPECT_OK(ws_list(&f->root, "", true, UINT32_MAX, &e, &n, &trunc, &err_));
        assert_int_equal(n, WS_LIST_MAX);
        assert_true(trunc);
        assert_string_equal(e[0].path, "many");
        assert_memory_equal(e[1].path, "many/f", 6);
        ws_entries_free(e, n);
        EXPECT_OK(ws_list(&f->root, "many", false, 10049, &e, &n, &trunc, &err_));
        assert_int_equal(n, WS_LIST_MAX);
        ws_entries_free(e, n);
}

/* Reading stops at the cap: a listing of a big directory reads O(max_entries) names, not the
 * whole directory (issue 12: 10^6 entries cost 0.6 s per call even with max_entries 1). The
 * old code read every name to keep the smallest: 5000 here. */
static void test_list_stops_at_the_cap(void **state)
{
        fx *f = *state;
        ws_entry *e = NULL;
        size_t n = 0, before;
        bool trunc = false;

        make_dir_of_files(f->wsfd, "big", 5000, 4);
        for (uint32_t max = 1; max <= 100; max *= 10) {
                before = ws_list_names_seen();
                EXPECT_OK(ws_list(&f->root, "big", false, max, &e, &n, &trunc, &err_));
                assert_int_equal(n, max);
                assert_true(trunc);
                /* max names, two more (to know it is truncated), "." and "..". */
                if (ws_list_names_seen() - before > max + 4)
                        fail_msg("max %u: %zu names read", max, ws_list_names_seen() - before);
                ws_entries_free(e, n);
                before = ws_list_names_seen();
                EXPECT_OK(ws_list(&f->root, "", true, max, &e, &n, &trunc, &err_));
                assert_int_equal(n, max);
                assert_true(trunc);
                if (ws_list_names_seen() - before > 2 * (max + 4))
                        fail_msg("recursive, max %u: %zu names read", max,
                                 ws_list_names_seen() - before);
                ws_entries_free(e, n);
        }
        /* Under the cap: the whole directory, sorted. */
        EXPECT_OK(ws_list(&f->root, "big", false, WS_LIST_MAX, &e, &n, &trunc, &err_));
        assert_int_equal(n, 5000);
        assert_false(trunc);
        assert_string_equal(e[0].path, "f0000");
        assert_string_equal(e[4999].path, "f4999");
        ws_entries_free(e, n);
}

/* Makes `levels` nested directories "d" under dfd's `top`. */
static void make_nested(int dfd, const char *top, int levels)
{
        int cur;

        mkdir_at(dfd, top);
        cur = openat(dfd, top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(cur >= 0);
        for (int i = 0; i < levels; i++) {
                int next;

                if (mkdirat(cur, "d", 0755) < 0 && errno != EEXIST)
                        fail_msg("mkdir level %d: %s", i, strerror(errno));
                next = openat(cur, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(next >= 0);
                close(cur);
                cur = next;
        }
        close(cur);
}

static void test_list_depth_limit(void **state)
{
        fx *f = *state;
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = true;

        /* Exactly WS_DEPTH_MAX levels below the listed directory: all listed, not truncated. */
        make_nested(f->wsfd, "deep", WS_DEPTH_MAX);
        EXPECT_OK(ws_list(&f->root, "deep", true, 0, &e, &n, &trunc, &err_));
        assert_int_equal(n, WS_DEPTH_MAX);
        assert_false(trunc);
        assert_int_equal(strlen(e[n - 1].path), 2 * WS_DEPTH_MAX - 1);
        ws_entries_free(e, n);

        /* One more: not descended, reported as truncated. */
        make_nested(f->wsfd, "deeper", WS_DEPTH_MAX + 1);
        EXPECT_OK(ws_list(&f->root, "deeper", true, 0, &e, &n, &trunc, &err_));
        assert_int_equal(n, WS_DEPTH_MAX);
        assert_true(trunc);
        ws_entries_free(e, n);
}

static void test_list_symlinks_not_followed(void **state)
{
        fx *f = *state;
        ws_entry *e = NULL;
        size_t n = 0;
        bool trunc = true;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "sub/f", "ff", 2, 0644);
        symlink_at(f->wsfd, "sub", "in");
        symlink_at(f->wsfd, "../outdir", "out");
        symlink_at(f->wsfd, "/etc", "etc");
        symlink_at(f->wsfd, ".", "self");
        EXPECT_OK(ws_list(&f->root, "", true, 0, &e, &n, &trunc, &err_));
        {
                _cleanup_free_ char *got = join_paths(e, n);

                assert_string_equal(got, "etc,in,out,self,sub,sub/f");
        }
        assert_false(trunc);
        assert_false(e[1].is_dir);
        assert_int_equal(e[1].size, strlen("sub"));
        assert_false(e[2].is_dir);
        assert_int_equal(e[2].size, strlen("../outdir"));
        assert_true(e[4].is_dir);
        ws_entries_free(e, n);
}

static void test_list_root_and_symlinked_dir(void **state)
{
        fx *f = *state;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "sub/f", "ff", 2, 0644);
        write_file_at(f->wsfd, "file.txt", "", 0, 0644);
        symlink_at(f->wsfd, "sub", "rel");
        symlink_at(f->wsfd, "/workspace/sub", "abs");
        symlink_at(f->wsfd, "/workspace", "absroot");
        expect_list(f, "", false, 0, "abs,absroot,file.txt,rel,sub", false);
        expect_list(f, ".", false, 0, "abs,absroot,file.txt,rel,sub", false);
        expect_list(f, "/workspace", false, 0, "abs,absroot,file.txt,rel,sub", false);
        expect_list(f, "/workspace/", false, 0, "abs,absroot,file.txt,rel,sub", false);
        expect_list(f, "absroot", false, 0, "abs,absroot,file.txt,rel,sub", false);
        expect_list(f, "rel", true, 0, "f", false);
        expect_list(f, "abs", true, 0, "f", false);
        expect_list(f, "absroot/abs", true, 0, "f", false);
        EXPECT_CODE_MSG(ls_discard(f, "file.txt", false, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a directory");
        EXPECT_CODE_MSG(ls_discard(f, "nope", false, &err_), GRPC_STATUS_NOT_FOUND, "nope");
        EXPECT_CODE(ls_discard(f, "nope/deeper", true, &err_), GRPC_STATUS_NOT_FOUND);
}

/* ---- path attacks -------------------------------------------------------------------- */

static void test_attack_dotdot(void **state)
{
        fx *f = *state;
        static const char *const paths[] = {
                "../secret", "a/../../secret", "./../secret",         "sub/../../secret",
                "..",        "../ws/x",        "a/b/../../../secret",
        };
        ws_read_result r;

        mkdir_at(f->wsfd, "sub");
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                EXPECT_CODE_MSG(rd_all(f, paths[i], &r, &err_), GRPC_STATUS_INVALID_ARGUMENT,
                                "escapes the workspace");
                EXPECT_CODE(wr_str(f, paths[i], "pwned", false, &err_),
                            GRPC_STATUS_INVALID_ARGUMENT);
                EXPECT_CODE(wr_str(f, paths[i], "pwned", true, &err_),
                            GRPC_STATUS_INVALID_ARGUMENT);
                EXPECT_CODE(ls_discard(f, paths[i], true, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        }
        assert_false(exists_at(f->wsfd, "a"));
        assert_false(exists_at(f->wsfd, "x"));
        assert_outside_untouched(f);
}

static void test_attack_absolute(void **state)
{
        fx *f = *state;
        const char *paths[] = { "/etc/passwd",   "/workspace/../secret",
                                "/workspacex/y", "/",
                                f->secret,       "/etc" };
        struct stat pw_before, pw_after;
        ws_read_result r;

        assert_int_equal(stat("/etc/passwd", &pw_before), 0);
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                EXPECT_CODE_MSG(rd_all(f, paths[i], &r, &err_), GRPC_STATUS_INVALID_ARGUMENT,
                                "escapes the workspace");
                EXPECT_CODE(wr_str(f, paths[i], "pwned", false, &err_),
                            GRPC_STATUS_INVALID_ARGUMENT);
                EXPECT_CODE(wr_str(f, paths[i], "pwned", true, &err_),
                            GRPC_STATUS_INVALID_ARGUMENT);
                EXPECT_CODE(ls_discard(f, paths[i], false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        }
        assert_int_equal(stat("/etc/passwd", &pw_after), 0);
        assert_true(same_stat(&pw_before, &pw_after));
        assert_outside_untouched(f);

        /* Inside mount_path: accepted, made relative. */
        EXPECT_OK(wr_str(f, "/workspace/x", "abs", false, &err_));
        assert_file_at(f->wsfd, "x", "abs");
        expect_read(f, "/workspace/x", "abs");
        expect_read(f, "x", "abs");
        expect_read(f, "//workspace/./x", "abs");
}

static void test_symlink_outside(void **state)
{
        fx *f = *state;
        char p[PATH_MAX + 16];
        struct stat pw_before, pw_after;
        ws_read_result r;
        static const char *const links[] = { "pw",     "sec",    "secabs", "sub/up",
                                             "dotdot", "tricky", "slash" };

        mkdir_at(f->wsfd, "sub");
        symlink_at(f->wsfd, "/etc/passwd", "pw");
        symlink_at(f->wsfd, "../secret", "sec");
        symlink_at(f->wsfd, f->secret, "secabs");
        symlink_at(f->wsfd, "../../secret", "sub/up");
        symlink_at(f->wsfd, "..", "dotdot");
        symlink_at(f->wsfd, "/workspace/../etc/passwd", "tricky");
        symlink_at(f->wsfd, "/", "slash");
        assert_int_equal(stat("/etc/passwd", &pw_before), 0);

        for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
                EXPECT_CODE_MSG(rd_all(f, links[i], &r, &err_), GRPC_STATUS_PERMISSION_DENIED,
                                links[i]);
                EXPECT_CODE(wr_str(f, links[i], "pwned", false, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, links[i], "pwned", true, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(ls_discard(f, links[i], true, &err_), GRPC_STATUS_PERMISSION_DENIED);
        }
        EXPECT_CODE(rd_all(f, "dotdot/secret", &r, &err_), GRPC_STATUS_PERMISSION_DENIED);
        EXPECT_CODE(wr_str(f, "dotdot/secret", "pwned", false, &err_),
                    GRPC_STATUS_PERMISSION_DENIED);
        EXPECT_CODE(rd_all(f, "slash/etc/passwd", &r, &err_), GRPC_STATUS_PERMISSION_DENIED);

        /* Dangling links to outside: writing must not create their targets. */
        symlink_at(f->wsfd, "../created_outside", "newout");
        snprintf(p, sizeof(p), "%s/created_abs", f->base);
        symlink_at(f->wsfd, p, "newout_abs");
        symlink_at(f->wsfd, "../newdir_outside/f", "newout_dir");
        for (int append = 0; append < 2; append++) {
                EXPECT_CODE(wr_str(f, "newout", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, "newout_abs", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, "newout_dir", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
        }

        /* The links themselves are untouched too. */
        assert_true(exists_at(f->wsfd, "pw"));
        assert_int_equal(readlinkat(f->wsfd, "pw", p, sizeof(p)), strlen("/etc/passwd"));
        assert_int_equal(stat("/etc/passwd", &pw_after), 0);
        assert_true(same_stat(&pw_before, &pw_after));
        assert_outside_untouched(f);
}

static void test_symlink_middle_dir(void **state)
{
        fx *f = *state;
        ws_read_result r;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "sub/f", "in sub", 6, 0644);
        mkdir_at(f->wsfd, "sub2");
        write_file_at(f->wsfd, "sub2/g", "in sub2", 7, 0644);
        mkdir_at(f->wsfd, "sub/deeper");
        symlink_at(f->wsfd, "../outdir", "outlink");
        symlink_at(f->wsfd, f->outdir, "outlink_abs");
        symlink_at(f->wsfd, "sub", "inlink");
        symlink_at(f->wsfd, "../../sub2", "sub/deeper/uplink");

        /* Outside: refused for every operation, nothing created or changed there. */
        EXPECT_CODE_MSG(rd_all(f, "outlink/f.txt", &r, &err_), GRPC_STATUS_PERMISSION_DENIED,
                        "outlink/f.txt");
        EXPECT_CODE(rd_all(f, "outlink_abs/f.txt", &r, &err_), GRPC_STATUS_PERMISSION_DENIED);
        for (int append = 0; append < 2; append++) {
                EXPECT_CODE(wr_str(f, "outlink/f.txt", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, "outlink/new.txt", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, "outlink/x/y", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
                EXPECT_CODE(wr_str(f, "outlink_abs/new.txt", "pwned", append, &err_),
                            GRPC_STATUS_PERMISSION_DENIED);
        }
        EXPECT_CODE(ls_discard(f, "outlink", true, &err_), GRPC_STATUS_PERMISSION_DENIED);
        EXPECT_CODE(ls_discard(f, "outlink_abs", false, &err_), GRPC_STATUS_PERMISSION_DENIED);
        assert_outside_untouched(f);

        /* Inside: followed. */
        expect_read(f, "inlink/f", "in sub");
        EXPECT_OK(wr_str(f, "inlink/g", "made", false, &err_));
        assert_file_at(f->wsfd, "sub/g", "made");
        EXPECT_OK(wr_str(f, "inlink/h/i", "deep", false, &err_));
        assert_file_at(f->wsfd, "sub/h/i", "deep");
        expect_list(f, "inlink", false, 0, "deeper,f,g,h", false);
        expect_read(f, "sub/deeper/uplink/g", "in sub2");
        expect_read(f, "inlink/deeper/uplink/g", "in sub2");
        EXPECT_OK(wr_str(f, "inlink/deeper/uplink/g", "rewritten", false, &err_));
        assert_file_at(f->wsfd, "sub2/g", "rewritten");
}

static void test_symlink_chain_and_loop(void **state)
{
        fx *f = *state;
        ws_read_result r;
        char name[16], target[16];

        write_file_at(f->wsfd, "real", "real content", 12, 0644);
        /* c0 -> c1 -> ... -> c40 -> real: from c1 that is WS_SYMLINK_MAX links, from c0 one more.
         */
        for (int i = 0; i <= WS_SYMLINK_MAX; i++) {
                snprintf(name, sizeof(name), "c%d", i);
                if (i == WS_SYMLINK_MAX)
                        snprintf(target, sizeof(target), "real");
                else
                        snprintf(target, sizeof(target), "c%d", i + 1);
                symlink_at(f->wsfd, target, name);
        }
        expect_read(f, "c1", "real content");
        EXPECT_CODE_MSG(rd_all(f, "c0", &r, &err_), GRPC_STATUS_INVALID_ARGUMENT,
                        "too many levels of symbolic links");
        EXPECT_OK(wr_str(f, "c1", "via chain", false, &err_));
        assert_file_at(f->wsfd, "real", "via chain");
        assert_true(exists_at(f->wsfd, "c1"));

        /* Mixed chain: absolute inside, relative with "..", plain. */
        mkdir_at(f->wsfd, "sub");
        symlink_at(f->wsfd, "/workspace/x2", "x1");
        symlink_at(f->wsfd, "sub/../x3", "x2");
        symlink_at(f->wsfd, "./real", "x3");
        expect_read(f, "x1", "via chain");

        /* Loops. */
        symlink_at(f->wsfd, "b", "a");
        symlink_at(f->wsfd, "a", "b");
        symlink_at(f->wsfd, "self", "self");
        symlink_at(f->wsfd, "/workspace/absloop", "absloop");
        symlink_at(f->wsfd, "dloop/x", "dloop");
        {
                static const char *const loops[] = { "a", "b", "self", "absloop", "dloop", "a/x" };

                for (size_t i = 0; i < ARRAY_SIZE(loops); i++) {
                        EXPECT_CODE_MSG(rd_all(f, loops[i], &r, &err_),
                                        GRPC_STATUS_INVALID_ARGUMENT, "too many levels");
                        EXPECT_CODE(wr_str(f, loops[i], "x", false, &err_),
                                    GRPC_STATUS_INVALID_ARGUMENT);
                        EXPECT_CODE(wr_str(f, loops[i], "x", true, &err_),
                                    GRPC_STATUS_INVALID_ARGUMENT);
                        EXPECT_CODE(ls_discard(f, loops[i], false, &err_),
                                    GRPC_STATUS_INVALID_ARGUMENT);
                }
        }
        assert_no_temp_files(f->wsfd, ".");
}

static void test_symlink_absolute_inside(void **state)
{
        fx *f = *state;
        char buf[64];

        write_file_at(f->wsfd, "real", "real", 4, 0644);
        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "sub/f", "sub f", 5, 0644);
        symlink_at(f->wsfd, "/workspace/real", "abs");
        symlink_at(f->wsfd, "/workspace/sub", "absdir");
        symlink_at(f->wsfd, "/workspace", "absroot");
        symlink_at(f->wsfd, "/workspace/../workspace//real", "tricky");
        symlink_at(f->wsfd, "/workspace/newdir/t.txt", "dangling_abs");
        symlink_at(f->wsfd, "newdir2/t.txt", "dangling_rel");
        symlink_at(f->wsfd, "/workspace/sub/../real", "sub/absup");

        expect_read(f, "abs", "real");
        expect_read(f, "absdir/f", "sub f");
        expect_read(f, "absroot/real", "real");
        expect_read(f, "absroot/absroot/absdir/f", "sub f");
        expect_read(f, "tricky", "real");
        expect_read(f, "sub/absup", "real");

        /* Writes go to the translated target; the link stays a link. */
        EXPECT_OK(wr_str(f, "abs", "replaced", false, &err_));
        assert_file_at(f->wsfd, "real", "replaced");
        EXPECT_OK(wr_str(f, "abs", "+more", true, &err_));
        assert_file_at(f->wsfd, "real", "replaced+more");
        assert_int_equal(readlinkat(f->wsfd, "abs", buf, sizeof(buf)), strlen("/workspace/real"));
        EXPECT_OK(wr_str(f, "absdir/new", "n", false, &err_));
        assert_file_at(f->wsfd, "sub/new", "n");

        /* A final link to a file that does not exist yet: created at the target. */
        EXPECT_OK(wr_str(f, "dangling_abs", "made", false, &err_));
        assert_file_at(f->wsfd, "newdir/t.txt", "made");
        EXPECT_OK(wr_str(f, "dangling_rel", "made2", true, &err_));
        assert_file_at(f->wsfd, "newdir2/t.txt", "made2");
        expect_read(f, "dangling_abs", "made");
        assert_int_equal(readlinkat(f->wsfd, "dangling_abs", buf, sizeof(buf)),
                         strlen("/workspace/newdir/t.txt"));

        /* Look-alikes of mount_path are outside. */
        symlink_at(f->wsfd, "/workspacex/real", "lookalike");
        EXPECT_CODE(wr_str(f, "lookalike", "x", false, &err_), GRPC_STATUS_PERMISSION_DENIED);
        assert_outside_untouched(f);
}

/* ---- special files ------------------------------------------------------------------- */

static void expect_refused_special(fx *f, const char *path)
{
        ws_read_result r;

        EXPECT_CODE_MSG(rd_all(f, path, &r, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a regular file");
        EXPECT_CODE_MSG(wr_str(f, path, "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a regular file");
        EXPECT_CODE_MSG(wr_str(f, path, "x", true, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a regular file");
        EXPECT_CODE_MSG(ls_discard(f, path, false, &err_), GRPC_STATUS_FAILED_PRECONDITION,
                        "not a directory");
}

static void test_special_files(void **state)
{
        fx *f = *state;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        ws_read_result r;
        int sock;

        /* A FIFO with no writer: opening it for reading would block forever (and this runs in
         * the test's own thread, so a regression hangs the test). */
        assert_int_equal(mkfifoat(f->wsfd, "fifo", 0666), 0);
        symlink_at(f->wsfd, "fifo", "fifolink");
        expect_refused_special(f, "fifo");
        expect_refused_special(f, "fifolink");
        EXPECT_CODE(rd_all(f, "fifo/x", &r, &err_), GRPC_STATUS_FAILED_PRECONDITION);
        EXPECT_CODE(wr_str(f, "fifo/x", "x", false, &err_), GRPC_STATUS_FAILED_PRECONDITION);
        assert_int_equal(fstatat(f->wsfd, "fifo", &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_true(S_ISFIFO(st.st_mode)); /* not replaced by a write */

        /* A socket. */
        assert_true(strlen(f->ws) + sizeof("/sock") <= sizeof(sa.sun_path));
        memcpy(sa.sun_path, f->ws, strlen(f->ws));
        memcpy(sa.sun_path + strlen(f->ws), "/sock", sizeof("/sock"));
        sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(sock >= 0);
        assert_int_equal(bind(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(listen(sock, 1), 0);
        expect_refused_special(f, "sock");
        close(sock);

        /* A device, if this environment lets us make one. */
        if (mknodat(f->wsfd, "null", S_IFCHR | 0666, makedev(1, 3)) == 0)
                expect_refused_special(f, "null");
        else
                print_message("mknod not permitted (%s): device case skipped\n", strerror(errno));

        /* Listing shows them, without opening them. */
        expect_list(f, "", false, 0,
                    exists_at(f->wsfd, "null") ? "fifo,fifolink,null,sock" : "fifo,fifolink,sock",
                    false);
        assert_no_temp_files(f->wsfd, ".");
}

/* ---- sizes of paths ------------------------------------------------------------------ */

static char *repeat_components(const char *comp, int n, const char *last)
{
        size_t cl = strlen(comp), w = 0;
        char *s = cs_xmalloc((cl + 1) * (size_t)n + strlen(last) + 1);

        for (int i = 0; i < n; i++) {
                memcpy(s + w, comp, cl);
                w += cl;
                s[w++] = '/';
        }
        strcpy(s + w, last);
        return s;
}

static void test_long_paths(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *p5000 = cs_xmalloc(5001);
        _cleanup_free_ char *c300 = repeat_components("a", 299, "a");
        _cleanup_free_ char *c256 = repeat_components("d", WS_DEPTH_MAX - 1, "f");
        _cleanup_free_ char *c257 = repeat_components("e", WS_DEPTH_MAX, "f");
        char longname[NAME_MAX + 2];
        ws_read_result r;

        memset(p5000, 'a', 5000);
        p5000[5000] = '\0';
        EXPECT_CODE(rd_all(f, p5000, &r, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, p5000, "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, p5000, "x", true, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(ls_discard(f, p5000, true, &err_), GRPC_STATUS_INVALID_ARGUMENT);

        EXPECT_CODE_MSG(rd_all(f, c300, &r, &err_), GRPC_STATUS_INVALID_ARGUMENT, "components");
        EXPECT_CODE(wr_str(f, c300, "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, c300, "x", true, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(ls_discard(f, c300, true, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, c257, "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        assert_false(exists_at(f->wsfd, "a"));
        assert_false(exists_at(f->wsfd, "e"));

        /* WS_DEPTH_MAX components is still fine. */
        EXPECT_OK(wr_str(f, c256, "deep", false, &err_));
        expect_read(f, c256, "deep");

        /* A component longer than NAME_MAX. */
        memset(longname, 'n', NAME_MAX + 1);
        longname[NAME_MAX + 1] = '\0';
        EXPECT_CODE(rd_all(f, longname, &r, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        EXPECT_CODE(wr_str(f, longname, "x", false, &err_), GRPC_STATUS_INVALID_ARGUMENT);
        /* A name of exactly NAME_MAX bytes: its temp name must still fit. */
        longname[NAME_MAX] = '\0';
        EXPECT_OK(wr_str(f, longname, "long", false, &err_));
        expect_read(f, longname, "long");
        assert_no_temp_files(f->wsfd, ".");

        /* Symlinks cannot take a walk deeper than WS_DEPTH_MAX directories. */
        make_nested(f->wsfd, "nest", WS_DEPTH_MAX);
        {
                _cleanup_free_ char *target = repeat_components("d", WS_DEPTH_MAX, "x");
                _cleanup_free_ char *ok = repeat_components("d", WS_DEPTH_MAX - 1, "x");

                assert_int_equal(symlinkat(target, f->wsfd, "nest/toodeep"), 0);
                assert_int_equal(symlinkat(ok, f->wsfd, "nest/deepenough"), 0);
                EXPECT_CODE(rd_all(f, "nest/toodeep", &r, &err_), GRPC_STATUS_INVALID_ARGUMENT);
                /* nest + 255 d's = 256 directories, then the missing file x. */
                EXPECT_CODE(rd_all(f, "nest/deepenough", &r, &err_), GRPC_STATUS_NOT_FOUND);
        }
}

/* ---- races --------------------------------------------------------------------------- */

typedef struct swapper {
        fx *f;
        atomic_bool stop;
        unsigned long swaps;
} swapper;

/* Atomically repoints `name` at `target` (a fresh link renamed over it). */
static void swap_link(int dfd, const char *target, const char *name)
{
        (void)unlinkat(dfd, "swap.tmp", 0);
        if (symlinkat(target, dfd, "swap.tmp") == 0)
                (void)renameat(dfd, "swap.tmp", dfd, name);
}

static void *swap_loop(void *arg)
{
        swapper *s = arg;
        const char *ftargets[] = { "inside.txt", "../secret", s->f->secret, "/workspace/inside.txt",
                                   "/etc/passwd" };
        const char *dtargets[] = { "dir_in", "../outdir", s->f->outdir, "/workspace/dir_in" };

        for (unsigned long i = 0; !atomic_load(&s->stop); i++) {
                swap_link(s->f->wsfd, ftargets[i % ARRAY_SIZE(ftargets)], "link");
                swap_link(s->f->wsfd, dtargets[i % ARRAY_SIZE(dtargets)], "dlink");
                /* The final name itself flips between a regular file (a directory) and a
                 * link to the outside: catches any check-then-open on the last component. */
                (void)renameat2(s->f->wsfd, "flip", s->f->wsfd, "flip.alt", RENAME_EXCHANGE);
                (void)renameat2(s->f->wsfd, "dflip", s->f->wsfd, "dflip.alt", RENAME_EXCHANGE);
                s->swaps = i;
        }
        return NULL;
}

static bool read_is_inside_or_error(fx *f, const char *path, long *ok, long *refused)
{
        ws_read_result r;
        cs_error *err = NULL;
        bool good;

        if (ws_read(&f->root, path, 0, 0, &r, &err) < 0) {
                (*refused)++;
                cs_error_free(err);
                return true;
        }
        (*ok)++;
        /* "flip" also gets appended to, so only its start is known. */
        good = r.len >= strlen(INSIDE) && memcmp(r.data, INSIDE, strlen(INSIDE)) == 0 &&
               (r.len == strlen(INSIDE) || strcmp(path, "flip") == 0) &&
               !memmem(r.data, r.len, "SECRET", 6);
        if (!good)
                print_error("read '%s' returned %zu bytes: '%.*s'\n", path, r.len, (int)r.len,
                            (const char *)r.data);
        free(r.data);
        return good;
}

static void test_symlink_race(void **state)
{
        fx *f = *state;
        swapper s = { .f = f };
        struct stat sec_before, sec_after, pw_before, pw_after;
        long ok = 0, refused = 0, bad = 0, list_bad = 0;
        pthread_t th;

        write_file_at(f->wsfd, "inside.txt", INSIDE, strlen(INSIDE), 0644);
        mkdir_at(f->wsfd, "dir_in");
        write_file_at(f->wsfd, "dir_in/f.txt", INSIDE, strlen(INSIDE), 0644);
        symlink_at(f->wsfd, "inside.txt", "link");
        symlink_at(f->wsfd, "dir_in", "dlink");
        write_file_at(f->wsfd, "flip", INSIDE, strlen(INSIDE), 0644);
        symlink_at(f->wsfd, "../secret", "flip.alt");
        mkdir_at(f->wsfd, "dflip");
        write_file_at(f->wsfd, "dflip/f.txt", INSIDE, strlen(INSIDE), 0644);
        symlink_at(f->wsfd, "../outdir", "dflip.alt");
        assert_int_equal(stat(f->secret, &sec_before), 0);
        assert_int_equal(stat("/etc/passwd", &pw_before), 0);

        assert_int_equal(pthread_create(&th, NULL, swap_loop, &s), 0);
        for (int i = 0; i < 2000; i++) {
                cs_error *err = NULL;
                ws_entry *e = NULL;
                size_t n = 0;
                bool trunc;

                if (!read_is_inside_or_error(f, "link", &ok, &refused))
                        bad++;
                if (!read_is_inside_or_error(f, "dlink/f.txt", &ok, &refused))
                        bad++;
                (void)wr_str(f, "link", INSIDE, false, &err);
                cs_error_freep(&err);
                (void)wr_str(f, "link", "", true, &err);
                cs_error_freep(&err);
                (void)wr_str(f, "dlink/f.txt", INSIDE, false, &err);
                cs_error_freep(&err);
                (void)wr_str(f, "dlink/f.txt", "", true, &err);
                cs_error_freep(&err);
                if (!read_is_inside_or_error(f, "flip", &ok, &refused))
                        bad++;
                if (!read_is_inside_or_error(f, "dflip/f.txt", &ok, &refused))
                        bad++;
                (void)wr_str(f, "flip", "+", true, &err);
                cs_error_freep(&err);
                (void)wr_str(f, "dflip/f.txt", INSIDE, false, &err);
                cs_error_freep(&err);
                (void)wr_str(f, "dflip/new.txt", "new", true, &err);
                cs_error_freep(&err);
                for (int k = 0; k < 2; k++) {
                        if (ws_list(&f->root, k ? "dflip" : "dlink", false, 0, &e, &n, &trunc,
                                    &err) == 0) {
                                for (size_t j = 0; j < n; j++)
                                        if (strcmp(e[j].path, "f.txt") != 0 &&
                                            strcmp(e[j].path, "new.txt") != 0)
                                                list_bad++;
                        }
                        cs_error_freep(&err);
                        ws_entries_free(e, n);
                        e = NULL;
                        n = 0;
                }
        }
        atomic_store(&s.stop, true);
        assert_int_equal(pthread_join(th, NULL), 0);
        print_message("race: %ld reads inside, %ld refused, %lu link swaps\n", ok, refused,
                      s.swaps);

        assert_int_equal(bad, 0);
        assert_int_equal(list_bad, 0);
        assert_int_equal(stat(f->secret, &sec_after), 0);
        assert_true(same_stat(&sec_before, &sec_after));
        assert_int_equal(stat("/etc/passwd", &pw_after), 0);
        assert_true(same_stat(&pw_before, &pw_after));
        assert_outside_untouched(f);
        assert_file_at(f->wsfd, "inside.txt", INSIDE);
        assert_file_at(f->wsfd, "dir_in/f.txt", INSIDE);
        assert_no_temp_files(f->wsfd, ".");
        assert_no_temp_files(f->wsfd, "dir_in");
        {
                struct stat st;
                const char *real_dir;

                assert_int_equal(fstatat(f->wsfd, "dflip", &st, AT_SYMLINK_NOFOLLOW), 0);
                real_dir = S_ISDIR(st.st_mode) ? "dflip" : "dflip.alt";
                assert_no_temp_files(f->wsfd, real_dir);
        }
}

/* ---- fd hygiene ---------------------------------------------------------------------- */

static void test_no_fd_leaks(void **state)
{
        fx *f = *state;
        _cleanup_free_ uint8_t *big = cs_xcalloc(1, (size_t)WS_DATA_MAX + 1);
        int before;

        mkdir_at(f->wsfd, "sub");
        write_file_at(f->wsfd, "sub/f", "f", 1, 0644);
        symlink_at(f->wsfd, "../secret", "out");
        symlink_at(f->wsfd, "sub", "in");
        symlink_at(f->wsfd, "a", "b");
        symlink_at(f->wsfd, "b", "a");
        assert_int_equal(mkfifoat(f->wsfd, "fifo", 0644), 0);
        make_nested(f->wsfd, "deep", WS_DEPTH_MAX + 2);

        before = count_fds();
        for (int i = 0; i < 20; i++) {
                static const char *const paths[] = {
                        "sub/f",       "in/f",   "out",      "a",        "fifo",
                        "sub",         "",       "missing",  "sub/f/x",  "../x",
                        "/etc/passwd", "in/new", "deep/d/d", "in/x/y/z", "/workspace/in/f",
                };
                for (size_t j = 0; j < ARRAY_SIZE(paths); j++) {
                        ws_read_result r;
                        cs_error *err = NULL;
                        ws_entry *e = NULL;
                        size_t n = 0;
                        bool trunc;

                        if (ws_read(&f->root, paths[j], 0, 0, &r, &err) == 0)
                                free(r.data);
                        cs_error_freep(&err);
                        (void)wr_str(f, paths[j], "data", false, &err);
                        cs_error_freep(&err);
                        (void)wr_str(f, paths[j], "data", true, &err);
                        cs_error_freep(&err);
                        (void)ws_write(&f->root, paths[j], big, (size_t)WS_DATA_MAX + 1, false, 0,
                                       NULL, &err);
                        cs_error_freep(&err);
                        (void)ws_list(&f->root, paths[j], true, 0, &e, &n, &trunc, &err);
                        cs_error_freep(&err);
                        ws_entries_free(e, n);
                        (void)ws_list(&f->root, paths[j], false, 1, &e, &n, &trunc, &err);
                        cs_error_freep(&err);
                        ws_entries_free(e, n);
                }
        }
        assert_int_equal(count_fds(), before);
        ws_entries_free(NULL, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
                T(test_path_clean),
                T(test_roundtrip_sizes),
                T(test_read_offsets),
                T(test_read_errors),
                T(test_append),
                T(test_replace_mode_and_owner),
                T(test_write_errors),
                T(test_write_too_big),
                T(test_write_failure_keeps_old),
                T(test_append_failure_keeps_old),
                T(test_replace_atomic),
                T(test_list_recursive),
                T(test_list_nonrecursive),
                T(test_list_skips_names_not_utf8),
                T(test_list_default_and_cap),
                T(test_list_stops_at_the_cap),
                T(test_list_depth_limit),
                T(test_list_symlinks_not_followed),
                T(test_list_root_and_symlinked_dir),
                T(test_attack_dotdot),
                T(test_attack_absolute),
                T(test_symlink_outside),
                T(test_symlink_middle_dir),
                T(test_symlink_chain_and_loop),
                T(test_symlink_absolute_inside),
                T(test_special_files),
                T(test_long_paths),
                T(test_symlink_race),
                T(test_no_fd_leaks),
#undef T
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
