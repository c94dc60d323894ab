/* Container paths the API takes from clients. */
#pragma once

#include <stdbool.h>

#include "error.h"

/* Longest mount_path accepted, in bytes. */
#define CS_MOUNT_PATH_MAX 1024

/* A workspace mount path (compute.v1 WorkspaceSpec.mount_path): absolute, clean (no empty,
 * "." or ".." components, no trailing slash), not the root, not under the sandbox's /proc,
 * /dev or /sys, printable without spaces or ':' (which container runtimes read as a
 * separator), at most CS_MOUNT_PATH_MAX bytes. Returns 0, or -1 with INVALID_ARGUMENT. */
int cs_mount_path_check(const char *p, cs_error **err);
