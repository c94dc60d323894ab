/* cp and ls: workspace files.
 *
 * The service moves at most 16 MiB per call, so cp moves a file of any size as a series of
 * calls: WriteFile (append=false, then append=true) up, ReadFile (offset, max_bytes) down. */
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
        const char *label;
        int64_t total; /* -1: unknown (a pipe) */
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
        p->label = slash && slash[1] ? slash + 1 : label;
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
};

static const cli_option cp_options[] = {
        { CP_QUIET, "quiet", 'q', NULL,
          "No progress bar (it shows only when stderr is a terminal)." },
};

typedef struct cp_state {
        bool quiet;
} cp_state;

static int on_cp_option(void *state, int id, const char *value)
{
        (void)value;
        if (id == CP_QUIET)
                ((cp_state *)state)->quiet = true;
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

static int cp_upload(cli_ctx *ctx, const cp_state *s, const char *src, const char *id,
                     const char *rpath)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_close_ int own_fd = -1;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ char *target = NULL, *remote = NULL;
        bool is_stdin = strcmp(src, "-") == 0;
        int fd = STDIN_FILENO;
        uint32_t mode = 0;
        int64_t total = -1;
        progress prog;
        struct stat st;

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
                             "'%s' is a directory (cp copies one file)", src);
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

        buf = cs_xmalloc(CLI_CHUNK_BYTES);
        progress_start(&prog, !ctx->json && !s->quiet, src, total);
        for (bool first = true;; first = false) {
                ssize_t n = cs_read_full(fd, buf, CLI_CHUNK_BYTES);

                if (n < 0) {
                        cs_error_errno(&err, errno, "cannot read '%s'", src);
                        break;
                }
                /* The first call is made even for an empty source: it creates the file. */
                if (n == 0 && !first)
                        break;
                if (upload_chunk(ctx, id, target, buf, (size_t)n, first, mode, &err) < 0)
                        break;
                prog.done += (uint64_t)n;
                progress_draw(&prog, false);
                if ((size_t)n < CLI_CHUNK_BYTES)
                        break;
        }
        progress_end(&prog, !err);
        if (err) {
                if (prog.done > 0)
                        cs_error_prefix(&err,
                                        "%s: upload failed after %" PRIu64
                                        " bytes, the remote file is incomplete",
                                        target, prog.done);
                return cli_fail(err);
        }
        remote = cs_xasprintf("%s:%s", id, target);
        return cp_summary(ctx, src, remote, prog.done, false);
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
                cli_usage_error(&cli_cmd_cp, "'%s' names a directory: cp copies one file", src);
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
        if (src_remote == dst_remote) {
                cli_usage_error(cmd, "exactly one of SRC and DST must be ID:PATH (a sandbox "
                                     "file), the other a local path or '-'");
                return CLI_EXIT_USAGE;
        }
        if (dst_remote)
                return cp_upload(ctx, &s, pos[0], dst_id, dst_path);
        return cp_download(ctx, &s, pos[0], src_id, src_path, pos[1]);
}

const cli_command cli_cmd_cp = {
        .name = "cp",
        .args = "SRC DST",
        .summary = "Copy a file into or out of a sandbox's workspace.",
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
                "--json: {\"source\", \"destination\", \"bytes\"} (on stderr when DST is '-').\n",
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
                printf("%s %*" PRIu64 " %-16s %s%s\n", mode, width, e->size, when, e->path,
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
