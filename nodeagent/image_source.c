/* Reading an import's source: opening it (a directory, or a tarball whose needed members are
 * extracted into a scratch work directory), the plan (which layers, from the manifest) and the
 * blobs (its files, streamed through libarchive, their digests checked). It only reads the
 * source; the one thing it writes is the scratch directory, and only through image_layer.c's
 * rules (image_layer_pass_extract), in a work directory image.c makes.
 *
 * The source. A directory is read as it is; its files are opened with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a symlink in it (old `docker save`
 * links duplicate layers) may only lead to another of its files. A tarball is read twice:
 * once to find manifest.json (kept in memory), index.json and the links between members;
 * once to extract only the members needed (manifest.json and the layers it names, plus the
 * links leading to them; or index.json and blobs/ for an OCI layout) into a hidden scratch
 * directory of images_dir, by the same strict rules as a layer. The scratch is the source.
 *
 * The plan: the layers, from manifest.json (exactly one image) or from index.json ->
 * (nested indexes ->) the manifest for linux/<host arch>, or the only one. An OCI blob's digest
 * is checked each time it is read. */
#include "image_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define IMAGE_INDEX_DEPTH 4            /* nested OCI indexes followed */
#define IMAGE_LINK_HOPS   16           /* links followed between members of a tarball */
#define BLOB_BUF          (128u << 10) /* bytes per read of a blob */

/* What the source's files resolve with: links allowed while they stay inside it. */
#define RESOLVE_SOURCE (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#error "add this architecture's OCI platform name"
#endif

/* ---- strings and digests ---------------------------------------------------------------- */

