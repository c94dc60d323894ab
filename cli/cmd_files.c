/* cp and ls: workspace files.
 *
 * The service moves at most 16 MiB per call, so cp moves a file of any size as a series of
 * calls: WriteFile (append=false, then append=true) up, ReadFile (offset, max_bytes) down. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"
#include "uuid.h"

/* Progress lines are redrawn at most this often. */
#define PROGRESS_INTERVAL_MS 100
#define PROGRESS_LABEL_MAX   24

/* --- progress --------------------------------------------------------------------------- */

typedef struct progress {
        bool on;
        char label[256]; /* printable: names may come from the sandbox */
        int64_t total;   /* -1: unknown (a pipe) */
        uint64_t done;
        int64_t start_ms, last_ms;
} progress;

static void progress_draw(progress *p, bool force)
{
        int64_t now = cs_now_monotonic_ms();
        char line[256], done[CLI_FMT_MAX], total[CLI_FMT_MAX], rate[CLI_FMT_MAX];
        double secs = (double)(now - p->start_ms) / 1000;
        size_t len, label_len = strlen(p->label);
        const char *label = p->label;
        int n;

        if (!p->on || (!force && now - p->last_ms < PROGRESS_INTERVAL_MS))
                return;
        p->last_ms = now;
        if (label_len > PROGRESS_LABEL_MAX)
                label += label_len - PROGRESS_LABEL_MAX;
        fmt_bytes(secs > 0 ? (uint64_t)((double)p->done / secs) : 0, rate);
        fmt_bytes(p->done, done);
        if (p->total >= 0) {
                int pct = p->total ? (int)(p->done * 100 / (uint64_t)p->total) : 100;
                char bar[21];

                memset(bar, '-', 20);
                memset(bar, '#', (size_t)(pct > 100 ? 100 : pct) / 5);
                bar[20] = '\0';
                n = snprintf(line, sizeof(line), "\r\033[K%-*s [%s] %3d%%  %s / %s  %s/s",
                             PROGRESS_LABEL_MAX, label, bar, pct, done,
                             fmt_bytes((uint64_t)p->total, total), rate);
        } else {
                n = snprintf(line, sizeof(line), "\r\033[K%-*s %s  %s/s", PROGRESS_LABEL_MAX, label,
                             done, rate);
        }
        len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
        (void)cs_write_all(STDERR_FILENO, line, len);
}

/* The bar shows on a terminal only, never with --json or --quiet. */
static void progress_start(progress *p, bool enabled, const char *label, int64_t total)
{
        const char *slash = strrchr(label, '/');

        p->on = enabled && isatty(STDERR_FILENO);
        snprintf(p->label, sizeof(p->label), "%s", slash && slash[1] ? slash + 1 : label);
        fmt_printable_inplace(p->label);
        p->total = total;
        p->done = 0;
        p->start_ms = cs_now_monotonic_ms();
        p->last_ms = 0;
        cli_signals_set_progress(p->on);
        progress_draw(p, true);
}

static void progress_end(progress *p, bool ok)
{
        if (!p->on)
                return;
        if (ok)
                progress_draw(p, true);
        (void)cs_write_all(STDERR_FILENO, "\n", 1);
        cli_signals_set_progress(false);
        p->on = false;
}

/* --- cp ---------------------------------------------------------------------------------- */

enum {
        CP_QUIET = 1,
        CP_RECURSIVE,
};

static const cli_option cp_options[] = {
        { CP_QUIET, "quiet", 'q', NULL,
          "No progress bar (it shows only when stderr is a terminal)." },
        { CP_RECURSIVE, "recursive", 'r', NULL,
          "Copy a directory and everything in it (see below)." },
};

typedef struct cp_state {
        bool quiet;
        bool recursive;
} cp_state;

static int on_cp_option(void *state, int id, const char *value)
{
        (void)value;
        if (id == CP_QUIET)
                ((cp_state *)state)->quiet = true;
        if (id == CP_RECURSIVE)
                ((cp_state *)state)->recursive = true;
        return 0;
}

/* "ID:PATH" with a sandbox UUID before the colon. A local path that looks like one can be
 * written as ./ID:PATH. */
static bool remote_parse(const char *arg, char id[static CS_UUID_STRLEN + 1], const char **path)
{
        if (strlen(arg) <= CS_UUID_STRLEN || arg[CS_UUID_STRLEN] != ':')
                return false;
        memcpy(id, arg, CS_UUID_STRLEN);
        id[CS_UUID_STRLEN] = '\0';
        if (!cs_uuid_valid(id))
                return false;
        *path = arg + CS_UUID_STRLEN + 1;
        return true;
}

static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');

        return slash ? slash + 1 : path;
}

static char *join(const char *dir, const char *name)
{
        if (!*dir || strcmp(dir, ".") == 0)
                return cs_xstrdup(name);
        return cs_xasprintf("%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
}

static int list_dir_call(cli_ctx *ctx, const char *id, const char *rpath, uint32_t max,
                         ProtobufCMessage **ret, cs_error **err)
{
        Compute__V1__ListFilesRequest req = COMPUTE__V1__LIST_FILES_REQUEST__INIT;

        req.sandbox_id = (char *)id;
        req.path = (char *)(*rpath ? rpath : ".");
        req.max_entries = max;
        return cli_unary(ctx, CLI_METHOD("ListFiles"), &req.base,
                         &compute__v1__list_files_response__descriptor, ret, err);
}

/* Whether the remote rpath is a directory (ListFiles answers for one only). Asked after a
 * WriteFile or ReadFile refused rpath as FAILED_PRECONDITION, to tell "a directory" from the
 * other reasons; any failure of its own reads as "no". */
static bool remote_is_dir(cli_ctx *ctx, const char *id, const char *rpath)
{
        _cleanup_msg_ ProtobufCMessage *probe = NULL;
        _cleanup_error_ cs_error *err = NULL;

        return list_dir_call(ctx, id, rpath, 1, &probe, &err) == 0;
}

static int cp_summary(const cli_ctx *ctx, const char *src, const char *dst, uint64_t bytes,
                      bool to_stderr)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };

        if (!ctx->json)
                return CLI_EXIT_OK;
        cli_json_object_begin(&j);
        cli_json_kv_string(&j, "source", src);
        cli_json_kv_string(&j, "destination", dst);
        cli_json_kv_u64(&j, "bytes", bytes);
        cli_json_object_end(&j);
        if (!to_stderr)
                return cli_json_print(&j);
        cli_json_newline(&j);
        (void)cs_write_all(STDERR_FILENO, j.buf, j.len);
        return CLI_EXIT_OK;
}

