/* computectl's small JSON writer (prefixed cli_json_: jansson owns the json_ names): builds one
 * document in memory, then it is written at once.
 *
 * Separators are placed by the writer: call cli_json_key() before each member's value, and the
 * value functions directly for array elements. Strings are escaped per RFC 8259; bytes that
 * are not valid UTF-8 are written as U+FFFD, so the output is always valid JSON. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_JSON_MAX_DEPTH 16

typedef struct cli_json_writer {
        char *buf; /* NUL-terminated */
        size_t len, cap;
        unsigned depth;
        bool after_key;
        bool has_member[CLI_JSON_MAX_DEPTH]; /* per open object/array: needs a comma first */
} cli_json_writer;

/* A writer starts zeroed (`cli_json_writer j = { 0 }`). cli_json_free() frees the buffer and
 * leaves the writer zeroed, ready to be used again. */
void cli_json_free(cli_json_writer *j);
static inline void cli_json_freep(cli_json_writer *j)
{
        cli_json_free(j);
}
#define _cleanup_cli_json_ __attribute__((cleanup(cli_json_freep)))

void cli_json_object_begin(cli_json_writer *j);
void cli_json_object_end(cli_json_writer *j);
void cli_json_array_begin(cli_json_writer *j);
void cli_json_array_end(cli_json_writer *j);
void cli_json_key(cli_json_writer *j, const char *key);

void cli_json_string(cli_json_writer *j, const char *s);
void cli_json_string_len(cli_json_writer *j, const char *s, size_t len);
void cli_json_base64(cli_json_writer *j, const uint8_t *data, size_t len);
void cli_json_u64(cli_json_writer *j, uint64_t v);
void cli_json_i64(cli_json_writer *j, int64_t v);
void cli_json_bool(cli_json_writer *j, bool v);
void cli_json_null(cli_json_writer *j);

/* Ends the document with a newline (JSON lines: one document per line). */
void cli_json_newline(cli_json_writer *j);

/* Key and value in one call. */
void cli_json_kv_string(cli_json_writer *j, const char *key, const char *s);
void cli_json_kv_u64(cli_json_writer *j, const char *key, uint64_t v);
void cli_json_kv_i64(cli_json_writer *j, const char *key, int64_t v);
void cli_json_kv_bool(cli_json_writer *j, const char *key, bool v);
