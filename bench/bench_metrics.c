/* bench-metrics: what the agent's /metrics page costs for a node of N sandboxes, at the
 * metrics layer (na_metrics_write over a source that lists N made-up sandboxes; no cgroup
 * read, no HTTP). Prints bytes and time per page for 1 sandbox (the baseline, run in the same
 * process) and for N, and their ratio. Asserts nothing.
 *
 * Usage: bench-metrics [N [RUNS]] (default 500 sandboxes, 200 pages). With -o FILE first,
 * the N-sandbox page is also written to FILE (for promtool check metrics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_metrics.h"
#include "util.h"
#include "uuid.h"

typedef struct fake_source {
        source base;
        size_t n;
} fake_source;

static int fake_list(source *s, const src_page *page, src_entry **ret, size_t *ret_n,
                     char **ret_next, cs_error **err)
{
        fake_source *f = (fake_source *)s;
        src_entry *e = cs_xcalloc(f->n + 1, sizeof(*e));
        int64_t now = cs_now_realtime_ms();

        (void)page;
        (void)err;
        for (size_t i = 0; i < f->n; i++) {
                sb_info *in = &e[i].info;
                char id[CS_UUID_STRLEN + 1];

                cs_uuid_generate(id);
                in->id = cs_xstrdup(id);
                cs_uuid_generate(id);
                in->tenant_id = cs_xstrdup(id);
                cs_uuid_generate(id);
                in->session_id = cs_xstrdup(id);
                in->status = SB_READY;
                in->created_at_ms = now - 3600 * 1000;
                in->usage = (usage_metrics){ .cpu_ms = 123456 + i,
                                             .memory_peak_bytes = 987654321,
                                             .disk_read_bytes = 12345678901,
                                             .disk_write_bytes = 23456789012,
                                             .network_egress_bytes = 345678,
                                             .network_ingress_bytes = 456789 };
                in->memory_now_bytes = 123456789;
        }
        *ret = e;
        *ret_n = f->n;
        *ret_next = NULL;
        return 0;
}

static const source_ops fake_ops = { .name = "bench", .list = fake_list };

static double now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Median microseconds per page over runs pages of n sandboxes; *ret_bytes: a page's size. */
static double measure(size_t n, int runs, size_t *ret_bytes, const char *out)
{
        fake_source f = { .base = { .ops = &fake_ops }, .n = n };
        double *t = cs_xcalloc((size_t)runs, sizeof(*t)), med;

        for (int i = 0; i < runs; i++) {
                cs_mpage p = { 0 };
                double t0 = now_us();

                na_metrics_write(&p, &f.base);
                t[i] = now_us() - t0;
                *ret_bytes = p.len;
                if (out && i == 0) {
                        FILE *fp = fopen(out, "w");

                        if (fp) {
                                fwrite(p.text, 1, p.len, fp);
                                fclose(fp);
                        }
                }
                cs_mpage_free(&p);
        }
        for (int i = 1; i < runs; i++) /* insertion sort: runs is small */
                for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                        double x = t[j];

                        t[j] = t[j - 1];
                        t[j - 1] = x;
                }
        med = t[runs / 2];
        free(t);
        return med;
}

int main(int argc, char **argv)
{
        const char *out = NULL;
        size_t n, bytes1 = 0, bytes_n = 0;
        int runs;
        double t1, tn;

        if (argc > 2 && strcmp(argv[1], "-o") == 0) {
                out = argv[2];
                argc -= 2;
                argv += 2;
        }
        n = argc > 1 ? strtoul(argv[1], NULL, 10) : 500;
        runs = argc > 2 ? atoi(argv[2]) : 200;
        if (n == 0 || runs <= 0) {
                fprintf(stderr, "usage: bench-metrics [-o FILE] [N [RUNS]]\n");
                return 2;
        }
        t1 = measure(1, runs, &bytes1, NULL);
        tn = measure(n, runs, &bytes_n, out);
        printf("agent page, sandbox part and exec/file counters (median of %d):\n", runs);
        printf("  1 sandbox:    %8zu bytes  %9.1f us\n", bytes1, t1);
        printf("  %zu sandboxes: %8zu bytes  %9.1f us  (x%.0f the time of 1; %.0f bytes and "
               "%.2f us per sandbox)\n",
               n, bytes_n, tn, tn / t1, (double)(bytes_n - bytes1) / (double)(n - 1 ? n - 1 : 1),
               (tn - t1) / (double)(n - 1 ? n - 1 : 1));
        return 0;
}
