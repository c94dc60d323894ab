/* Unit tests for nodeagent/image.c: images built here with libarchive's writer (pax, some
 * layers gzip'd) as docker save tarballs, OCI layout directories (correct sha256 digests) and
 * tarballs of those, imported into a temp images directory.
 *
 * Each test gets a fresh temp dir holding "images" (the images directory), "src" (the inputs)
 * and "canary/passwd", which the hostile inputs aim their symlinks at. The teardown checks
 * that the canary is untouched, that nothing appeared in the temp dir but what the test made
 * (no "escape" anywhere) and that no fd was leaked. Every refused import must leave the images
 * directory exactly as it was: no image, no hidden work or scratch directory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "util.h"

#define MTIME   1500000000
#define CANARY  "CANARY\n"
#define NAME    "test:1"
#define MANY_FD 64

typedef struct fx {
        char base[64];
        char images[PATH_MAX];
        char src[PATH_MAX];
        char canary[PATH_MAX]; /* a directory outside the images directory */
        int fds_before;
} fx;

/* An entry of a layer to write. */
enum {
        T_FILE,
        T_DIR,
        T_SYMLINK,
        T_HARDLINK,
        T_FIFO,
        T_CHARDEV
};
typedef struct tent {
        const char *path;
        int type;
        int perm;         /* 0: 0644 (0755 for directories) */
        const char *data; /* T_FILE */
        const char *link; /* T_SYMLINK, T_HARDLINK */
        int64_t uid;      /* and gid */
        int64_t size;     /* T_FILE: > 0: a sparse file this big, data at its start */
} tent;

/* Entries, briefly (designated initializers: the other fields are 0). */
#define F(p, m, d)                                                                                 \
        {                                                                                          \
                .path = (p), .type = T_FILE, .perm = (m), .data = (d)                              \
        }
#define D(p, m)                                                                                    \
        {                                                                                          \
                .path = (p), .type = T_DIR, .perm = (m)                                            \
        }
#define S(p, t)                                                                                    \
        {                                                                                          \
                .path = (p), .type = T_SYMLINK, .perm = 0777, .link = (t)                          \
        }
#define H(p, t)                                                                                    \
        {                                                                                          \
                .path = (p), .type = T_HARDLINK, .link = (t)                                       \
        }
#define W(p)                                                                                       \
        {                                                                                          \
                .path = (p), .type = T_FILE                                                        \
        }

/* ---- helpers ---------------------------------------------------------------------------- */

static int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        assert_non_null(d);
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static char *path_of(const char *dir, const char *name)
{
        return cs_xasprintf("%s/%s", dir, name);
}

static void file_put(const char *path, const void *data, size_t len)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        assert_true(fd >= 0);
        assert_int_equal(cs_write_all(fd, data, len), 0);
        close(fd);
}

static char *file_get(const char *path, size_t *ret_len)
{
        char *buf = NULL;

        if (cs_read_file(path, 64u << 20, &buf, ret_len, NULL) < 0)
                return NULL;
        return buf;
}

static void assert_file(const char *dir, const char *name, const char *content)
{
        _cleanup_free_ char *p = path_of(dir, name);
        _cleanup_free_ char *got = file_get(p, NULL);

        if (!got)
                fail_msg("%s: %s", p, strerror(errno));
        assert_string_equal(got, content);
}

static bool exists(const char *dir, const char *name)
{
        struct stat st;
        _cleanup_free_ char *p = path_of(dir, name);

        return lstat(p, &st) == 0;
}

static int name_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir (hidden ones too), sorted, one a line; "" for a missing directory. */
static char *listing(const char *dir)
{
        DIR *d = opendir(dir);
        char *names[256], *out;
        size_t n = 0, len = 1;
        struct dirent *de;

        if (!d)
                return cs_xstrdup("");
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && n < 256)
                        names[n++] = cs_xstrdup(de->d_name);
        closedir(d);
        qsort(names, n, sizeof(*names), name_cmp);
        for (size_t i = 0; i < n; i++)
                len += strlen(names[i]) + 1;
        out = cs_xcalloc(1, len);
        for (size_t i = 0; i < n; i++) {
                strcat(out, names[i]);
                strcat(out, "\n");
                free(names[i]);
        }
        return out;
}

static char *sha256_hex(const void *data, size_t len)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned n = 0;
        char *out = cs_xmalloc(65);

        assert_int_equal(EVP_Digest(data, len, md, &n, EVP_sha256(), NULL), 1);
        for (unsigned i = 0; i < n; i++)
                sprintf(out + 2 * i, "%02x", md[i]);
        return out;
}

/* ---- writing archives ------------------------------------------------------------------- */

