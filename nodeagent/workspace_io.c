/* Workspace file I/O on the host side of a sandbox's workspace (contract: workspace_io.h).
 *
 * How a path is resolved (ws_resolve): the client path is cleaned lexically, then walked one
 * component at a time from root->dirfd with openat(O_PATH | O_NOFOLLOW) + fstat, keeping a
 * stack of directory fds so that a ".." taken from a symlink target pops back to the directory
 * we physically came from and can never climb above the root. A symlink is read through the
 * O_PATH fd of the very inode that was fstat'ed (readlinkat(fd, "")), so what we check is what
 * we follow. Its target is spliced in front of the components still to walk: a relative target
 * is walked from the directory holding the link, an absolute one must lie inside mount_path and
 * is walked from the root. The kernel therefore never follows a link for us.
 *
 * The final component is only ever held as an O_PATH fd (opening an O_PATH fd never blocks and
 * never has side effects, even on a FIFO or a device). Once fstat says it is a regular file or
 * a directory, that same inode is reopened with real access flags through /proc/self/fd/<n>.
 *
 * NUL bytes: a C string cannot carry one, so the gRPC service layer must refuse a path whose
 * strlen() differs from the protobuf field's length (INVALID_ARGUMENT) before calling in here.
 *
 * Caps applied here beyond the header (both about sizes a client controls):
 * - resolution never holds more than WS_DEPTH_MAX directory levels (symlinks included);
 * - ListFiles leaves out (and reports as truncated) any entry whose relative path would be
 *   longer than WS_PATH_MAX bytes: the client could not name it in a later call anyway, and it
 *   bounds the response to WS_LIST_MAX * WS_PATH_MAX bytes. */
#include "workspace_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"
#include "util.h"

#define WS_WRITE_ATTEMPTS 4  /* resolutions tried when the tree changes under a write */
#define WS_TEMP_ATTEMPTS  16 /* random temp names tried before giving up */

/* ---- lexical path handling ------------------------------------------------------------- */

/* Go's filepath.Clean: collapses "//", drops ".", removes "x/.." pairs; a leading ".." of a
 * relative path is kept, "/.." is "/". "" becomes ".". Returns a malloc'd string. */
static char *path_clean_lexical(const char *path)
{
        size_t n = strlen(path);
        char *out = cs_xmalloc(n + 2);
        bool rooted = n > 0 && path[0] == '/';
        size_t w = 0, r = 0, dotdot = 0;

        if (rooted) {
                out[w++] = '/';
                r = dotdot = 1;
        }
        while (r < n) {
                if (path[r] == '/') {
                        r++;
                } else if (path[r] == '.' && (r + 1 == n || path[r + 1] == '/')) {
                        r++;
                } else if (path[r] == '.' && path[r + 1] == '.' &&
                           (r + 2 == n || path[r + 2] == '/')) {
                        r += 2;
                        if (w > dotdot) {
                                w--;
                                while (w > dotdot && out[w] != '/')
                                        w--;
                        } else if (!rooted) {
                                if (w > 0)
                                        out[w++] = '/';
                                out[w++] = '.';
                                out[w++] = '.';
                                dotdot = w;
                        }
                } else {
                        if ((rooted && w != 1) || (!rooted && w != 0))
                                out[w++] = '/';
                        for (; r < n && path[r] != '/'; r++)
                                out[w++] = path[r];
                }
        }
        if (w == 0)
                out[w++] = '.';
        out[w] = '\0';
        return out;
}

/* If the cleaned absolute path `abs` lies inside the cleaned absolute `mount`, returns the part
 * relative to it (a suffix of abs, "" for mount itself); otherwise NULL. */
static const char *path_under_mount(const char *abs, const char *mount)
{
        size_t m;

        if (!mount || mount[0] != '/' || abs[0] != '/')
                return NULL;
        if (strcmp(mount, "/") == 0)
                return abs + 1;
        m = strlen(mount);
        if (strncmp(abs, mount, m) != 0)
                return NULL;
        if (abs[m] == '\0')
                return abs + m;
        if (abs[m] == '/')
                return abs + m + 1;
        return NULL;
}

static size_t path_count_components(const char *p)
{
        size_t n = 0;

        for (; *p; p++)
                if (*p != '/' && (p[1] == '/' || p[1] == '\0'))
                        n++;
        return n;
}

/* The mount path as we compare against it: cleaned, or NULL when there is none usable. */
static char *mount_clean(const char *mount_path)
{
        if (!mount_path || mount_path[0] != '/')
                return NULL;
        return path_clean_lexical(mount_path);
}