static bool str_eq(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

/* A "sha256:<64 lowercase hex>" digest: the only algorithm accepted. */
static bool digest_valid(const char *d)
{
        if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
                return false;
        for (const char *s = d + 7; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

static char *digest_hex(const unsigned char *md, unsigned len)
{
        char *out = cs_xmalloc(2 * len + 1);

        for (unsigned i = 0; i < len; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
        return out;
}

/* ---- blobs: files of the source, read through libarchive, their digests checked ------- */

struct image_source_blob {
        int fd;
        char *digest; /* "sha256:<hex>" the content must have; NULL: not checked */
        EVP_MD_CTX *md;
        unsigned char buf[BLOB_BUF];
};

static void blob_free(image_source_blob *b)
{
        if (!b)
                return;
        if (b->fd >= 0)
                close(b->fd);
        EVP_MD_CTX_free(b->md);
        free(b->digest);
        free(b);
}

void image_source_blob_freep(image_source_blob **b)
{
        blob_free(*b);
}

/* Opens a regular file of the source directory. what names it in messages. */
static int source_file_open(int srcfd, const char *path, const char *what, cs_error **err)
{
        int fd = image_openat2(srcfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, RESOLVE_SOURCE);
        struct stat st;

        if (fd < 0 && errno == EXDEV)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: a symlink leads out of the image", what);
        if (fd < 0 && errno == ENOENT)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "%s: missing from the image", what);
        if (fd < 0)
                return cs_error_errno(err, errno, "%s: cannot open it", what);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: not a regular file",
                                    what);
        }
        return fd;
}

int image_source_blob_open(int srcfd, const char *path, const char *digest, const char *what,
                           image_source_blob **ret, cs_error **err)
{
        image_source_blob *b = cs_xcalloc(1, sizeof(*b));

        b->fd = source_file_open(srcfd, path, what, err);
        if (b->fd < 0) {
                blob_free(b);
                return -1;
        }
        if (digest) {
                b->digest = cs_xstrdup(digest);
                b->md = EVP_MD_CTX_new();
                if (!b->md)
                        abort();
        }
        *ret = b;
        return 0;
}

/* Reads the next piece into b->buf, hashing it. Its length (0 at the end), or -1 with errno. */
static ssize_t blob_fill(image_source_blob *b)
{
        ssize_t n;

        do
                n = read(b->fd, b->buf, sizeof(b->buf));
        while (n < 0 && errno == EINTR);
        if (b->md && n > 0 && EVP_DigestUpdate(b->md, b->buf, (size_t)n) != 1)
                abort();
        return n;
}

static la_ssize_t blob_read(struct archive *a, void *ctx, const void **buf)
{
        image_source_blob *b = ctx;
        ssize_t n = blob_fill(b);

        if (n < 0)
                archive_set_error(a, errno, "read error: %s", strerror(errno));
        *buf = b->buf;
        return n;
}

static int blob_rewind(image_source_blob *b, const char *what, cs_error **err)
{
        if (lseek(b->fd, 0, SEEK_SET) < 0)
                return cs_error_errno(err, errno, "%s: cannot read it", what);
        if (b->md && EVP_DigestInit_ex(b->md, EVP_sha256(), NULL) != 1)
                abort();
        return 0;
}

/* Reads what libarchive left (padding after the end of the archive) and checks the digest. */
static int blob_finish(image_source_blob *b, const char *what, cs_error **err)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        _cleanup_free_ char *hex = NULL;
        ssize_t n;

        if (!b->md)
                return 0;
        while ((n = blob_fill(b)) > 0)
                ;
        if (n < 0)
                return cs_error_errno(err, errno, "%s: cannot read it", what);
        if (EVP_DigestFinal_ex(b->md, md, &len) != 1)
                abort();
        hex = digest_hex(md, len);
        if (strcmp(hex, b->digest + 7) != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: its content does not match its digest (it hashes to "
                                    "sha256:%s)",
                                    what, hex);
        return 0;
}

static void archive_freep(struct archive **a)
{
        if (*a)
                archive_read_free(*a);
}

/* Streams the blob from its start as a tar (compressed or not) and calls fn on each entry;
 * then checks its digest. what names it in messages. */
int image_source_walk(image_source_blob *b, const char *what, image_source_entry_fn fn, void *ctx,
                      cs_error **err)
{
        _cleanup_(archive_freep) struct archive *a = archive_read_new();
        struct archive_entry *e;
        uint64_t n = 0;
        int r;

        if (!a)
                abort();
        if (blob_rewind(b, what, err) < 0)
                return -1;
        /* Only the compressions this libarchive decodes itself: never one it would hand to an
         * external program (lrzip, lzop, grzip). Only tar: a layer is a tar. */
        archive_read_support_filter_gzip(a);
        archive_read_support_filter_bzip2(a);
        archive_read_support_filter_xz(a);
        archive_read_support_filter_lzma(a);
        archive_read_support_filter_zstd(a);
        archive_read_support_filter_lz4(a);
        archive_read_support_format_tar(a);
        archive_read_support_format_empty(a);
        if (archive_read_open(a, b, NULL, blob_read, NULL) != ARCHIVE_OK)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: not a tar archive libarchive can read: %s", what,
                                    image_archive_msg(a));
        for (;; n++) {
                r = archive_read_next_header(a, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: truncated or corrupt after %" PRIu64
                                            " entries: %s",
                                            what, n, image_archive_msg(a));
                if (fn(ctx, a, e, err) < 0)
                        return -1;
        }
        return blob_finish(b, what, err);
}

/* ---- the plan: which layers, from the manifest ------------------------------------------ */

void image_source_plan_clear(image_source_plan *p)
{
        for (size_t i = 0; i < p->n; i++) {
                free(p->layers[i].path);
                free(p->layers[i].digest);
                free(p->layers[i].label);
        }
        p->n = 0;
}

/* Reads and parses a JSON file of the source (at most IMAGE_JSON_MAX bytes), checking its
 * digest if one is given. */
