#include "log.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"

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

bool cs_log_key_valid(const char *key)
{
        static const char *const reserved[] = { "ts",         "level", "request_id",
                                                "sandbox_id", "msg",   "cut" };
        size_t len = key ? strlen(key) : 0;

        if (len == 0 || len > CS_LOG_KEY_MAX)
                return false;
        for (const char *p = key; *p; p++) {
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        }
        for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
                if (strcmp(key, reserved[i]) == 0)
                        return false;
        }
        return true;
}

/* --- the line builder ------------------------------------------------------------------ */

/* A bounded string builder: appends past `cap` are dropped and set `cut`; the buffer always
 * keeps LOG_TAIL bytes for the closing tail of a cut line. */
typedef struct line {
        char buf[CS_LOG_LINE_MAX];
        size_t len;
        size_t cap;
        /* The longest prefix that ends on a whole character of an escaped string, with the
         * tail's room still free: where a line cut inside a string is closed. */
        size_t safe;
        bool cut;
} line;

/* Room kept at the end of every line: `...","cut":true}` and the newline. */
#define LOG_TAIL 32
/* Room the fields leave for the message. */
#define LOG_MSG_ROOM 256

static void line_init(line *l, size_t cap)
{
        l->len = 0;
        l->safe = 0;
        l->cut = false;
        l->cap = cap < sizeof(l->buf) - LOG_TAIL ? cap : sizeof(l->buf) - LOG_TAIL;
}

static void line_putc(line *l, char c)
{
        if (l->cut || l->len + 1 > l->cap) {
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

/* Appends s past the cap, into the room kept for the tail. */
static void line_tail(line *l, const char *s)
{
        size_t n = strlen(s);

        if (l->len + n > sizeof(l->buf))
                n = sizeof(l->buf) - l->len;
        memcpy(l->buf + l->len, s, n);
        l->len += n;
}

typedef enum esc_mode {
        ESC_JSON,        /* inside a JSON string */
        ESC_TEXT,        /* text: control characters only (the message, ids) */
        ESC_TEXT_QUOTED, /* text inside "...": also the quote and the backslash */
} esc_mode;

static void line_put_hex(line *l, const char *prefix, unsigned char c)
{
        static const char hex[] = "0123456789abcdef";

        line_puts(l, prefix);
        line_putc(l, hex[c >> 4]);
        line_putc(l, hex[c & 0xf]);
}

/* Appends at most `max` bytes of s, escaped for `mode`, with "..." when more were left. A
 * message can thus never forge a second line, close its string, or carry bad UTF-8. */
static void line_put_escaped(line *l, const char *s, size_t max, esc_mode mode)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t n = strlen(s);
        bool json = mode == ESC_JSON, quoted = mode != ESC_TEXT;

        for (size_t i = 0; i < n && !l->cut;) {
                unsigned char c = p[i];
                size_t k = 1;

                l->safe = l->len;
                if (c >= 0x80)
                        k = cs_utf8_len(p + i, n - i);
                if (i + (k ? k : 1) > max) {
                        line_puts(l, "...");
                        return;
                }
                if (c >= 0x80 && k == 0) {
                        if (json)
                                line_puts(l, "\\ufffd");
                        else
                                line_put_hex(l, "\\x", c);
                        k = 1;
                } else if (c >= 0x80) {
                        for (size_t j = 0; j < k; j++)
                                line_putc(l, (char)p[i + j]);
                } else if ((c == '"' || c == '\\') && quoted) {
                        line_putc(l, '\\');
                        line_putc(l, (char)c);
                } else if (c == '\n') {
                        line_puts(l, "\\n");
                } else if (c < 0x20 || c == 0x7f) {
                        line_put_hex(l, json ? "\\u00" : "\\x", c);
                } else {
                        line_putc(l, (char)c);
                }
                i += k;
        }
        if (!l->cut)
                l->safe = l->len;
}

/* Whether a text value needs quotes to read back as one value. */
static bool text_needs_quotes(const char *s)
{
        if (!*s || !cs_utf8_valid(s, strlen(s)))
                return true;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
                        return true;
        }
        return false;
}

/* Appends one field: `,"key":value` (JSON) or ` key=value` (text). */
static void line_put_field(line *l, const cs_log_field *f, bool json)
{
        char num[32];

        line_puts(l, json ? ",\"" : " ");
        line_puts(l, f->key);
        line_puts(l, json ? "\":" : "=");
        switch (f->type) {
        case CS_LOG_FIELD_STR:
                if (json || text_needs_quotes(f->v.s)) {
                        line_putc(l, '"');
                        line_put_escaped(l, f->v.s, CS_LOG_VALUE_MAX,
                                         json ? ESC_JSON : ESC_TEXT_QUOTED);
                        line_putc(l, '"');
                } else {
                        line_put_escaped(l, f->v.s, CS_LOG_VALUE_MAX, ESC_TEXT);
                }
                return;
        case CS_LOG_FIELD_INT:
                snprintf(num, sizeof(num), "%" PRId64, f->v.i);
                break;
        case CS_LOG_FIELD_UINT:
                snprintf(num, sizeof(num), "%" PRIu64, f->v.u);
                break;
        case CS_LOG_FIELD_BOOL:
        default:
                snprintf(num, sizeof(num), "%s", f->v.b ? "true" : "false");
                break;
        }
        line_puts(l, num);
}

/* Renders the fields that fit whole within cap into f; *ret_cut when some did not. */
static void render_fields(line *f, size_t cap, const cs_log_field *fields, size_t n, bool json,
                          bool *ret_cut)
{
        line_init(f, cap);
        for (size_t i = 0; i < n; i++) {
                size_t at = f->len;

                if (!cs_log_key_valid(fields[i].key) ||
                    (fields[i].type == CS_LOG_FIELD_STR && !fields[i].v.s))
                        continue;
                line_put_field(f, &fields[i], json);
                if (f->cut) { /* whole or not at all, and none after it */
                        f->len = at;
                        f->cut = false;
                        *ret_cut = true;
                        return;
                }
        }
}