int ws_path_clean(const char *path, const char *mount_path, char **ret, cs_error **err)
{
        _cleanup_free_ char *clean = NULL;
        _cleanup_free_ char *mount = NULL;
        const char *rel;
        size_t len, depth;

        if (!path)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no path given");
        len = strlen(path);
        if (len > WS_PATH_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "path is %zu bytes long, more than the %d allowed", len,
                                    WS_PATH_MAX);
        clean = path_clean_lexical(path);
        if (clean[0] == '/') {
                mount = mount_clean(mount_path);
                rel = path_under_mount(clean, mount);
                if (!rel)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "path '%s' escapes the workspace: an absolute path "
                                            "must lie under %s",
                                            path, mount ? mount : "the mount path");
        } else if (strcmp(clean, ".") == 0) {
                rel = "";
        } else if (strcmp(clean, "..") == 0 || strncmp(clean, "../", 3) == 0) {
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "path '%s' escapes the workspace: it climbs above its root",
                                    path);
        } else {
                rel = clean;
        }
        depth = path_count_components(rel);
        if (depth > WS_DEPTH_MAX)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "path has %zu components, more than the %d allowed", depth,
                                    WS_DEPTH_MAX);
        *ret = cs_xstrdup(rel);
        return 0;
}

/* ---- resolution ------------------------------------------------------------------------ */

enum {
        WALK_FOLLOW_LAST = 1 << 0, /* a symlink as the last component is followed */
        WALK_CREATE_DIRS = 1 << 1, /* missing intermediate directories are created */
};

/* Directories we stand in: stack[0] is root->dirfd (the caller's), stack[1..depth] are O_PATH
 * fds we own. */
typedef struct ws_walk {
        int stack[WS_DEPTH_MAX + 1];
        size_t depth;
} ws_walk;

static void ws_walk_pop_all(ws_walk *w)
{
        while (w->depth > 0)
                close(w->stack[w->depth--]);
}

/* What a path resolved to. */
typedef struct ws_target {
        int dirfd;      /* O_PATH fd of the directory holding `name` (owned), or -1 */
        char *name;     /* final component (malloc'd); NULL when the path ends on a directory
                         * reached by "", "." or ".." (then dirfd is -1 and fd is set) */
        int fd;         /* O_PATH fd of the target itself (owned); -1 if it does not exist */
        struct stat st; /* the target's fstat, valid when fd >= 0 */
} ws_target;

static void ws_target_done(ws_target *t)
{
        cs_closep(&t->dirfd);
        cs_closep(&t->fd);
        free(t->name);
        t->name = NULL;
        t->dirfd = t->fd = -1;
}

/* Hands out the directory on top of the stack as an fd the caller owns. */
static int walk_take_top(ws_walk *w, const char *display, cs_error **err)
{
        int fd;

        if (w->depth > 0)
                return w->stack[w->depth--];
        fd = fcntl(w->stack[0], F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return cs_error_errno(err, errno, "'%s': cannot duplicate the workspace fd",
                                      display);
        return fd;
}

/* Replaces the unwalked rest (*rem from *pos) with the link's target followed by that rest. */
static int walk_follow(ws_walk *w, int linkfd, const char *linkname, const char *mount,
                       const char *display, char **rem, size_t *pos, cs_error **err)
{
        char target[PATH_MAX + 1];
        _cleanup_free_ char *abs = NULL;
        const char *start = target;
        ssize_t n;
        char *next;

        /* The link's own O_PATH fd: we read the inode we fstat'ed, not whatever the name
         * points at by now. */
        n = readlinkat(linkfd, "", target, sizeof(target));
        if (n < 0)
                return cs_error_errno(err, errno, "'%s': cannot read symbolic link '%s'", display,
                                      linkname);
        if ((size_t)n >= sizeof(target))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "'%s': symbolic link '%s' has too long a target", display,
                                    linkname);
        target[n] = '\0';
        if (n == 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "'%s': symbolic link '%s' is empty",
                                    display, linkname);
        if (target[0] == '/') {
                /* As the sandbox sees it: translate mount_path to the workspace root. */
                abs = path_clean_lexical(target);
                start = path_under_mount(abs, mount);
                if (!start)
                        return cs_error_set(err, GRPC_STATUS_PERMISSION_DENIED,
                                            "'%s': symbolic link '%s' -> '%s' leads outside the "
                                            "workspace",
                                            display, linkname, target);
                ws_walk_pop_all(w);
        }
        next = cs_xasprintf("%s/%s", start, *rem + *pos);
        free(*rem);
        *rem = next;
        *pos = 0;
        return 0;
}

