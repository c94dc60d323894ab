#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A line longer than this is cut (and marked with "..."), never split across writes. */
#define LOG_LINE_MAX 4096

static atomic_int log_min_level = CS_LOG_INFO;
static atomic_bool log_json = false;

static const char *const level_names[] = { "debug", "info", "warn", "error" };
static const char *const level_tags[] = { "DEBUG", "INFO ", "WARN ", "ERROR" };

int cs_log_level_parse(const char *name, cs_log_level *ret)
{
        for (int i = CS_LOG_DEBUG; i <= CS_LOG_ERROR; i++) {
                if (strcmp(name, level_names[i]) == 0) {
                        *ret = (cs_log_level)i;
                        return 0;
                }
        }
        return -1;
}

int cs_log_format_parse(const char *name, bool *ret_json)
{
        if (strcmp(name, "text") == 0)
                *ret_json = false;
        else if (strcmp(name, "json") == 0)
                *ret_json = true;
        else
                return -1;
        return 0;
}

void cs_log_setup(cs_log_level min_level, bool json)
{
        atomic_store(&log_min_level, min_level);
        atomic_store(&log_json, json);
}

bool cs_log_enabled(cs_log_level level)
{
        return (int)level >= atomic_load(&log_min_level);
}

/* A small bounded string builder: appends never overflow, the result is always terminated. */
typedef struct line {
        char buf[LOG_LINE_MAX];
        size_t len;
        size_t safe; /* longest prefix that ends on a whole escaped character, tail room kept */
        bool cut;
} line;

/* Room kept at the end of a cut JSON line for its closing tail. */
#define LOG_JSON_TAIL 32

static void line_putc(line *l, char c)
{
        /* Keep room for "...\n" and the terminator. */
        if (l->len + 5 >= sizeof(l->buf)) {
                l->cut = true;
                return;
        }
        l->buf[l->len++] = c;
}

static void line_puts(line *l, const char *s)
{
        for (; *s; s++)
                line_putc(l, *s);
}

/* Appends s with JSON string escaping (or, for text, with control characters escaped so a
 * message can never forge a second log line). */
static void line_put_escaped(line *l, const char *s, bool json)
{
        static const char hex[] = "0123456789abcdef";

        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (l->len + LOG_JSON_TAIL <= sizeof(l->buf))
                        l->safe = l->len;
                if (*p == '"' && json) {
                        line_puts(l, "\\\"");
                } else if (*p == '\\' && json) {
                        line_puts(l, "\\\\");
                } else if (*p == '\n') {
                        line_puts(l, "\\n");
                } else if (*p < 0x20 || *p == 0x7f) {
                        line_puts(l, json ? "\\u00" : "\\x");
                        line_putc(l, hex[*p >> 4]);
                        line_putc(l, hex[*p & 0xf]);
                } else {
                        line_putc(l, (char)*p);
                }
        }
}

static void format_time(char *buf, size_t size)
{
        struct timespec ts;
        struct tm tm;
        size_t n;

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void cs_logv(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
             va_list ap)
{
        char ts[40], msg[LOG_LINE_MAX];
        bool json = atomic_load(&log_json);
        line l = { .len = 0 };

        if (!cs_log_enabled(level))
                return;
        format_time(ts, sizeof(ts));
        vsnprintf(msg, sizeof(msg), fmt, ap);

        if (json) {
                line_puts(&l, "{\"ts\":\"");
                line_puts(&l, ts);
                line_puts(&l, "\",\"level\":\"");
                line_puts(&l, level_names[level]);
                line_puts(&l, "\"");
                if (request_id) {
                        line_puts(&l, ",\"request_id\":\"");
                        line_put_escaped(&l, request_id, true);
                        line_puts(&l, "\"");
                }
                if (sandbox_id) {
                        line_puts(&l, ",\"sandbox_id\":\"");
                        line_put_escaped(&l, sandbox_id, true);
                        line_puts(&l, "\"");
                }
                line_puts(&l, ",\"msg\":\"");
                line_put_escaped(&l, msg, true);
                /* A cut JSON line must still parse: close it with a fixed tail. */
                if (l.cut)
                        l.len = l.safe;
                line_puts(&l, l.cut ? "...\",\"cut\":true}" : "\"}");
        } else {
                line_puts(&l, ts);
                line_putc(&l, ' ');
                line_puts(&l, level_tags[level]);
                line_putc(&l, ' ');
                if (request_id || sandbox_id) {
                        line_putc(&l, '[');
                        if (request_id) {
                                line_puts(&l, "req=");
                                line_put_escaped(&l, request_id, false);
                        }
                        if (sandbox_id) {
                                line_puts(&l, request_id ? " sandbox=" : "sandbox=");
                                line_put_escaped(&l, sandbox_id, false);
                        }
                        line_puts(&l, "] ");
                }
                line_put_escaped(&l, msg, false);
                if (l.cut)
                        line_puts(&l, "...");
        }
        l.buf[l.len++] = '\n';
        (void)!write(STDERR_FILENO, l.buf, l.len);
}

void cs_log(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
            ...)
{
        va_list ap;

        va_start(ap, fmt);
        cs_logv(level, request_id, sandbox_id, fmt, ap);
        va_end(ap);
}