/* Sends one chunk; the first one replaces the file and sets its mode. */
static int upload_chunk(cli_ctx *ctx, const char *id, const char *path, const uint8_t *data,
                        size_t len, bool first, uint32_t mode, cs_error **err)
{
        Compute__V1__WriteFileRequest req = COMPUTE__V1__WRITE_FILE_REQUEST__INIT;
        _cleanup_msg_ ProtobufCMessage *msg = NULL;
        const Compute__V1__WriteFileResponse *resp;

        req.sandbox_id = (char *)id;
        req.path = (char *)path;
        req.data.data = (uint8_t *)data;
        req.data.len = len;
        req.append = !first;
        req.mode = first ? mode : 0;
        if (cli_unary(ctx, CLI_METHOD("WriteFile"), &req.base,
                      &compute__v1__write_file_response__descriptor, &msg, err) < 0)
                return -1;
        resp = (const Compute__V1__WriteFileResponse *)msg;
        if (resp->bytes_written != (int64_t)len)
                return cs_error_set(err, GRPC_STATUS_DATA_LOSS,
                                    "%s: the server wrote %" PRId64 " of %zu bytes", path,
                                    resp->bytes_written, len);
        return 0;
}

/* Streams fd (named `label` in messages and on the progress bar; total: its size, -1 when
 * unknown) into the remote file `target`, chunk by chunk; the first call creates or replaces it
 * with `mode`. *ret_bytes: what was sent. 0, or -1 with *err. */
static int upload_stream(cli_ctx *ctx, const cp_state *s, int fd, const char *label, int64_t total,
                         uint32_t mode, const char *id, const char *target, uint64_t *ret_bytes,
                         cs_error **err)
{
        _cleanup_free_ uint8_t *buf = cs_xmalloc(CLI_CHUNK_BYTES);
        progress prog;

        progress_start(&prog, !ctx->json && !s->quiet, label, total);
        for (bool first = true;; first = false) {
                ssize_t n = cs_read_full(fd, buf, CLI_CHUNK_BYTES);

                if (n < 0) {
                        cs_error_errno(err, errno, "cannot read '%s'", label);
                        break;
                }
                /* The first call is made even for an empty source: it creates the file. */
                if (n == 0 && !first)
                        break;
                if (upload_chunk(ctx, id, target, buf, (size_t)n, first, mode, err) < 0)
                        break;
                prog.done += (uint64_t)n;
                progress_draw(&prog, false);
                if ((size_t)n < CLI_CHUNK_BYTES)
                        break;
        }
        progress_end(&prog, !*err);
        *ret_bytes = prog.done;
        if (!*err)
                return 0;
        if (prog.done > 0)
                cs_error_prefix(err,
                                "%s: upload failed after %" PRIu64
                                " bytes, the remote file is incomplete",
                                target, prog.done);
        return -1;
}

static int cp_upload(cli_ctx *ctx, const cp_state *s, const char *src, const char *id,
                     const char *rpath)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_close_ int own_fd = -1;
        _cleanup_free_ char *target = NULL, *remote = NULL;
        bool is_stdin = strcmp(src, "-") == 0;
        int fd = STDIN_FILENO;
        uint32_t mode = 0;
        int64_t total = -1;
        uint64_t bytes = 0;
        struct stat st;
        int r;

        if (!is_stdin) {
                own_fd = open(src, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (own_fd < 0) {
                        cs_error_errno(&err, errno, "cannot open '%s'", src);
                        return cli_fail(err);
                }
                fd = own_fd;
        }
        if (fstat(fd, &st) < 0) {
                cs_error_errno(&err, errno, "cannot stat '%s'", src);
                return cli_fail(err);
        }
        if (S_ISDIR(st.st_mode)) {
                cs_error_set(&err, GRPC_STATUS_INVALID_ARGUMENT,
                             "'%s' is a directory (cp -r copies a directory)", src);
                return cli_fail(err);
        }
        if (S_ISREG(st.st_mode)) {
                total = st.st_size;
                mode = st.st_mode & 0777;
        }
        /* "ID:" or "ID:dir/": into that directory, under the source's name. */
        if (!*rpath || rpath[strlen(rpath) - 1] == '/') {
                if (is_stdin) {
                        cli_usage_error(&cli_cmd_cp, "copying from '-' needs a file name, not "
                                                     "a directory");
                        return CLI_EXIT_USAGE;
                }
                target = cs_xasprintf("%s%s", rpath, base_name(src));
        } else {
                target = cs_xstrdup(rpath);
        }
        r = upload_stream(ctx, s, fd, src, total, mode, id, target, &bytes, &err);
        /* "cp FILE ID:dir" with dir there: into it under the source's name, as cp(1) does
         * (the first WriteFile refused a directory; nothing was written). */
        if (r < 0 && bytes == 0 && err->code == GRPC_STATUS_FAILED_PRECONDITION &&
            strcmp(target, rpath) == 0 && remote_is_dir(ctx, id, rpath)) {
                if (is_stdin || lseek(fd, 0, SEEK_SET) < 0) {
                        cs_error_freep(&err);
                        cs_error_set(&err, GRPC_STATUS_FAILED_PRECONDITION,
                                     "'%s' is a directory: name the file (%s:%s/NAME)", rpath, id,
                                     rpath);
                        return cli_fail(err);
                }
                cs_error_freep(&err);
                free(target);
                target = join(rpath, base_name(src));
                r = upload_stream(ctx, s, fd, src, total, mode, id, target, &bytes, &err);
        }
        if (r < 0)
                return cli_fail(err);
        remote = cs_xasprintf("%s:%s", id, target);
        return cp_summary(ctx, src, remote, bytes, false);
}

/* The mode a new local file gets: an existing file's, else 0666 less the umask (as cp). */
static mode_t download_mode(const char *path)
{
        struct stat st;
        mode_t mask;

        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                return st.st_mode & 07777;
        mask = umask(0);
        umask(mask);
        return 0666 & ~mask;
}