/* Makes a missing intermediate directory, with exactly WS_DEFAULT_DIR_MODE (not umask'ed).
 * Returns an O_PATH fd of what is now at `name` (which the caller checks like any other). */
static int walk_mkdir(int parent, const char *name, const char *display, cs_error **err)
{
        char proc[64];
        struct stat st;
        bool created = true;
        int fd;

        if (mkdirat(parent, name, WS_DEFAULT_DIR_MODE) < 0) {
                if (errno != EEXIST)
                        return cs_error_errno(err, errno, "'%s': cannot create directory '%s'",
                                              display, name);
                created = false; /* raced with someone else: walk whatever is there */
        }
        fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return cs_error_errno(err, errno, "'%s': cannot open '%s'", display, name);
        if (created && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
            (st.st_mode & 07777) != WS_DEFAULT_DIR_MODE) {
                /* chmod through the fd's magic link: reaches this inode even if the name was
                 * swapped for a symlink meanwhile. Best effort: the umask only narrows. */
                snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
                (void)chmod(proc, WS_DEFAULT_DIR_MODE);
        }
        return fd;
}

/* True when nothing but slashes is left from p on. */
static bool rest_is_empty(const char *p)
{
        while (*p == '/')
                p++;
        return *p == '\0';
}

/* Ends the walk on the directory on top of the stack (the path ended in "", "." or ".."). */
static int walk_finish_dir(ws_walk *w, const char *display, ws_target *ret, cs_error **err)
{
        int fd = walk_take_top(w, display, err);

        if (fd < 0)
                return -1;
        ret->fd = fd;
        if (fstat(fd, &ret->st) < 0)
                return cs_error_errno(err, errno, "'%s': cannot stat", display);
        return 0;
}

/* Ends the walk on `name` in the directory on top of the stack; fd is its O_PATH fd or -1. */
static int walk_finish_name(ws_walk *w, const char *name, int fd, const struct stat *st,
                            const char *display, ws_target *ret, cs_error **err)
{
        int dfd = walk_take_top(w, display, err);

        if (dfd < 0) {
                cs_closep(&fd);
                return -1;
        }
        ret->dirfd = dfd;
        ret->name = cs_xstrdup(name);
        ret->fd = fd;
        if (st)
                ret->st = *st;
        return 0;
}

/* Resolves the cleaned workspace-relative `rel` (display: the client's path, for messages).
 * On success *ret holds fds and a name the caller releases with ws_target_done(). */
static int ws_resolve(const ws_root *root, const char *display, const char *rel, unsigned flags,
                      ws_target *ret, cs_error **err)
{
        _cleanup_(ws_walk_pop_all) ws_walk w = { .depth = 0 };
        _cleanup_free_ char *rem = cs_xstrdup(rel);
        _cleanup_free_ char *mount = mount_clean(root->mount_path);
        char name[NAME_MAX + 1];
        unsigned links = 0;
        size_t pos = 0;

        w.stack[0] = root->dirfd;
        for (;;) {
                _cleanup_close_ int fd = -1;
                struct stat st;
                size_t len;
                bool last;
                int top = w.stack[w.depth];

                while (rem[pos] == '/')
                        pos++;
                if (rem[pos] == '\0')
                        return walk_finish_dir(&w, display, ret, err);
                len = strcspn(rem + pos, "/");
                if (len > NAME_MAX)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "'%s': a path component is longer than %d bytes",
                                            display, NAME_MAX);
                memcpy(name, rem + pos, len);
                name[len] = '\0';
                pos += len;
                last = rest_is_empty(rem + pos);

                if (strcmp(name, ".") == 0)
                        continue;
                if (strcmp(name, "..") == 0) {
                        /* Only symlink targets still hold ".." (the client path is cleaned). */
                        if (w.depth == 0)
                                return cs_error_set(err, GRPC_STATUS_PERMISSION_DENIED,
                                                    "'%s': a symbolic link leads above the "
                                                    "workspace root",
                                                    display);
                        close(w.stack[w.depth--]);
                        continue;
                }

                fd = openat(top, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT && !last && (flags & WALK_CREATE_DIRS)) {
                        fd = walk_mkdir(top, name, display, err);
                        if (fd < 0)
                                return -1;
                }
                if (fd < 0) {
                        if (errno == ENOENT && last)
                                return walk_finish_name(&w, name, -1, NULL, display, ret, err);
                        if (errno == ENOENT)
                                return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                                                    "'%s': no such file or directory", display);
                        return cs_error_errno(err, errno, "'%s': cannot open '%s'", display, name);
                }
                if (fstat(fd, &st) < 0)
                        return cs_error_errno(err, errno, "'%s': cannot stat '%s'", display, name);

                if (S_ISLNK(st.st_mode) && (!last || (flags & WALK_FOLLOW_LAST))) {
                        if (++links > WS_SYMLINK_MAX)
                                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                                    "'%s': too many levels of symbolic links "
                                                    "(more than %d)",
                                                    display, WS_SYMLINK_MAX);
                        if (walk_follow(&w, fd, name, mount, display, &rem, &pos, err) < 0)
                                return -1;
                        continue;
                }
                if (last)
                        return walk_finish_name(&w, name, TAKE_FD(fd), &st, display, ret, err);
                if (!S_ISDIR(st.st_mode))
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "'%s': '%s' is not a directory", display, name);
                if (w.depth == WS_DEPTH_MAX)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "'%s': resolves deeper than %d directory levels",
                                            display, WS_DEPTH_MAX);
                w.stack[++w.depth] = TAKE_FD(fd);
        }
}

