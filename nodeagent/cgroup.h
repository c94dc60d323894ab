/* Reading a sandbox's resource usage from cgroups (v1 or v2) and /proc.
 *
 * Library code: no logging, no threads, no state beyond the struct below. The root is a
 * parameter so that tests can point it at a fake tree. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

typedef enum cgroup_version {
        CGROUP_V1 = 1,
        CGROUP_V2 = 2,
} cgroup_version;

typedef struct cgroup_fs {
        char *root;             /* "/sys/fs/cgroup" normally */
        cgroup_version version; /* what the sandboxes' cgroups use */
} cgroup_fs;

/* Detects the hierarchy sandboxes get under root: v2 when root/cgroup.controllers lists cpu
 * and memory (on a real system root is then a cgroup2 mount; the check is on the files so that
 * tests can use a plain directory); v1 when root holds v1 controller directories (cpuacct or
 * "cpu,cpuacct", and memory); otherwise FAILED_PRECONDITION naming root (also when root is a
 * cgroup2 mount without cpu and memory, e.g. the near-empty v2 of a hybrid host, or does not
 * exist). On success ret->root is a malloc'd copy of root (trailing slashes dropped); the
 * caller frees it with cgroup_fs_free(). */
int cgroup_fs_detect(const char *root, cgroup_fs *ret, cs_error **err);
void cgroup_fs_free(cgroup_fs *fs);

typedef struct cgroup_sample {
        uint64_t cpu_ns;            /* v1 cpuacct.usage; v2 cpu.stat usage_usec * 1000 */
        uint64_t memory_bytes;      /* v1 memory.usage_in_bytes; v2 memory.current */
        uint64_t memory_peak_bytes; /* v1 memory.max_usage_in_bytes; v2 memory.peak (0 if
                                       the kernel has none) */
        uint64_t io_read_bytes;     /* v1 blkio.throttle.io_service_bytes "Read" totals
                                       (blkio.io_service_bytes if empty); v2 io.stat rbytes */
        uint64_t io_write_bytes;    /* likewise "Write" / wbytes */
        uint64_t oom_kills;         /* v1 memory.oom_control oom_kill; v2 memory.events
                                       oom_kill (0 when the kernel does not count them) */
        bool has_peak;              /* the kernel reported a high-water mark */
} cgroup_sample;

/* Reads everything above for the cgroup at `path` (as in an OCI linux.cgroupsPath, e.g.
 * "/compute/<id>"; relative to the hierarchy root with or without the leading slash; "." and
 * ".." components are INVALID_ARGUMENT). A controller file (or v1 memory/blkio cgroup) that
 * does not exist leaves its fields 0; a cgroup that does not exist at all (v1: no cpuacct
 * cgroup; v2: no directory) is NOT_FOUND. A file whose contents are not what the kernel
 * documents ("max", garbage, larger than the cap) is INTERNAL, naming the file. *ret is
 * written only on success. */
int cgroup_read(const cgroup_fs *fs, const char *path, cgroup_sample *ret, cs_error **err);

/* Resets the memory high-water mark where the kernel allows it. v1: writes 0 to
 * memory.max_usage_in_bytes, which resets the cgroup's watermark for every reader. v2: always
 * 1 (not supported). Kernels >= 6.12 accept writes to memory.peak, but the reset is local to
 * the writing file descriptor: any later open() still reads the peak since the cgroup was
 * created, so a stateless reset would have no effect on cgroup_read(). Callers should treat
 * the v2 peak as a lifetime peak.
 * Returns 0 when reset, 1 when not supported (v2, or no v1 memory cgroup / file), -1 with *err
 * on failure (NOT_FOUND when the cgroup does not exist). */
int cgroup_reset_peak(const cgroup_fs *fs, const char *path, cs_error **err);

/* Removes the cgroup at `path` from every hierarchy (v1) or from the v2 tree, SIGKILLing the
 * tasks still in it first (cgroup.kill, then each pid of cgroup.procs), retrying rmdir for
 * about a second while killed tasks leave. A cgroup that does not exist is fine (0). For a
 * sandbox whose runtime could not stop it: without this its cgroup (and its sentry) stayed
 * after the sandbox was gone. Child cgroups are not walked: runsc makes none. */
int cgroup_remove(const cgroup_fs *fs, const char *path, cs_error **err);

/* Reads rx/tx byte counters of every interface but "lo" in the network namespace of pid
 * (from /proc/<pid>/net/dev), summed. Both 0 when only loopback exists. NOT_FOUND when the
 * pid is gone. */
int proc_read_net(const char *proc_root, pid_t pid, uint64_t *ret_rx, uint64_t *ret_tx,
                  cs_error **err);