static void tar_entry(struct archive *a, const tent *t)
{
        struct archive_entry *e = archive_entry_new();
        size_t len = t->data ? strlen(t->data) : 0;

        archive_entry_set_pathname(e, t->path);
        archive_entry_set_mtime(e, MTIME, 0);
        archive_entry_set_uid(e, t->uid);
        archive_entry_set_gid(e, t->uid);
        archive_entry_set_perm(e, t->perm ? t->perm : t->type == T_DIR ? 0755 : 0644);
        switch (t->type) {
        case T_FILE:
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_size(e, t->size > 0 ? t->size : (int64_t)len);
                if (t->size > 0)
                        archive_entry_sparse_add_entry(e, 0, (int64_t)len);
                break;
        case T_DIR:
                archive_entry_set_filetype(e, AE_IFDIR);
                break;
        case T_SYMLINK:
                archive_entry_set_filetype(e, AE_IFLNK);
                archive_entry_set_symlink(e, t->link);
                break;
        case T_HARDLINK:
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_hardlink(e, t->link);
                break;
        case T_FIFO:
                archive_entry_set_filetype(e, AE_IFIFO);
                break;
        case T_CHARDEV:
                archive_entry_set_filetype(e, AE_IFCHR);
                archive_entry_set_rdevmajor(e, 1);
                archive_entry_set_rdevminor(e, 3);
                break;
        }
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        if (len)
                assert_int_equal(archive_write_data(a, t->data, len), (la_ssize_t)len);
        archive_entry_free(e);
}

