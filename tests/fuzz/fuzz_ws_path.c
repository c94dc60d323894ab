/* Fuzz target: workspace path cleaning, ws_path_clean() in nodeagent/workspace_io.c, the
 * lexical step every ReadFile/WriteFile/ListFiles path goes through before it touches disk.
 *
 * Input: a client path, then (after a NUL byte, if any) the mount path; without a NUL the
 * mount path is "/workspace". A NUL cannot reach ws_path_clean inside a path (the RPC layer
 * refuses strings holding one), so it serves as the separator here.
 *
 * Beyond "no crash", every result is checked against a model written independently of the
 * code under test (a stack of components, as a reader of the contract in workspace_io.h
 * would write it): both accept or refuse the same paths, a cleaned path is the same string,
 * it never has an empty, "." or ".." component nor a leading or trailing '/', so it cannot
 * leave the workspace root, and cleaning it again gives it back unchanged.
 *
 * Then the path goes through the whole resolution, ws_read() on a workspace made at start
 * (WS_TREE: files, a directory, symlinks that climb out, point to absolute paths in and out of
 * the mount path, loop, and a canary file next to the workspace): a read never returns the
 * canary, a path that cleaning refuses is refused, and a read that succeeds returns one of the
 * workspace's files.
 *
 * Owns: this file. Touches only the temporary directory it makes in $TMPDIR (default /tmp) at
 * start and removes at exit. */
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "util.h"
#include "workspace_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_DEFAULT_MOUNT "/workspace"

/* A path as a stack of components (pointers into a private copy). */
typedef struct model {
        char *buf;
        const char **comp;
        size_t n;
        bool escapes; /* a relative path climbed above its start */
} model;

static void model_free(model *m)
{
        free(m->buf);
        free(m->comp);
}

/* Splits p on '/', drops empty and "." components, pops on "..": at the root (absolute p)
 * a ".." stays there; above the start of a relative p it sets escapes. */
static model model_clean(const char *p)
{
        model m = { .buf = cs_xstrdup(p), .comp = cs_xcalloc(strlen(p) + 1, sizeof(char *)) };
        bool rooted = p[0] == '/';

        for (char *save = NULL, *c = strtok_r(m.buf, "/", &save); c;
             c = strtok_r(NULL, "/", &save)) {
                if (strcmp(c, ".") == 0)
                        continue;
                if (strcmp(c, "..") == 0) {
                        if (m.n > 0)
                                m.n--;
                        else if (!rooted)
                                m.escapes = true;
                        continue;
                }
                m.comp[m.n++] = c;
        }
        return m;
}

/* comp[from..n) joined with '/', malloc'd. */
static char *model_join(const model *m, size_t from)
{
        size_t len = 1;
        char *out, *o;

        for (size_t i = from; i < m->n; i++)
                len += strlen(m->comp[i]) + 1;
        out = o = cs_xmalloc(len);
        for (size_t i = from; i < m->n; i++) {
                if (i > from)
                        *o++ = '/';
                o = stpcpy(o, m->comp[i]);
        }
        *o = '\0';
        return out;
}

/* What ws_path_clean should answer: NULL (refused) or the workspace-relative path. */
static char *model_expect(const char *path, const char *mount)
{
        model p, m;
        char *ret = NULL;
        size_t k = 0;

        if (strlen(path) > WS_PATH_MAX)
                return NULL;
        p = model_clean(path);
        if (path[0] == '/') {
                if (!mount || mount[0] != '/') {
                        model_free(&p);
                        return NULL;
                }
                m = model_clean(mount);
                for (k = 0; k < m.n && k < p.n && strcmp(m.comp[k], p.comp[k]) == 0; k++)
                        ;
                if (k == m.n && p.n - k <= WS_DEPTH_MAX)
                        ret = model_join(&p, k);
                model_free(&m);
        } else if (!p.escapes && p.n <= WS_DEPTH_MAX) {
                ret = model_join(&p, 0);
        }
        model_free(&p);
        return ret;
}

/* The shape every cleaned path must have: "" or name("/"name)*, no name "." or "..". */
static bool rel_well_formed(const char *rel)
{
        const char *p = rel;

        if (!*p)
                return true;
        for (;;) {
                size_t n = strcspn(p, "/");
                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                p += n;
                if (!*p)
                        return true;
                p++; /* the '/': a name must follow it */
        }
}

static void check(const char *path, const char *mount)
{
        _cleanup_free_ char *rel = NULL, *again = NULL;
        _cleanup_free_ char *expect = model_expect(path, mount);
        cs_error *err = NULL;
        int r = ws_path_clean(path, mount, &rel, &err);

        if (r < 0) {
                /* Refused: with a status and a message, as the model says. */
                if (!err || err->code != GRPC_STATUS_INVALID_ARGUMENT || !err->msg || expect)
                        abort();
                cs_error_free(err);
                return;
        }
        if (err || !rel || !expect || strcmp(rel, expect) != 0)
                abort();
        if (!rel_well_formed(rel) || strlen(rel) > strlen(path))
                abort();
        /* Cleaning is idempotent: the cleaned path names the same place. */
        if (ws_path_clean(rel, mount, &again, &err) < 0 || strcmp(again, rel) != 0)
                abort();
}