static int json_read(int srcfd, const char *path, const char *digest, json_t **ret, cs_error **err)
{
        _cleanup_close_ int fd = source_file_open(srcfd, path, path, err);
        _cleanup_free_ char *buf = NULL;
        json_error_t jerr;
        ssize_t n;

        if (fd < 0)
                return -1;
        buf = cs_xmalloc(IMAGE_JSON_MAX + 1);
        n = cs_read_full(fd, buf, IMAGE_JSON_MAX + 1);
        if (n < 0)
                return cs_error_errno(err, errno, "%s: cannot read it", path);
        if (n > IMAGE_JSON_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "%s: larger than the %u bytes allowed (IMAGE_JSON_MAX)", path,
                                    IMAGE_JSON_MAX);
        if (digest) {
                unsigned char md[EVP_MAX_MD_SIZE];
                unsigned len = 0;
                _cleanup_free_ char *hex = NULL;

                if (EVP_Digest(buf, (size_t)n, md, &len, EVP_sha256(), NULL) != 1)
                        abort();
                hex = digest_hex(md, len);
                if (strcmp(hex, digest + 7) != 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: its content does not match its digest (it "
                                            "hashes to sha256:%s)",
                                            path, hex);
        }
        *ret = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
        if (!*ret)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
        return 0;
}

static char *blob_path(const char *digest)
{
        return cs_xasprintf("blobs/sha256/%s", digest + 7);
}

/* The layer paths of a docker save manifest.json (cleaned; the caller frees them). */
static int docker_layer_paths(json_t *doc, char **ret, size_t *ret_n, cs_error **err)
{
        json_t *layers, *v;
        size_t i, n;

        if (!json_is_array(doc) || json_array_size(doc) == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "manifest.json: not a list of images");
        if (json_array_size(doc) > 1)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "manifest.json: it holds %zu images; import a tarball of "
                                    "one (docker save IMAGE)",
                                    json_array_size(doc));
        layers = json_object_get(json_array_get(doc, 0), "Layers");
        n = json_array_size(layers);
        if (!json_is_array(layers) || n == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "manifest.json: the image lists no Layers");
        if (n > IMAGE_MAX_LAYERS)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "manifest.json: %zu layers, more than the %d allowed "
                                    "(IMAGE_MAX_LAYERS)",
                                    n, IMAGE_MAX_LAYERS);
        json_array_foreach(layers, i, v)
        {
                const char *why = json_is_string(v)
                                          ? image_layer_path_clean(json_string_value(v), &ret[i])
                                          : "is not a string";

                if (!why && !ret[i][0])
                        why = "names the root";
                if (why) {
                        for (size_t k = 0; k < i; k++)
                                free(ret[k]);
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "manifest.json: layer %zu: its path %s", i + 1, why);
                }
        }
        *ret_n = n;
        return 0;
}

static void plan_add(image_source_plan *p, char *path, const char *digest, size_t n)
{
        image_source_layer *l = &p->layers[p->n++];
        _cleanup_free_ char *shown = image_printable(path);

        l->path = path;
        l->digest = digest ? cs_xstrdup(digest) : NULL;
        if (digest)
                l->label = cs_xasprintf("layer %zu/%zu (sha256:%.12s)", p->n, n, digest + 7);
        else
                l->label = cs_xasprintf("layer %zu/%zu (%s)", p->n, n, shown);
}

static int docker_plan(int srcfd, image_source_plan *p, cs_error **err)
{
        _cleanup_(json_decrefp) json_t *doc = NULL;
        char *paths[IMAGE_MAX_LAYERS];
        size_t n;

        if (json_read(srcfd, "manifest.json", NULL, &doc, err) < 0 ||
            docker_layer_paths(doc, paths, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                /* docker 25 names its layers by digest: then the digest is checked too. */
                _cleanup_free_ char *digest = strncmp(paths[i], "blobs/sha256/", 13) == 0
                                                      ? cs_xasprintf("sha256:%s", paths[i] + 13)
                                                      : NULL;

                plan_add(p, paths[i], digest_valid(digest) ? digest : NULL, n);
        }
        return 0;
}

/* The descriptor of an index's manifests for linux/<host arch>, or its only one. */
static json_t *index_pick(json_t *manifests, const char *what, cs_error **err)
{
        size_t i, n = json_array_size(manifests);
        json_t *d;

        json_array_foreach(manifests, i, d)
        {
                json_t *pf = json_object_get(d, "platform");

                if (str_eq(json_string_value(json_object_get(pf, "os")), "linux") &&
                    str_eq(json_string_value(json_object_get(pf, "architecture")), HOST_ARCH))
                        return d;
        }
        if (n == 1)
                return json_array_get(manifests, 0);
        if (n == 0)
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: it lists no manifest", what);
        else
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "%s: it lists %zu manifests and none for linux/" HOST_ARCH, what, n);
        return NULL;
}