/* Writes a pax tar (gzip'd if asked) of the n entries to path. */
static void tar_write(const char *path, bool gzip, const tent *ents, size_t n)
{
        struct archive *a = archive_write_new();

        assert_int_equal(archive_write_set_format_pax(a), ARCHIVE_OK);
        if (gzip)
                assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
        assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
        for (size_t i = 0; i < n; i++)
                tar_entry(a, &ents[i]);
        assert_int_equal(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
}

/* A file member made from bytes. */
typedef struct member {
        const char *name;
        const char *data;
        size_t len;
        const char *link; /* a symlink to this instead */
} member;

static void tar_members(const char *path, bool gzip, const member *m, size_t n)
{
        struct archive *a = archive_write_new();

        assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        if (gzip)
                assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
        assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
        for (size_t i = 0; i < n; i++) {
                struct archive_entry *e = archive_entry_new();

                archive_entry_set_pathname(e, m[i].name);
                archive_entry_set_filetype(e, m[i].link ? AE_IFLNK : AE_IFREG);
                archive_entry_set_perm(e, 0644);
                archive_entry_set_size(e, (int64_t)m[i].len);
                if (m[i].link)
                        archive_entry_set_symlink(e, m[i].link);
                assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
                if (m[i].len)
                        assert_int_equal(archive_write_data(a, m[i].data, m[i].len),
                                         (la_ssize_t)m[i].len);
                archive_entry_free(e);
        }
        assert_int_equal(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
}

/* A docker save tarball (the pre-25 layout: <n>/layer.tar) of the layer files; a NULL layer
 * is named in manifest.json but missing from the tarball. */
static void docker_tar(const char *out, const char *const *layers, size_t n)
{
        member m[16] = { 0 };
        char *data[16] = { 0 }, *names[16] = { 0 };
        _cleanup_free_ char *manifest = cs_xstrdup("[{\"Config\":\"config.json\",\"RepoTags\":"
                                                   "[\"x:1\"],\"Layers\":[");
        size_t k = 0;

        for (size_t i = 0; i < n; i++) {
                char *next;

                names[i] = cs_xasprintf("%zu/layer.tar", i);
                next = cs_xasprintf("%s%s\"%s\"", manifest, i ? "," : "", names[i]);
                free(manifest);
                manifest = next;
                if (!layers[i])
                        continue;
                data[i] = file_get(layers[i], &m[k].len);
                assert_non_null(data[i]);
                m[k].name = names[i];
                m[k++].data = data[i];
        }
        {
                char *next = cs_xasprintf("%s]}]", manifest);

                free(manifest);
                manifest = next;
        }
        m[k++] = (member){ "config.json", "{}", 2, NULL };
        m[k++] = (member){ "manifest.json", manifest, strlen(manifest), NULL };
        tar_members(out, false, m, k);
        for (size_t i = 0; i < n; i++) {
                free(data[i]);
                free(names[i]);
        }
}

/* Writes data as a blob of the OCI layout dir; its descriptor (digest, size) in *ret. */
static char *oci_blob(const char *dir, const char *media, const char *data, size_t len)
{
        _cleanup_free_ char *hex = sha256_hex(data, len);
        _cleanup_free_ char *p = cs_xasprintf("%s/blobs/sha256/%s", dir, hex);

        file_put(p, data, len);
        return cs_xasprintf("{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":%zu", media,
                            hex, len);
}

/* An OCI image layout directory of the layer files (linux/amd64, beside an arm64 manifest
 * whose blob does not exist, behind a nested index when asked). */
static void oci_dir(const char *dir, const char *const *layers, size_t n, bool nested)
{
        _cleanup_free_ char *blobs = path_of(dir, "blobs");
        _cleanup_free_ char *sha = path_of(dir, "blobs/sha256");
        _cleanup_free_ char *list = cs_xstrdup("");
        _cleanup_free_ char *config = NULL, *manifest = NULL, *mdesc = NULL, *index = NULL;
        _cleanup_free_ char *p = NULL;

        assert_int_equal(mkdir(dir, 0755), 0);
        assert_int_equal(mkdir(blobs, 0755), 0);
        assert_int_equal(mkdir(sha, 0755), 0);
        for (size_t i = 0; i < n; i++) {
                size_t len;
                _cleanup_free_ char *data = file_get(layers[i], &len);
                _cleanup_free_ char *d =
                        oci_blob(dir, "application/vnd.oci.image.layer.v1.tar", data, len);
                char *next = cs_xasprintf("%s%s%s}", list, i ? "," : "", d);

                free(list);
                list = next;
        }
        config = oci_blob(dir, "application/vnd.oci.image.config.v1+json", "{}", 2);
        manifest =
                cs_xasprintf("{\"schemaVersion\":2,\"config\":%s},\"layers\":[%s]}", config, list);
        mdesc = oci_blob(dir, "application/vnd.oci.image.manifest.v1+json", manifest,
                         strlen(manifest));
        index = cs_xasprintf(
                "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/"
                "vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:%064d\",\"size\":1,"
                "\"platform\":{\"architecture\":\"arm64\",\"os\":\"linux\"}},%s,\"platform\":"
                "{\"architecture\":\"amd64\",\"os\":\"linux\"}}]}",
                0, mdesc);
        if (nested) {
                _cleanup_free_ char *idesc = oci_blob(
                        dir, "application/vnd.oci.image.index.v1+json", index, strlen(index));

                free(index);
                index = cs_xasprintf("{\"schemaVersion\":2,\"manifests\":[%s}]}", idesc);
        }
        p = path_of(dir, "index.json");
        file_put(p, index, strlen(index));
        free(p);
        p = path_of(dir, "oci-layout");
        file_put(p, "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
}

/* A tarball (gzip'd) of an OCI layout directory's files. */
static void oci_tar(const char *out, const char *dir)
{
        member m[32] = { 0 };
        char *data[32] = { 0 }, *names[32] = { 0 };
        _cleanup_free_ char *sha = path_of(dir, "blobs/sha256");
        DIR *d = opendir(sha);
        struct dirent *de;
        size_t k = 0;

        assert_non_null(d);
        names[k] = cs_xstrdup("oci-layout");
        names[k + 1] = cs_xstrdup("./index.json");
        k = 2;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        names[k++] = cs_xasprintf("blobs/sha256/%s", de->d_name);
        closedir(d);
        for (size_t i = 0; i < k; i++) {
                _cleanup_free_ char *p = path_of(dir, names[i]);

                data[i] = file_get(p, &m[i].len);
                assert_non_null(data[i]);
                m[i].name = names[i];
                m[i].data = data[i];
        }
        tar_members(out, true, m, k);
        for (size_t i = 0; i < k; i++) {
                free(data[i]);
                free(names[i]);
        }
}

/* Writes the layer tar(s) into src/<name>.tar and returns its path. */
static char *layer(fx *f, const char *name, bool gzip, const tent *ents, size_t n)
{
        char *p = cs_xasprintf("%s/%s.tar", f->src, name);

        tar_write(p, gzip, ents, n);
        return p;
}

/* ---- fixture ---------------------------------------------------------------------------- */

static int setup(void **state)
{
        fx *f = cs_xcalloc(1, sizeof(*f));
        _cleanup_free_ char *pw = NULL;

        f->fds_before = count_fds();
        strcpy(f->base, "/tmp/cs-test-image-XXXXXX");
        assert_non_null(mkdtemp(f->base));
        snprintf(f->images, sizeof(f->images), "%s/images", f->base);
        snprintf(f->src, sizeof(f->src), "%s/src", f->base);
        snprintf(f->canary, sizeof(f->canary), "%s/canary", f->base);
        assert_int_equal(mkdir(f->src, 0755), 0);
        assert_int_equal(mkdir(f->canary, 0755), 0);
        pw = path_of(f->canary, "passwd");
        file_put(pw, CANARY, strlen(CANARY));
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *top = listing(f->base);
        _cleanup_free_ char *canary = listing(f->canary);

        assert_file(f->canary, "passwd", CANARY);
        assert_string_equal(canary, "passwd\n");
        /* Nothing but what the test made: an escape would show up here. */
        if (strcmp(top, "canary\nsrc\n") != 0 && strcmp(top, "canary\nimages\nsrc\n") != 0)
                fail_msg("unexpected entries in %s:\n%s", f->base, top);
        assert_int_equal(cs_remove_tree(AT_FDCWD, f->base), 0);
        assert_int_equal(count_fds(), f->fds_before);
        free(f);
        return 0;
}

static void import_ok(fx *f, const char *src, const char *name, image_stats *ret)
{
        cs_error *err = NULL;

        if (image_import(f->images, src, name, ret, &err) < 0)
                fail_msg("import %s: %s", src, err->msg);
        assert_null(err);
}

/* The import must fail with code and a message containing needle, leaving the images
 * directory as it was. */
static void import_fails(fx *f, const char *src, const char *name, grpc_status_code code,
                         const char *needle)
{
        _cleanup_free_ char *before = listing(f->images);
        _cleanup_free_ char *after = NULL;
        cs_error *err = NULL;

        assert_int_equal(image_import(f->images, src, name, NULL, &err), -1);
        assert_non_null(err);
        if (getenv("TEST_IMAGE_VERBOSE"))
                fprintf(stderr, "%s\n", err->msg);
        if (!strstr(err->msg, needle))
                fail_msg("error '%s' does not say '%s'", err->msg, needle);
        if (err->code != code)
                fail_msg("error '%s' has code %d, not %d", err->msg, err->code, code);
        cs_error_free(err);
        after = listing(f->images);
        assert_string_equal(after, before);
}

/* ---- a good image ----------------------------------------------------------------------- */

static const tent good1[] = {
        D("./", 0755),
        D("etc/", 0),
        F("etc/passwd", 0644, "root:x:0:0::/root:/bin/sh\n"),
        F("etc/delete-me", 0644, "gone in layer 2\n"),
        D("bin/", 0),
        F("bin/su", 04755, "#!setuid\n"),
        H("bin/su2", "bin/su"),
        S("bin/sh", "/bin/busybox"),
        { .path = "home/user/", .type = T_DIR, .perm = 0750, .uid = 1000 },
        { .path = "home/user/notes", .type = T_FILE, .perm = 0600, .data = "mine\n", .uid = 1000 },
        { .path = "run/fifo", .type = T_FIFO, .perm = 0620 },
        { .path = "dev/null", .type = T_CHARDEV, .perm = 0666 },
        D("data/", 0),
        F("data/a", 0644, "lower a\n"),
        D("data/sub/", 0),
        F("data/sub/b", 0644, "lower b\n"),
        D("ro/", 0555),
        F("ro/inside", 0444, "in a read-only dir\n"),
        { .path = "sparse.img", .type = T_FILE, .perm = 0644, .data = "head", .size = 64 << 20 },
};

/* Layer 2 adds data/new before the opaque marker: the marker hides only layer 1's files. */
static const tent good2[] = {
        W("etc/.wh.delete-me"),          F("data/new", 0644, "upper\n"),
        W("data/.wh..wh..opq"),          F("data/sub2/c", 0644, "upper c\n"),
        F("etc/hello", 0644, "hello\n"),
};

/* No whiteout file anywhere under dir. */
static void assert_no_whiteouts(int fd)
{
        DIR *d = fdopendir(fd);
        struct dirent *de;

        assert_non_null(d);
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (strncmp(de->d_name, ".wh.", 4) == 0)
                        fail_msg("whiteout %s written", de->d_name);
                if (de->d_type == DT_DIR)
                        assert_no_whiteouts(
                                openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        }
        closedir(d);
}

static void assert_good_rootfs(fx *f, const char *name, const image_stats *st)
{
        _cleanup_free_ char *root = path_of(f->images, name);
        _cleanup_free_ char *p = NULL;
        char target[64] = { 0 };
        struct stat s1, s2;

        assert_int_equal(st->layers, 2);
        assert_int_equal(st->devices_skipped, 1);
        assert_int_equal(st->whiteouts, 2);
        assert_int_equal(st->hardlinks, 1);
        assert_int_equal(st->fifos, 1);
        assert_file(root, "etc/passwd", "root:x:0:0::/root:/bin/sh\n");
        assert_file(root, "etc/hello", "hello\n");
        assert_false(exists(root, "etc/delete-me"));
        assert_file(root, "data/new", "upper\n");
        assert_file(root, "data/sub2/c", "upper c\n");
        assert_false(exists(root, "data/a"));
        assert_false(exists(root, "data/sub"));
        assert_false(exists(root, "dev/null"));
        assert_file(root, "ro/inside", "in a read-only dir\n");
        p = path_of(root, "bin/su");
        assert_int_equal(lstat(p, &s1), 0);
        assert_int_equal(s1.st_mode & 07777, 04755);
        assert_int_equal(s1.st_mtime, MTIME);
        free(p);
        p = path_of(root, "bin/su2");
        assert_int_equal(lstat(p, &s2), 0);
        assert_int_equal(s1.st_ino, s2.st_ino);
        free(p);
        p = path_of(root, "bin/sh");
        assert_int_equal(readlink(p, target, sizeof(target) - 1), 12);
        assert_string_equal(target, "/bin/busybox");
        assert_int_equal(lstat(p, &s1), 0);
        assert_int_equal(s1.st_mtime, MTIME);
        free(p);
        p = path_of(root, "home/user/notes");
        assert_int_equal(lstat(p, &s1), 0);
        assert_int_equal(s1.st_uid, 1000);
        assert_int_equal(s1.st_gid, 1000);
        assert_int_equal(s1.st_mode & 07777, 0600);
        free(p);
        p = path_of(root, "home/user");
        assert_int_equal(lstat(p, &s1), 0);
        assert_true(S_ISDIR(s1.st_mode));
        assert_int_equal(s1.st_uid, 1000);
        assert_int_equal(s1.st_mode & 07777, 0750);
        assert_int_equal(s1.st_mtime, MTIME);
        free(p);
        p = path_of(root, "ro");
        assert_int_equal(lstat(p, &s1), 0);
        assert_int_equal(s1.st_mode & 07777, 0555);
        free(p);
        p = path_of(root, "run/fifo");
        assert_int_equal(lstat(p, &s1), 0);
        assert_true(S_ISFIFO(s1.st_mode));
        assert_int_equal(s1.st_mode & 07777, 0620);
        free(p);
        p = path_of(root, "sparse.img");
        assert_int_equal(lstat(p, &s1), 0);
        assert_int_equal(s1.st_size, 64 << 20);
        assert_true(s1.st_blocks * 512 < (1 << 20)); /* still sparse */
        assert_int_equal(lstat(root, &s1), 0);
        assert_int_equal(s1.st_mode & 07777, 0755);
        assert_int_equal(s1.st_mtime, MTIME);
        assert_no_whiteouts(open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

static void test_good_docker(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *l1 = layer(f, "l1", false, good1, ARRAY_SIZE(good1));
        _cleanup_free_ char *l2 = layer(f, "l2", true, good2, ARRAY_SIZE(good2));
        _cleanup_free_ char *tarball = path_of(f->src, "image.tar");
        _cleanup_free_ char *list = NULL;
        const char *layers[] = { l1, l2 };
        image_stats st;

        docker_tar(tarball, layers, 2);
        import_ok(f, tarball, NAME, &st);
        assert_good_rootfs(f, NAME, &st);
        list = listing(f->images);
        assert_string_equal(list, NAME "\n"); /* no scratch, no work directory left */
}

static void test_good_oci(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *l1 = layer(f, "l1", true, good1, ARRAY_SIZE(good1));
        _cleanup_free_ char *l2 = layer(f, "l2", false, good2, ARRAY_SIZE(good2));
        _cleanup_free_ char *dir = path_of(f->src, "layout");
        _cleanup_free_ char *nested = path_of(f->src, "nested");
        _cleanup_free_ char *tarball = path_of(f->src, "layout.tar.gz");
        _cleanup_free_ char *list = NULL;
        const char *layers[] = { l1, l2 };
        image_stats st;

        oci_dir(dir, layers, 2, false);
        import_ok(f, dir, "oci:dir", &st);
        assert_good_rootfs(f, "oci:dir", &st);
        oci_dir(nested, layers, 2, true);
        import_ok(f, nested, "oci:nested", &st);
        assert_good_rootfs(f, "oci:nested", &st);
        oci_tar(tarball, nested);
        import_ok(f, tarball, "oci:tar", &st);
        assert_good_rootfs(f, "oci:tar", &st);
        list = listing(f->images);
        assert_string_equal(list, "oci:dir\noci:nested\noci:tar\n");
}

/* ---- hostile images --------------------------------------------------------------------- */

/* A docker save tarball of the given layers (each a list of entries). */
static char *hostile(fx *f, const tent *l1, size_t n1, const tent *l2, size_t n2)
{
        _cleanup_free_ char *p1 = layer(f, "h1", false, l1, n1);
        _cleanup_free_ char *p2 = l2 ? layer(f, "h2", false, l2, n2) : NULL;
        char *tarball = path_of(f->src, "hostile.tar");
        const char *layers[] = { p1, p2 };

        docker_tar(tarball, layers, l2 ? 2 : 1);
        return tarball;
}

#define HOSTILE(f, l) hostile(f, l, ARRAY_SIZE(l), NULL, 0)

static void test_dotdot(void **state)
{
        fx *f = *state;
        const tent up[] = { D("etc/", 0), F("../escape", 0644, "x") };
        const tent deep[] = { D("a/", 0), F("a/../../escape", 0644, "x") };
        const tent dir[] = { D("../escape/", 0) };
        _cleanup_free_ char *t1 = HOSTILE(f, up);

        import_fails(f, t1, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "layer 1/1 (0/layer.tar): entry '../escape': its path has a '..' "
                     "component");
        free(t1);
        t1 = HOSTILE(f, deep);
        import_fails(f, t1, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "entry 'a/../../escape': its path has a '..' component");
        free(t1);
        t1 = HOSTILE(f, dir);
        import_fails(f, t1, NAME, GRPC_STATUS_INVALID_ARGUMENT, "'..'");
        assert_false(exists(f->images, "escape"));
}

/* An absolute path is stripped: it lands inside the rootfs, never in the host's /etc. */
static void test_absolute_path_lands_inside(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *name = cs_xasprintf("/etc/cs-image-test-%d", (int)getpid());
        _cleanup_free_ char *host = cs_xstrdup(name);
        const tent ents[] = { F(name, 0644, "inside\n"), F("//./etc//twice", 0644, "twice\n") };
        _cleanup_free_ char *t = HOSTILE(f, ents);
        _cleanup_free_ char *root = path_of(f->images, NAME);
        struct stat st;

        import_ok(f, t, NAME, NULL);
        assert_file(root, name + 1, "inside\n");
        assert_file(root, "etc/twice", "twice\n");
        assert_int_equal(lstat(host, &st), -1);
        assert_int_equal(errno, ENOENT);
}

static void test_symlink_escapes(void **state)
{
        fx *f = *state;
        const tent out[] = { S("evil", f->canary), F("evil/passwd", 0644, "owned\n") };
        const tent up[] = { S("up", ".."), F("up/escape", 0644, "owned\n") };
        const tent deep[] = { D("a/b/", 0), S("a/b/evil", f->canary),
                              F("a/b/evil/new/file", 0644, "owned\n") };
        const tent link_only[] = { S("evil", f->canary) };
        const tent later[] = { F("evil/passwd", 0644, "owned\n") };
        const tent wh[] = { W("evil/.wh.passwd") };
        const tent opq[] = { W("evil/.wh..wh..opq") };
        _cleanup_free_ char *t = HOSTILE(f, out);

        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "entry 'evil/passwd': its path goes through a symlink");
        free(t);
        t = HOSTILE(f, up);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "entry 'up/escape': its path goes through a symlink");
        free(t);
        t = HOSTILE(f, deep);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "goes through a symlink");
        free(t);
        /* The symlink in one layer, the write through it in the next. */
        t = hostile(f, link_only, 1, later, 1);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "layer 2/2 (1/layer.tar): entry 'evil/passwd': its path goes through a "
                     "symlink");
        free(t);
        t = hostile(f, link_only, 1, wh, 1);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "goes through a symlink");
        free(t);
        t = hostile(f, link_only, 1, opq, 1);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "goes through a symlink");
}