/* Reads the remote file into fd (named `local` in messages), chunk by chunk. */
static int download_to(cli_ctx *ctx, const char *id, const char *rpath, int fd, const char *local,
                       progress *prog, cs_error **err)
{
        Compute__V1__ReadFileRequest req = COMPUTE__V1__READ_FILE_REQUEST__INIT;

        req.sandbox_id = (char *)id;
        req.path = (char *)rpath;
        req.max_bytes = CLI_CHUNK_BYTES;
        for (;;) {
                _cleanup_msg_ ProtobufCMessage *msg = NULL;
                const Compute__V1__ReadFileResponse *resp;
                rpc_bytes data;
                int r;

                /* The data is written out from the pieces it arrived in, not decoded. */
                rpc_bytes_init(&data);
                req.offset = (int64_t)prog->done;
                if (cli_unary_bytes(ctx, CLI_METHOD("ReadFile"), &req.base,
                                    &compute__v1__read_file_response__descriptor, "data", &msg,
                                    &data, err) < 0)
                        return -1;
                resp = (const Compute__V1__ReadFileResponse *)msg;
                prog->total = resp->total_size;
                r = cs_writev_all(fd, data.iov, data.n_iov);
                prog->done += data.len;
                rpc_bytes_clear(&data);
                if (r < 0)
                        return cs_error_errno(err, errno, "cannot write '%s'", local);
                progress_draw(prog, false);
                if (resp->eof)
                        return 0;
                if (prog->done == (uint64_t)req.offset)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                            "%s: the server returned no data at offset %" PRIu64
                                            " before the end of the file",
                                            rpath, prog->done);
        }
}

/* Where a download lands: DST itself, or DST/NAME when DST is a directory. */
static char *download_target(const char *dst, const char *rpath)
{
        struct stat st;
        size_t len = strlen(dst);

        if ((len > 0 && dst[len - 1] == '/') || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode)))
                return cs_xasprintf("%s%s%s", dst, len > 0 && dst[len - 1] == '/' ? "" : "/",
                                    base_name(rpath));
        return cs_xstrdup(dst);
}

/* A download whose first ReadFile refused a directory: say how to copy one, as an upload of
 * a local directory does. */
static void hint_directory(cli_ctx *ctx, const char *id, const char *rpath, uint64_t done,
                           cs_error **err)
{
        if (done > 0 || (*err)->code != GRPC_STATUS_FAILED_PRECONDITION ||
            !remote_is_dir(ctx, id, rpath))
                return;
        cs_error_freep(err);
        cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                     "'%s' is a directory (cp -r copies a directory)", rpath);
}

static int cp_download(cli_ctx *ctx, const cp_state *s, const char *src, const char *id,
                       const char *rpath, const char *dst)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_free_ char *target = NULL, *tmp = NULL, *dir = NULL;
        _cleanup_close_ int fd = -1;
        bool to_stdout = strcmp(dst, "-") == 0;
        progress prog;
        struct stat st;
        char *slash;
        int r;

        if (!*rpath || rpath[strlen(rpath) - 1] == '/') {
                cli_usage_error(&cli_cmd_cp, "'%s' names a directory: cp -r copies one", src);
                return CLI_EXIT_USAGE;
        }
        target = to_stdout ? NULL : download_target(dst, rpath);
        if (to_stdout || (stat(target, &st) == 0 && !S_ISREG(st.st_mode))) {
                /* Stdout, or an existing device or FIFO (/dev/null, a named pipe): written
                 * in place, as cp(1) does. A file renamed over it would replace the node. */
                if (!to_stdout) {
                        fd = open(target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
                        if (fd < 0) {
                                cs_error_errno(&err, errno, "cannot open '%s'", target);
                                return cli_fail(err);
                        }
                }
                progress_start(&prog, !ctx->json && !s->quiet, rpath, -1);
                r = download_to(ctx, id, rpath, to_stdout ? STDOUT_FILENO : fd,
                                to_stdout ? "stdout" : target, &prog, &err);
                if (r < 0)
                        hint_directory(ctx, id, rpath, prog.done, &err);
                if (r == 0 && fd >= 0 && close(TAKE_FD(fd)) < 0)
                        r = cs_error_errno(&err, errno, "cannot write '%s'", target);
                progress_end(&prog, r == 0);
                if (r < 0)
                        return cli_fail(err);
                return cp_summary(ctx, src, to_stdout ? dst : target, prog.done, to_stdout);
        }

        /* A temp file next to the target, renamed over it at the end: a failed or
         * interrupted download leaves no half file behind. */
        dir = cs_xstrdup(target);
        slash = strrchr(dir, '/');
        if (slash)
                slash[slash == dir ? 1 : 0] = '\0';
        tmp = cs_xasprintf("%s/.%s.computectl-XXXXXX", slash ? dir : ".", base_name(target));
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                cs_error_errno(&err, errno, "cannot create a temporary file for '%s'", target);
                return cli_fail(err);
        }
        cli_signals_set_unlink(tmp);
        progress_start(&prog, !ctx->json && !s->quiet, rpath, -1);
        r = download_to(ctx, id, rpath, fd, target, &prog, &err);
        if (r < 0)
                hint_directory(ctx, id, rpath, prog.done, &err);
        if (r == 0 && fchmod(fd, download_mode(target)) < 0)
                r = cs_error_errno(&err, errno, "cannot set the mode of '%s'", tmp);
        if (r == 0 && close(TAKE_FD(fd)) < 0)
                r = cs_error_errno(&err, errno, "cannot write '%s'", target);
        if (r == 0 && rename(tmp, target) < 0)
                r = cs_error_errno(&err, errno, "cannot rename '%s' to '%s'", tmp, target);
        progress_end(&prog, r == 0);
        if (r < 0)
                unlink(tmp);
        cli_signals_set_unlink(NULL);
        if (r < 0)
                return cli_fail(err);
        return cp_summary(ctx, src, target, prog.done, false);
}

/* --- cp -r -------------------------------------------------------------------------------- */

/* Caps of one cp -r, both ways (docs/computectl.md). A directory's listing is one ListFiles
 * call: the API has no paging, so a directory of more than CP_LIST_MAX entries is refused
 * rather than copied in part. */
#define CP_TREE_DEPTH_MAX   64           /* directory levels below the copied directory */
#define CP_TREE_ENTRIES_MAX 100000       /* files and directories in one copy */
#define CP_LIST_MAX         10000        /* the server's cap on one ListFiles */
#define CP_MKDIR_BATCH      500          /* directories per `mkdir` run in the sandbox */
#define CP_MKDIR_BYTES      (256 * 1024) /* their paths' bytes per run (the exec cap: 1 MiB) */
#define CP_NAME_MAX         255

