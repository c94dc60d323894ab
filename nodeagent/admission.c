/* Admission control (admission.h): reads the node's capacity, checks limits against it. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "admission.h"

#define GIB (1024.0 * 1024 * 1024)

static uint64_t meminfo_total(const char *path)
{
        FILE *f = fopen(path, "re");
        char line[256];
        unsigned long long kib = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
                        break;
        fclose(f);
        return (uint64_t)kib * 1024;
}

/* cgroup v2 cpu.max as millis; 0: no cap (or unreadable). */
static uint32_t cpu_max_millis(const char *path)
{
        FILE *f = path ? fopen(path, "re") : NULL;
        unsigned long long quota = 0, period = 0;
        int n;

        if (!f)
                return 0;
        n = fscanf(f, "%llu %llu", &quota, &period);
        fclose(f);
        if (n != 2 || period == 0)
                return 0; /* "max ...": no cap */
        return (uint32_t)(quota * 1000 / period);
}

int na_capacity_read(const char *meminfo_path, const char *cpu_max_path, na_capacity *ret,
                     cs_error **err)
{
        cpu_set_t set;
        uint32_t cpus = 1000, cap;

        ret->memory_bytes = meminfo_total(meminfo_path);
        if (ret->memory_bytes == 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: no MemTotal", meminfo_path);
        if (sched_getaffinity(0, sizeof(set), &set) == 0)
                cpus = (uint32_t)CPU_COUNT(&set) * 1000;
        cap = cpu_max_millis(cpu_max_path);
        ret->cpu_millis = cap && cap < cpus ? cap : cpus;
        return 0;
}

int na_admit(const na_capacity *cap, const na_committed *used, uint32_t cpu_millis,
             uint64_t memory_bytes, cs_error **err)
{
        double mem_room = (double)cap->memory_bytes * cap->memory_overcommit;
        double cpu_room = (double)cap->cpu_millis * cap->cpu_overcommit;

        if (memory_bytes > cap->memory_bytes)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "memory: %.1f GiB asked, %.1f GiB on this node",
                                    (double)memory_bytes / GIB, (double)cap->memory_bytes / GIB);
        if (cpu_millis > cap->cpu_millis)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "cpu: %" PRIu32 "m asked, %" PRIu32 "m on this node",
                                    cpu_millis, cap->cpu_millis);
        if (memory_bytes && (double)(used->memory_bytes + memory_bytes) > mem_room)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "memory committed %.1f GiB of %.1f GiB (overcommit %.1f), "
                                    "%.1f GiB asked",
                                    (double)used->memory_bytes / GIB, mem_room / GIB,
                                    cap->memory_overcommit, (double)memory_bytes / GIB);
        if (cpu_millis && (double)(used->cpu_millis + cpu_millis) > cpu_room)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "cpu committed %" PRIu64 "m of %.0fm (overcommit %.1f), "
                                    "%" PRIu32 "m asked",
                                    used->cpu_millis, cpu_room, cap->cpu_overcommit, cpu_millis);
        return 0;
}