static void test_hardlink_escapes(void **state)
{
        fx *f = *state;
        const tent up[] = { D("etc/", 0), H("etc/pw", "../../etc/passwd") };
        const tent via[] = { S("evil", f->canary), H("pw", "evil/passwd") };
        const tent missing[] = { H("pw", "etc/passwd") };
        const tent dir[] = { D("d/", 0), H("pw", "d") };
        _cleanup_free_ char *t = HOSTILE(f, up);
        struct stat st;
        _cleanup_free_ char *pw = path_of(f->canary, "passwd");

        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "entry 'etc/pw': its link target has a '..' component");
        free(t);
        t = HOSTILE(f, via);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "entry 'pw': its link target goes through a symlink");
        free(t);
        t = HOSTILE(f, missing);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT,
                     "its link target 'etc/passwd' does not exist");
        free(t);
        t = HOSTILE(f, dir);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "is a directory");
        assert_int_equal(stat(pw, &st), 0);
        assert_int_equal(st.st_nlink, 1); /* never linked into an image */
}

static void test_corrupt_layers(void **state)
{
        fx *f = *state;
        char big[200000];
        const tent ents[] = { F("first", 0644, "ok\n"), F("big", 0644, big) };
        _cleanup_free_ char *lp = NULL, *data = NULL, *t = path_of(f->src, "bad.tar");
        _cleanup_free_ char *gz = path_of(f->src, "garbage.tar.gz");
        const char *layers[1];
        char garbage[4096];
        size_t len;

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        lp = layer(f, "full", false, ents, 2);
        data = file_get(lp, &len);
        file_put(lp, data, len / 2); /* cut in half: in the middle of "big" */
        layers[0] = lp;
        docker_tar(t, layers, 1);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "layer 1/1 (0/layer.tar)");
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "runcated");
        /* gzip's magic, then garbage. */
        for (size_t i = 0; i < sizeof(garbage); i++)
                garbage[i] = (char)(i * 7919 % 251);
        memcpy(garbage, "\x1f\x8b\x08\x00", 4);
        file_put(gz, garbage, sizeof(garbage));
        layers[0] = gz;
        docker_tar(t, layers, 1);
        import_fails(f, t, NAME, GRPC_STATUS_INVALID_ARGUMENT, "layer 1/1 (0/layer.tar): ");
        /* Not an archive at all, as the source. */
        import_fails(f, gz, NAME, GRPC_STATUS_INVALID_ARGUMENT, "garbage.tar.gz: ");
}