typedef struct tree_stats {
        uint64_t files, dirs, bytes, skipped, entries;
        mode_t mask; /* down: our umask, taken off the listed modes (as cp -r without -p) */
} tree_stats;

static int tree_summary(const cli_ctx *ctx, const char *src, const char *dst, const tree_stats *t)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };

        if (t->skipped)
                fprintf(stderr, CLI_NAME ": cp: %" PRIu64 " entr%s skipped (see above)\n",
                        t->skipped, t->skipped == 1 ? "y" : "ies");
        if (ctx->json) {
                cli_json_object_begin(&j);
                cli_json_kv_string(&j, "source", src);
                cli_json_kv_string(&j, "destination", dst);
                cli_json_kv_u64(&j, "bytes", t->bytes);
                cli_json_kv_u64(&j, "files", t->files);
                cli_json_kv_u64(&j, "directories", t->dirs);
                cli_json_kv_u64(&j, "skipped", t->skipped);
                cli_json_object_end(&j);
                if (cli_json_print(&j) != 0)
                        return CLI_EXIT_ERROR;
        }
        return t->skipped ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}

static void tree_skip(tree_stats *t, const char *path, const char *why)
{
        _cleanup_free_ char *p = fmt_printable(path);

        fprintf(stderr, CLI_NAME ": cp: skipped '%s': %s\n", p, why);
        t->skipped++;
}

static int tree_count(tree_stats *t, const char *path, unsigned depth, cs_error **err)
{
        if (++t->entries > CP_TREE_ENTRIES_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "more than %d entries: cp -r copies at most that many",
                                    CP_TREE_ENTRIES_MAX);
        if (depth > CP_TREE_DEPTH_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "'%s': more than %d directory levels deep", path,
                                    CP_TREE_DEPTH_MAX);
        return 0;
}

/* "a/b//" -> "a/b"; "" and "/"-only stay as they are. */
static char *strip_slashes(const char *path)
{
        char *p = cs_xstrdup(path);
        size_t n = strlen(p);

        while (n > 1 && p[n - 1] == '/')
                p[--n] = '\0';
        return p;
}

/* The name a copied directory gets under its destination: the last component of its path. */
static const char *tree_base(const char *stripped)
{
        const char *b = base_name(stripped);

        return *b ? b : stripped;
}

static bool has_dotdot(const char *path)
{
        for (const char *p = path; (p = strstr(p, "..")); p += 2)
                if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
                        return true;
        return false;
}

/* A name from a sandbox's listing is hostile: only a plain name of this directory is taken
 * (nothing empty, ".", "..", absolute or with a '/'). It is then only ever used relative to
 * the directory fd it belongs in. */
static bool remote_name_ok(const char *name)
{
        size_t n = strlen(name);

        return n > 0 && n <= CP_NAME_MAX && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
               !strchr(name, '/');
}

/* --- cp -r down: sandbox -> host --- */

/* Downloads the remote file rpath into dfd/name (a temp file renamed over it: never through
 * a symlink or into a FIFO already there), with mode. display: dfd's path, for messages. */
static int download_file_at(cli_ctx *ctx, const cp_state *s, const char *id, const char *rpath,
                            int dfd, const char *display, const char *name, uint32_t mode,
                            uint64_t *ret_bytes, cs_error **err)
{
        _cleanup_free_ char *local = join(display, name), *tmp = NULL, *tmp_path = NULL;
        _cleanup_close_ int fd = -1;
        progress prog;
        int r;

        for (int tries = 0; fd < 0; tries++) {
                char rnd[CS_UUID_STRLEN + 1];

                cs_uuid_generate(rnd);
                free(tmp);
                tmp = cs_xasprintf(".%.200s.computectl-%.8s", name, rnd);
                fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0 && (errno != EEXIST || tries > 10))
                        return cs_error_errno(err, errno, "cannot create a temporary file in '%s'",
                                              display);
        }
        tmp_path = join(display, tmp);
        cli_signals_set_unlink(tmp_path);
        progress_start(&prog, !ctx->json && !s->quiet, local, -1);
        r = download_to(ctx, id, rpath, fd, local, &prog, err);
        if (r == 0 && fchmod(fd, mode & 0777) < 0)
                r = cs_error_errno(err, errno, "cannot set the mode of '%s'", local);
        if (r == 0 && close(TAKE_FD(fd)) < 0)
                r = cs_error_errno(err, errno, "cannot write '%s'", local);
        if (r == 0 && renameat(dfd, tmp, dfd, name) < 0)
                r = cs_error_errno(err, errno, "cannot rename '%s' to '%s'", tmp_path, local);
        progress_end(&prog, r == 0);
        if (r < 0)
                unlinkat(dfd, tmp, 0);
        cli_signals_set_unlink(NULL);
        *ret_bytes = prog.done;
        return r;
}

/* A sub-directory `name` of dfd made (0700 while it is filled) or taken as it is when one is
 * there, and opened without following a symlink. */