/* index.json -> (nested indexes ->) the image manifest. */
static int oci_manifest(int srcfd, json_t **ret, cs_error **err)
{
        _cleanup_(json_decrefp) json_t *doc = NULL;
        char what[64] = "index.json";

        if (json_read(srcfd, "index.json", NULL, &doc, err) < 0)
                return -1;
        for (int depth = 0; !json_is_array(json_object_get(doc, "layers")); depth++) {
                json_t *manifests = json_object_get(doc, "manifests"), *d;
                _cleanup_free_ char *digest = NULL;
                _cleanup_free_ char *path = NULL;

                if (!json_is_array(manifests))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: neither an index nor a manifest", what);
                if (depth == IMAGE_INDEX_DEPTH)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: indexes nested more than %d deep", what,
                                            IMAGE_INDEX_DEPTH);
                d = index_pick(manifests, what, err);
                if (!d)
                        return -1;
                if (!digest_valid(json_string_value(json_object_get(d, "digest"))))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: a manifest's digest is not sha256:<64 hex>", what);
                /* A copy: the document it is part of goes before it is used. */
                digest = cs_xstrdup(json_string_value(json_object_get(d, "digest")));
                path = blob_path(digest);
                json_decref(TAKE_PTR(doc));
                if (json_read(srcfd, path, digest, &doc, err) < 0)
                        return -1;
                snprintf(what, sizeof(what), "manifest sha256:%.12s", digest + 7);
        }
        *ret = TAKE_PTR(doc);
        return 0;
}

static int oci_plan(int srcfd, image_source_plan *p, cs_error **err)
{
        _cleanup_(json_decrefp) json_t *doc = NULL;
        json_t *layers, *d;
        size_t i, n;

        if (oci_manifest(srcfd, &doc, err) < 0)
                return -1;
        layers = json_object_get(doc, "layers");
        n = json_array_size(layers);
        if (n == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "the manifest lists no layers");
        if (n > IMAGE_MAX_LAYERS)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "the manifest lists %zu layers, more than the %d allowed "
                                    "(IMAGE_MAX_LAYERS)",
                                    n, IMAGE_MAX_LAYERS);
        json_array_foreach(layers, i, d)
        {
                const char *digest = json_string_value(json_object_get(d, "digest"));

                if (!digest_valid(digest))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "the manifest's layer %zu: its digest is not "
                                            "sha256:<64 hex>",
                                            i + 1);
                plan_add(p, blob_path(digest), digest, n);
        }
        return 0;
}

/* manifest.json (docker save) when there is one, else index.json (OCI layout). */
int image_source_plan_load(int srcfd, image_source_plan *p, cs_error **err)
{
        _cleanup_close_ int fd = image_openat2(srcfd, "manifest.json", O_PATH, RESOLVE_SOURCE);

        if (fd >= 0)
                return docker_plan(srcfd, p, err);
        fd = image_openat2(srcfd, "index.json", O_PATH, RESOLVE_SOURCE);
        if (fd >= 0)
                return oci_plan(srcfd, p, err);
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                            "not an image: neither manifest.json (docker save) nor index.json "
                            "(OCI image layout) in it");
}

/* ---- a tarball as the source ------------------------------------------------------------ */

typedef struct tar_link {
        char *name;   /* a member (cleaned) that is a symlink or a hard link */
        char *target; /* the member it leads to (cleaned); NULL: out of the tarball */
} tar_link;

typedef struct tar_scan {
        const char *label; /* the tarball, for messages */
        char *manifest;    /* manifest.json's bytes; NULL when there is none */
        size_t manifest_len;
        bool has_index;
        tar_link *links; /* sorted by name once the scan is done */
        size_t n_links, cap_links;
        uint64_t entries;
} tar_scan;

typedef struct tar_want {
        char **names; /* the members needed */
        size_t n, cap;
        bool blobs; /* and everything under blobs/ */
} tar_want;

static void tar_scan_clear(tar_scan *s)
{
        for (size_t i = 0; i < s->n_links; i++) {
                free(s->links[i].name);
                free(s->links[i].target);
        }
        free(s->links);
        free(s->manifest);
}

static void tar_want_clear(tar_want *w)
{
        for (size_t i = 0; i < w->n; i++)
                free(w->names[i]);
        free(w->names);
}

static int member_error(const char *label, const char *raw, cs_error **err, const char *why)
{
        _cleanup_free_ char *name = image_printable(raw);

        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: member '%s': %s", label, name,
                            why);
}