/* A pax header claiming a 10 GiB (sparse) file with a few bytes of data: refused from its
 * declared size, before any of it is written. */
static void test_size_claims(void **state)
{
        fx *f = *state;
        const tent huge[] = { F("small", 0644, "ok\n"),
                              { .path = "huge.img",
                                .type = T_FILE,
                                .perm = 0644,
                                .data = "data",
                                .size = 10ll << 30 } };
        const tent fits[] = {
                { .path = "a.img", .type = T_FILE, .perm = 0644, .data = "data", .size = 5ll << 30 }
        };
        const tent over[] = {
                { .path = "b.img", .type = T_FILE, .perm = 0644, .data = "data", .size = 4ll << 30 }
        };
        _cleanup_free_ char *t = HOSTILE(f, huge);

        import_fails(f, t, NAME, GRPC_STATUS_RESOURCE_EXHAUSTED,
                     "entry 'huge.img': it declares 10737418240 bytes");
        free(t);
        /* The cap is on the image: 5 + 4 GiB in two layers is over it too. */
        t = hostile(f, fits, 1, over, 1);
        import_fails(f, t, NAME, GRPC_STATUS_RESOURCE_EXHAUSTED, "IMAGE_MAX_BYTES");
}

static void test_bad_manifests(void **state)
{
        fx *f = *state;
        const tent ok[] = { F("f", 0644, "ok\n") };
        _cleanup_free_ char *l1 = layer(f, "l1", false, ok, 1);
        _cleanup_free_ char *t = path_of(f->src, "missing.tar");
        _cleanup_free_ char *dir = path_of(f->src, "layout");
        _cleanup_free_ char *sha = path_of(f->src, "layout/blobs/sha256");
        _cleanup_free_ char *victim = NULL, *data = NULL;
        const char *layers[] = { l1, NULL };
        DIR *d;
        struct dirent *de;
        size_t len;

        docker_tar(t, layers, 2);
        import_fails(f, t, NAME, GRPC_STATUS_NOT_FOUND,
                     "layer 2/2 (1/layer.tar): missing from the image");
        import_fails(f, f->canary, NAME, GRPC_STATUS_INVALID_ARGUMENT, "not an image");
        /* A blob whose content no longer matches its name. */
        oci_dir(dir, layers, 1, false);
        d = opendir(sha);
        assert_non_null(d);
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' && !victim) {
                        _cleanup_free_ char *p = path_of(sha, de->d_name);

                        data = file_get(p, &len);
                        if (len > 1000) /* the layer, not a JSON document */
                                victim = TAKE_PTR(p);
                        else
                                free(TAKE_PTR(data));
                }
        closedir(d);
        assert_non_null(victim);
        data[600] ^= 1;
        file_put(victim, data, len);
        import_fails(f, dir, NAME, GRPC_STATUS_INVALID_ARGUMENT, "does not match its digest");
}

