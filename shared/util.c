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
        const char *p = buf;

        while (len > 0) {
                ssize_t n = write(fd, p, len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
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
