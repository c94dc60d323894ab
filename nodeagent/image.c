/* Image import, listing and removal: the public functions of image.h (the contract is there),
 * the images directory and its hidden work directories, and the few helpers the other two
 * files of na_image share (image_internal.h). It touches images_dir and the entries in it; it
 * reads the source only through image_source.c and writes a layer's entries only through
 * image_layer.c.
 *
 * An import runs in four steps:
 * 1. The source (image_source.c): a directory as it is, or the needed members of a tarball
 *    extracted into a hidden scratch directory of images_dir.
 * 2. The plan (image_source.c): the layers, from manifest.json or from index.json.
 * 3. Each layer is streamed twice (image_layer.c): pass 1 checks every entry and applies the
 *    whiteouts, pass 2 writes the other entries, into a hidden work directory of images_dir.
 * 4. Directory owners, modes and times are applied at the very end (image_layer.c), then
 *    syncfs and renameat2(RENAME_NOREPLACE) to the name (here).
 * Any failure removes the work directory and the scratch (cs_remove_tree: fd-based, never
 * follows a symlink).
 *
 * The work directories are made 0700 by root inside images_dir: nobody else can put a
 * symlink into them behind our back (image_layer.c relies on it). */
#include "image.h"

#include <archive.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "image_internal.h"
#include "util.h"

#define IMAGE_TEMP_TRIES 16 /* random work directory names tried */

/* ---- names, paths, messages ------------------------------------------------------------ */

bool image_name_valid(const char *name)
{
        size_t n = 0;

        if (!name || !name[0] || name[0] == '.')
                return false;
        for (const char *s = name; *s; s++) {
                char c = *s;

                if (++n > IMAGE_NAME_MAX)
                        return false;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == ':'))
                        return false;
        }
        return true;
}

/* A copy of s fit for a one-line message: at most 200 bytes, control bytes shown as '?'. */
char *image_printable(const char *s)
{
        size_t n = strnlen(s, 200);
        char *out = cs_xmalloc(n + 4);

        for (size_t i = 0; i < n; i++)
                out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
        strcpy(out + n, s[n] ? "..." : "");
        return out;
}

const char *image_archive_msg(struct archive *a)
{
        const char *m = archive_error_string(a);

        return m ? m : "unknown error";
}

/* openat2(2), which glibc does not wrap; retried while a rename elsewhere makes the kernel
 * ask for it (EAGAIN). The fd, or -1 with errno. */
int image_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
        struct open_how how = { .flags = flags | O_CLOEXEC, .resolve = resolve };
        int fd = -1;

        for (int i = 0; i < 8; i++) {
                fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
                if (fd >= 0 || errno != EAGAIN)
                        break;
        }
        return fd;
}

/* ---- work directories ------------------------------------------------------------------ */

/* Work directories are hidden names of images_dir; each is flock()ed by the process working
 * in it for as long as it does, so one whose lock is free was left by a process that died. */
static bool workdir_name(const char *name)
{
        return strncmp(name, ".import-", 8) == 0 || strncmp(name, ".scratch-", 9) == 0 ||
               strncmp(name, ".remove-", 8) == 0;
}