static void test_names(void **state)
{
        fx *f = *state;
        const tent ok[] = { F("f", 0644, "ok\n") };
        _cleanup_free_ char *t = HOSTILE(f, ok);
        _cleanup_free_ char *root = path_of(f->images, NAME);
        char long_name[IMAGE_NAME_MAX + 2];
        const char *bad[] = { "", ".", "..", ".hidden", "a/b", "x y", "ü", "../x", long_name };

        memset(long_name, 'a', sizeof(long_name) - 1);
        long_name[IMAGE_NAME_MAX + 1] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                assert_false(image_name_valid(bad[i]));
                import_fails(f, t, bad[i], GRPC_STATUS_INVALID_ARGUMENT, "not a valid image name");
        }
        assert_false(image_name_valid(NULL));
        long_name[IMAGE_NAME_MAX] = '\0';
        assert_true(image_name_valid(long_name));
        assert_true(image_name_valid("debian:bookworm-compute"));
        assert_true(image_name_valid("a.b_c-d:1"));
        /* An existing name is never replaced. */
        import_ok(f, t, NAME, NULL);
        {
                _cleanup_free_ char *marker = path_of(root, "marker");

                file_put(marker, "kept", 4);
        }
        import_fails(f, t, NAME, GRPC_STATUS_ALREADY_EXISTS, "already exists");
        assert_file(root, "marker", "kept");
}

