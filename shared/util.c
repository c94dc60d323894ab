#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int64_t cs_now_realtime_ms(void)
{
        return clock_ms(CLOCK_REALTIME);
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
