/* Samples and percentiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "util.h"

void samples_add(samples *s, double x)
{
        if (s->n == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 64;
                double *v = realloc(s->v, cap * sizeof(*v));

                if (!v)
                        abort();
                s->v = v;
                s->cap = cap;
        }
        s->v[s->n++] = x;
}

void samples_merge(samples *into, const samples *from)
{
        for (size_t i = 0; i < from->n; i++)
                samples_add(into, from->v[i]);
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* Sorts in place: the order of samples is never used after they are taken. */
double samples_pct(const samples *s, double p)
{
        double rank, frac;
        size_t lo;

        if (s->n == 0)
                return NAN;
        qsort(s->v, s->n, sizeof(*s->v), cmp_double);
        rank = p / 100.0 * (double)(s->n - 1);
        lo = (size_t)rank;
        frac = rank - (double)lo;
        if (lo + 1 >= s->n)
                return s->v[s->n - 1];
        return s->v[lo] + frac * (s->v[lo + 1] - s->v[lo]);
}

void samples_free(samples *s)
{
        free(s->v);
        memset(s, 0, sizeof(*s));
}

json_t *samples_json(const samples *s)
{
        double sum = 0;

        if (s->n == 0)
                return json_pack("{s:i}", "n", 0);
        for (size_t i = 0; i < s->n; i++)
                sum += s->v[i];
        return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)s->n, "min",
                         samples_pct(s, 0), "p50", samples_pct(s, 50), "p90", samples_pct(s, 90),
                         "p99", samples_pct(s, 99), "max", samples_pct(s, 100), "mean",
                         sum / (double)s->n);
}

int64_t bench_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void bench_note_first(void *userdata, const uint8_t *data, size_t len)
{
        bench_first_byte *f = userdata;

        (void)data;
        if (len && !f->first_ns)
                f->first_ns = bench_now_ns();
}

double bench_ms_since(int64_t start_ns)
{
        return (double)(bench_now_ns() - start_ns) / 1e6;
}

double bench_mbps(uint64_t bytes, double ms)
{
        return ms > 0 ? (double)bytes / 1e6 / (ms / 1e3) : 0;
}
