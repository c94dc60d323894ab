#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static void *check_alloc(void *p)
{
        if (!p) {
                static const char msg[] = "out of memory\n";
                (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
                abort();
        }
        return p;
}

void *cs_xmalloc(size_t n)
{
        return check_alloc(malloc(n ? n : 1));
}

void *cs_xcalloc(size_t n, size_t size)
{
        return check_alloc(calloc(n ? n : 1, size ? size : 1));
}

char *cs_xstrdup(const char *s)
{
        return check_alloc(strdup(s));
}

void *cs_xgrow(void *p, size_t n, size_t *cap, size_t size)
{
        if (n < *cap)
                return p;
        *cap = *cap ? 2 * *cap : 16;
        return check_alloc(reallocarray(p, *cap, size));
}

void cs_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : 256;

                while (c < *len + n + 1)
                        c *= 2;
                *buf = check_alloc(realloc(*buf, c));
                *cap = c;
        }
        memcpy(*buf + *len, s, n);
        *len += n;
        (*buf)[*len] = '\0';
}

char *cs_xasprintf(const char *fmt, ...)
{
        char *s = NULL;
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        return check_alloc(s);
}

static int64_t clock_ms(clockid_t id)
{
        struct timespec ts;

        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cs_read_file(const char *path, size_t max, char **ret, size_t *ret_len, struct stat *ret_st)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t len = 0, cap = 4096;

        if (fd < 0 || fstat(fd, &st) < 0)
                return -1;
        if (S_ISDIR(st.st_mode)) {
                errno = EISDIR;
                return -1;
        }
        buf = cs_xmalloc(cap);
        for (;;) {
                ssize_t n = cs_read_full(fd, buf + len, cap - len - 1);

                if (n < 0)
                        return -1;
                len += (size_t)n;
                if (len > max) {
                        errno = EFBIG;
                        return -1;
                }
                if (len + 1 < cap)
                        break; /* a short read: the end of the file */
                cap *= 2;
                buf = realloc(buf, cap);
                if (!buf)
                        abort();
        }
        buf[len] = '\0';
        if (ret_st)
                *ret_st = st;
        if (ret_len)
                *ret_len = len;
        *ret = TAKE_PTR(buf);
        return 0;
}

int64_t cs_now_monotonic_ms(void)
{
        return clock_ms(CLOCK_MONOTONIC);
}

void cs_cond_init_monotonic(pthread_cond_t *cond)
{
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &ca);
        pthread_condattr_destroy(&ca);
}

int cs_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms)
{
        struct timespec ts;

        if (until_ms == INT64_MAX)
                return pthread_cond_wait(cond, lock);
        if (until_ms < 0)
                until_ms = 0;
        ts.tv_sec = until_ms / 1000;
        ts.tv_nsec = (until_ms % 1000) * 1000000;
        return pthread_cond_timedwait(cond, lock, &ts);
}

int64_t cs_now_monotonic_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t cs_now_realtime_ms(void)
{
        return clock_ms(CLOCK_REALTIME);
}

bool cs_fd_readable(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return fd >= 0 && poll(&p, 1, 0) == 1;
}

int cs_write_all(int fd, const void *buf, size_t len)
{
        struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

        return cs_writev_all(fd, &iov, 1);
}