/* Appends what another line holds (it fits: its cap said so). */
static void line_append(line *l, const line *f)
{
        memcpy(l->buf + l->len, f->buf, f->len);
        l->len += f->len;
}

static void render_json(line *l, line *f, const char *ts, cs_log_level level,
                        const char *request_id, const char *sandbox_id, const cs_log_field *fields,
                        size_t n, const char *msg)
{
        bool fields_cut = false;

        line_puts(l, "{\"ts\":\"");
        line_puts(l, ts);
        line_puts(l, "\",\"level\":\"");
        line_puts(l, level_names[level]);
        line_putc(l, '"');
        if (request_id) {
                line_puts(l, ",\"request_id\":\"");
                line_put_escaped(l, request_id, CS_LOG_VALUE_MAX, ESC_JSON);
                line_putc(l, '"');
        }
        if (sandbox_id) {
                line_puts(l, ",\"sandbox_id\":\"");
                line_put_escaped(l, sandbox_id, CS_LOG_VALUE_MAX, ESC_JSON);
                line_putc(l, '"');
        }
        if (!l->cut && l->len + LOG_MSG_ROOM < l->cap) {
                render_fields(f, l->cap - l->len - LOG_MSG_ROOM, fields, n, true, &fields_cut);
                line_append(l, f);
        } else if (n > 0) {
                fields_cut = true;
        }
        line_puts(l, ",\"msg\":\"");
        line_put_escaped(l, msg, sizeof(l->buf), ESC_JSON);
        if (l->cut) { /* cut inside a string: close it there, and the object */
                l->len = l->safe;
                line_tail(l, "...\",\"cut\":true}");
                return;
        }
        line_tail(l, fields_cut ? "\",\"cut\":true}" : "\"}");
}

static void render_text(line *l, line *f, const char *ts, cs_log_level level,
                        const char *request_id, const char *sandbox_id, const cs_log_field *fields,
                        size_t n, const char *msg)
{
        bool fields_cut = false;
        size_t cap = l->cap;

        line_puts(l, ts);
        line_putc(l, ' ');
        line_puts(l, level_tags[level]);
        line_putc(l, ' ');
        if (request_id || sandbox_id) {
                line_putc(l, '[');
                if (request_id) {
                        line_puts(l, "req=");
                        line_put_escaped(l, request_id, CS_LOG_VALUE_MAX, ESC_TEXT);
                }
                if (sandbox_id) {
                        line_puts(l, request_id ? " sandbox=" : "sandbox=");
                        line_put_escaped(l, sandbox_id, CS_LOG_VALUE_MAX, ESC_TEXT);
                }
                line_puts(l, "] ");
        }
        /* The fields go after the message but are measured first, so that a long message is
         * what gets cut. */
        f->len = 0;
        if (!l->cut && l->len + LOG_MSG_ROOM < cap)
                render_fields(f, cap - l->len - LOG_MSG_ROOM, fields, n, false, &fields_cut);
        else
                fields_cut = n > 0;
        l->cap = cap - f->len;
        line_put_escaped(l, msg, sizeof(l->buf), ESC_TEXT);
        if (l->cut) {
                l->len = l->safe;
                line_tail(l, "...");
        }
        line_append(l, f);
        if (fields_cut && !l->cut)
                line_tail(l, " ...");
}

size_t cs_log_render(char buf[static CS_LOG_LINE_MAX], bool json, const char *ts,
                     cs_log_level level, const char *request_id, const char *sandbox_id,
                     const cs_log_field *fields, size_t n, const char *msg)
{
        /* Two lines of 4 KiB on the stack: every thread that logs has far more. */
        line l, f;

        if ((unsigned)level > CS_LOG_ERROR)
                level = CS_LOG_ERROR;
        line_init(&l, sizeof(l.buf));
        f.len = 0;
        if (json)
                render_json(&l, &f, ts, level, request_id, sandbox_id, fields, n, msg);
        else
                render_text(&l, &f, ts, level, request_id, sandbox_id, fields, n, msg);
        /* The tail's room always holds the newline. */
        if (l.len == sizeof(l.buf))
                l.len--;
        l.buf[l.len++] = '\n';
        memcpy(buf, l.buf, l.len);
        return l.len;
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

void cs_logv_fields(cs_log_level level, const char *request_id, const char *sandbox_id,
                    const cs_log_field *fields, size_t n, const char *fmt, va_list ap)
{
        char ts[40], msg[CS_LOG_LINE_MAX], out[CS_LOG_LINE_MAX];
        size_t len;

        if (!cs_log_enabled(level))
                return;
        format_time(ts, sizeof(ts));
        vsnprintf(msg, sizeof(msg), fmt, ap);
        len = cs_log_render(out, atomic_load(&log_json), ts, level, request_id, sandbox_id, fields,
                            n, msg);
        (void)!write(STDERR_FILENO, out, len);
}

void cs_log_fields(cs_log_level level, const char *request_id, const char *sandbox_id,
                   const cs_log_field *fields, size_t n, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        cs_logv_fields(level, request_id, sandbox_id, fields, n, fmt, ap);
        va_end(ap);
}

void cs_logv(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
             va_list ap)
{
        cs_logv_fields(level, request_id, sandbox_id, NULL, 0, fmt, ap);
}

void cs_log(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
            ...)
{
        va_list ap;

        va_start(ap, fmt);
        cs_logv(level, request_id, sandbox_id, fmt, ap);
        va_end(ap);
}