/* ---- the whole resolution, on a real tree ------------------------------------------------ */

#define FUZZ_CANARY "canary: outside the workspace\n"
#define FUZZ_FILE_A "inside: a.txt\n"
#define FUZZ_FILE_B "inside: sub/b.txt\n"

/* The tree under the temporary directory: ws/ is the workspace, mounted at /workspace. */
static const struct {
        const char *path, *content, *link; /* content: a file; link: a symlink; neither: a dir */
} ws_tree[] = {
        { "outside_canary", FUZZ_CANARY, NULL },
        { "ws", NULL, NULL },
        { "ws/a.txt", FUZZ_FILE_A, NULL },
        { "ws/sub", NULL, NULL },
        { "ws/sub/b.txt", FUZZ_FILE_B, NULL },
        { "ws/up", NULL, ".." },
        { "ws/sub/upup", NULL, "../.." },
        { "ws/canary", NULL, "../outside_canary" },
        { "ws/abs_canary", NULL, "/workspace/../outside_canary" },
        { "ws/abs_in", NULL, "/workspace/sub" },
        { "ws/abs_etc", NULL, "/etc" },
        { "ws/abs_root", NULL, "/" },
        { "ws/loop", NULL, "loop" },
        { "ws/sub/back", NULL, "../sub/back" },
        { "ws/to_a", NULL, "sub/../a.txt" },
        { "ws/fifo_like", NULL, "/dev/null" },
};

static char tree_dir[256];
static int ws_fd = -1;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void tree_remove(void)
{
        if (ws_fd >= 0)
                close(ws_fd);
        if (tree_dir[0])
                nftw(tree_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void tree_make(void)
{
        const char *tmp = getenv("TMPDIR");

        snprintf(tree_dir, sizeof(tree_dir), "%s/fuzz_ws_path.XXXXXX",
                 tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(tree_dir))
                abort();
        atexit(tree_remove);
        for (size_t i = 0; i < ARRAY_SIZE(ws_tree); i++) {
                _cleanup_free_ char *p = cs_xasprintf("%s/%s", tree_dir, ws_tree[i].path);
                _cleanup_close_ int fd = -1;

                if (ws_tree[i].content) {
                        fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                        if (fd < 0 ||
                            cs_write_all(fd, ws_tree[i].content, strlen(ws_tree[i].content)) < 0)
                                abort();
                } else if (ws_tree[i].link ? symlink(ws_tree[i].link, p) < 0 : mkdir(p, 0755) < 0) {
                        abort();
                }
        }
        {
                _cleanup_free_ char *ws = cs_xasprintf("%s/ws", tree_dir);
                ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (ws_fd < 0)
                abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc;
        (void)argv;
        tree_make();
        return 0;
}

/* Reads path in the workspace: never the canary, only what cleaning lets through. */
static void check_read(const char *path)
{
        ws_root root = { .dirfd = ws_fd, .mount_path = FUZZ_DEFAULT_MOUNT };
        ws_read_result r;
        cs_error *err = NULL;
        _cleanup_free_ char *rel = NULL;
        bool clean_ok = ws_path_clean(path, FUZZ_DEFAULT_MOUNT, &rel, NULL) == 0;

        if (ws_read(&root, path, 0, 256, &r, &err) < 0) {
                if (!err || err->code == GRPC_STATUS_OK || !err->msg)
                        abort();
                cs_error_free(err);
                return;
        }
        if (!clean_ok || err)
                abort();
        if (!(r.len == strlen(FUZZ_FILE_A) && memcmp(r.data, FUZZ_FILE_A, r.len) == 0) &&
            !(r.len == strlen(FUZZ_FILE_B) && memcmp(r.data, FUZZ_FILE_B, r.len) == 0))
                abort(); /* the canary, or anything else outside the workspace */
        free(r.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *buf = cs_xmalloc(size + 2);
        const char *mount = FUZZ_DEFAULT_MOUNT;
        size_t plen;

        /* Two C strings: the path and, after its NUL, the mount path (one more NUL at the
         * end, so both are terminated whatever the input). */
        memcpy(buf, data, size);
        buf[size] = buf[size + 1] = '\0';
        plen = strlen(buf);
        if (plen < size)
                mount = buf + plen + 1;
        check(buf, mount);
        /* The same path under the root mount and with no usable mount path at all. */
        check(buf, "/");
        check(buf, NULL);
        check_read(buf);
        return 0;
}