static int open_subdir(int dfd, const char *display, const char *name, cs_error **err)
{
        _cleanup_free_ char *local = join(display, name);
        int fd;

        if (mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create directory '%s'", local);
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return cs_error_errno(err, errno,
                                      errno == ELOOP || errno == ENOTDIR
                                              ? "'%s' exists and is not a directory (a symlink "
                                                "is not followed)"
                                              : "cannot open directory '%s'",
                                      local);
        return fd;
}

/* Copies the remote directory rdir into dfd (named display), entry by entry, depth levels
 * below the copied directory. Per-file refusals (a symlink leading out of the workspace, a
 * FIFO, a file removed meanwhile) are skipped with a warning; anything else stops the copy. */
static int download_tree(cli_ctx *ctx, const cp_state *s, const char *id, const char *rdir, int dfd,
                         const char *display, unsigned depth, tree_stats *t, cs_error **err)
{
        _cleanup_msg_ ProtobufCMessage *msg = NULL;
        const Compute__V1__ListFilesResponse *resp;

        if (list_dir_call(ctx, id, rdir, CP_LIST_MAX, &msg, err) < 0)
                return -1;
        resp = (const Compute__V1__ListFilesResponse *)msg;
        if (resp->truncated)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "'%s': more than %d entries (or names too long): cp -r "
                                    "copies no directory in part",
                                    rdir, CP_LIST_MAX);
        for (size_t i = 0; i < resp->n_entries; i++) {
                const Compute__V1__FileEntry *e = resp->entries[i];
                _cleanup_free_ char *rchild = NULL, *local = NULL;

                if (!remote_name_ok(e->path)) {
                        _cleanup_free_ char *p = fmt_printable(e->path);
                        return cs_error_set(err, GRPC_STATUS_DATA_LOSS,
                                            "'%s': the server listed an entry named '%s': not a "
                                            "plain name, refused",
                                            rdir, p);
                }
                rchild = join(rdir, e->path);
                local = join(display, e->path);
                if (tree_count(t, rchild, depth + (e->is_dir ? 1 : 0), err) < 0)
                        return -1;
                if (e->is_dir) {
                        _cleanup_close_ int sub = open_subdir(dfd, display, e->path, err);

                        if (sub < 0)
                                return -1;
                        if (download_tree(ctx, s, id, rchild, sub, local, depth + 1, t, err) < 0)
                                return -1;
                        if (fchmod(sub, e->mode & 0777 & ~t->mask) < 0)
                                return cs_error_errno(err, errno, "cannot set the mode of '%s'",
                                                      local);
                        t->dirs++;
                } else {
                        uint64_t bytes = 0;
                        cs_error *ferr = NULL;

                        if (download_file_at(ctx, s, id, rchild, dfd, display, e->path,
                                             e->mode & ~t->mask, &bytes, &ferr) < 0) {
                                if (ferr->code != GRPC_STATUS_FAILED_PRECONDITION &&
                                    ferr->code != GRPC_STATUS_PERMISSION_DENIED &&
                                    ferr->code != GRPC_STATUS_NOT_FOUND) {
                                        *err = ferr;
                                        return -1;
                                }
                                tree_skip(t, rchild, ferr->msg ? ferr->msg : "refused");
                                cs_error_free(ferr);
                                continue;
                        }
                        t->files++;
                        t->bytes += bytes;
                }
        }
        return 0;
}

static int cp_download_tree(cli_ctx *ctx, const cp_state *s, const char *src, const char *id,
                            const char *rpath, const char *dst)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_msg_ ProtobufCMessage *probe = NULL;
        _cleanup_free_ char *rdir = strip_slashes(rpath), *target = NULL;
        _cleanup_close_ int fd = -1;
        bool root = !*rdir || strcmp(rdir, ".") == 0, created;
        tree_stats t = { 0 };
        struct stat st;

        if (strcmp(dst, "-") == 0) {
                cli_usage_error(&cli_cmd_cp, "cp -r cannot copy a directory to stdout");
                return CLI_EXIT_USAGE;
        }
        /* A directory, before anything is made here (ListFiles refuses a file). */
        if (list_dir_call(ctx, id, rdir, 1, &probe, &err) < 0)
                return cli_fail(err);
        /* As cp -r: into DST/NAME when DST is a directory, else as DST. The workspace's root
         * (and a path ending in "." or "..") has no name of its own: its entries go into DST. */
        if (!root && stat(dst, &st) == 0 && S_ISDIR(st.st_mode) &&
            strcmp(tree_base(rdir), "..") != 0 && strcmp(tree_base(rdir), ".") != 0)
                target = join(dst, tree_base(rdir));
        else
                target = cs_xstrdup(dst);
        created = mkdir(target, 0700) == 0;
        if (!created && errno != EEXIST) {
                cs_error_errno(&err, errno, "cannot create directory '%s'", target);
                return cli_fail(err);
        }
        fd = open(target, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                cs_error_errno(&err, errno, "cannot open directory '%s'", target);
                return cli_fail(err);
        }
        t.mask = umask(0);
        umask(t.mask);
        if (download_tree(ctx, s, id, root ? "" : rdir, fd, target, 0, &t, &err) < 0) {
                cs_error_prefix(&err, "cp -r: %s (what was copied so far stays)", target);
                return cli_fail(err);
        }
        /* A top directory made here: as mkdir(1) would make it (its remote mode is not
         * listed); one that was there is left as it was. */
        if (created)
                (void)fchmod(fd, 0777 & ~t.mask);
        return tree_summary(ctx, src, target, &t);
}

/* --- cp -r up: host -> sandbox --- */

typedef struct local_entry {
        char *rel; /* below the copied directory */
        bool is_dir;
        uint32_t mode;
        int64_t size;
} local_entry;

typedef struct local_tree {
        local_entry *v;
        size_t n, cap;
} local_tree;

static void local_tree_done(local_tree *lt)
{
        for (size_t i = 0; i < lt->n; i++)
                free(lt->v[i].rel);
        free(lt->v);
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dfd (borrowed), sorted. */
static int read_dir_names(int dfd, const char *display, char ***ret, size_t *ret_n, cs_error **err)
{
        int fd = dup(dfd);
        char **v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        DIR *d;

        if (fd < 0 || !(d = fdopendir(fd))) {
                if (fd >= 0)
                        close(fd);
                return cs_error_errno(err, errno, "cannot read directory '%s'", display);
        }
        rewinddir(d);
        errno = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                v = cs_xgrow(v, n, &cap, sizeof(*v));
                v[n++] = cs_xstrdup(de->d_name);
                errno = 0;
        }
        if (errno) {
                int e = errno;
                closedir(d);
                for (size_t i = 0; i < n; i++)
                        free(v[i]);
                free(v);
                return cs_error_errno(err, e, "cannot read directory '%s'", display);
        }
        closedir(d);
        if (n)
                qsort(v, n, sizeof(*v), cmp_str);
        *ret = v;
        *ret_n = n;
        return 0;
}

/* Lists the local directory dfd (rel below the copied one, display its path): directories
 * and regular files, never following a symlink; other kinds are skipped with a warning. */
