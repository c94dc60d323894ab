/* Admission control (issue 12): what the node can give (memory, CPU, read once at start) and
 * whether a sandbox's limits fit it, alone and on top of what the node's live sandboxes have
 * committed, under an overcommit ratio per resource. Pure and unit-tested; the caller keeps
 * the committed sums (recomputed from the registry after a restart). Does not log. */
#pragma once

#include <stdint.h>

#include "error.h"

typedef struct na_capacity {
        uint64_t memory_bytes; /* MemTotal of /proc/meminfo */
        uint32_t cpu_millis;   /* CPUs this process may run on, capped by cgroup cpu.max */
        double memory_overcommit, cpu_overcommit; /* >= 1.0: committed may reach capacity * this */
} na_capacity;

typedef struct na_committed {
        uint64_t memory_bytes;
        uint64_t cpu_millis;
} na_committed;

/* Reads MemTotal from meminfo_path (e.g. "/proc/meminfo") and the CPUs from
 * sched_getaffinity, capped by cpu_max_path (cgroup v2 "cpu.max": "max 100000" or
 * "quota period"; NULL or unreadable: no cap). Fills memory_bytes and cpu_millis only.
 * -1 with INTERNAL when MemTotal cannot be read. */
int na_capacity_read(const char *meminfo_path, const char *cpu_max_path, na_capacity *ret,
                     cs_error **err);

/* 0 when a sandbox asking cpu_millis and memory_bytes (0: no limit asked, nothing checked or
 * committed) fits: each at most the node's capacity, and committed + asked at most capacity
 * times the overcommit ratio. Else -1 with RESOURCE_EXHAUSTED naming the limit, e.g.
 * "memory: 64 GiB asked, 23 GiB on this node" or
 * "cpu committed 1900m of 2000m (overcommit 1.0), 500m asked". */
int na_admit(const na_capacity *cap, const na_committed *used, uint32_t cpu_millis,
             uint64_t memory_bytes, cs_error **err);
