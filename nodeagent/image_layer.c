/* Applying a layer's entries to a tree (rootfs being built, or a tarball's scratch copy):
 * the hostile-path rules, the caps, whiteouts, writing each kind of entry, and the directories'
 * metadata at the end. It touches only the tree beneath image_layer_importer.rootfd, by the
 * rules below; it reads nothing but the archive entries it is handed (image_source.c walks
 * them) and never opens the source or images_dir itself.
 *
 * Layers are applied as image.h says. Every path is resolved beneath the root, from a
 * directory fd: openat2(RESOLVE_STRICT) for the parent directories, *at() calls with
 * O_NOFOLLOW / AT_SYMLINK_NOFOLLOW for the last component. A layer is walked twice: pass 1
 * checks every entry (path rules, caps) and applies the whiteouts; pass 2 writes the other
 * entries. So a whiteout deletes only what the layers below made, wherever it sits in the tar,
 * and a layer that breaks a rule fails before any of its entries is written. Directory owners,
 * modes and times are applied at the very end (a read-only directory never stops a later
 * entry).
 *
 * The tree is a work directory image.c made 0700 (root's) inside images_dir: nobody else can
 * put a symlink into it behind our back, which is what makes fchmodat() of a FIFO we just made
 * safe (glibc does AT_SYMLINK_NOFOLLOW through O_PATH anyway). */
#include "image_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define WH_PREFIX ".wh."
#define WH_META   ".wh..wh."     /* aufs bookkeeping names, opaque markers among them */
#define WH_OPAQUE ".wh..wh..opq" /* "the layers below put nothing in this directory" */

/* What a layer's parent directories resolve with: beneath the root, never through a link. */
#define RESOLVE_STRICT (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* ---- paths ------------------------------------------------------------------------------ */

const char *image_layer_path_clean(const char *raw, char **ret)
{
        size_t n = strlen(raw);
        char *out, *w;

        if (n > IMAGE_PATH_MAX)
                return "is longer than the 4096 bytes allowed (IMAGE_PATH_MAX)";
        out = w = cs_xmalloc(n + 1);
        for (const char *p = raw; *p;) {
                const char *end = strchrnul(p, '/');
                size_t len = (size_t)(end - p);

                if (len == 2 && p[0] == '.' && p[1] == '.') {
                        free(out);
                        return "has a '..' component";
                }
                if (len > 0 && !(len == 1 && p[0] == '.')) {
                        if (w != out)
                                *w++ = '/';
                        memcpy(w, p, len);
                        w += len;
                }
                p = *end ? end + 1 : end;
        }
        *w = '\0';
        *ret = out;
        return NULL;
}

static const char *path_base(const char *path)
{
        const char *slash = strrchr(path, '/');

        return slash ? slash + 1 : path;
}

/* ---- applying entries ------------------------------------------------------------------ */

/* A directory's metadata, applied once every layer is in. */
typedef struct image_layer_dir_meta {
        char *path; /* cleaned, relative to the root ("": the root) */
        uid_t uid;
        gid_t gid;
        mode_t mode;
        struct timespec times[2];
} dir_meta;

void image_layer_importer_done(image_layer_importer *im)
{
        for (size_t i = 0; i < im->n_dirs; i++)
                free(im->dirs[i].path);
        free(im->dirs);
        im->dirs = NULL;
        im->n_dirs = im->cap_dirs = 0;
}

/* "<label>: entry '<raw>': <message>". Returns -1. */
static int entry_error(const image_layer_importer *im, const char *raw, grpc_status_code code,
                       cs_error **err, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int entry_error(const image_layer_importer *im, const char *raw, grpc_status_code code,
                       cs_error **err, const char *fmt, ...)
{
        _cleanup_free_ char *name = image_printable(raw);
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        return cs_error_set(err, code, "%s: entry '%s': %s", im->label, name, msg);
}

static int entry_errno(const image_layer_importer *im, const char *raw, int errnum,
                       const char *what, cs_error **err)
{
        _cleanup_free_ char *name = image_printable(raw);

        return cs_error_errno(err, errnum, "%s: entry '%s': %s", im->label, name, what);
}

/* An entry's path as it stands in the layer (*ret_raw, for messages) and cleaned by the path
 * rules (*ret_path, malloc'd). */
static int entry_path(const image_layer_importer *im, struct archive_entry *e, const char **ret_raw,
                      char **ret_path, cs_error **err)
{
        const char *raw = archive_entry_pathname(e), *why;

        if (!raw)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: an entry has no usable name", im->label);
        why = image_layer_path_clean(raw, ret_path);
        if (why)
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err, "its path %s", why);
        *ret_raw = raw;
        return 0;
}

