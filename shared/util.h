/* Scoped cleanup and small helpers shared by every target (after systemd's alloc-util.h). */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
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

/* Aborts on allocation failure: the service cannot do anything useful without memory and
 * every caller would otherwise carry an untestable error path. */
void *cs_xmalloc(size_t n);
void *cs_xcalloc(size_t n, size_t size);
char *cs_xstrdup(const char *s);
char *cs_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Milliseconds on the monotonic clock and on the wall clock. */
int64_t cs_now_monotonic_ms(void);
int64_t cs_now_realtime_ms(void);