static int local_walk(int dfd, const char *rel, const char *display, unsigned depth, local_tree *lt,
                      tree_stats *t, cs_error **err)
{
        char **names = NULL;
        size_t n = 0;
        int r = 0;

        if (read_dir_names(dfd, display, &names, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n && r == 0; i++) {
                _cleanup_free_ char *child = join(rel, names[i]), *local = join(display, names[i]);
                struct stat st;

                if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT)
                                r = cs_error_errno(err, errno, "cannot stat '%s'", local);
                        continue;
                }
                if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
                        tree_skip(t, local,
                                  S_ISLNK(st.st_mode) ? "a symlink (not followed, not copied)"
                                                      : "not a regular file or directory");
                        continue;
                }
                if ((r = tree_count(t, local, depth + (S_ISDIR(st.st_mode) ? 1 : 0), err)) < 0)
                        continue;
                lt->v = cs_xgrow(lt->v, lt->n, &lt->cap, sizeof(*lt->v));
                lt->v[lt->n++] = (local_entry){ .rel = cs_xstrdup(child),
                                                .is_dir = S_ISDIR(st.st_mode),
                                                .mode = st.st_mode & 0777,
                                                .size = st.st_size };
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = openat(
                                dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                r = cs_error_errno(err, errno, "cannot open directory '%s'", local);
                        else
                                r = local_walk(sub, child, local, depth + 1, lt, t, err);
                }
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return r;
}

/* Opens rel below top one component at a time, never following a symlink (a name swapped for
 * one since the walk fails with ELOOP). */
static int open_beneath(int top, const char *rel, int flags)
{
        _cleanup_free_ char *copy = cs_xstrdup(rel);
        _cleanup_close_ int dir = -1;
        char *save = NULL, *part = strtok_r(copy, "/", &save);

        while (part) {
                char *next = strtok_r(NULL, "/", &save);
                int fd = openat(dir >= 0 ? dir : top, part,
                                next ? O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                                     : flags | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return -1;
                if (!next)
                        return fd;
                if (dir >= 0)
                        close(dir);
                dir = fd;
                part = next;
        }
        errno = EINVAL;
        return -1;
}

/* Runs `mkdir -p -m MODE -- DIR...` in the sandbox: the API has no call that makes a directory
 * (WriteFile makes a file's missing parents, 0755), and an empty one has no file. */
static int remote_mkdir(cli_ctx *ctx, const char *id, uint32_t mode, char **dirs, size_t n,
                        cs_error **err)
{
        Compute__V1__ExecCommandRequest req = COMPUTE__V1__EXEC_COMMAND_REQUEST__INIT;
        rpc_call_options opts = { .timeout_ms = 720 * 1000 };
        _cleanup_free_ char **args = cs_xcalloc(n + 4, sizeof(char *));
        char mode_s[16], errbuf[512];
        size_t errlen = 0;
        int32_t code = -1;
        bool done = false;
        rpc_stream *st = NULL;
        int r;

        snprintf(mode_s, sizeof(mode_s), "%o", mode & 0777);
        args[0] = "-p";
        args[1] = "-m";
        args[2] = mode_s;
        args[3] = "--";
        memcpy(args + 4, dirs, n * sizeof(char *));
        req.sandbox_id = (char *)id;
        req.command = "mkdir";
        req.args = args;
        req.n_args = n + 4;
        if (rpc_stream_open(cli_channel(ctx), CLI_METHOD("ExecCommand"), &req.base,
                            &compute__v1__exec_event__descriptor, &opts, &st, err) < 0)
                return -1;
        for (;;) {
                ProtobufCMessage *msg = NULL;
                const Compute__V1__ExecEvent *ev;

                r = rpc_stream_read(st, &msg, err);
                if (r <= 0)
                        break;
                ev = (const Compute__V1__ExecEvent *)msg;
                if (ev->event_case == COMPUTE__V1__EXEC_EVENT__EVENT_STDERR) {
                        size_t k = ev->stderr->data.len;
                        if (k > sizeof(errbuf) - 1 - errlen)
                                k = sizeof(errbuf) - 1 - errlen;
                        memcpy(errbuf + errlen, ev->stderr->data.data, k);
                        errlen += k;
                } else if (ev->event_case == COMPUTE__V1__EXEC_EVENT__EVENT_COMPLETED) {
                        done = true;
                        code = ev->completed->exit_code;
                }
                protobuf_c_message_free_unpacked(msg, NULL);
        }
        rpc_stream_free(st);
        if (r < 0)
                return -1;
        if (!done || code != 0) {
                _cleanup_free_ char *text = NULL;

                while (errlen > 0 && errbuf[errlen - 1] == '\n')
                        errlen--;
                errbuf[errlen] = '\0';
                text = fmt_printable(errbuf);
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "making directories in the sandbox with mkdir failed (exit "
                                    "%d): %s",
                                    code, *text ? text : "no message");
        }
        return 0;
}

/* Every directory made in the sandbox: the top one, then the tree's in the walk's order (a
 * parent before its children), consecutive ones of one mode in one `mkdir` run. */
static int upload_dirs(cli_ctx *ctx, const char *id, const char *target, uint32_t top_mode,
                       const local_tree *lt, tree_stats *t, cs_error **err)
{
        _cleanup_free_ const local_entry **dirs = cs_xcalloc(lt->n + 1, sizeof(*dirs));
        _cleanup_free_ char **paths = cs_xcalloc(CP_MKDIR_BATCH, sizeof(char *));
        char *top = (char *)target;
        size_t nd = 0;
        int r = 0;

        if (remote_mkdir(ctx, id, top_mode, &top, 1, err) < 0)
                return -1;
        for (size_t i = 0; i < lt->n; i++)
                if (lt->v[i].is_dir)
                        dirs[nd++] = &lt->v[i];
        for (size_t i = 0; i < nd && r == 0;) {
                size_t k = 0;
                uint32_t mode = dirs[i]->mode;

                size_t bytes = 0;

                while (i < nd && dirs[i]->mode == mode && k < CP_MKDIR_BATCH &&
                       (k == 0 ||
                        bytes + strlen(target) + strlen(dirs[i]->rel) + 2 <= CP_MKDIR_BYTES)) {
                        paths[k] = join(target, dirs[i++]->rel);
                        bytes += strlen(paths[k++]) + 1;
                }
                r = remote_mkdir(ctx, id, mode, paths, k, err);
                for (size_t j = 0; j < k; j++)
                        free(paths[j]);
                t->dirs += r == 0 ? k : 0;
        }
        return r;
}