/* What a failed resolution of an entry's path (what: "its path", "its link target") means. */
static int resolve_error(const image_layer_importer *im, const char *raw, int errnum,
                         const char *what, cs_error **err)
{
        switch (errnum) {
        case ELOOP:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "%s goes through a symlink (a layer lists real paths)", what);
        case ENOTDIR:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "%s goes through something that is not a directory", what);
        case EXDEV:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "%s leaves the image's root", what);
        default:
                return entry_errno(im, raw, errnum, what, err);
        }
}

/* Checks an entry against the caps, from what it declares. */
static int entry_check(image_layer_importer *im, struct archive_entry *e, const char *raw,
                       cs_error **err)
{
        int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
        const char *link = archive_entry_symlink(e);

        if (++im->entries > IMAGE_MAX_ENTRIES)
                return entry_error(im, raw, GRPC_STATUS_RESOURCE_EXHAUSTED, err,
                                   "the image has more than the %d entries allowed "
                                   "(IMAGE_MAX_ENTRIES)",
                                   IMAGE_MAX_ENTRIES);
        if (size < 0)
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "it declares a negative size");
        if ((uint64_t)size > IMAGE_MAX_BYTES - im->bytes)
                return entry_error(im, raw, GRPC_STATUS_RESOURCE_EXHAUSTED, err,
                                   "it declares %" PRId64 " bytes: with the %" PRIu64
                                   " declared before it, more than the %llu an image may hold "
                                   "(IMAGE_MAX_BYTES)",
                                   size, im->bytes, IMAGE_MAX_BYTES);
        im->bytes += (uint64_t)size;
        if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "its owner %" PRId64 ":%" PRId64 " is out of range", uid, gid);
        if (link && strlen(link) > IMAGE_PATH_MAX)
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "its link target is longer than the %d bytes allowed",
                                   IMAGE_PATH_MAX);
        return 0;
}

static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
        ts[1] = (struct timespec){ .tv_sec = archive_entry_mtime(e),
                                   .tv_nsec = archive_entry_mtime_nsec(e) };
        ts[0] = ts[1];
        if (archive_entry_atime_is_set(e))
                ts[0] = (struct timespec){ .tv_sec = archive_entry_atime(e),
                                           .tv_nsec = archive_entry_atime_nsec(e) };
}

/* Makes the missing directories of dir (cleaned, relative to rootfd) one component at a
 * time (0755, root's), each opened by the strict rules: an existing symlink among them is
 * refused (-ELOOP). 0 with *ret_fd, or -errno. */
static int dir_make_parents(int rootfd, const char *dir, int *ret_fd)
{
        _cleanup_free_ char *copy = cs_xstrdup(dir);
        _cleanup_close_ int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        char *save = NULL;

        if (cur < 0)
                return -errno;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                bool made = mkdirat(cur, c, 0700) == 0;
                int next;

                if (!made && errno != EEXIST)
                        return -errno;
                next = image_openat2(cur, c, O_RDONLY | O_DIRECTORY, RESOLVE_STRICT);
                if (next < 0)
                        return -errno;
                close(cur);
                cur = next;
                if (made && fchmod(cur, 0755) < 0)
                        return -errno;
        }
        *ret_fd = TAKE_FD(cur);
        return 0;
}

/* Opens the directory holding path (cleaned, not "") beneath the root, by the strict rules;
 * create: missing directories are made. 0 with *ret_fd, or -errno. */
static int parent_open(const image_layer_importer *im, const char *path, bool create, int *ret_fd)
{
        const char *slash = strrchr(path, '/');
        _cleanup_free_ char *dir = NULL;
        int fd;

        if (!slash) {
                fd = fcntl(im->rootfd, F_DUPFD_CLOEXEC, 3);
        } else {
                dir = strndup(path, (size_t)(slash - path));
                if (!dir)
                        abort();
                fd = image_openat2(im->rootfd, dir, O_RDONLY | O_DIRECTORY, RESOLVE_STRICT);
                if (fd < 0 && errno == ENOENT && create)
                        return dir_make_parents(im->rootfd, dir, ret_fd);
        }
        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        return 0;
}

