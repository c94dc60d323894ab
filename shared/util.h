/* Scoped cleanup and small helpers shared by every target (after systemd's alloc-util.h). */
#pragma once

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define _cleanup_(f)    __attribute__((cleanup(f)))
#define _cleanup_free_  _cleanup_(cs_freep)
#define _cleanup_close_ _cleanup_(cs_closep)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Hands ownership of *p to the caller and leaves NULL behind, so the cleanup is a no-op. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _p = (p);                                                            \
                (p) = NULL;                                                                        \
                _p;                                                                                \
        })

#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int _fd = (fd);                                                                    \
                (fd) = -1;                                                                         \
                _fd;                                                                               \
        })

static inline void cs_freep(void *p)
{
        free(*(void **)p);
}

/* Closes *fd if it is open, keeping errno as it was (cleanup runs on error paths). */
static inline void cs_closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

/* NULL or "": a string field left unset. */
static inline bool cs_isempty(const char *s)
{
        return !s || !*s;
}

/* Aborts on allocation failure: the service cannot do anything useful without memory and
 * every caller would otherwise carry an untestable error path. */
void *cs_xmalloc(size_t n);
void *cs_xcalloc(size_t n, size_t size);
char *cs_xstrdup(const char *s);
/* Room for one more element in the array p of n elements of size bytes: when n has reached
 * *cap, the array grows (to 16 elements, then twice its size) and *cap with it. Returns the
 * (possibly moved) array. */
void *cs_xgrow(void *p, size_t n, size_t *cap, size_t size);
char *cs_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Appends n bytes of s to the text *buf of *len bytes (kept NUL-terminated), in an allocation
 * of *cap bytes that doubles as needed (256 at first). *buf NULL and *len, *cap 0 start it. */
void cs_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* Writes all of buf (retrying short writes and EINTR). 0, or -1 with errno. */
int cs_write_all(int fd, const void *buf, size_t len);

/* cs_write_all of the pieces iov[0..n_iov), gathered by writev(2) rather than copied. */
int cs_writev_all(int fd, const struct iovec *iov, size_t n_iov);

/* Reads until buf is full or the input ends (retrying EINTR). The count, or -1 with errno. */
ssize_t cs_read_full(int fd, void *buf, size_t len);

/* Milliseconds on the monotonic clock and on the wall clock. */
/* Reads a whole (small) file of at most max bytes into a new NUL-terminated buffer (*ret,
 * the caller frees it; its length in *ret_len and its fstat in *ret_st when those are not
 * NULL). 0, or -1 with errno (EFBIG over the cap, EISDIR for a directory). */
struct stat;
int cs_read_file(const char *path, size_t max, char **ret, size_t *ret_len, struct stat *ret_st);

/* Creates path and its missing parents, each with mode (less the umask); existing ones are
 * left as they are. 0, or -1 with errno set. */
int cs_mkdir_parents(const char *path, mode_t mode);

/* Removes dirfd/name (a path relative to dirfd, or absolute) and everything beneath it. A
 * symlink is never followed: a link is removed, not what it points to; no directory on another
 * mount is entered (a mount point and what lies on it are left, and the removal fails with
 * EXDEV). Open fds stay bounded however deep the tree: a directory more than CS_REMOVE_DEPTH
 * levels down is moved up beneath the tree's top and removed from there. A missing name is
 * success. 0, or -1 with errno set to the first failure (the removal goes on past it). */
#define CS_REMOVE_DEPTH 32
int cs_remove_tree(int dirfd, const char *name);

int64_t cs_now_monotonic_ms(void);
/* pthread_cond_init on the monotonic clock: pthread_cond_timedwait deadlines are then
 * cs_now_monotonic_ms() values, unmoved by a change of the wall clock. */
void cs_cond_init_monotonic(pthread_cond_t *cond);
/* pthread_cond_timedwait on such a condition (lock held) until until_ms, a
 * cs_now_monotonic_ms() value; INT64_MAX waits without a limit. ETIMEDOUT once until_ms has
 * passed, else 0 (signalled, or woken spuriously: the caller looks at its predicate again). */
int cs_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t until_ms);
/* The same clock in nanoseconds (durations measured for metrics). */
int64_t cs_now_monotonic_ns(void);
/* Whether fd has data (or EOF, or an error) to read now, without waiting; false for fd < 0.
 * For cancel fds: a call's cancel fd turns readable once the call is cancelled. */
bool cs_fd_readable(int fd);
int64_t cs_now_realtime_ms(void);
