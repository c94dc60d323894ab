/* Prometheus metrics in the text exposition format (0.0.4): a page written at scrape time by
 * the daemon's collector, and histograms updated on the hot path with atomics (no lock).
 * Label values and help texts are escaped here; names are the caller's constants.
 * Library code: does not log. docs/metrics.md lists what each daemon exposes. */
#pragma once

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A page being written; starts zeroed, freed with cs_mpage_free. Grows as needed. */
typedef struct cs_mpage {
        char *text;
        size_t len, cap;
} cs_mpage;

void cs_mpage_free(cs_mpage *p);

/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram): once per metric,
 * before its samples. */
void cs_mpage_family(cs_mpage *p, const char *name, const char *type, const char *help);

/* One sample: name{k1="v1",...} value. labels: NULL, or "k1", "v1", ..., NULL; a NULL value
 * is written as "". Values are escaped (\\, \", \n). */
void cs_mpage_sample(cs_mpage *p, const char *name, const char *const *labels, double value);

/* An integer sample, written exactly (a double would round counters past 2^53). */
void cs_mpage_sample_u64(cs_mpage *p, const char *name, const char *const *labels, uint64_t value);

/* The standard process_* metrics of the calling process (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
 * process_max_fds, process_start_time_seconds), from /proc/self. */
void cs_mpage_process(cs_mpage *p);

/* A histogram of durations in seconds with fixed upper bounds (ascending; +Inf implied). */
#define CS_HISTOGRAM_MAX_BOUNDS 16
typedef struct cs_histogram {
        const double *bounds;
        size_t n_bounds;
        _Atomic uint64_t buckets[CS_HISTOGRAM_MAX_BOUNDS + 1]; /* not cumulative; last: +Inf */
        _Atomic uint64_t count;
        _Atomic uint64_t sum_ns;
} cs_histogram;

/* The default bounds, Prometheus client libraries' own (5 ms .. 10 s), 11 of them. */
extern const double cs_histogram_default_bounds[];
extern const size_t cs_histogram_default_n;

/* bounds must outlive h; n_bounds <= CS_HISTOGRAM_MAX_BOUNDS. */
void cs_histogram_init(cs_histogram *h, const double *bounds, size_t n_bounds);
void cs_histogram_observe(cs_histogram *h, int64_t ns);

/* name_bucket{labels...,le="..."} (cumulative), name_sum, name_count. */
void cs_mpage_histogram(cs_mpage *p, const char *name, const char *const *labels,
                        const cs_histogram *h);
