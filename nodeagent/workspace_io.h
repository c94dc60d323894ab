/* Workspace file I/O on the host side of a sandbox's workspace, without exec.
 *
 * Path rules (API reference + ARCHITECTURE.md "Contract decisions"):
 * - A client path is relative to the sandbox's mount_path. An absolute path is accepted only
 *   when it lies inside mount_path (it is made relative to it); any other absolute path is an
 *   escape: INVALID_ARGUMENT.
 * - Paths are cleaned lexically (like Go's filepath.Clean); a ".." that climbs above the
 *   workspace root after cleaning is INVALID_ARGUMENT. "" and "." name the root.
 * - Every step is resolved from a directory fd of the workspace root, one component at a
 *   time with O_NOFOLLOW, so the kernel never follows a link for us and no check-then-use
 *   race exists. A symlink is followed only if its target stays inside the workspace: a
 *   relative target is resolved against the directory holding the link; an absolute target
 *   is read as the sandbox sees it, so it must lie inside mount_path (then it is translated
 *   to the workspace root); anything else is PERMISSION_DENIED. More than WS_SYMLINK_MAX links
 *   in one resolution (chains, loops) is INVALID_ARGUMENT.
 * - Only regular files and directories are ever opened: FIFOs, sockets and devices are
 *   refused with FAILED_PRECONDITION and never block the agent.
 * - NUL bytes, paths over WS_PATH_MAX bytes or WS_DEPTH_MAX components: INVALID_ARGUMENT.
 *
 * Nothing here logs or knows about gRPC messages; errors carry the status they become. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "error.h"

#define WS_PATH_MAX          4096 /* bytes in a client path */
#define WS_DEPTH_MAX         256  /* components in a path; directory levels walked by a listing */
#define WS_SYMLINK_MAX       40   /* symlinks followed in one resolution */
#define WS_DATA_MAX          (16u << 20) /* bytes per ReadFile/WriteFile call */
#define WS_LIST_DEFAULT      1000        /* ListFiles entries when max_entries is 0 */
#define WS_LIST_MAX          10000       /* ListFiles hard cap */
#define WS_DEFAULT_FILE_MODE 0644
#define WS_DEFAULT_DIR_MODE  0755

/* A workspace: an O_DIRECTORY fd of its host directory (owned by the caller, which keeps it
 * open for the duration of the call) and the path it is mounted at inside the sandbox. */
typedef struct ws_root {
        int dirfd;
        const char *mount_path; /* absolute, cleaned, e.g. "/workspace" */
} ws_root;

typedef struct ws_read_result {
        uint8_t *data; /* malloc'd, owned by the caller (NULL when len is 0) */
        size_t len;
        int64_t total_size; /* the file's size */
        bool eof;           /* data reaches the end of the file */
} ws_read_result;

typedef struct ws_entry {
        char *path;    /* relative to the listed directory, '/'-separated; malloc'd */
        uint64_t size; /* 0 for directories */
        bool is_dir;
        uint32_t mode; /* permission bits (07777) */
        int64_t mtime_sec;
        int32_t mtime_nsec;
} ws_entry;

/* Cleans a client path into a workspace-relative one ("" for the root). *ret is malloc'd. */
int ws_path_clean(const char *path, const char *mount_path, char **ret, cs_error **err);

/* Reads up to max_bytes (0: to the end; capped at WS_DATA_MAX) from offset. A negative offset
 * or max_bytes is INVALID_ARGUMENT; an offset at or past the end gives no data and eof. */
int ws_read(const ws_root *root, const char *path, int64_t offset, int64_t max_bytes,
            ws_read_result *ret, cs_error **err);

/* Writes len bytes (at most WS_DATA_MAX, else RESOURCE_EXHAUSTED). Missing parent directories
 * are created (WS_DEFAULT_DIR_MODE). append: appended to the file (created if missing).
 * Otherwise the file is replaced atomically: the data goes to a temporary file in the same
 * directory which is renamed over the old one, so a reader sees the old or the new content,
 * never a mix, and a failure leaves the old content. `mode` (0: WS_DEFAULT_FILE_MODE) applies
 * when the file is created; an existing file keeps its mode and owner. */
int ws_write(const ws_root *root, const char *path, const uint8_t *data, size_t len, bool append,
             uint32_t mode, int64_t *ret_written, cs_error **err);

/* ws_write of the bytes in iov[0..n_iov), len in all (bytes received in pieces, written
 * without gathering them first). */
int ws_writev(const ws_root *root, const char *path, const struct iovec *iov, size_t n_iov,
              size_t len, bool append, uint32_t mode, int64_t *ret_written, cs_error **err);

/* Lists a directory (recursively if asked, depth-first, entries of each directory sorted by
 * name, symlinks listed but not followed). max_entries 0: WS_LIST_DEFAULT; above WS_LIST_MAX:
 * WS_LIST_MAX. *ret_truncated tells whether entries were left out. Reading stops at the cap:
 * a truncated listing holds the first entries each directory's readdir gives (sorted among
 * themselves), not the smallest names, and costs O(max_entries) whatever the directory's size.
 * Names that are not UTF-8 are left out. Free with ws_entries_free(). */
int ws_list(const ws_root *root, const char *path, bool recursive, uint32_t max_entries,
            ws_entry **ret_entries, size_t *ret_n, bool *ret_truncated, cs_error **err);

void ws_entries_free(ws_entry *entries, size_t n);

/* For tests: directory entries ws_list has read on this thread so far (".." included). */
size_t ws_list_names_seen(void);
