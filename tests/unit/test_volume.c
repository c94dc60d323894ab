/* Tests of nodeagent/volume.c on real loop devices (root only; skipped otherwise): a 32 MiB
 * volume stops writes with ENOSPC, its block counters see the bytes written, and removing it
 * leaves no mount, loop device or image file. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "util.h"
#include "volume.h"

#define MIB (1ull << 20)

static bool loop_attached(dev_t dev)
{
        char path[96];

        snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/loop/backing_file", major(dev),
                 minor(dev));
        return access(path, F_OK) == 0;
}

static void test_fill_count_remove(void **state)
{
        char dir[] = "/tmp/cs-vol-XXXXXX";
        static char buf[1 << 20];
        _cleanup_free_ char *image = NULL, *mnt = NULL, *file = NULL;
        cs_error *err = NULL;
        uint64_t rd = 0, wr = 0, total = 0;
        vol_counters start = { 0 };
        struct stat st;
        ssize_t n;
        int fd;

        (void)state;
        if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0)
                skip();
        assert_non_null(mkdtemp(dir));
        image = cs_xasprintf("%s/ws.img", dir);
        mnt = cs_xasprintf("%s/ws", dir);
        file = cs_xasprintf("%s/ws/fill", dir);
        assert_int_equal(mkdir(mnt, 0755), 0);
        if (vol_create(image, 32 * MIB, mnt, &start, &err) < 0)
                fail_msg("vol_create: %s", err->msg);
        assert_true(vol_mounted(mnt));
        assert_int_equal(stat(mnt, &st), 0);
        assert_true(loop_attached(st.st_dev));

        /* The image is sparse: it takes far less than its size on the host. */
        struct stat ist;
        assert_int_equal(stat(image, &ist), 0);
        assert_int_equal(ist.st_size, 32 * MIB);

        fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        memset(buf, 'x', sizeof(buf));
        while ((n = write(fd, buf, sizeof(buf))) > 0)
                total += (uint64_t)n;
        assert_int_equal(errno, ENOSPC);
        fsync(fd);
        close(fd);
        assert_true(total > 16 * MIB && total <= 32 * MIB);
        if (vol_io_bytes(mnt, &rd, &wr, &err) < 0)
                fail_msg("vol_io_bytes: %s", err->msg);
        print_message("wrote %llu bytes before ENOSPC; block layer: %llu written\n",
                      (unsigned long long)total, (unsigned long long)(wr - start.written));
        /* A reused loop device counts on from its earlier attachments. */
        assert_true(wr >= start.written && wr - start.written >= total);

        if (vol_remove(image, mnt, &err) < 0)
                fail_msg("vol_remove: %s", err->msg);
        assert_false(vol_mounted(mnt));
        assert_int_not_equal(access(image, F_OK), 0);
        for (int i = 0; i < 100 && loop_attached(st.st_dev); i++)
                usleep(20000);
        assert_false(loop_attached(st.st_dev));
        /* Idempotent. */
        assert_int_equal(vol_remove(image, mnt, &err), 0);
        rmdir(mnt);
        rmdir(dir);
}

static void test_failed_create_leaves_nothing(void **state)
{
        char dir[] = "/tmp/cs-vol-XXXXXX";
        _cleanup_free_ char *image = NULL, *mnt = NULL;
        cs_error *err = NULL;

        (void)state;
        if (geteuid() != 0 || access("/dev/loop-control", F_OK) != 0)
                skip();
        assert_non_null(mkdtemp(dir));
        image = cs_xasprintf("%s/ws.img", dir);
        mnt = cs_xasprintf("%s/missing", dir); /* no such mount point: mount fails */
        assert_int_equal(vol_create(image, 32 * MIB, mnt, NULL, &err), -1);
        assert_non_null(err);
        cs_error_free(err);
        assert_int_not_equal(access(image, F_OK), 0);
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fill_count_remove),
                cmocka_unit_test(test_failed_create_leaves_nothing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
