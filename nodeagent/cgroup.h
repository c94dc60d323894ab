/* Reading a sandbox's resource usage from cgroups (v1 or v2) and /proc, and removing a
 * sandbox's cgroup that its runtime left behind.
 *
 * The mounts, their version and the removal go through libcgroup when the hierarchies under
 * the root are mounts it finds in /proc/mounts; the usage reads stay hand-written (measured
 * faster: docs/nodeagent.md). A root that is not such a mount (a fake tree in a test) takes
 * the hand-written path throughout. No logging, no threads; libcgroup's global table is
 * (re)filled by cgroup_fs_detect() (see there). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

typedef enum cgroup_version {
        CS_CGROUP_V1 = 1,
        CS_CGROUP_V2 = 2,
} cgroup_version;

typedef struct cgroup_fs {
        char *root;             /* "/sys/fs/cgroup" normally */
        cgroup_version version; /* what the sandboxes' cgroups use */
        bool hybrid;            /* v1, and a cgroup2 hierarchy is mounted too (systemd's
                                   "unified"); informational: sandboxes use v1 */
        bool libcgroup;         /* the hierarchies are mounts libcgroup found under root:
                                   removal goes through libcgroup */
        char *cpuacct_dir;      /* v1 with libcgroup: where libcgroup found the cpuacct, */
        char *memory_dir;       /* memory and blkio hierarchies mounted (NULL: not mounted, */
        char *blkio_dir;        /* or without libcgroup: looked up under root by name) */
} cgroup_fs;

/* Detects the hierarchy sandboxes get under root.
 *
 * First through libcgroup (cgroup_init(), which reads /proc/mounts and /proc/cgroups): v2
 * when libcgroup has cpu and memory on one cgroup2 mount that is root; v1 when it has the
 * cpuacct and memory hierarchies mounted directly under root. cgroup_init() refills a global
 * table: call this once, before threads (the agent does so at start), and know that an
 * earlier cgroup_fs then uses the table of the latest call.
 *
 * Otherwise (root is not where libcgroup sees the mounts: a fake tree in a test, or a system
 * libcgroup does not understand), by the files, as before libcgroup: v2 when
 * root/cgroup.controllers lists cpu and memory; v1 when root holds v1 controller directories
 * (cpuacct or "cpu,cpuacct", and memory); otherwise FAILED_PRECONDITION naming root (also when
 * root is a cgroup2 mount without cpu and memory, e.g. the near-empty v2 of a hybrid host, or
 * does not exist). ret->hybrid is set for v1 when a cgroup2 hierarchy is mounted too
 * (libcgroup lists a controller on one, or root/unified is one: libcgroup 2.0 skips a cgroup2
 * mount without controllers).
 *
 * On success ret->root is a malloc'd copy of root (trailing slashes dropped); the caller frees
 * it with cgroup_fs_free(). */
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
 * tasks still in it first (cgroup.kill, then each pid of cgroup.procs), retrying the removal
 * for about a second while killed tasks leave. A cgroup that does not exist is fine (0). For
 * a sandbox whose runtime could not stop it: without this its cgroup (and its sentry) stayed
 * after the sandbox was gone. Child cgroups are not walked: runsc makes none. With libcgroup
 * (fs->libcgroup) the hierarchies are the mounts it lists under root and the rmdir is its
 * cgroup_delete_cgroup_ext(CGFLAG_DELETE_EMPTY_ONLY): never its default, which moves the
 * tasks to the parent cgroup, where a sentry that survived the kill would run on unaccounted. */
int cgroup_remove(const cgroup_fs *fs, const char *path, cs_error **err);

/* The names of the child cgroups of `path` (e.g. "/compute": the sandboxes' cgroups): in the
 * v2 tree, or in any v1 hierarchy under the root (a sandbox's cgroup may be left in some
 * hierarchies only), each name once, as a malloc'd array of *ret_n malloc'd strings (free with
 * cgroup_children_free). A path that exists nowhere has none (0). With libcgroup (fs->libcgroup)
 * the hierarchies are the mounts it lists, plus every other directory under a v1 root (its
 * opaque name=systemd, which runsc uses too, as in cgroup_remove). */
int cgroup_children(const cgroup_fs *fs, const char *path, char ***ret, size_t *ret_n,
                    cs_error **err);
void cgroup_children_free(char **names, size_t n);
/* Whether the cgroup `path` exists in the v2 tree or in any v1 hierarchy under the root (as
 * cgroup_children looks for them). An invalid path, or a root that cannot be listed: no. */
bool cgroup_exists(const cgroup_fs *fs, const char *path);

/* The limits of a sandbox's cgroup (0: none). */
typedef struct cgroup_limits {
        uint32_t cpu_millis;   /* v1 cpu.cfs_quota_us over a 100 ms period; v2 cpu.max */
        uint64_t memory_bytes; /* v1 memory.limit_in_bytes; v2 memory.max */
        uint64_t pids_max;     /* pids.max */
} cgroup_limits;

/* Makes the sandbox's cgroup at `path` through libcgroup, with its limits, in every
 * hierarchy libcgroup lists under the root (v1: each mounted controller but cpuset, which
 * runsc makes with its parent's CPUs and memory nodes; v2: the root mount, its controllers
 * enabled down the path). runsc then finds the cgroup made and only joins it:
 * it neither sets its limits nor removes it (runsc/cgroup: "Using pre-created cgroup"), so
 * the caller owns it and removes it with cgroup_remove() when the sandbox goes. An existing
 * cgroup at path (a sandbox re-made after a crash) is taken as it is and its limits set.
 * Returns 1 when made, 0 when the root is not where libcgroup sees the mounts (!fs->libcgroup:
 * a fake tree in a test; the runtime then makes the cgroup itself), -1 with *err. */
int cgroup_create(const cgroup_fs *fs, const char *path, const cgroup_limits *lim, cs_error **err);

/* Reads rx/tx byte counters of every interface but "lo" in the network namespace of pid
 * (from /proc/<pid>/net/dev), summed. Both 0 when only loopback exists. NOT_FOUND when the
 * pid is gone. */
int proc_read_net(const char *proc_root, pid_t pid, uint64_t *ret_rx, uint64_t *ret_tx,
                  cs_error **err);
