/* How computectl shows things: times, sizes, durations, usage metrics, JSON documents. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* Width of the "key:" column of describe's and destroy's text output: the longest key,
 * "network_ingress_bytes:", and a space. */
#define KV_KEY_WIDTH 23

const char *fmt_timestamp(const Google__Protobuf__Timestamp *ts, char buf[static CLI_FMT_MAX])
{
        time_t secs;
        struct tm tm;
        size_t n;

        buf[0] = '\0';
        if (!ts)
                return buf;
        secs = (time_t)ts->seconds;
        if (!gmtime_r(&secs, &tm))
                return buf;
        n = strftime(buf, CLI_FMT_MAX, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, CLI_FMT_MAX - n, ".%03dZ",
                 ts->nanos >= 0 && ts->nanos < 1000000000 ? ts->nanos / 1000000 : 0);
        return buf;
}

const char *fmt_bytes(uint64_t n, char buf[static CLI_FMT_MAX])
{
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        double v = (double)n;
        size_t u = 0;

        if (n < 1024) {
                snprintf(buf, CLI_FMT_MAX, "%" PRIu64 " B", n);
                return buf;
        }
        v /= 1024;
        while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, CLI_FMT_MAX, "%.1f %s", v, units[u]);
        return buf;
}

const char *fmt_duration_ms(int64_t ms, char buf[static CLI_FMT_MAX])
{
        if (ms < 0)
                ms = 0;
        if (ms < 1000)
                snprintf(buf, CLI_FMT_MAX, "%" PRId64 "ms", ms);
        else if (ms < 60 * 1000)
                snprintf(buf, CLI_FMT_MAX, "%.1fs", (double)ms / 1000);
        else if (ms < 3600 * 1000)
                snprintf(buf, CLI_FMT_MAX, "%" PRId64 "m%02" PRId64 "s", ms / 60000,
                         ms / 1000 % 60);
        else
                snprintf(buf, CLI_FMT_MAX, "%" PRId64 "h%02" PRId64 "m%02" PRId64 "s", ms / 3600000,
                         ms / 60000 % 60, ms / 1000 % 60);
        return buf;
}

const char *fmt_status(Compute__V1__SandboxStatus status, char buf[static CLI_FMT_MAX])
{
        const char *name;

        switch (status) {
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_UNSPECIFIED:
                name = "UNSPECIFIED";
                break;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING:
                name = "STARTING";
                break;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY:
                name = "READY";
                break;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_FAILED:
                name = "FAILED";
                break;
        case COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_DESTROYED:
                name = "DESTROYED";
                break;
        default:
                /* A newer server may know more states than this client. */
                snprintf(buf, CLI_FMT_MAX, "UNKNOWN(%d)", (int)status);
                return buf;
        }
        snprintf(buf, CLI_FMT_MAX, "%s", name);
        return buf;
}

const char *fmt_egress(Compute__V1__EgressMode egress, char buf[static CLI_FMT_MAX])
{
        switch (egress) {
        case COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_UNSPECIFIED:
                return "UNSPECIFIED";
        case COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_NONE:
                return "NONE";
        case COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_ALLOWLIST:
                return "ALLOWLIST";
        case COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_OPEN:
                return "OPEN";
        default:
                snprintf(buf, CLI_FMT_MAX, "UNKNOWN(%d)", (int)egress);
                return buf;
        }
}

void fmt_printable_inplace(char *s)
{
        for (unsigned char *p = (unsigned char *)s; *p; p++) {
                if (*p < 0x20 || *p == 0x7f)
                        *p = '?';
                /* U+0080..U+009F, the C1 controls (U+009B is a CSI to many terminals). */
                else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
                        p[0] = p[1] = '?';
        }
}

char *fmt_printable(const char *s)
{
        char *out = cs_xstrdup(s ? s : "");

        fmt_printable_inplace(out);
        return out;
}

void print_kv(const char *key, const char *fmt, ...)
{
        va_list ap;

        printf("%s:%*s", key, KV_KEY_WIDTH - (int)strlen(key) - 1, "");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
}

static void print_kv_bytes(const char *key, uint64_t n)
{
        char b[CLI_FMT_MAX];

        if (n < 1024)
                print_kv(key, "%" PRIu64, n);
        else
                print_kv(key, "%" PRIu64 " (%s)", n, fmt_bytes(n, b));
}