/* Opens the inode behind the O_PATH fd with real access flags. The caller has fstat'ed it, so
 * this is never a FIFO or a device. */
static int ws_reopen(int pathfd, int flags, const char *display, cs_error **err)
{
        char proc[64];
        int fd;

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pathfd);
        do
                fd = open(proc, flags | O_CLOEXEC | O_NOCTTY);
        while (fd < 0 && errno == EINTR);
        if (fd < 0)
                return cs_error_errno(err, errno, "'%s': cannot open", display);
        return fd;
}

/* Refuses anything but a regular file (existing targets only). */
static int check_regular(const ws_target *t, const char *display, cs_error **err)
{
        if (!t->name || S_ISDIR(t->st.st_mode))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "'%s' is a directory",
                                    display);
        if (!S_ISREG(t->st.st_mode))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "'%s' is not a regular file", display);
        return 0;
}

/* ---- ReadFile -------------------------------------------------------------------------- */

int ws_read(const ws_root *root, const char *path, int64_t offset, int64_t max_bytes,
            ws_read_result *ret, cs_error **err)
{
        _cleanup_(ws_target_done) ws_target t = { .dirfd = -1, .fd = -1 };
        _cleanup_free_ char *rel = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_close_ int fd = -1;
        bool hit_end = false;
        size_t want, got = 0;
        struct stat st;

        *ret = (ws_read_result){ 0 };
        if (offset < 0 || max_bytes < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "offset (%lld) and max_bytes (%lld) must not be negative",
                                    (long long)offset, (long long)max_bytes);
        if (ws_path_clean(path, root->mount_path, &rel, err) < 0)
                return -1;
        if (ws_resolve(root, path, rel, WALK_FOLLOW_LAST, &t, err) < 0)
                return -1;
        if (t.fd < 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "'%s': no such file", path);
        if (check_regular(&t, path, err) < 0)
                return -1;
        fd = ws_reopen(t.fd, O_RDONLY, path, err);
        if (fd < 0)
                return -1;
        if (fstat(fd, &st) < 0)
                return cs_error_errno(err, errno, "'%s': cannot stat", path);

        want = (max_bytes == 0 || max_bytes > (int64_t)WS_DATA_MAX) ? WS_DATA_MAX
                                                                    : (size_t)max_bytes;
        if (offset >= st.st_size)
                want = 0;
        else if ((uint64_t)(st.st_size - offset) < want)
                want = (size_t)(st.st_size - offset);
        if (want > 0)
                buf = cs_xmalloc(want);
        while (got < want) {
                ssize_t n = pread(fd, buf + got, want - got, offset + (off_t)got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return cs_error_errno(err, errno, "'%s': cannot read", path);
                if (n == 0) {
                        hit_end = true; /* shrank since the fstat */
                        break;
                }
                got += (size_t)n;
        }

        ret->data = got > 0 ? TAKE_PTR(buf) : NULL;
        ret->len = got;
        ret->total_size = st.st_size;
        ret->eof = hit_end || offset >= st.st_size || (int64_t)got >= st.st_size - offset;
        return 0;
}

/* ---- WriteFile ------------------------------------------------------------------------- */

#define WRITE_RETRY 1 /* the tree changed between resolution and creation: resolve again */

/* The data of a write: pieces, as they arrived. */
typedef struct ws_data {
        const struct iovec *iov;
        size_t n_iov;
} ws_data;

/* Writes all of d: 0, or -errno. */
static int write_all(int fd, const ws_data *d)
{
        return cs_writev_all(fd, d->iov, d->n_iov) < 0 ? -errno : 0;
}

/* A failed write of the data: a full workspace volume (ENOSPC, or EDQUOT under a quota) and
 * RLIMIT_FSIZE (EFBIG) are RESOURCE_EXHAUSTED with a message saying so; else by errno. */
static int write_error(cs_error **err, int errnum, const char *display)
{
        if (errnum == ENOSPC || errnum == EDQUOT)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "'%s': the workspace is full (%s)", display, strerror(errnum));
        return cs_error_errno(err, errnum, "'%s': cannot write", display);
}