/* Clears the way for a new entry at dfd/base: a directory stays when a directory comes (the
 * two merge; *ret_kept), anything else there goes. 0, or -errno. */
static int node_clear(int dfd, const char *base, bool keep_dir, bool *ret_kept)
{
        struct stat st;

        *ret_kept = false;
        if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (keep_dir && S_ISDIR(st.st_mode)) {
                *ret_kept = true;
                return 0;
        }
        return cs_remove_tree(dfd, base) < 0 ? -errno : 0;
}

/* ---- whiteouts (pass 1) ---------------------------------------------------------------- */

/* Empties the directory dfd of everything in it (all made by the layers below). */
static int dir_empty(const image_layer_importer *im, int dfd, const char *raw, cs_error **err)
{
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        int r = 0;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return entry_errno(im, raw, errno, "cannot read its directory", err);
        }
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                names = cs_xgrow(names, n, &cap, sizeof(*names));
                names[n++] = cs_xstrdup(de->d_name);
        }
        closedir(d);
        for (size_t i = 0; i < n; i++) {
                if (r == 0 && cs_remove_tree(dfd, names[i]) < 0)
                        r = entry_errno(im, raw, errno, "cannot empty its directory", err);
                free(names[i]);
        }
        free(names);
        return r;
}

static int whiteout_apply(image_layer_importer *im, const char *path, const char *raw,
                          cs_error **err)
{
        const char *base = path_base(path), *victim = base + strlen(WH_PREFIX);
        _cleanup_close_ int dfd = -1;
        int r;

        im->stats.whiteouts++;
        if (strncmp(base, WH_META, strlen(WH_META)) == 0 && strcmp(base, WH_OPAQUE) != 0)
                return 0; /* aufs bookkeeping (.wh..wh..plnk): nothing to apply */
        if (strcmp(base, WH_OPAQUE) != 0 &&
            (!victim[0] || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0))
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "a whiteout of no name");
        r = parent_open(im, path, false, &dfd);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0; /* nothing there: nothing to delete */
        if (r < 0)
                return resolve_error(im, raw, -r, "its path", err);
        if (strcmp(base, WH_OPAQUE) == 0)
                return dir_empty(im, dfd, raw, err);
        if (cs_remove_tree(dfd, victim) < 0)
                return entry_errno(im, raw, errno, "cannot delete what it whites out", err);
        return 0;
}

/* Pass 1 of a layer: every entry checked (path rules, caps), whiteouts applied. */
int image_layer_pass_check(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err)
{
        image_layer_importer *im = ctx;
        const char *raw, *link = archive_entry_hardlink(e);
        _cleanup_free_ char *path = NULL;
        _cleanup_free_ char *target = NULL;
        const char *why;

        (void)a;
        if (entry_path(im, e, &raw, &path, err) < 0)
                return -1;
        if (link && (why = image_layer_path_clean(link, &target)))
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err, "its link target %s",
                                   why);
        if (entry_check(im, e, raw, err) < 0)
                return -1;
        if (strncmp(path_base(path), WH_PREFIX, strlen(WH_PREFIX)) != 0)
                return 0;
        return whiteout_apply(im, path, raw, err);
}

/* ---- writing entries (pass 2) ---------------------------------------------------------- */

static int pwrite_all(int fd, const char *buf, size_t len, off_t off)
{
        while (len > 0) {
                ssize_t n = pwrite(fd, buf, len, off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -1 : (errno = EIO, -1);
                buf += n;
                len -= (size_t)n;
                off += n;
        }
        return 0;
}

/* Owner, then mode (a chown clears setuid and setgid), then times, of the inode fd. */
static int meta_fd(const image_layer_importer *im, int fd, struct archive_entry *e)
{
        struct timespec ts[2];

        entry_times(e, ts);
        if (im->chown && fchown(fd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0)
                return -1;
        if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
                return -1;
        return futimens(fd, ts);
}

/* The same, of dfd/base, never following it (a symlink gets no mode). */
static int meta_at(const image_layer_importer *im, int dfd, const char *base,
                   struct archive_entry *e, bool mode)
{
        struct timespec ts[2];

        entry_times(e, ts);
        if (im->chown && fchownat(dfd, base, (uid_t)archive_entry_uid(e),
                                  (gid_t)archive_entry_gid(e), AT_SYMLINK_NOFOLLOW) < 0)
                return -1;
        if (mode && fchmodat(dfd, base, archive_entry_perm(e) & 07777, AT_SYMLINK_NOFOLLOW) < 0)
                return -1;
        return utimensat(dfd, base, ts, AT_SYMLINK_NOFOLLOW);
}

/* Writes the entry's data blocks at their offsets: holes stay holes. */
static int data_copy(const image_layer_importer *im, struct archive *a, int fd, int64_t size,
                     const char *raw, cs_error **err)
{
        for (;;) {
                const void *buf;
                size_t len;
                la_int64_t off;
                int r = archive_read_data_block(a, &buf, &len, &off);

                if (r == ARCHIVE_EOF)
                        return 0;
                if (r != ARCHIVE_OK)
                        return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                           "cannot read its data (truncated or corrupt "
                                           "layer): %s",
                                           image_archive_msg(a));
                if (off < 0 || off > size || len > (uint64_t)(size - off))
                        return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                           "its data goes past its declared size");
                if (pwrite_all(fd, buf, len, off) < 0)
                        return entry_errno(im, raw, errno, "cannot write it", err);
        }
}