/* Removes the work directories that imports or removals killed midway left in imgfd. */
static void workdirs_sweep(int imgfd)
{
        int fd = openat(imgfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        char *names[64];
        size_t n = 0;
        struct dirent *de;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while (n < ARRAY_SIZE(names) && (de = readdir(d))) /* any more: next time */
                if (workdir_name(de->d_name))
                        names[n++] = cs_xstrdup(de->d_name);
        closedir(d);
        for (size_t i = 0; i < n; i++) {
                _cleanup_close_ int wfd =
                        openat(imgfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                if (wfd >= 0 && flock(wfd, LOCK_EX | LOCK_NB) == 0)
                        (void)cs_remove_tree(imgfd, names[i]);
                free(names[i]);
        }
}

/* Makes a work directory <prefix><random> (0700) in imgfd, locked: its name in *ret_name,
 * an O_RDONLY fd of it (holding the lock; the caller closes it once done) in *ret_fd. */
int image_workdir_make(int imgfd, const char *prefix, char **ret_name, int *ret_fd, cs_error **err)
{
        for (int i = 0; i < IMAGE_TEMP_TRIES; i++) {
                uint64_t rnd = 0;
                _cleanup_free_ char *name = NULL;
                _cleanup_close_ int fd = -1;
                struct stat st;

                if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
                        rnd = (uint64_t)cs_now_monotonic_ms() * 2654435761u ^ (uint64_t)getpid();
                name = cs_xasprintf("%s%012" PRIx64, prefix, rnd & 0xffffffffffffu);
                if (mkdirat(imgfd, name, 0700) < 0) {
                        if (errno == EEXIST)
                                continue;
                        return cs_error_errno(err, errno, "cannot make a work directory");
                }
                /* A sweep may take it between mkdir and flock: then it is gone (nlink 0) or
                 * locked; either way, another name. */
                fd = openat(imgfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || fstat(fd, &st) < 0 ||
                    st.st_nlink == 0)
                        continue;
                *ret_name = TAKE_PTR(name);
                *ret_fd = TAKE_FD(fd);
                return 0;
        }
        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                            "cannot make a work directory in the images directory");
}

/* Opens images_dir; create: it and its missing parents are made 0700. */
static int images_dir_open(const char *images_dir, bool create, cs_error **err)
{
        int fd;

        if (!images_dir || !images_dir[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no images directory");
        if (create && cs_mkdir_parents(images_dir, 0700) < 0)
                return cs_error_errno(err, errno, "cannot create %s", images_dir);
        fd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return cs_error_errno(err, errno, "images directory %s", images_dir);
        return fd;
}

/* ---- import ---------------------------------------------------------------------------- */

/* Builds the rootfs in a work directory of imgfd (its name in *ret_tmp and its locked fd in
 * *ret_rootfd as soon as it exists, for the caller to close): every layer, then the
 * directories' metadata, then syncfs. */
static int rootfs_build(int imgfd, int srcfd, const image_source_plan *p, char **ret_tmp,
                        int *ret_rootfd, image_stats *ret_stats, cs_error **err)
{
        image_layer_importer im = { .rootfd = -1, .chown = true };
        int r = image_workdir_make(imgfd, ".import-", ret_tmp, &im.rootfd, err);

        *ret_rootfd = im.rootfd;

        for (size_t i = 0; r == 0 && i < p->n; i++) {
                const image_source_layer *l = &p->layers[i];
                _cleanup_(image_source_blob_freep) image_source_blob *b = NULL;

                im.label = l->label;
                r = image_source_blob_open(srcfd, l->path, l->digest, l->label, &b, err);
                if (r == 0)
                        r = image_source_walk(b, l->label, image_layer_pass_check, &im, err);
                if (r == 0)
                        r = image_source_walk(b, l->label, image_layer_pass_write, &im, err);
                if (r == 0)
                        im.stats.layers++;
        }
        /* The root is 0755 root's unless a layer says otherwise ("./" entry). */
        if (r == 0 && fchmod(im.rootfd, 0755) < 0)
                r = cs_error_errno(err, errno, "cannot set the root's mode");
        if (r == 0)
                r = image_layer_dirs_finish(&im, err);
        if (r == 0 && syncfs(im.rootfd) < 0)
                r = cs_error_errno(err, errno, "cannot sync the image");
        *ret_stats = im.stats;
        image_layer_importer_done(&im);
        return r;
}

int image_import(const char *images_dir, const char *src, const char *name, image_stats *ret_stats,
                 cs_error **err)
{
        _cleanup_close_ int imgfd = -1;
        _cleanup_close_ int srcfd = -1;  /* locked while it is a scratch directory */
        _cleanup_close_ int rootfd = -1; /* locked until the image has its name */
        _cleanup_free_ char *scratch = NULL;
        _cleanup_free_ char *tmp = NULL;
        image_stats stats = { 0 };
        image_source_plan p = { .n = 0 };
        struct stat st;
        int r;

        if (!image_name_valid(name))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "'%.64s' is not a valid image name (1..%d of "
                                    "[A-Za-z0-9._:-], not starting with '.')",
                                    name ? name : "", IMAGE_NAME_MAX);
        imgfd = images_dir_open(images_dir, true, err);
        if (imgfd < 0)
                return -1;
        workdirs_sweep(imgfd);
        if (fstatat(imgfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return cs_error_set(err, GRPC_STATUS_ALREADY_EXISTS,
                                    "image '%s' already exists in %s", name, images_dir);
        r = image_source_open(imgfd, src, &srcfd, &scratch, err);
        if (r == 0)
                r = image_source_plan_load(srcfd, &p, err);
        if (r == 0)
                r = rootfs_build(imgfd, srcfd, &p, &tmp, &rootfd, &stats, err);
        if (r == 0 && renameat2(imgfd, tmp, imgfd, name, RENAME_NOREPLACE) < 0)
                r = errno == EEXIST
                            ? cs_error_set(err, GRPC_STATUS_ALREADY_EXISTS,
                                           "image '%s' already exists in %s", name, images_dir)
                            : cs_error_errno(err, errno, "cannot name the image");
        if (r == 0)
                (void)fsync(imgfd);
        if (scratch)
                (void)cs_remove_tree(imgfd, scratch);
        if (r < 0 && tmp)
                (void)cs_remove_tree(imgfd, tmp);
        image_source_plan_clear(&p);
        if (r == 0 && ret_stats)
                *ret_stats = stats;
        return r;
}

/* ---- list and remove ------------------------------------------------------------------- */

static int info_cmp(const void *a, const void *b)
{
        return strcmp(((const image_info *)a)->name, ((const image_info *)b)->name);
}

void image_infos_free(image_info *infos, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(infos[i].name);
        free(infos);
}

int image_list(const char *images_dir, image_info **ret_infos, size_t *ret_n, cs_error **err)
{
        int fd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        image_info *infos = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        DIR *d;

        *ret_infos = NULL;
        *ret_n = 0;
        if (fd < 0 && errno == ENOENT)
                return 0;
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                int e = errno;

                if (fd >= 0)
                        close(fd);
                return cs_error_errno(err, e, "images directory %s", images_dir);
        }
        while ((de = readdir(d))) {
                struct stat st;

                if (!image_name_valid(de->d_name) ||
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISDIR(st.st_mode))
                        continue;
                infos = cs_xgrow(infos, n, &cap, sizeof(*infos));
                infos[n++] = (image_info){ .name = cs_xstrdup(de->d_name),
                                           .imported_at_ms = (int64_t)st.st_ctim.tv_sec * 1000 +
                                                             st.st_ctim.tv_nsec / 1000000 };
        }
        closedir(d);
        if (n)
                qsort(infos, n, sizeof(*infos), info_cmp);
        *ret_infos = infos;
        *ret_n = n;
        return 0;
}

int image_remove(const char *images_dir, const char *name, cs_error **err)
{
        _cleanup_close_ int imgfd = -1;
        _cleanup_close_ int dfd = -1;
        _cleanup_free_ char *tmp = NULL;
        struct stat st;

        if (!image_name_valid(name))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "'%.64s' is not a valid image name", name ? name : "");
        imgfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (imgfd < 0 && errno == ENOENT)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no image '%s' (no %s)", name,
                                    images_dir);
        if (imgfd < 0)
                return cs_error_errno(err, errno, "images directory %s", images_dir);
        workdirs_sweep(imgfd);
        if (fstatat(imgfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "no image '%s' in %s", name,
                                    images_dir);
        if (fstatat(imgfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return cs_error_errno(err, errno, "image '%s'", name);
        if (!S_ISDIR(st.st_mode))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "%s/%s is not an image directory", images_dir, name);
        /* An empty work directory holds the place of the hidden name; the image replaces it
         * (rename(2) may replace an empty directory), so the name is never visible half-gone. */
        if (image_workdir_make(imgfd, ".remove-", &tmp, &dfd, err) < 0)
                return -1;
        if (renameat(imgfd, name, imgfd, tmp) < 0) {
                int e = errno;

                unlinkat(imgfd, tmp, AT_REMOVEDIR);
                return cs_error_errno(err, e, "image '%s': cannot rename it", name);
        }
        /* The lock now goes with the image's directory (a sweep that got there first is
         * removing it: wait for it, then there is nothing left to do). */
        close(dfd);
        dfd = openat(imgfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0)
                (void)flock(dfd, LOCK_EX);
        if (cs_remove_tree(imgfd, tmp) < 0)
                return cs_error_errno(err, errno,
                                      "image '%s' is gone, but removing its files (%s/%s) "
                                      "failed",
                                      name, images_dir, tmp);
        return 0;
}