static uint64_t random_u64(void)
{
        static unsigned counter;
        uint64_t v;
        struct timespec ts;

        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
                return v;
        /* Only uniqueness matters (O_EXCL catches collisions), not unpredictability. */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16) ^
               __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

/* Creates ".<name>.tmp-<hex>" next to the target; its name goes to tmp (NAME_MAX + 1 bytes). */
static int create_temp(int dfd, const char *name, char *tmp, const char *display, cs_error **err)
{
        /* Keep the whole temp name within NAME_MAX: "." + name + ".tmp-" + 16 hex. */
        int keep = NAME_MAX - 1 - 5 - 16;

        for (int i = 0; i < WS_TEMP_ATTEMPTS; i++) {
                int fd;

                snprintf(tmp, NAME_MAX + 1, ".%.*s.tmp-%016llx", keep, name,
                         (unsigned long long)random_u64());
                fd = openat(dfd, tmp,
                            O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
                if (fd >= 0)
                        return fd;
                if (errno != EEXIST && errno != EINTR)
                        return cs_error_errno(err, errno, "'%s': cannot create a temporary file",
                                              display);
        }
        return cs_error_set(err, GRPC_STATUS_ABORTED,
                            "'%s': no free temporary file name next to it", display);
}

static mode_t create_mode(uint32_t mode)
{
        return mode ? (mode_t)(mode & 07777) : WS_DEFAULT_FILE_MODE;
}

/* Gives the unnamed (O_TMPFILE) file fd the name ".<name>.tmp-<hex>" in dfd, written to tmp
 * (NAME_MAX + 1 bytes). Through /proc/self/fd: linkat's AT_EMPTY_PATH would need
 * CAP_DAC_READ_SEARCH. */
static int link_temp(int fd, int dfd, const char *name, char *tmp, const char *display,
                     cs_error **err)
{
        int keep = NAME_MAX - 1 - 5 - 16;
        char proc[64];

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        for (int i = 0; i < WS_TEMP_ATTEMPTS; i++) {
                snprintf(tmp, NAME_MAX + 1, ".%.*s.tmp-%016llx", keep, name,
                         (unsigned long long)random_u64());
                if (linkat(AT_FDCWD, proc, dfd, tmp, AT_SYMLINK_FOLLOW) == 0)
                        return 0;
                if (errno != EEXIST && errno != EINTR)
                        return cs_error_errno(err, errno, "'%s': cannot write", display);
        }
        return cs_error_set(err, GRPC_STATUS_ABORTED,
                            "'%s': no free temporary file name next to it", display);
}

/* Data to a file with no name (O_TMPFILE), owner and mode set on it, then linked under a
 * temporary name and renamed over the target: an agent killed while the data is written
 * leaves nothing behind, and no one ever sees a partial file (the temporary name exists,
 * complete, only between the link and the rename). Where the filesystem has no O_TMPFILE, a
 * named temporary file from the start (a crash then leaves it). */
static int write_replace(const ws_target *t, const char *display, const ws_data *data,
                         uint32_t mode, cs_error **err)
{
        char tmp[NAME_MAX + 1] = "";
        _cleanup_close_ int fd = -1;
        mode_t fmode = t->fd >= 0 ? (t->st.st_mode & 07777) : create_mode(mode);
        int r;

        fd = openat(t->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
                return cs_error_errno(err, errno, "'%s': cannot create a temporary file", display);
        if (fd < 0) {
                fd = create_temp(t->dirfd, t->name, tmp, display, err);
                if (fd < 0)
                        return -1;
        }
        r = write_all(fd, data);
        if (r < 0) {
                write_error(err, -r, display);
                goto fail;
        }
        /* Owner first: chown clears set-id bits, the fchmod then restores them. */
        if (t->fd >= 0 && (t->st.st_uid != geteuid() || t->st.st_gid != getegid()) &&
            fchown(fd, t->st.st_uid, t->st.st_gid) < 0) {
                cs_error_errno(err, errno, "'%s': cannot keep the file's owner", display);
                goto fail;
        }
        if (fchmod(fd, fmode) < 0) {
                cs_error_errno(err, errno, "'%s': cannot set the file's mode", display);
                goto fail;
        }
        /* The data reaches the disk while the file has no name yet. Otherwise the rename pays
         * for it (ext4's auto_da_alloc flushes a file renamed over another: about 10 ms for
         * 16 MiB on a workspace volume), and an agent killed in that flush leaves the
         * temporary name behind (integration.nodeagent's kill -9 test caught it). A WriteFile
         * that answers OK is on disk, too. */
        if (fdatasync(fd) < 0) {
                write_error(err, errno, display);
                goto fail;
        }
        if (!tmp[0] && link_temp(fd, t->dirfd, t->name, tmp, display, err) < 0)
                goto fail;
        /* close() may report a deferred write error (NFS, quotas): before the rename. */
        if (close(TAKE_FD(fd)) < 0) {
                write_error(err, errno, display);
                goto fail;
        }
        if (renameat(t->dirfd, tmp, t->dirfd, t->name) < 0) {
                if (errno == EISDIR)
                        cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "'%s' is a directory",
                                     display);
                else
                        cs_error_errno(err, errno, "'%s': cannot replace the file", display);
                goto fail;
        }
        return 0;
fail:
        if (tmp[0])
                (void)unlinkat(t->dirfd, tmp, 0);
        return -1;
}

/* Puts an append that failed half way back: the file cut to the size it had (a file the
 * append created is removed, if it is still the one it made). A process in the sandbox
 * appending to the same file at the same moment may lose what it appended meanwhile: two
 * writers appending at once have no order to keep anyway. */
static void append_undo(const ws_target *t, int fd, const struct stat *before)
{
        struct stat now;

        if (t->fd >= 0) {
                (void)ftruncate(fd, before->st_size);
                return;
        }
        if (fstatat(t->dirfd, t->name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
            now.st_dev == before->st_dev && now.st_ino == before->st_ino)
                (void)unlinkat(t->dirfd, t->name, 0);
}

/* Appends to the existing regular file, or creates it. A failure in the middle of the data
 * (a full workspace: RESOURCE_EXHAUSTED) puts the file back as it was (append_undo). */
static int write_append(const ws_target *t, const char *display, const ws_data *data, uint32_t mode,
                        cs_error **err)
{
        _cleanup_close_ int fd = -1;
        struct stat before;
        int r;

        if (t->fd >= 0) {
                fd = ws_reopen(t->fd, O_WRONLY | O_APPEND, display, err);
                if (fd < 0)
                        return -1;
        } else {
                fd = openat(t->dirfd, t->name,
                            O_CREAT | O_EXCL | O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC |
                                    O_NOCTTY,
                            create_mode(mode));
                if (fd < 0 && errno == EEXIST)
                        return WRITE_RETRY; /* appeared since we looked: look again */
                if (fd < 0)
                        return cs_error_errno(err, errno, "'%s': cannot create", display);
        }
        if (fstat(fd, &before) < 0)
                return cs_error_errno(err, errno, "'%s': cannot stat", display);
        /* The exact mode, not the umask'ed one (as replacement does). */
        if (t->fd < 0 && fchmod(fd, create_mode(mode)) < 0) {
                cs_error_errno(err, errno, "'%s': cannot set the file's mode", display);
                append_undo(t, fd, &before);
                return -1;
        }
        r = write_all(fd, data);
        if (r < 0) {
                write_error(err, -r, display);
                append_undo(t, fd, &before);
                return -1;
        }
        if (close(TAKE_FD(fd)) < 0)
                return write_error(err, errno, display);
        return 0;
}

static int write_once(const ws_root *root, const char *path, const char *rel, const ws_data *data,
                      bool append, uint32_t mode, cs_error **err)
{
        _cleanup_(ws_target_done) ws_target t = { .dirfd = -1, .fd = -1 };

        if (ws_resolve(root, path, rel, WALK_FOLLOW_LAST | WALK_CREATE_DIRS, &t, err) < 0)
                return -1;
        if ((t.fd >= 0 || !t.name) && check_regular(&t, path, err) < 0)
                return -1;
        if (append)
                return write_append(&t, path, data, mode, err);
        return write_replace(&t, path, data, mode, err);
}

int ws_write(const ws_root *root, const char *path, const uint8_t *data, size_t len, bool append,
             uint32_t mode, int64_t *ret_written, cs_error **err)
{
        struct iovec iov = { .iov_base = (void *)data, .iov_len = len };

        if (len > 0 && !data) {
                if (ret_written)
                        *ret_written = 0;
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "no data given");
        }
        return ws_writev(root, path, &iov, 1, len, append, mode, ret_written, err);
}

int ws_writev(const ws_root *root, const char *path, const struct iovec *iov, size_t n_iov,
              size_t len, bool append, uint32_t mode, int64_t *ret_written, cs_error **err)
{
        ws_data data = { .iov = iov, .n_iov = n_iov };
        _cleanup_free_ char *rel = NULL;
        int r;

        if (ret_written)
                *ret_written = 0;
        /* Before anything touches the tree. */
        if (len > WS_DATA_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "write of %zu bytes is over the %u bytes allowed per call", len,
                                    WS_DATA_MAX);
        if (ws_path_clean(path, root->mount_path, &rel, err) < 0)
                return -1;
        /* "newdir/" names a directory: cleaning would drop the '/' and make a file "newdir". */
        if (rel[0] && path[strlen(path) - 1] == '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "path '%s' ends with '/': WriteFile writes a file, not a "
                                    "directory",
                                    path);
        for (int attempt = 0;; attempt++) {
                r = write_once(root, path, rel, &data, append, mode, err);
                if (r != WRITE_RETRY)
                        break;
                if (attempt + 1 == WS_WRITE_ATTEMPTS)
                        return cs_error_set(err, GRPC_STATUS_ABORTED,
                                            "'%s' keeps changing while being written; try again",
                                            path);
        }
        if (r < 0)
                return -1;
        if (ret_written)
                *ret_written = (int64_t)len;
        return 0;
}

/* ---- ListFiles ------------------------------------------------------------------------- */

/* The names of one directory, sorted; at most `keep` of them, the first ones readdir gives:
 * reading stops there, so a directory of millions of entries costs O(keep) time and memory
 * whatever its size (docs/api.md, ListFiles: a truncated listing holds the first entries the
 * filesystem gives, sorted among themselves, not the smallest names, which would take reading
 * the whole directory on every call). */
typedef struct name_set {
        char **v;
        size_t n, cap;
        bool dropped; /* names beyond `keep` exist */
} name_set;

static void name_set_done(name_set *s)
{
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
        s->v = NULL;
        s->n = 0;
}

static int cmp_names(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The next name of d worth listing in *ret_name (NULL at the end): ".", ".." and names that
 * are not UTF-8 are skipped. A name made inside the sandbox that is not UTF-8 cannot be a
 * proto3 string (every strict client would fail the whole listing): left out, as the API
 * reference says (docs/api.md, ListFiles). */
static _Thread_local size_t names_seen; /* ws_list_names_seen() */

size_t ws_list_names_seen(void)
{
        return names_seen;
}

static int next_name(DIR *d, const char **ret_name, const char *display, cs_error **err)
{
        for (;;) {
                struct dirent *de;

                errno = 0;
                de = readdir(d);
                names_seen += de != NULL;
                if (!de) {
                        *ret_name = NULL;
                        if (errno != 0)
                                return cs_error_errno(err, errno, "'%s': cannot list", display);
                        return 0;
                }
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (!cs_utf8_valid(de->d_name, strlen(de->d_name)))
                        continue;
                *ret_name = de->d_name;
                return 0;
        }
}

static int read_names(int dfd, size_t keep, name_set *ret, const char *display, cs_error **err)
{
        const char *name;
        DIR *d;
        int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
        int r = 0;

        if (fd < 0)
                return cs_error_errno(err, errno, "'%s': cannot list", display);
        d = fdopendir(fd);
        if (!d) {
                cs_error_errno(err, errno, "'%s': cannot list", display);
                close(fd);
                return -1;
        }
        rewinddir(d);
        while ((r = next_name(d, &name, display, err)) == 0 && name) {
                if (ret->n == keep) {
                        ret->dropped = true; /* one more exists: enough to know */
                        break;
                }
                if (ret->n == ret->cap) {
                        ret->cap = ret->cap ? ret->cap * 2 : 16;
                        ret->v = realloc(ret->v, ret->cap * sizeof(*ret->v));
                        if (!ret->v)
                                abort(); /* as cs_xmalloc: no useful recovery */
                }
                ret->v[ret->n++] = cs_xstrdup(name);
        }
        closedir(d);
        if (r < 0)
                return -1;
        if (ret->n > 1) /* v is NULL for an empty directory: not for qsort */
                qsort(ret->v, ret->n, sizeof(*ret->v), cmp_names);
        return 0;
}

typedef struct list_ctx {
        ws_entry *v;
        size_t n, cap;
        size_t max;
        bool recursive;
        bool truncated;
        bool stop; /* max reached and one more entry seen */
        const char *display;
} list_ctx;

/* Whether the directory `name` in dfd has any entry (for a truthful `truncated` at the depth
 * limit). Errors count as "no". */
static bool dir_has_entries(int dfd, const char *name)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        struct dirent *de;
        bool found = false;
        DIR *d;

        if (fd < 0)
                return false;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return false;
        }
        while (!found && (de = readdir(d)))
                found = strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        closedir(d);
        return found;
}