static int cp_upload_tree(cli_ctx *ctx, const cp_state *s, const char *src, const char *id,
                          const char *rpath)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_(local_tree_done) local_tree lt = { 0 };
        _cleanup_free_ char *lsrc = strip_slashes(src), *rdst = strip_slashes(rpath);
        _cleanup_free_ char *target = NULL, *remote = NULL;
        _cleanup_close_ int top = -1;
        const char *base = tree_base(lsrc);
        bool nameless = strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strcmp(base, "/") == 0;
        tree_stats t = { 0 };
        struct stat st;
        int r;

        if (strcmp(src, "-") == 0) {
                cli_usage_error(&cli_cmd_cp, "cp -r cannot copy a directory from stdin");
                return CLI_EXIT_USAGE;
        }
        top = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (top < 0 || fstat(top, &st) < 0) {
                cs_error_errno(&err, errno, "cannot open directory '%s'", src);
                return cli_fail(err);
        }
        if (has_dotdot(rdst)) {
                cli_usage_error(&cli_cmd_cp, "'%s': a '..' in the remote path", rpath);
                return CLI_EXIT_USAGE;
        }
        /* As cp -r: into DST/NAME when DST is a directory (or ends in '/', or is the
         * workspace's root), else as DST. A source named "." or ".." (or "/") has no name of
         * its own: its entries go into DST. */
        if (nameless) {
                target = cs_xstrdup(*rdst ? rdst : ".");
        } else if (!*rpath || rpath[strlen(rpath) - 1] == '/') {
                target = join(rdst, tree_base(lsrc));
        } else {
                _cleanup_msg_ ProtobufCMessage *probe = NULL;

                r = list_dir_call(ctx, id, rdst, 1, &probe, &err);
                if (r < 0 && err->code != GRPC_STATUS_NOT_FOUND)
                        return cli_fail(err);
                target = r == 0 ? join(rdst, tree_base(lsrc)) : cs_xstrdup(rdst);
                cs_error_freep(&err);
        }
        if (local_walk(top, "", lsrc, 0, &lt, &t, &err) < 0 ||
            upload_dirs(ctx, id, target, st.st_mode & 0777, &lt, &t, &err) < 0) {
                cs_error_prefix(&err, "cp -r: %s", src);
                return cli_fail(err);
        }
        for (size_t i = 0; i < lt.n; i++) {
                const local_entry *e = &lt.v[i];
                _cleanup_free_ char *local = join(lsrc, e->rel), *rfile = NULL;
                _cleanup_close_ int fd = -1;
                uint64_t bytes = 0;

                if (e->is_dir)
                        continue;
                fd = open_beneath(top, e->rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
                if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                        tree_skip(&t, local, fd < 0 ? strerror(errno) : "no longer a regular file");
                        continue;
                }
                rfile = join(target, e->rel);
                if (upload_stream(ctx, s, fd, local, st.st_size, e->mode, id, rfile, &bytes, &err) <
                    0) {
                        cs_error_prefix(&err, "cp -r: %s (what was copied so far stays)", src);
                        return cli_fail(err);
                }
                t.files++;
                t.bytes += bytes;
        }
        remote = cs_xasprintf("%s:%s", id, target);
        return tree_summary(ctx, src, remote, &t);
}

static int run_cp(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        char src_id[CS_UUID_STRLEN + 1], dst_id[CS_UUID_STRLEN + 1];
        const char *src_path = NULL, *dst_path = NULL;
        _cleanup_free_ char **pos = NULL;
        cp_state s = { 0 };
        bool src_remote, dst_remote;
        size_t n = 0;
        int r;

        r = cli_parse(cmd, argc, argv, on_cp_option, &s, &pos, &n);
        if (r == 1)
                cli_print_command_help(cmd, stdout);
        if (r != 0)
                return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
        if (n != 2) {
                cli_usage_error(cmd, "expected SRC and DST, got %zu argument%s", n,
                                n == 1 ? "" : "s");
                return CLI_EXIT_USAGE;
        }
        src_remote = remote_parse(pos[0], src_id, &src_path);
        dst_remote = remote_parse(pos[1], dst_id, &dst_path);
        if (src_remote && dst_remote) {
                cli_usage_error(cmd, "SRC and DST are both ID:PATH: cp copies between a sandbox "
                                     "and this host (copy through a local file)");
                return CLI_EXIT_USAGE;
        }
        if (!src_remote && !dst_remote) {
                /* "cp hello.txt $SB": a bare ID is a local file name. */
                const char *bare = cs_uuid_valid(pos[1])   ? pos[1]
                                   : cs_uuid_valid(pos[0]) ? pos[0]
                                                           : NULL;

                if (bare)
                        cli_usage_error(cmd,
                                        "'%s' is a sandbox ID without ':': write '%s:' for "
                                        "its workspace, or '%s:PATH' for a file in it",
                                        bare, bare, bare);
                else
                        cli_usage_error(cmd, "exactly one of SRC and DST must be ID:PATH (a "
                                             "sandbox file), the other a local path or '-'");
                return CLI_EXIT_USAGE;
        }
        if (s.recursive && dst_remote)
                return cp_upload_tree(ctx, &s, pos[0], dst_id, dst_path);
        if (s.recursive)
                return cp_download_tree(ctx, &s, pos[0], src_id, src_path, pos[1]);
        if (dst_remote)
                return cp_upload(ctx, &s, pos[0], dst_id, dst_path);
        return cp_download(ctx, &s, pos[0], src_id, src_path, pos[1]);
}

const cli_command cli_cmd_cp = {
        .name = "cp",
        .args = "SRC DST",
        .summary = "Copy a file or (-r) a directory to or from a sandbox's workspace.",
        .details =
                "Exactly one of SRC and DST is ID:PATH, a file in the sandbox (PATH relative to\n"
                "the workspace, or absolute under its mount path); the other is a local path,\n"
                "or '-' for stdin/stdout. A DST that is a directory (or ends in '/') gets SRC's\n"
                "file name. Files of any size move in 16 MiB calls. An upload sends the local\n"
                "file's permission bits for a new remote file; a download writes a temporary\n"
                "file next to DST and renames it at the end, so a failure leaves no partial\n"
                "file (an upload that fails midway leaves the remote file incomplete); a DST\n"
                "that is a device or FIFO (/dev/null, a named pipe) is written in place.\n"
                "A progress bar is drawn on stderr when it is a terminal.\n"
                "--json: {\"source\", \"destination\", \"bytes\"} (on stderr when DST is '-').\n"
                "\n"
                "-r copies a directory, into DST/NAME when DST is a directory (or ends in '/'),\n"
                "else as DST; the workspace's root (ID: or ID:.) copies its entries into DST.\n"
                "Files stream as above, one at a time. Up: regular files keep their permission\n"
                "bits; directories (empty ones too) are made by running 'mkdir -p -m MODE' in\n"
                "the sandbox; local symlinks are never followed, they and other special files\n"
                "are skipped. Down: each directory is listed (ListFiles: one call, so at most\n"
                "10000 entries per directory); a listed name that is not a plain name ('..',\n"
                "'/' in it) stops the copy; everything is written relative to the directory\n"
                "it belongs in, never through a symlink; modes are the listed ones less the\n"
                "umask (as cp -r without -p); a file the server will not read (a symlink out\n"
                "of the workspace or to a directory, a FIFO) is skipped. At most 100000\n"
                "entries and 64 levels. Skipped entries are named on stderr and make the exit\n"
                "status 125; a failed copy leaves what it copied so far.\n"
                "--json with -r: {\"source\", \"destination\", \"bytes\", \"files\",\n"
                "\"directories\", \"skipped\"}.\n",
        .options = cp_options,
        .n_options = ARRAY_SIZE(cp_options),
        .run = run_cp,
};

