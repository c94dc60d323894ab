/* Usage metrics to and from JSON (see usage_json.h). */
#include <stddef.h>
#include <string.h>

#include "usage_json.h"
#include "util.h"

/* The field names, in the order of usage_metrics. */
static const struct {
        const char *key;
        size_t offset;
} fields[] = {
        { "cpu_ms", offsetof(usage_metrics, cpu_ms) },
        { "memory_peak_bytes", offsetof(usage_metrics, memory_peak_bytes) },
        { "memory_avg_bytes", offsetof(usage_metrics, memory_avg_bytes) },
        { "disk_read_bytes", offsetof(usage_metrics, disk_read_bytes) },
        { "disk_write_bytes", offsetof(usage_metrics, disk_write_bytes) },
        { "network_egress_bytes", offsetof(usage_metrics, network_egress_bytes) },
        { "network_ingress_bytes", offsetof(usage_metrics, network_ingress_bytes) },
};

json_t *usage_to_json(const usage_metrics *u)
{
        json_t *j = json_object();

        for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
                const uint64_t *v = (const uint64_t *)((const char *)u + fields[i].offset);
                json_object_set_new(j, fields[i].key, json_integer((json_int_t)*v));
        }
        return j;
}

void usage_from_json(json_t *j, usage_metrics *ret)
{
        memset(ret, 0, sizeof(*ret));
        for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
                json_int_t v = json_integer_value(json_object_get(j, fields[i].key));
                *(uint64_t *)((char *)ret + fields[i].offset) = v > 0 ? (uint64_t)v : 0;
        }
}