static int file_write(image_layer_importer *im, struct archive *a, struct archive_entry *e, int dfd,
                      const char *base, const char *raw, cs_error **err)
{
        int64_t size = archive_entry_size(e);
        _cleanup_close_ int fd = -1;
        bool kept;
        int r = node_clear(dfd, base, false, &kept);

        if (r < 0)
                return entry_errno(im, raw, -r, "cannot replace what is there", err);
        fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return entry_errno(im, raw, errno, "cannot create it", err);
        if (data_copy(im, a, fd, size, raw, err) < 0)
                return -1;
        if (ftruncate(fd, size) < 0 || meta_fd(im, fd, e) < 0)
                return entry_errno(im, raw, errno, "cannot set its size, owner, mode or times",
                                   err);
        im->stats.files++;
        im->stats.bytes += (uint64_t)size;
        return 0;
}

static int dir_entry(image_layer_importer *im, struct archive_entry *e, int dfd, const char *base,
                     const char *path, const char *raw, cs_error **err)
{
        dir_meta *d;
        bool kept;
        int r = node_clear(dfd, base, true, &kept);

        if (r < 0)
                return entry_errno(im, raw, -r, "cannot replace what is there", err);
        if (!kept && mkdirat(dfd, base, 0700) < 0)
                return entry_errno(im, raw, errno, "cannot create it", err);
        im->dirs = cs_xgrow(im->dirs, im->n_dirs, &im->cap_dirs, sizeof(*im->dirs));
        d = &im->dirs[im->n_dirs++];
        *d = (dir_meta){ .path = cs_xstrdup(path),
                         .uid = (uid_t)archive_entry_uid(e),
                         .gid = (gid_t)archive_entry_gid(e),
                         .mode = archive_entry_perm(e) & 07777 };
        entry_times(e, d->times);
        im->stats.dirs++;
        return 0;
}

static int symlink_entry(image_layer_importer *im, struct archive_entry *e, int dfd,
                         const char *base, const char *raw, cs_error **err)
{
        const char *target = archive_entry_symlink(e);
        bool kept;
        int r;

        if (!target || !target[0])
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "a symlink with no target");
        r = node_clear(dfd, base, false, &kept);
        if (r < 0)
                return entry_errno(im, raw, -r, "cannot replace what is there", err);
        /* The target is written as it is: only the sandbox resolves it, in its own root. */
        if (symlinkat(target, dfd, base) < 0)
                return entry_errno(im, raw, errno, "cannot create it", err);
        if (meta_at(im, dfd, base, e, false) < 0)
                return entry_errno(im, raw, errno, "cannot set its owner or times", err);
        im->stats.symlinks++;
        return 0;
}

static int fifo_entry(image_layer_importer *im, struct archive_entry *e, int dfd, const char *base,
                      const char *raw, cs_error **err)
{
        bool kept;
        int r = node_clear(dfd, base, false, &kept);

        if (r < 0)
                return entry_errno(im, raw, -r, "cannot replace what is there", err);
        if (mkfifoat(dfd, base, 0600) < 0)
                return entry_errno(im, raw, errno, "cannot create it", err);
        if (meta_at(im, dfd, base, e, true) < 0)
                return entry_errno(im, raw, errno, "cannot set its owner, mode or times", err);
        im->stats.fifos++;
        return 0;
}