static void list_push(list_ctx *c, char *path, const struct stat *st)
{
        ws_entry *e;

        if (c->n == c->cap) {
                c->cap = c->cap ? c->cap * 2 : 64;
                c->v = realloc(c->v, c->cap * sizeof(*c->v));
                if (!c->v)
                        abort();
        }
        e = &c->v[c->n++];
        e->path = path;
        e->is_dir = S_ISDIR(st->st_mode);
        e->size = e->is_dir ? 0 : (uint64_t)st->st_size;
        e->mode = st->st_mode & 07777;
        e->mtime_sec = st->st_mtim.tv_sec;
        e->mtime_nsec = (int32_t)st->st_mtim.tv_nsec;
}

/* Lists dfd (an O_RDONLY directory fd, borrowed) whose entries are at `level` (1 for the listed
 * directory), naming them prefix + "/" + name. */
static int list_dir(list_ctx *c, int dfd, const char *prefix, unsigned level, cs_error **err)
{
        _cleanup_(name_set_done) name_set names = { 0 };

        if (read_names(dfd, c->max - c->n + 1, &names, c->display, err) < 0)
                return -1;
        for (size_t i = 0; i < names.n && !c->stop; i++) {
                _cleanup_free_ char *rel = NULL;
                _cleanup_close_ int sub = -1;
                struct stat st;

                if (fstatat(dfd, names.v[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno == ENOENT)
                                continue; /* removed since readdir */
                        return cs_error_errno(err, errno, "'%s': cannot stat an entry", c->display);
                }
                rel = prefix ? cs_xasprintf("%s/%s", prefix, names.v[i]) : cs_xstrdup(names.v[i]);
                if (strlen(rel) > WS_PATH_MAX) {
                        c->truncated = true; /* see the file comment */
                        continue;
                }
                if (c->n == c->max) {
                        c->truncated = true;
                        c->stop = true;
                        break;
                }
                list_push(c, TAKE_PTR(rel), &st);
                if (!S_ISDIR(st.st_mode) || !c->recursive)
                        continue;
                if (level >= WS_DEPTH_MAX) {
                        if (dir_has_entries(dfd, names.v[i]))
                                c->truncated = true;
                        continue;
                }
                /* O_DIRECTORY | O_NOFOLLOW: if the entry was swapped since the fstatat, this
                 * fails instead of following a link or opening a FIFO. */
                sub = openat(dfd, names.v[i],
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
                if (sub < 0) {
                        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
                                continue;
                        return cs_error_errno(err, errno, "'%s': cannot open a subdirectory",
                                              c->display);
                }
                if (list_dir(c, sub, c->v[c->n - 1].path, level + 1, err) < 0)
                        return -1;
        }
        if (names.dropped && !c->stop)
                c->truncated = true;
        return 0;
}

int ws_list(const ws_root *root, const char *path, bool recursive, uint32_t max_entries,
            ws_entry **ret_entries, size_t *ret_n, bool *ret_truncated, cs_error **err)
{
        _cleanup_(ws_target_done) ws_target t = { .dirfd = -1, .fd = -1 };
        _cleanup_free_ char *rel = NULL;
        _cleanup_close_ int dfd = -1;
        list_ctx c = { .recursive = recursive, .display = path };

        *ret_entries = NULL;
        *ret_n = 0;
        *ret_truncated = false;
        c.max = max_entries == 0 ? WS_LIST_DEFAULT
                                 : (max_entries > WS_LIST_MAX ? WS_LIST_MAX : max_entries);
        if (ws_path_clean(path, root->mount_path, &rel, err) < 0)
                return -1;
        if (ws_resolve(root, path, rel, WALK_FOLLOW_LAST, &t, err) < 0)
                return -1;
        if (t.fd < 0)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "'%s': no such directory", path);
        if (!S_ISDIR(t.st.st_mode))
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "'%s' is not a directory",
                                    path);
        dfd = ws_reopen(t.fd, O_RDONLY | O_DIRECTORY, path, err);
        if (dfd < 0)
                return -1;
        if (list_dir(&c, dfd, NULL, 1, err) < 0) {
                ws_entries_free(c.v, c.n);
                return -1;
        }
        *ret_entries = c.v;
        *ret_n = c.n;
        *ret_truncated = c.truncated;
        return 0;
}

void ws_entries_free(ws_entry *entries, size_t n)
{
        if (!entries)
                return;
        for (size_t i = 0; i < n; i++)
                free(entries[i].path);
        free(entries);
}