void print_usage_text(const Common__V1__UsageMetrics *u)
{
        static const Common__V1__UsageMetrics zero = COMMON__V1__USAGE_METRICS__INIT;

        if (!u)
                u = &zero;
        print_kv("cpu_ms", "%" PRIu64, u->cpu_ms);
        print_kv_bytes("memory_peak_bytes", u->memory_peak_bytes);
        print_kv_bytes("memory_avg_bytes", u->memory_avg_bytes);
        print_kv_bytes("disk_read_bytes", u->disk_read_bytes);
        print_kv_bytes("disk_write_bytes", u->disk_write_bytes);
        print_kv_bytes("network_egress_bytes", u->network_egress_bytes);
        print_kv_bytes("network_ingress_bytes", u->network_ingress_bytes);
}

/* One line of the entries of a list, space-separated (the server's text, made printable). */
static void print_kv_list(const char *key, char *const *v, size_t n)
{
        _cleanup_free_ char *line = NULL;
        size_t len = 0, cap = 0;

        if (n == 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        cs_text_append(&line, &len, &cap, " ", 1);
                cs_text_append(&line, &len, &cap, v[i], strlen(v[i]));
        }
        fmt_printable_inplace(line);
        print_kv(key, "%s", line);
}

void print_network_text(const Compute__V1__NetworkSpec *n)
{
        char b[CLI_FMT_MAX];

        if (!n)
                return;
        print_kv("egress", "%s", fmt_egress(n->egress, b));
        print_kv_list("allow_domains", n->allow_domains, n->n_allow_domains);
        print_kv_list("allow_cidrs", n->allow_cidrs, n->n_allow_cidrs);
}

static void json_string_array(cli_json_writer *j, const char *key, char *const *v, size_t n)
{
        cli_json_key(j, key);
        cli_json_array_begin(j);
        for (size_t i = 0; i < n; i++)
                cli_json_string(j, v[i]);
        cli_json_array_end(j);
}

void cli_json_network(cli_json_writer *j, const Compute__V1__NetworkSpec *n)
{
        char b[CLI_FMT_MAX];

        if (!n) {
                cli_json_null(j);
                return;
        }
        cli_json_object_begin(j);
        cli_json_kv_string(j, "egress", fmt_egress(n->egress, b));
        json_string_array(j, "allow_domains", n->allow_domains, n->n_allow_domains);
        json_string_array(j, "allow_cidrs", n->allow_cidrs, n->n_allow_cidrs);
        cli_json_object_end(j);
}

void cli_json_usage(cli_json_writer *j, const Common__V1__UsageMetrics *u)
{
        static const Common__V1__UsageMetrics zero = COMMON__V1__USAGE_METRICS__INIT;

        if (!u)
                u = &zero;
        cli_json_object_begin(j);
        cli_json_kv_u64(j, "cpu_ms", u->cpu_ms);
        cli_json_kv_u64(j, "memory_peak_bytes", u->memory_peak_bytes);
        cli_json_kv_u64(j, "memory_avg_bytes", u->memory_avg_bytes);
        cli_json_kv_u64(j, "disk_read_bytes", u->disk_read_bytes);
        cli_json_kv_u64(j, "disk_write_bytes", u->disk_write_bytes);
        cli_json_kv_u64(j, "network_egress_bytes", u->network_egress_bytes);
        cli_json_kv_u64(j, "network_ingress_bytes", u->network_ingress_bytes);
        cli_json_object_end(j);
}

void cli_json_kv_timestamp(cli_json_writer *j, const char *key,
                           const Google__Protobuf__Timestamp *ts)
{
        char b[CLI_FMT_MAX];

        cli_json_key(j, key);
        if (ts)
                cli_json_string(j, fmt_timestamp(ts, b));
        else
                cli_json_null(j);
}

int cli_json_print(cli_json_writer *j)
{
        cli_json_newline(j);
        if (cs_write_all(STDOUT_FILENO, j->buf, j->len) < 0) {
                cs_error e = { .code = cs_errno_to_status(errno), .msg = NULL };
                _cleanup_free_ char *msg = cs_xasprintf("stdout: %s", strerror(errno));

                e.msg = msg;
                return cli_fail(&e);
        }
        return 0;
}