int cs_writev_all(int fd, const struct iovec *iov, size_t n_iov)
{
        size_t i = 0, done = 0; /* iov[i] is written up to done */

        for (;;) {
                struct iovec v[64];
                size_t n = 0;
                ssize_t w;

                while (i < n_iov && iov[i].iov_len == done) {
                        i++;
                        done = 0;
                }
                if (i == n_iov)
                        return 0;
                for (size_t k = i; k < n_iov && n < ARRAY_SIZE(v); k++) {
                        size_t skip = k == i ? done : 0;
                        v[n++] = (struct iovec){ .iov_base = (char *)iov[k].iov_base + skip,
                                                 .iov_len = iov[k].iov_len - skip };
                }
                w = writev(fd, v, (int)n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -1;
                if (w == 0) {
                        errno = EIO;
                        return -1;
                }
                for (size_t left = (size_t)w; left > 0;) {
                        size_t k = iov[i].iov_len - done;
                        if (k > left)
                                k = left;
                        done += k;
                        left -= k;
                        if (done == iov[i].iov_len) {
                                i++;
                                done = 0;
                        }
                }
        }
}

ssize_t cs_read_full(int fd, void *buf, size_t len)
{
        char *p = buf;
        size_t got = 0;

        while (got < len) {
                ssize_t n = read(fd, p + got, len - got);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

/* ---- cs_remove_tree ---------------------------------------------------------------------- */

typedef struct rm_tree {
        int topfd;     /* the directory being removed: deep subtrees are moved up into it */
        dev_t dev;     /* its device: another device is another mount */
        unsigned seq;  /* for the names of moved subtrees */
        int first_err; /* the first errno met */
} rm_tree;

static void rm_note(rm_tree *t, int errnum)
{
        if (!t->first_err)
                t->first_err = errnum;
}

/* Whether the directory fd is on the tree's mount (same device, not itself a mount root, which
 * catches bind mounts of the same filesystem). */
static bool rm_same_mount(const rm_tree *t, int fd)
{
        struct statx stx;

        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_TYPE, &stx) < 0)
                return false;
        if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != t->dev)
                return false;
        return !(stx.stx_attributes_mask & stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* Moves dirfd/name (too deep to enter with a bounded number of fds) to the top of the tree,
 * where a later round of the top's loop removes it. Returns whether it moved. */
static bool rm_move_up(rm_tree *t, int dirfd, const char *name)
{
        for (int i = 0; i < 1000; i++) {
                char tmp[32];

                snprintf(tmp, sizeof(tmp), ".cs-rm-%u", t->seq++);
                if (renameat2(dirfd, name, t->topfd, tmp, RENAME_NOREPLACE) == 0)
                        return true;
                if (errno != EEXIST) {
                        rm_note(t, errno);
                        return false;
                }
        }
        rm_note(t, EEXIST);
        return false;
}

static bool rm_at(rm_tree *t, int dirfd, const char *name, unsigned depth);

/* Empties the directory fd (taken over), rereading it until a round removes nothing: whether
 * readdir() returns entries added or removed while it runs is unspecified. */
static void rm_contents(rm_tree *t, int fd, unsigned depth)
{
        DIR *d = fdopendir(fd);
        bool progress = true;

        if (!d) {
                rm_note(t, errno);
                close(fd);
                return;
        }
        while (progress) {
                struct dirent *de;

                progress = false;
                rewinddir(d);
                while ((errno = 0, de = readdir(d))) {
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (rm_at(t, dirfd(d), de->d_name, depth))
                                progress = true;
                }
                if (errno) {
                        rm_note(t, errno);
                        break;
                }
        }
        closedir(d);
}

/* Removes dirfd/name, depth levels below the top. Returns whether it is gone (or moved up). */
static bool rm_at(rm_tree *t, int dirfd, const char *name, unsigned depth)
{
        int fd;

        /* unlink(2) of a directory fails with EISDIR on Linux: no stat needed for the rest. */
        if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
                return true;
        if (errno != EISDIR) {
                rm_note(t, errno);
                return false;
        }
        if (depth >= CS_REMOVE_DEPTH)
                return rm_move_up(t, dirfd, name);
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
                return true; /* someone else removed it meanwhile */
        if (fd < 0) {
                rm_note(t, errno);
                return false;
        }
        if (!rm_same_mount(t, fd)) {
                rm_note(t, EXDEV);
                close(fd);
                return false;
        }
        rm_contents(t, fd, depth + 1);
        if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
                return true;
        rm_note(t, errno);
        return false;
}

int cs_remove_tree(int dirfd, const char *name)
{
        _cleanup_close_ int fd = -1;
        rm_tree t = { .topfd = -1 };
        struct stat st;
        int dup_fd;

        if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR)
                return -1;
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : -1;
        if (fstat(fd, &st) < 0)
                return -1;
        t.topfd = fd;
        t.dev = st.st_dev;
        if (!rm_same_mount(&t, fd)) {
                errno = EXDEV;
                return -1;
        }
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* rm_contents closes its fd */
        if (dup_fd < 0)
                return -1;
        rm_contents(&t, dup_fd, 0);
        if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                rm_note(&t, errno);
        if (t.first_err) {
                errno = t.first_err;
                return -1;
        }
        return 0;
}

int cs_mkdir_parents(const char *path, mode_t mode)
{
        _cleanup_free_ char *p = cs_xstrdup(path);

        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != '\0')
                        continue;
                char c = *s;
                *s = '\0';
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -1;
                *s = c;
                if (c == '\0')
                        return 0;
        }
}