/* What a link leads to is replaced, or linked, never written through. */
static void test_links_replaced_not_followed(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *target = path_of(f->canary, "passwd");
        const tent l1[] = { S("x", target), S("evil", target) };
        const tent l2[] = { F("x", 0600, "replaced\n"), H("h", "evil") };
        _cleanup_free_ char *t = hostile(f, l1, 2, l2, 2);
        _cleanup_free_ char *root = path_of(f->images, NAME);
        _cleanup_free_ char *h = path_of(root, "h");
        struct stat st;

        import_ok(f, t, NAME, NULL);
        assert_file(root, "x", "replaced\n");
        assert_int_equal(lstat(h, &st), 0);
        assert_true(S_ISLNK(st.st_mode)); /* a hard link to the symlink itself */
        assert_int_equal(stat(target, &st), 0);
        assert_int_equal(st.st_nlink, 1);
}

/* Links between members of a tarball (old docker save links a repeated layer to the first
 * copy), and links that lead out of it. */
static void test_tarball_links(void **state)
{
        fx *f = *state;
        const tent ok[] = { F("f", 0644, "ok\n") };
        _cleanup_free_ char *l = layer(f, "l", false, ok, 1);
        _cleanup_free_ char *t = path_of(f->src, "links.tar");
        _cleanup_free_ char *data = NULL;
        _cleanup_free_ char *dir = path_of(f->src, "unpacked");
        _cleanup_free_ char *sub = path_of(dir, "0");
        _cleanup_free_ char *mf = path_of(dir, "manifest.json");
        _cleanup_free_ char *lt = path_of(sub, "layer.tar");
        _cleanup_free_ char *pw = path_of(f->canary, "passwd");
        const char *manifest = "[{\"Config\":\"c.json\",\"Layers\":[\"0/layer.tar\","
                               "\"1/layer.tar\"]}]";
        const char *links[] = { "../0/layer.tar", "/etc/passwd", "../../x" };
        size_t len;

        data = file_get(l, &len);
        for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
                member m[] = { { "0/layer.tar", data, len, NULL },
                               { "./1/layer.tar", NULL, 0, links[i] },
                               { "manifest.json", manifest, strlen(manifest), NULL } };

                tar_members(t, false, m, ARRAY_SIZE(m));
                if (i == 0) {
                        image_stats st;

                        import_ok(f, t, NAME, &st);
                        assert_int_equal(st.layers, 2);
                        continue;
                }
                import_fails(f, t, "x:1", GRPC_STATUS_INVALID_ARGUMENT,
                             "links.tar: member '1/layer.tar': a link that leads out of the "
                             "tarball");
        }
        {
                member m[] = { { "../x", "x", 1, NULL },
                               { "manifest.json", manifest, strlen(manifest), NULL } };

                tar_members(t, false, m, ARRAY_SIZE(m));
                import_fails(f, t, "x:1", GRPC_STATUS_INVALID_ARGUMENT,
                             "member '../x': its path has a '..' component");
        }
        /* An unpacked docker save whose layer is a symlink out of it. */
        assert_int_equal(mkdir(dir, 0755), 0);
        assert_int_equal(mkdir(sub, 0755), 0);
        file_put(mf, manifest, strlen(manifest));
        assert_int_equal(symlink(pw, lt), 0);
        import_fails(f, dir, "x:1", GRPC_STATUS_INVALID_ARGUMENT,
                     "0/layer.tar): a symlink leads out of the image");
}

