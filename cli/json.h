/* A small JSON writer: builds one document in memory, then it is written at once.
 *
 * Separators are placed by the writer: call json_key() before each member's value, and the
 * value functions directly for array elements. Strings are escaped per RFC 8259; bytes that
 * are not valid UTF-8 are written as U+FFFD, so the output is always valid JSON. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 16

typedef struct json_writer {
        char *buf; /* NUL-terminated */
        size_t len, cap;
        unsigned depth;
        bool after_key;
        bool has_member[JSON_MAX_DEPTH]; /* per open object/array: needs a comma first */
} json_writer;

void json_init(json_writer *j);
/* Frees the buffer; the writer can be used again after json_init(). */
void json_free(json_writer *j);
static inline void json_freep(json_writer *j)
{
        json_free(j);
}
#define _cleanup_json_ __attribute__((cleanup(json_freep)))

void json_object_begin(json_writer *j);
void json_object_end(json_writer *j);
void json_array_begin(json_writer *j);
void json_array_end(json_writer *j);
void json_key(json_writer *j, const char *key);

void json_string(json_writer *j, const char *s);
void json_string_len(json_writer *j, const char *s, size_t len);
void json_base64(json_writer *j, const uint8_t *data, size_t len);
void json_u64(json_writer *j, uint64_t v);
void json_i64(json_writer *j, int64_t v);
void json_bool(json_writer *j, bool v);
void json_null(json_writer *j);

/* Ends the document with a newline (JSON lines: one document per line). */
void json_newline(json_writer *j);

/* Key and value in one call. */
void json_kv_string(json_writer *j, const char *key, const char *s);
void json_kv_u64(json_writer *j, const char *key, uint64_t v);
void json_kv_i64(json_writer *j, const char *key, int64_t v);
void json_kv_bool(json_writer *j, const char *key, bool v);
