/* Logging: one line per event on stderr, as text or JSON lines.
 *
 * Text:  2026-12-02T08:37:19.123Z INFO  [req=... sandbox=...] message key=value key="a b"
 * JSON:  {"ts":"2026-12-02T08:37:19.123Z","level":"info","request_id":"...","sandbox_id":"...",
 *         "key":"value","n":12,"msg":"message"}
 * Each line is written with a single write(2), so lines from different threads never mix.
 * Library code does not log; the edges (RPC handlers, main) do.
 *
 * Structured fields (cs_log_fields): key/value pairs next to the message. In JSON each is a
 * member of the line's object (strings escaped, numbers and booleans bare), never text inside
 * "msg"; in text, key=value after the message, the value in double quotes (with \" \\ and
 * control characters escaped) when it is empty or holds a space, a quote, '=' or a
 * backslash. Every string (ids, values, the message) is escaped so that it can never forge
 * a second line or another field, and bytes that are not UTF-8 are replaced (\ufffd in
 * JSON, \xNN in text). */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cs_log_level {
        CS_LOG_DEBUG,
        CS_LOG_INFO,
        CS_LOG_WARN,
        CS_LOG_ERROR,
} cs_log_level;

/* A line longer than this is cut, never split across writes (see cs_log_fields). */
#define CS_LOG_LINE_MAX 4096
/* Bytes of one string value (request id, sandbox id, a field's string) kept; the rest is cut
 * and the value ends with "...". Client-controlled values are thus bounded one by one. */
#define CS_LOG_VALUE_MAX 512
/* A field key: 1..CS_LOG_KEY_MAX of [a-z0-9_]. */
#define CS_LOG_KEY_MAX 32

/* Parses "debug", "info", "warn", "error". Returns -1 on an unknown name. */
int cs_log_level_parse(const char *name, cs_log_level *ret);
/* Parses "text" or "json". Returns -1 on an unknown name. */
int cs_log_format_parse(const char *name, bool *ret_json);

void cs_log_setup(cs_log_level min_level, bool json);
bool cs_log_enabled(cs_log_level level);

/* request_id and sandbox_id may be NULL: they are left out of the line. */
void cs_logv(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
             va_list ap) __attribute__((format(printf, 4, 0)));
void cs_log(cs_log_level level, const char *request_id, const char *sandbox_id, const char *fmt,
            ...) __attribute__((format(printf, 4, 5)));

#define log_debug(...) cs_log(CS_LOG_DEBUG, NULL, NULL, __VA_ARGS__)
#define log_info(...)  cs_log(CS_LOG_INFO, NULL, NULL, __VA_ARGS__)
#define log_warn(...)  cs_log(CS_LOG_WARN, NULL, NULL, __VA_ARGS__)
#define log_error(...) cs_log(CS_LOG_ERROR, NULL, NULL, __VA_ARGS__)

/* --- structured fields ----------------------------------------------------------------- */

typedef enum cs_log_field_type {
        CS_LOG_FIELD_STR, /* v.s; NULL: the field is left out */
        CS_LOG_FIELD_INT, /* v.i */
        CS_LOG_FIELD_UINT,
        CS_LOG_FIELD_BOOL,
} cs_log_field_type;

/* One field. The key is the program's own, a string constant: 1..CS_LOG_KEY_MAX of
 * [a-z0-9_], and none of the line's own members (ts, level, request_id, sandbox_id, msg,
 * cut); a field with another key is left out. Values are borrowed for the call. */
typedef struct cs_log_field {
        const char *key;
        cs_log_field_type type;
        union {
                const char *s;
                int64_t i;
                uint64_t u;
                bool b;
        } v;
} cs_log_field;

#define CS_LOG_STR(k, val)  ((cs_log_field){ .key = (k), .type = CS_LOG_FIELD_STR, .v.s = (val) })
#define CS_LOG_INT(k, val)  ((cs_log_field){ .key = (k), .type = CS_LOG_FIELD_INT, .v.i = (val) })
#define CS_LOG_UINT(k, val) ((cs_log_field){ .key = (k), .type = CS_LOG_FIELD_UINT, .v.u = (val) })
#define CS_LOG_BOOL(k, val) ((cs_log_field){ .key = (k), .type = CS_LOG_FIELD_BOOL, .v.b = (val) })

/* Whether key may name a field (see cs_log_field). */
bool cs_log_key_valid(const char *key);

/* Logs one line with n fields (fields may be NULL when n is 0). Bounds: each string value
 * at CS_LOG_VALUE_MAX bytes; the fields together leave the message room in the line, and a
 * field that does not fit whole is left out, with those after it; the message is cut last.
 * A cut line says so: "cut":true in JSON (the line still parses), "..." at its end in
 * text. */
void cs_logv_fields(cs_log_level level, const char *request_id, const char *sandbox_id,
                    const cs_log_field *fields, size_t n, const char *fmt, va_list ap)
        __attribute__((format(printf, 6, 0)));
void cs_log_fields(cs_log_level level, const char *request_id, const char *sandbox_id,
                   const cs_log_field *fields, size_t n, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

/* The line cs_log_fields writes, without the level filter and the write: into buf
 * (CS_LOG_LINE_MAX bytes), newline included, not NUL-terminated; returns its length. ts is
 * the timestamp text. For tests. */
size_t cs_log_render(char buf[static CS_LOG_LINE_MAX], bool json, const char *ts,
                     cs_log_level level, const char *request_id, const char *sandbox_id,
                     const cs_log_field *fields, size_t n, const char *msg);