/* Where a symlink member at name (cleaned) leads, lexically: a cleaned member name, or NULL
 * when it leads out of the tarball (absolute, or above its root). */
static char *link_resolve(const char *name, const char *target)
{
        const char *slash = strrchr(name, '/');
        _cleanup_free_ char *joined = NULL;
        char *out, *w;

        if (target[0] == '/')
                return NULL;
        joined = slash ? cs_xasprintf("%.*s/%s", (int)(slash - name), name, target)
                       : cs_xstrdup(target);
        out = w = cs_xmalloc(strlen(joined) + 1);
        for (const char *p = joined; *p;) {
                const char *end = strchrnul(p, '/');
                size_t len = (size_t)(end - p);

                if (len == 2 && p[0] == '.' && p[1] == '.') {
                        if (w == out) {
                                free(out);
                                return NULL;
                        }
                        while (w > out && w[-1] != '/')
                                w--;
                        if (w > out)
                                w--;
                } else if (len > 0 && !(len == 1 && p[0] == '.')) {
                        if (w != out)
                                *w++ = '/';
                        memcpy(w, p, len);
                        w += len;
                }
                p = *end ? end + 1 : end;
        }
        *w = '\0';
        return out;
}

static void link_add(tar_scan *s, const char *name, char *target)
{
        s->links = cs_xgrow(s->links, s->n_links, &s->cap_links, sizeof(*s->links));
        s->links[s->n_links++] = (tar_link){ .name = cs_xstrdup(name), .target = target };
}

static int link_cmp(const void *a, const void *b)
{
        return strcmp(((const tar_link *)a)->name, ((const tar_link *)b)->name);
}

static int scan_manifest(tar_scan *s, struct archive *a, struct archive_entry *e, cs_error **err)
{
        int64_t size = archive_entry_size(e);
        la_ssize_t n;

        if (size > IMAGE_JSON_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "%s: manifest.json is larger than the %u bytes allowed "
                                    "(IMAGE_JSON_MAX)",
                                    s->label, IMAGE_JSON_MAX);
        free(s->manifest);
        s->manifest = cs_xmalloc((size_t)size + 1);
        s->manifest_len = 0;
        while ((n = archive_read_data(a, s->manifest + s->manifest_len,
                                      (size_t)size - s->manifest_len)) > 0)
                s->manifest_len += (size_t)n;
        if (n < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: cannot read manifest.json: %s", s->label,
                                    image_archive_msg(a));
        return 0;
}

/* The first read of a tarball: what it holds, manifest.json's content, its links. */
static int scan_entry(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err)
{
        tar_scan *s = ctx;
        const char *raw = archive_entry_pathname(e), *hard = archive_entry_hardlink(e), *why;
        _cleanup_free_ char *path = NULL;
        char *target = NULL;

        if (!raw)
                return member_error(s->label, "", err, "it has no usable name");
        why = image_layer_path_clean(raw, &path);
        if (why) {
                _cleanup_free_ char *msg = cs_xasprintf("its path %s", why);

                return member_error(s->label, raw, err, msg);
        }
        if (++s->entries > IMAGE_MAX_ENTRIES)
                return member_error(s->label, raw, err, "more members than IMAGE_MAX_ENTRIES");
        if (strcmp(path, "index.json") == 0)
                s->has_index = true;
        if (hard) {
                if (image_layer_path_clean(hard, &target))
                        target = NULL; /* refused if it is ever needed */
                link_add(s, path, target);
        } else if (archive_entry_filetype(e) == AE_IFLNK && archive_entry_symlink(e)) {
                link_add(s, path, link_resolve(path, archive_entry_symlink(e)));
        } else if (strcmp(path, "manifest.json") == 0 && archive_entry_filetype(e) == AE_IFREG) {
                return scan_manifest(s, a, e, err);
        }
        return 0;
}

static void want_add(tar_want *w, const char *name)
{
        for (size_t i = 0; i < w->n; i++)
                if (strcmp(w->names[i], name) == 0)
                        return;
        w->names = cs_xgrow(w->names, w->n, &w->cap, sizeof(*w->names));
        w->names[w->n++] = cs_xstrdup(name);
}

