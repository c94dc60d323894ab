/* Resource usage as the API reports it (common.v1.UsageMetrics), for code that does not
 * include generated headers. */
#pragma once

#include <stdint.h>

typedef struct usage_metrics {
        uint64_t cpu_ms;
        uint64_t memory_peak_bytes;
        uint64_t memory_avg_bytes;
        uint64_t disk_read_bytes;
        uint64_t disk_write_bytes;
        uint64_t network_egress_bytes;
        uint64_t network_ingress_bytes;
} usage_metrics;
