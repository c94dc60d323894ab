/* What image.c, image_layer.c and image_source.c share, and nothing else: the na_image library's
 * internal seams. Not for other modules (they use image.h). Each file's functions carry its own
 * prefix: image_ (image.c: messages, openat2, work directories), image_layer_ (applying a
 * layer's entries to a tree), image_source_ (reading the source: blobs, the plan, a tarball). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "image.h"

struct archive;
struct archive_entry;

/* ---- image.c ---------------------------------------------------------------------------- */

/* A copy of s fit for a one-line message: at most 200 bytes, control bytes shown as '?'.
 * malloc'd. */
char *image_printable(const char *s);

/* libarchive's message for a's last error, never NULL. */
const char *image_archive_msg(struct archive *a);

/* openat2(2), which glibc does not wrap; retried while a rename elsewhere makes the kernel
 * ask for it (EAGAIN). The fd (O_CLOEXEC), or -1 with errno. */
int image_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve);

/* Makes a work directory <prefix><random> (0700) in imgfd, locked: its name in *ret_name,
 * an O_RDONLY fd of it (holding the lock; the caller closes it once done) in *ret_fd. prefix
 * is one of the hidden prefixes image.c sweeps (".import-", ".scratch-", ".remove-"). */
int image_workdir_make(int imgfd, const char *prefix, char **ret_name, int *ret_fd, cs_error **err);

/* ---- image_layer.c ---------------------------------------------------------------------- */

/* Cleans a member path: a leading "/" or "./" goes, so do "." and empty components; "" is
 * the root. NULL with *ret (malloc'd), or why the path is refused (a ".." component, too long). */
const char *image_layer_path_clean(const char *raw, char **ret);

/* Whether an entry at path (cleaned) is to be written. */
typedef bool (*image_layer_want_fn)(const void *ctx, const char *path);

/* Applies the entries of the layers, in order, to the tree at rootfd. The caller sets the
 * fields up to label (and label again before each layer), reads stats, and calls
 * image_layer_importer_done() once done. */
typedef struct image_layer_importer {
        int rootfd;               /* O_RDONLY | O_DIRECTORY: the tree being built (borrowed) */
        bool chown;               /* restore owners (not in the scratch copy of a tarball) */
        image_layer_want_fn want; /* NULL: every entry; else only those it wants */
        const void *want_ctx;
        const char *label; /* the layer (or tarball) being read, for messages */
        uint64_t bytes;    /* declared so far, against IMAGE_MAX_BYTES */
        uint64_t entries;  /* so far, against IMAGE_MAX_ENTRIES */
        image_stats stats;
        struct image_layer_dir_meta *dirs; /* the directories' metadata, for dirs_finish */
        size_t n_dirs, cap_dirs;
} image_layer_importer;

void image_layer_importer_done(image_layer_importer *im);

/* Entry callbacks for image_source_walk(), ctx an image_layer_importer. A layer is walked
 * twice: pass_check (every entry checked, whiteouts applied), then pass_write (the other
 * entries written). pass_extract is the single pass that extracts a tarball's wanted members
 * (checks and writes). */
int image_layer_pass_check(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err);
int image_layer_pass_write(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err);
int image_layer_pass_extract(void *ctx, struct archive *a, struct archive_entry *e, cs_error **err);

/* Applies the directories' owners, modes and times, once every layer is in. */
int image_layer_dirs_finish(image_layer_importer *im, cs_error **err);

/* ---- image_source.c --------------------------------------------------------------------- */

/* The source as a directory fd (*ret_srcfd, the caller closes it): src itself, or a scratch
 * work directory of imgfd holding what its tarball needs (its name in *ret_scratch as soon as
 * it exists, for the caller to remove; the fd holds its lock). */
int image_source_open(int imgfd, const char *src, int *ret_srcfd, char **ret_scratch,
                      cs_error **err);

typedef struct image_source_layer {
        char *path;   /* in the source directory */
        char *digest; /* what its content must hash to; NULL: not known */
        char *label;  /* "layer 2/3 (sha256:0123456789ab)", for messages */
} image_source_layer;

/* Which layers, in order. Zero-initialise; free with image_source_plan_clear(). */
typedef struct image_source_plan {
        image_source_layer layers[IMAGE_MAX_LAYERS];
        size_t n;
} image_source_plan;

/* manifest.json (docker save) when the source has one, else index.json (OCI layout). */
int image_source_plan_load(int srcfd, image_source_plan *p, cs_error **err);
void image_source_plan_clear(image_source_plan *p);

/* A file of the source, read through libarchive, its digest checked. */
typedef struct image_source_blob image_source_blob;

/* Opens the regular file path of the source; digest (may be NULL): what it must hash to.
 * what names it in messages. Free with image_source_blob_freep() (a cleanup function). */
int image_source_blob_open(int srcfd, const char *path, const char *digest, const char *what,
                           image_source_blob **ret, cs_error **err);
void image_source_blob_freep(image_source_blob **b);

/* Called for each entry of an archive; a failure (-1 with *err) stops the walk. */
typedef int (*image_source_entry_fn)(void *ctx, struct archive *a, struct archive_entry *e,
                                     cs_error **err);

/* Streams the blob from its start as a tar (compressed or not) and calls fn on each entry;
 * then checks its digest. what names it in messages. Can be called again (another pass). */
int image_source_walk(image_source_blob *b, const char *what, image_source_entry_fn fn, void *ctx,
                      cs_error **err);
