/* Prometheus text exposition (metrics.h). */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"
#include "util.h"

const double cs_histogram_default_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,    2.5,   5,    10 };
const size_t cs_histogram_default_n = ARRAY_SIZE(cs_histogram_default_bounds);

void cs_mpage_free(cs_mpage *p)
{
        free(p->text);
        *p = (cs_mpage){ 0 };
}

static void put(cs_mpage *p, const char *s, size_t n)
{
        cs_text_append(&p->text, &p->len, &p->cap, s, n);
}

static void puts_(cs_mpage *p, const char *s)
{
        put(p, s, strlen(s));
}

static void __attribute__((format(printf, 2, 3))) putf(cs_mpage *p, const char *fmt, ...)
{
        char buf[64];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        put(p, buf, n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* s escaped as the format asks: \ and newline always, " in label values. */
static void put_escaped(cs_mpage *p, const char *s, int quote)
{
        for (const char *c = s ? s : ""; *c; c++) {
                if (*c == '\\')
                        puts_(p, "\\\\");
                else if (*c == '\n')
                        puts_(p, "\\n");
                else if (*c == '"' && quote)
                        puts_(p, "\\\"");
                else
                        put(p, c, 1);
        }
}

void cs_mpage_family(cs_mpage *p, const char *name, const char *type, const char *help)
{
        puts_(p, "# HELP ");
        puts_(p, name);
        put(p, " ", 1);
        put_escaped(p, help, 0);
        puts_(p, "\n# TYPE ");
        puts_(p, name);
        put(p, " ", 1);
        puts_(p, type);
        put(p, "\n", 1);
}

/* name{labels[,le="..."]} with a space after it. */
static void put_series(cs_mpage *p, const char *name, const char *const *labels, const char *le)
{
        int n = 0;

        puts_(p, name);
        for (size_t i = 0; labels && labels[i]; i += 2, n++) {
                put(p, n ? "," : "{", 1);
                puts_(p, labels[i]);
                puts_(p, "=\"");
                put_escaped(p, labels[i + 1], 1);
                put(p, "\"", 1);
        }
        if (le) {
                put(p, n++ ? "," : "{", 1);
                puts_(p, "le=\"");
                puts_(p, le);
                put(p, "\"", 1);
        }
        puts_(p, n ? "} " : " ");
}

/* The shortest decimal that reads back as v ("0.1", not "0.10000000000000001"). */
static void format_double(char *buf, size_t len, double v)
{
        if (isnan(v)) {
                snprintf(buf, len, "NaN");
                return;
        }
        if (isinf(v)) {
                snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
                return;
        }
        for (int prec = 1; prec <= 17; prec++) {
                snprintf(buf, len, "%.*g", prec, v);
                if (strtod(buf, NULL) == v)
                        return;
        }
}

static void put_double(cs_mpage *p, double v)
{
        char buf[32];

        format_double(buf, sizeof(buf), v);
        puts_(p, buf);
}

void cs_mpage_sample(cs_mpage *p, const char *name, const char *const *labels, double value)
{
        put_series(p, name, labels, NULL);
        put_double(p, value);
        put(p, "\n", 1);
}

void cs_mpage_sample_u64(cs_mpage *p, const char *name, const char *const *labels, uint64_t value)
{
        put_series(p, name, labels, NULL);
        putf(p, "%" PRIu64 "\n", value);
}

void cs_histogram_init(cs_histogram *h, const double *bounds, size_t n_bounds)
{
        memset(h, 0, sizeof(*h));
        h->bounds = bounds;
        h->n_bounds = n_bounds < CS_HISTOGRAM_MAX_BOUNDS ? n_bounds : CS_HISTOGRAM_MAX_BOUNDS;
}

void cs_histogram_observe(cs_histogram *h, int64_t ns)
{
        double s = (double)(ns > 0 ? ns : 0) / 1e9;
        size_t i = 0;

        while (i < h->n_bounds && s > h->bounds[i])
                i++;
        atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(ns > 0 ? ns : 0), memory_order_relaxed);
        atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void cs_mpage_histogram(cs_mpage *p, const char *name, const char *const *labels,
                        const cs_histogram *h)
{
        _cleanup_free_ char *bucket = cs_xasprintf("%s_bucket", name);
        _cleanup_free_ char *sum = cs_xasprintf("%s_sum", name);
        _cleanup_free_ char *count = cs_xasprintf("%s_count", name);
        uint64_t cum = 0;
        char le[32];

        /* Read while others observe: each bucket is read once, and the +Inf bucket is the
         * running total, so the page is monotonic within itself. */
        for (size_t i = 0; i <= h->n_bounds; i++) {
                cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
                format_double(le, sizeof(le), i < h->n_bounds ? h->bounds[i] : INFINITY);
                put_series(p, bucket, labels, le);
                putf(p, "%" PRIu64 "\n", cum);
        }
        cs_mpage_sample(p, sum, labels,
                        (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9);
        cs_mpage_sample_u64(p, count, labels, cum);
}

/* The fields of /proc/self/stat the process metrics use; -1 when unreadable. */
static int proc_stat_fields(unsigned long long *utime, unsigned long long *stime,
                            unsigned long long *start, unsigned long long *vsize, long long *rss)
{
        char buf[1024];
        FILE *f = fopen("/proc/self/stat", "re");
        char *c;
        size_t n;

        if (!f)
                return -1;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        c = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
        if (!c)
                return -1;
        /* After ") ": field 3 (state) onwards; utime is 14, stime 15, starttime 22, vsize 23,
         * rss 24. */
        if (sscanf(c + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                   "%*d %llu %llu %lld",
                   utime, stime, start, vsize, rss) != 5)
                return -1;
        return 0;
}

static long long boot_time(void)
{
        char line[256];
        long long btime = 0;
        FILE *f = fopen("/proc/stat", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "btime %lld", &btime) == 1)
                        break;
        fclose(f);
        return btime;
}

static unsigned open_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        unsigned n = 0;

        if (!d)
                return 0;
        while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n ? n - 1 : 0; /* not the directory's own fd */
}

void cs_mpage_process(cs_mpage *p)
{
        unsigned long long utime, stime, start, vsize;
        long long rss;
        double tick = (double)sysconf(_SC_CLK_TCK);
        struct rlimit rl;

        if (proc_stat_fields(&utime, &stime, &start, &vsize, &rss) == 0) {
                cs_mpage_family(p, "process_cpu_seconds_total", "counter",
                                "Total user and system CPU time spent in seconds.");
                cs_mpage_sample(p, "process_cpu_seconds_total", NULL,
                                (double)(utime + stime) / tick);
                cs_mpage_family(p, "process_resident_memory_bytes", "gauge",
                                "Resident memory size in bytes.");
                cs_mpage_sample_u64(p, "process_resident_memory_bytes", NULL,
                                    (uint64_t)(rss > 0 ? rss : 0) *
                                            (uint64_t)sysconf(_SC_PAGESIZE));
                cs_mpage_family(p, "process_virtual_memory_bytes", "gauge",
                                "Virtual memory size in bytes.");
                cs_mpage_sample_u64(p, "process_virtual_memory_bytes", NULL, vsize);
                cs_mpage_family(p, "process_start_time_seconds", "gauge",
                                "Start time of the process since unix epoch in seconds.");
                cs_mpage_sample(p, "process_start_time_seconds", NULL,
                                (double)boot_time() + (double)start / tick);
        }
        cs_mpage_family(p, "process_open_fds", "gauge", "Number of open file descriptors.");
        cs_mpage_sample_u64(p, "process_open_fds", NULL, open_fds());
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
                cs_mpage_family(p, "process_max_fds", "gauge",
                                "Maximum number of open file descriptors.");
                cs_mpage_sample_u64(p, "process_max_fds", NULL, (uint64_t)rl.rlim_cur);
        }
}
