/* Container images as the agent's local mode uses them: <images_dir>/<NAME> is a plain
 * directory that IS the sandbox's root filesystem. This module imports images users already
 * have (an OCI image layout, a `docker save` tarball) into such directories, lists and
 * removes them.
 *
 * Layers are applied as the OCI image spec's "Applying changesets" says: in order; a whiteout
 * `.wh.NAME` deletes NAME of the layers below, `.wh..wh..opq` empties its directory of what the
 * layers below put there; whiteouts are never written. Regular files (sparse ones stay sparse),
 * directories, symlinks, hard links and FIFOs are made with their owner, mode (setuid, setgid
 * and sticky included) and mtime. Character and block devices are skipped (counted in
 * image_stats): mknod is never done on the host; the sandbox has its own /dev.
 *
 * Every layer is hostile input. Its paths are resolved beneath the rootfs being built, from a
 * directory fd, with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
 * for the parent directories and *at() calls with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW for the
 * last component, so nothing is ever written outside it and no symlink is ever followed:
 * - a leading "/" or "./" is stripped; an entry with a ".." component is an error;
 * - an entry whose parent path goes through a symlink is an error (a legitimate layer lists
 *   real paths); so is a hard link whose target does (or uses "..");
 * - symlink targets are written as they are (absolute ones too): only the sandbox resolves
 *   them, inside its own root;
 * - the caps below are checked from the declared sizes before anything of an entry is written;
 *   a truncated or corrupt layer is an error. OCI blobs are checked against their sha256
 *   digests.
 * Errors name the layer and the entry. The result appears atomically: the image is built in a
 * hidden directory of images_dir and renamed to NAME at the end; a failure leaves nothing.
 *
 * Library code: no logging; errors carry the status they become. Meant to run as root (the
 * owners of the image's files are restored); the images directory is created 0700. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Caps on what an image (a hostile input) may declare. */
#define IMAGE_NAME_MAX    255          /* bytes in an image name (CreateSandbox.image too) */
#define IMAGE_MAX_BYTES   (8ull << 30) /* declared bytes of all entries of all layers */
#define IMAGE_MAX_ENTRIES 1000000      /* entries of all layers (whiteouts included) */
#define IMAGE_MAX_LAYERS  128          /* layers in a manifest */
#define IMAGE_JSON_MAX    (1u << 20)   /* bytes of a manifest, index or config JSON */
#define IMAGE_PATH_MAX    4096         /* bytes in an entry's path or link target */

/* What an import did. */
typedef struct image_stats {
        uint32_t layers;
        uint64_t files;    /* regular files written */
        uint64_t dirs;     /* directory entries applied */
        uint64_t symlinks; /* symlinks written */
        uint64_t hardlinks;
        uint64_t fifos;
        uint64_t whiteouts;       /* whiteout entries (deletions and opaque directories) */
        uint64_t devices_skipped; /* character and block device entries, never created */
        uint64_t bytes;           /* declared size of the regular files written */
} image_stats;

/* One image of an images directory. */
typedef struct image_info {
        char *name;             /* malloc'd */
        int64_t imported_at_ms; /* wall clock: when the directory got its name */
} image_info;

/* Whether name can name an image: 1..IMAGE_NAME_MAX bytes of [A-Za-z0-9._:-], not starting
 * with '.' (so it is never ".", ".." nor one of the hidden work directories of this module). */
bool image_name_valid(const char *name);

/* Imports the image at src into <images_dir>/<name>. src is a directory (an OCI image layout:
 * oci-layout, index.json, blobs/sha256/...; or an unpacked `docker save`: manifest.json wins
 * when present) or a file: a tarball of either, in any compression libarchive reads (its
 * needed members are extracted into a hidden scratch directory of images_dir first, and it is
 * removed at the end). images_dir is created (0700) if missing. An existing name is
 * ALREADY_EXISTS and is never touched. *ret_stats (may be NULL) receives what was done. */
int image_import(const char *images_dir, const char *src, const char *name, image_stats *ret_stats,
                 cs_error **err);

/* The images of images_dir (directories with a valid name; hidden work directories and
 * anything else are left out), sorted by name. A missing images_dir has none. Free with
 * image_infos_free(). */
int image_list(const char *images_dir, image_info **ret_infos, size_t *ret_n, cs_error **err);

void image_infos_free(image_info *infos, size_t n);

/* Removes image name: it is first renamed to a hidden name (so a half-removed image is never
 * usable), then its tree is removed without following any symlink or crossing a mount.
 * NOT_FOUND when there is no such image. A sandbox already running from it keeps what its
 * runtime holds open; the caller decides whether removing it is wise. */
int image_remove(const char *images_dir, const char *name, cs_error **err);