/* ---- list, remove, cs_remove_tree ------------------------------------------------------- */

static void test_list_and_remove(void **state)
{
        fx *f = *state;
        const tent ents[] = { F("f", 0644, "ok\n"), S("evil", f->canary), D("ro/", 0500),
                              F("ro/x", 0400, "x") };
        _cleanup_free_ char *t = HOSTILE(f, ents);
        _cleanup_free_ char *dead = path_of(f->images, ".import-0123456789ab");
        _cleanup_free_ char *dead_file = path_of(dead, "half-written");
        _cleanup_free_ char *live = path_of(f->images, ".scratch-0123456789ab");
        _cleanup_close_ int live_fd = -1;
        _cleanup_free_ char *file = path_of(f->images, "not-a-dir");
        _cleanup_free_ char *link = path_of(f->images, "link");
        _cleanup_free_ char *list = NULL;
        image_info *infos;
        size_t n;
        cs_error *err = NULL;

        assert_int_equal(image_list(f->images, &infos, &n, &err), 0);
        assert_int_equal(n, 0);
        import_ok(f, t, "b:2", NULL);
        import_ok(f, t, "a:1", NULL);
        /* What an import killed midway leaves (no lock held), and one at work (locked). */
        assert_int_equal(mkdir(dead, 0700), 0);
        file_put(dead_file, "x", 1);
        assert_int_equal(mkdir(live, 0700), 0);
        live_fd = open(live, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_int_equal(flock(live_fd, LOCK_EX), 0);
        file_put(file, "x", 1);
        assert_int_equal(symlink(f->canary, link), 0);
        assert_int_equal(image_list(f->images, &infos, &n, &err), 0);
        assert_int_equal(n, 2);
        assert_string_equal(infos[0].name, "a:1");
        assert_string_equal(infos[1].name, "b:2");
        assert_true(infos[0].imported_at_ms > 0);
        image_infos_free(infos, n);

        assert_int_equal(image_remove(f->images, "a:1", &err), 0);
        assert_int_equal(image_remove(f->images, "a:1", &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        cs_error_freep(&err);
        /* A symlink planted under an image name is not an image: its target stays. */
        assert_int_equal(image_remove(f->images, "link", &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_FAILED_PRECONDITION);
        cs_error_freep(&err);
        assert_int_equal(image_remove(f->images, "../canary", &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_freep(&err);
        /* The removals swept the dead work directory, not the live one. */
        list = listing(f->images);
        assert_string_equal(list, ".scratch-0123456789ab\nb:2\nlink\nnot-a-dir\n");
        close(TAKE_FD(live_fd));
}

/* A tree deeper than the fds one may hold, with symlinks out: all of it goes, nothing it
 * points to does. */
static void test_remove_tree(void **state)
{
        fx *f = *state;
        _cleanup_free_ char *top = path_of(f->base, "tree");
        _cleanup_close_ int fd = -1;
        int depth = 300;

        assert_int_equal(mkdir(top, 0755), 0);
        fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        for (int i = 0; i < depth; i++) {
                int next;

                assert_int_equal(symlinkat(f->canary, fd, "out"), 0);
                assert_int_equal(mkdirat(fd, "d", i % 7 == 0 ? 0500 : 0755), 0);
                next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(next >= 0);
                close(fd);
                fd = next;
        }
        close(TAKE_FD(fd));
        assert_int_equal(cs_remove_tree(AT_FDCWD, top), 0);
        assert_false(exists(f->base, "tree"));
        assert_int_equal(cs_remove_tree(AT_FDCWD, top), 0); /* missing: done */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
                T(test_good_docker),
                T(test_good_oci),
                T(test_dotdot),
                T(test_absolute_path_lands_inside),
                T(test_symlink_escapes),
                T(test_hardlink_escapes),
                T(test_links_replaced_not_followed),
                T(test_tarball_links),
                T(test_corrupt_layers),
                T(test_size_claims),
                T(test_bad_manifests),
                T(test_names),
                T(test_list_and_remove),
                T(test_remove_tree),
#undef T
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
