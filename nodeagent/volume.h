/* A workspace volume (local mode): a sparse image file with its own ext4 filesystem, on a loop
 * device, mounted nodev,nosuid at the workspace directory, so a workspace holds no more than
 * its size. Owns the image file, the loop device and the mount it makes; touches nothing else.
 * Used by the registry for local sandboxes (sandbox.c, sandbox_record.c, sandbox_housekeep.c)
 * unless the agent runs with --workspace-volumes=off. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* A loop device's block counters, in bytes. */
typedef struct vol_counters {
        uint64_t read, written;
} vol_counters;

/* Makes image (must not exist) of size bytes, an ext4 filesystem on it (no reserved blocks,
 * inode tables and journal initialised now, not lazily), attaches it to a free loop device
 * with autoclear, and mounts it at mountpoint (an existing directory). On failure, leaves no
 * image, loop device or mount. No loop devices: FAILED_PRECONDITION, no fallback. The new
 * filesystem's root is empty (mkfs's lost+found is removed). *ret_start (may be NULL): the loop
 * device's counters when it was attached (a device is reused and its counters never restart:
 * what the volume did is vol_io_bytes minus these). */
int vol_create(const char *image, uint64_t size, const char *mountpoint, vol_counters *ret_start,
               cs_error **err);

/* Attaches an existing image (made by vol_create) to a free loop device with autoclear and
 * mounts it at mountpoint, as vol_create does, without touching its filesystem (never
 * formats). For a volume that is no longer mounted (a reboot, an unmount by hand). */
int vol_attach(const char *image, const char *mountpoint, vol_counters *ret_start, cs_error **err);

/* Unmounts the top mount at mountpoint, lazily if busy. 0, or -1 with errno. */
int vol_umount_one(const char *mountpoint);

/* Unmounts whatever is mounted at mountpoint (lazily if busy; the loop device then detaches
 * itself when its last user lets go), keeping the image. Idempotent. */
int vol_unmount(const char *mountpoint, cs_error **err);

/* vol_unmount(mountpoint), then removes image if it exists. Idempotent. */
int vol_remove(const char *image, const char *mountpoint, cs_error **err);

/* Whether a volume is mounted at mountpoint (after an agent restart: the kernel kept it). */
bool vol_mounted(const char *mountpoint);

/* The bytes read and written on the block device mounted at mountpoint
 * (/sys/dev/block/M:m/stat, sectors x 512): since the device was first used, so subtract the
 * counters vol_create or vol_attach returned. */
int vol_io_bytes(const char *mountpoint, uint64_t *ret_read, uint64_t *ret_written, cs_error **err);
