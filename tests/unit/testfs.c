/* Files for unit-test fixtures (testfs.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testfs.h"

void testfs_put(const char *path, const char *text)
{
        size_t len = strlen(text);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

        if (fd < 0)
                fail_msg("open %s: %s", path, strerror(errno));
        assert_int_equal(write(fd, text, len), (ssize_t)len);
        assert_int_equal(close(fd), 0);
}

void testfs_mkdir(const char *path)
{
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                fail_msg("mkdir %s: %s", path, strerror(errno));
}