/* --- ls ---------------------------------------------------------------------------------- */

#define LS_MAX_ENTRIES 10000 /* the server's hard cap */

enum {
        LS_RECURSIVE = 1,
        LS_MAX,
};

static const cli_option ls_options[] = {
        { LS_RECURSIVE, "recursive", 'r', NULL, "List subdirectories too." },
        { LS_MAX, "max", 0, "N", "At most N entries (server default 1000, at most 10000)." },
};

typedef struct ls_state {
        const cli_command *cmd;
        bool recursive;
        uint64_t max;
} ls_state;

static int on_ls_option(void *state, int id, const char *value)
{
        ls_state *s = state;

        if (id == LS_RECURSIVE) {
                s->recursive = true;
                return 0;
        }
        return cli_parse_u64(s->cmd, "--max", value, LS_MAX_ENTRIES, &s->max);
}

/* "drwxr-xr-x" from is_dir and the permission bits (set-id and sticky as ls shows them). */
static void fmt_mode(bool is_dir, uint32_t mode, char out[static 11])
{
        static const char rwx[] = "rwxrwxrwx";

        out[0] = is_dir ? 'd' : '-';
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (1u << (8 - i)) ? rwx[i] : '-';
        if (mode & S_ISUID)
                out[3] = out[3] == 'x' ? 's' : 'S';
        if (mode & S_ISGID)
                out[6] = out[6] == 'x' ? 's' : 'S';
        if (mode & S_ISVTX)
                out[9] = out[9] == 'x' ? 't' : 'T';
        out[10] = '\0';
}

static void ls_print_text(const Compute__V1__ListFilesResponse *resp)
{
        int width = 1;

        for (size_t i = 0; i < resp->n_entries; i++) {
                char b[24];
                int w = snprintf(b, sizeof(b), "%" PRIu64, resp->entries[i]->size);
                if (w > width)
                        width = w;
        }
        for (size_t i = 0; i < resp->n_entries; i++) {
                const Compute__V1__FileEntry *e = resp->entries[i];
                char mode[11], when[32] = "";
                struct tm tm;

                fmt_mode(e->is_dir, e->mode, mode);
                if (e->modified_at) {
                        time_t t = (time_t)e->modified_at->seconds;
                        if (localtime_r(&t, &tm))
                                strftime(when, sizeof(when), "%Y-%m-%d %H:%M", &tm);
                }
                _cleanup_free_ char *name = fmt_printable(e->path);

                /* A name from the sandbox never reaches the terminal as control codes. */
                printf("%s %*" PRIu64 " %-16s %s%s\n", mode, width, e->size, when, name,
                       e->is_dir ? "/" : "");
        }
        if (resp->truncated)
                printf("(truncated)\n");
}

static int ls_print_json(const Compute__V1__ListFilesResponse *resp)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };

        cli_json_object_begin(&j);
        cli_json_key(&j, "entries");
        cli_json_array_begin(&j);
        for (size_t i = 0; i < resp->n_entries; i++) {
                const Compute__V1__FileEntry *e = resp->entries[i];

                cli_json_object_begin(&j);
                cli_json_kv_string(&j, "path", e->path);
                cli_json_kv_u64(&j, "size", e->size);
                cli_json_kv_bool(&j, "is_dir", e->is_dir);
                cli_json_kv_u64(&j, "mode", e->mode);
                cli_json_kv_timestamp(&j, "modified_at", e->modified_at);
                cli_json_object_end(&j);
        }
        cli_json_array_end(&j);
        cli_json_kv_bool(&j, "truncated", resp->truncated);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

static int run_ls(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        Compute__V1__ListFilesRequest req = COMPUTE__V1__LIST_FILES_REQUEST__INIT;
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_msg_ ProtobufCMessage *msg = NULL;
        _cleanup_free_ char **pos = NULL;
        ls_state s = { .cmd = cmd };
        size_t n = 0;
        int r;

        r = cli_parse(cmd, argc, argv, on_ls_option, &s, &pos, &n);
        if (r == 1)
                cli_print_command_help(cmd, stdout);
        if (r != 0)
                return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
        if (n < 1 || n > 2) {
                cli_usage_error(cmd, n < 1 ? "missing the sandbox ID" : "too many arguments");
                return CLI_EXIT_USAGE;
        }
        req.sandbox_id = pos[0];
        req.path = n == 2 ? pos[1] : ".";
        req.recursive = s.recursive;
        req.max_entries = (uint32_t)s.max;
        if (cli_unary(ctx, CLI_METHOD("ListFiles"), &req.base,
                      &compute__v1__list_files_response__descriptor, &msg, &err) < 0)
                return cli_fail(err);
        if (ctx->json)
                return ls_print_json((const Compute__V1__ListFilesResponse *)msg);
        ls_print_text((const Compute__V1__ListFilesResponse *)msg);
        return CLI_EXIT_OK;
}

const cli_command cli_cmd_ls = {
        .name = "ls",
        .args = "ID [PATH]",
        .summary = "List a directory of a sandbox's workspace.",
        .details = "PATH is relative to the workspace (default: its root). Text: one line per\n"
                   "entry with mode, size, modification time (local) and path; directories end\n"
                   "in '/'; a last line '(truncated)' when the listing was capped.\n"
                   "--json: {\"entries\": [{\"path\", \"size\", \"is_dir\", \"mode\",\n"
                   "\"modified_at\"}], \"truncated\"} (mode: the permission bits as a number).\n",
        .options = ls_options,
        .n_options = ARRAY_SIZE(ls_options),
        .run = run_ls,
};
