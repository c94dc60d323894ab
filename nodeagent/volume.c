/* Workspace volumes: see volume.h. Owns the image files, loop devices and mounts it makes. */
#include "volume.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/loop.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

static int run_mkfs(const char *image, cs_error **err)
{
        char *const argv[] = { "mkfs.ext4",
                               "-q",
                               "-F",
                               "-m",
                               "0",
                               "-E",
                               "lazy_itable_init=0,lazy_journal_init=0",
                               (char *)image,
                               NULL };
        pid_t pid;
        int rc, status;

        rc = posix_spawnp(&pid, "mkfs.ext4", NULL, NULL, argv, environ);
        if (rc != 0)
                return cs_error_errno(err, rc, "volume: cannot run mkfs.ext4");
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return cs_error_errno(err, errno, "volume: waitpid mkfs.ext4");
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "volume: mkfs.ext4 failed (status %d)", status);
        return 0;
}

/* LOOP_CTL_GET_FREE names the same free device to every caller until one configures it:
 * the agent's own creates take turns (50 at once lost the race 16 times in a row), and only
 * another process can still take a device between the two calls. */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;

/* Attaches backing to a free loop device (autoclear: it detaches when its mount goes);
 * returns the device's fd, or -1. */
static int loop_attach_locked(int backing, char *ret_dev, size_t dev_len, cs_error **err)
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        struct loop_config cfg = { .fd = (uint32_t)backing,
                                   .info = { .lo_flags = LO_FLAGS_AUTOCLEAR } };

        if (ctl < 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "volume: no loop devices (/dev/loop-control: %s)",
                                    strerror(errno));
        /* Another process may take the free device between the two calls: try again. */
        for (int tries = 0; tries < 16; tries++) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                int fd;

                if (n < 0)
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "volume: no free loop device: %s", strerror(errno));
                snprintf(ret_dev, dev_len, "/dev/loop%d", n);
                fd = open(ret_dev, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        return cs_error_errno(err, errno, "volume: open %s", ret_dev);
                if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
                        return fd;
                close(fd);
                if (errno != EBUSY)
                        return cs_error_errno(err, errno, "volume: LOOP_CONFIGURE %s", ret_dev);
        }
        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "volume: loop devices busy");
}

static int loop_attach(int backing, char *ret_dev, size_t dev_len, cs_error **err)
{
        int fd;

        pthread_mutex_lock(&loop_lock);
        fd = loop_attach_locked(backing, ret_dev, dev_len, err);
        pthread_mutex_unlock(&loop_lock);
        return fd;
}

/* The block counters of device rdev (/sys/dev/block/M:m/stat, sectors x 512). */
static int dev_io_bytes(dev_t rdev, uint64_t *ret_read, uint64_t *ret_written, cs_error **err)
{
        uint64_t f[7];
        char path[96];
        FILE *fp;
        int n;

        snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(rdev), minor(rdev));
        fp = fopen(path, "re");
        if (!fp)
                return cs_error_errno(err, errno, "volume: %s", path);
        /* reads, merges, sectors read, ms, writes, merges, sectors written, ... */
        n = fscanf(fp,
                   "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                   " %" SCNu64,
                   &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]);
        fclose(fp);
        if (n != 7)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "volume: %s unreadable", path);
        *ret_read = f[2] * 512;
        *ret_written = f[6] * 512;
        return 0;
}

/* Attaches the image open at backing to a loop device and mounts it at mountpoint; the
 * device's counters before the mount go to *ret_start. */
static int loop_mount(int backing, const char *mountpoint, vol_counters *ret_start, cs_error **err)
{
        _cleanup_close_ int loop = -1;
        vol_counters start = { 0 };
        struct stat st;
        char dev[64];

        loop = loop_attach(backing, dev, sizeof(dev), err);
        if (loop < 0)
                return -1;
        /* A loop device is reused, and its counters run on from its earlier attachments. */
        if (fstat(loop, &st) < 0 ||
            dev_io_bytes(st.st_rdev, &start.read, &start.written, err) < 0) {
                if (!*err)
                        cs_error_errno(err, errno, "volume: stat %s", dev);
                ioctl(loop, LOOP_CLR_FD, 0);
                return -1;
        }
        if (mount(dev, mountpoint, "ext4", MS_NODEV | MS_NOSUID, NULL) < 0) {
                cs_error_errno(err, errno, "volume: mount %s at %s", dev, mountpoint);
                ioctl(loop, LOOP_CLR_FD, 0);
                return -1;
        }
        /* Closing loop now leaves the mount as the device's only user: autoclear frees the
         * device when the mount goes. */
        if (ret_start)
                *ret_start = start;
        return 0;
}

int vol_attach(const char *image, const char *mountpoint, vol_counters *ret_start, cs_error **err)
{
        _cleanup_close_ int backing = open(image, O_RDWR | O_CLOEXEC | O_NOFOLLOW);

        if (backing < 0)
                return cs_error_errno(err, errno, "volume: open %s", image);
        return loop_mount(backing, mountpoint, ret_start, err);
}

int vol_create(const char *image, uint64_t size, const char *mountpoint, vol_counters *ret_start,
               cs_error **err)
{
        _cleanup_close_ int backing = -1;
        _cleanup_free_ char *lost = cs_xasprintf("%s/lost+found", mountpoint);

        backing = open(image, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (backing < 0)
                return cs_error_errno(err, errno, "volume: create %s", image);
        if (ftruncate(backing, (off_t)size) < 0) {
                cs_error_errno(err, errno, "volume: size %s", image);
                goto fail;
        }
        if (run_mkfs(image, err) < 0 || loop_mount(backing, mountpoint, ret_start, err) < 0)
                goto fail;
        /* The workspace starts empty, as a directory would: mkfs's lost+found is not the
         * tenant's (e2fsck makes it again if it ever needs one). */
        (void)rmdir(lost);
        return 0;
fail:
        unlink(image);
        return -1;
}

bool vol_mounted(const char *mountpoint)
{
        struct stat st, parent;
        _cleanup_free_ char *up = cs_xasprintf("%s/..", mountpoint);

        return stat(mountpoint, &st) == 0 && stat(up, &parent) == 0 && st.st_dev != parent.st_dev;
}

int vol_umount_one(const char *mountpoint)
{
        /* A mount still busy is detached lazily: it leaves the tree now, and its loop device
         * is freed once its last user lets go. */
        if (umount2(mountpoint, UMOUNT_NOFOLLOW) == 0)
                return 0;
        if (errno != EBUSY)
                return -1;
        return umount2(mountpoint, UMOUNT_NOFOLLOW | MNT_DETACH);
}

int vol_unmount(const char *mountpoint, cs_error **err)
{
        /* Whatever is stacked there goes. */
        for (int i = 0; i < 8 && vol_mounted(mountpoint); i++) {
                if (vol_umount_one(mountpoint) < 0)
                        return cs_error_errno(err, errno, "volume: unmount %s", mountpoint);
        }
        return 0;
}

int vol_remove(const char *image, const char *mountpoint, cs_error **err)
{
        if (vol_unmount(mountpoint, err) < 0)
                return -1;
        if (unlink(image) < 0 && errno != ENOENT)
                return cs_error_errno(err, errno, "volume: remove %s", image);
        return 0;
}

int vol_io_bytes(const char *mountpoint, uint64_t *ret_read, uint64_t *ret_written, cs_error **err)
{
        struct stat st;

        if (stat(mountpoint, &st) < 0)
                return cs_error_errno(err, errno, "volume: stat %s", mountpoint);
        return dev_io_bytes(st.st_dev, ret_read, ret_written, err);
}
