/* The node agent's own Prometheus metrics (docs/metrics.md): per sandbox on the node, read
 * through the sandbox source, with the values DescribeSandbox reports (the same snapshot
 * code); and per exec and per file call, counted as they end. Thread-safe: counters are
 * atomics, the page is written by the metrics server's one thread. */
#pragma once

#include <stdint.h>

#include "metrics.h"
#include "net.h"
#include "sandbox.h"
#include "source.h"

/* How an exec ended, for compute_exec_total{outcome}. */
typedef enum na_exec_outcome {
        NA_EXEC_EXITED,
        NA_EXEC_SIGNALED,
        NA_EXEC_TIMEOUT,
        NA_EXEC_CANCELLED,
        NA_EXEC_OOM,
        NA_EXEC_ERROR,
        NA_EXEC_N_OUTCOMES
} na_exec_outcome;

/* A destroyed sandbox's series stay this long after it was destroyed (its final values,
 * for at least a few scrapes), then go. */
#define NA_METRICS_DESTROYED_KEEP_MS (5 * 60 * 1000)

void na_metrics_exec_started(void);
void na_metrics_exec_ended(na_exec_outcome outcome, int64_t duration_ns);
/* Bytes of workspace data a ReadFile returned or a WriteFile wrote. */
void na_metrics_file_bytes(bool write, uint64_t bytes);

/* Writes the agent's page (after the common metrics): every sandbox src lists. */
void na_metrics_write(cs_mpage *p, source *src);
/* The warm pool's families (local mode with --warm-pool > 0; nothing otherwise). */
void na_metrics_write_pool(cs_mpage *p, sb_registry *reg);
/* The sandboxes' resolver's families (with a sandbox network; nothing when net is NULL). */
void na_metrics_write_dns(cs_mpage *p, na_net *net);
