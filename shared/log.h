/* Logging: one line per event on stderr, as text or JSON lines.
 *
 * Text:  2026-12-02T08:37:19.123Z INFO  [req=... sandbox=...] message
 * JSON:  {"ts":"2026-12-02T08:37:19.123Z","level":"info","request_id":"...","sandbox_id":"...",
 *         "msg":"message"}
 * Each line is written with a single write(2), so lines from different threads never mix.
 * Library code does not log; the edges (RPC handlers, main) do. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

typedef enum cs_log_level {
        CS_LOG_DEBUG,
        CS_LOG_INFO,
        CS_LOG_WARN,
        CS_LOG_ERROR,
} cs_log_level;

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