static bool want_match(const void *ctx, const char *path)
{
        const tar_want *w = ctx;

        if (w->blobs && strncmp(path, "blobs/", 6) == 0)
                return true;
        for (size_t i = 0; i < w->n; i++)
                if (strcmp(w->names[i], path) == 0)
                        return true;
        return false;
}

/* Wants name and the members its links lead to. */
static int want_closure(tar_want *w, const tar_scan *s, const char *name, cs_error **err)
{
        want_add(w, name);
        for (int hops = 0;; hops++) {
                tar_link key = { .name = (char *)name };
                const tar_link *l =
                        s->n_links ? bsearch(&key, s->links, s->n_links, sizeof(key), link_cmp)
                                   : NULL;

                if (!l)
                        return 0;
                if (!l->target)
                        return member_error(s->label, name, err,
                                            "a link that leads out of the tarball");
                if (hops == IMAGE_LINK_HOPS)
                        return member_error(s->label, name, err, "too many links in a row");
                want_add(w, l->target);
                name = l->target;
        }
}

/* The members to extract: manifest.json and the layers it names, or an OCI layout's files. */
static int want_plan(tar_want *w, const tar_scan *s, cs_error **err)
{
        _cleanup_(json_decrefp) json_t *doc = NULL;
        char *paths[IMAGE_MAX_LAYERS];
        json_error_t jerr;
        size_t n;
        int r = 0;

        if (!s->manifest && !s->has_index)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: not an image: neither manifest.json (docker save) nor "
                                    "index.json (OCI image layout) in it",
                                    s->label);
        if (!s->manifest) {
                w->blobs = true;
                want_add(w, "index.json");
                want_add(w, "oci-layout");
                return 0;
        }
        doc = json_loadb(s->manifest, s->manifest_len, JSON_REJECT_DUPLICATES, &jerr);
        if (!doc)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "manifest.json: not valid JSON: %s (line %d)", jerr.text,
                                    jerr.line);
        if (docker_layer_paths(doc, paths, &n, err) < 0)
                return -1;
        want_add(w, "manifest.json");
        for (size_t i = 0; i < n; i++) {
                if (r == 0)
                        r = want_closure(w, s, paths[i], err);
                free(paths[i]);
        }
        return r;
}

/* Extracts what an image tarball needs into a scratch directory of imgfd (its name in
 * *ret_scratch as soon as it exists, for the caller to remove), which becomes the source. */
static int tarball_unpack(int imgfd, const char *src, int fd, int *ret_srcfd, char **ret_scratch,
                          cs_error **err)
{
        _cleanup_(image_source_blob_freep) image_source_blob *b = cs_xcalloc(1, sizeof(*b));
        _cleanup_(tar_scan_clear) tar_scan s = { .label = src };
        _cleanup_(tar_want_clear) tar_want w = { 0 };
        image_layer_importer im = {
                .rootfd = -1, .want = want_match, .want_ctx = &w, .label = src
        };
        int r;

        b->fd = fd;
        if (image_source_walk(b, src, scan_entry, &s, err) < 0)
                return -1;
        if (s.n_links)
                qsort(s.links, s.n_links, sizeof(*s.links), link_cmp);
        if (want_plan(&w, &s, err) < 0 ||
            image_workdir_make(imgfd, ".scratch-", ret_scratch, &im.rootfd, err) < 0)
                return -1;
        r = image_source_walk(b, src, image_layer_pass_extract, &im, err);
        image_layer_importer_done(&im);
        if (r < 0) {
                close(im.rootfd);
                return -1;
        }
        *ret_srcfd = im.rootfd; /* locked while the caller keeps it */
        return 0;
}

/* The source as a directory fd: src itself, or a scratch copy of what its tarball holds. */
int image_source_open(int imgfd, const char *src, int *ret_srcfd, char **ret_scratch,
                      cs_error **err)
{
        int fd = open(src, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;

        if (fd < 0)
                return cs_error_errno(err, errno, "%s", src);
        if (fstat(fd, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
                close(fd);
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: neither a directory (OCI image layout) nor a file "
                                    "(tarball)",
                                    src);
        }
        if (S_ISDIR(st.st_mode)) {
                *ret_srcfd = fd;
                return 0;
        }
        return tarball_unpack(imgfd, src, fd, ret_srcfd, ret_scratch, err);
}