/* A hard link to a path already in the tree, resolved by the same strict rules. */
static int hardlink_entry(image_layer_importer *im, struct archive_entry *e, int dfd,
                          const char *base, const char *path, const char *raw, cs_error **err)
{
        _cleanup_free_ char *target = NULL;
        _cleanup_free_ char *shown = NULL;
        _cleanup_close_ int tfd = -1;
        const char *why = image_layer_path_clean(archive_entry_hardlink(e), &target);
        bool kept;
        int r;

        if (why)
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err, "its link target %s",
                                   why);
        if (!target[0])
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "a hard link to the root");
        if (strcmp(target, path) == 0)
                return 0;
        shown = image_printable(target);
        r = parent_open(im, target, false, &tfd);
        if (r == 0) {
                r = node_clear(dfd, base, false, &kept);
                if (r < 0)
                        return entry_errno(im, raw, -r, "cannot replace what is there", err);
                r = linkat(tfd, path_base(target), dfd, base, 0) < 0 ? -errno : 0;
        }
        switch (r) {
        case 0:
                im->stats.hardlinks++;
                return 0;
        case -ENOENT:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "its link target '%s' does not exist", shown);
        case -EPERM:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "its link target '%s' is a directory", shown);
        default:
                return resolve_error(im, raw, -r, "its link target", err);
        }
}

/* Writes one entry (never a whiteout). check: the caps are checked here (a single pass). */
static int entry_write(image_layer_importer *im, struct archive *a, struct archive_entry *e,
                       bool check, cs_error **err)
{
        const char *raw, *base;
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int dfd = -1;
        mode_t type = archive_entry_filetype(e);
        int r;

        if (entry_path(im, e, &raw, &path, err) < 0)
                return -1;
        if (im->want && !im->want(im->want_ctx, path))
                return 0;
        if (check && entry_check(im, e, raw, err) < 0)
                return -1;
        base = path_base(path);
        if (strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) == 0)
                return 0; /* applied in pass 1; never written */
        if (type == AE_IFCHR || type == AE_IFBLK) {
                im->stats.devices_skipped++; /* never mknod on the host */
                return 0;
        }
        if (!path[0]) {
                if (type != AE_IFDIR)
                        return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                           "the root is not a directory");
                return dir_entry(im, e, im->rootfd, ".", path, raw, err);
        }
        r = parent_open(im, path, true, &dfd);
        if (r < 0)
                return resolve_error(im, raw, -r, "its path", err);
        if (archive_entry_hardlink(e))
                return hardlink_entry(im, e, dfd, base, path, raw, err);
        switch (type) {
        case AE_IFREG:
                return file_write(im, a, e, dfd, base, raw, err);
        case AE_IFDIR:
                return dir_entry(im, e, dfd, base, path, raw, err);
        case AE_IFLNK:
                return symlink_entry(im, e, dfd, base, raw, err);
        case AE_IFIFO:
                return fifo_entry(im, e, dfd, base, raw, err);
        default:
                return entry_error(im, raw, GRPC_STATUS_INVALID_ARGUMENT, err,
                                   "its type (0%o) is not supported", (unsigned)type);
        }
}

/* Pass 2 of a layer. */
int image_layer_pass_write(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err)
{
        return entry_write(ctx, a, e, false, err);
}

/* The single pass that extracts a tarball's members into the scratch directory. */
int image_layer_pass_extract(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err)
{
        return entry_write(ctx, a, e, true, err);
}

/* Applies the directories' owners, modes and times, in the order the layers gave them (a
 * later layer's wins). A directory a later layer deleted or replaced is skipped. */
int image_layer_dirs_finish(image_layer_importer *im, cs_error **err)
{
        for (size_t i = 0; i < im->n_dirs; i++) {
                const dir_meta *d = &im->dirs[i];
                _cleanup_close_ int fd =
                        d->path[0] ? image_openat2(im->rootfd, d->path, O_RDONLY | O_DIRECTORY,
                                                   RESOLVE_STRICT)
                                   : fcntl(im->rootfd, F_DUPFD_CLOEXEC, 3);

                if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP))
                        continue;
                if (fd < 0 || (im->chown && fchown(fd, d->uid, d->gid) < 0) ||
                    fchmod(fd, d->mode) < 0 || futimens(fd, d->times) < 0) {
                        _cleanup_free_ char *p = image_printable(d->path);

                        return cs_error_errno(err, errno,
                                              "directory '%s': cannot set its owner, mode or "
                                              "times",
                                              p);
                }
        }
        return 0;
}
