#include "json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "utf8.h"
#include "util.h"

void cli_json_free(cli_json_writer *j)
{
        free(j->buf);
        memset(j, 0, sizeof(*j));
}

static void put(cli_json_writer *j, const char *s, size_t n)
{
        cs_text_append(&j->buf, &j->len, &j->cap, s, n);
}

static void puts_(cli_json_writer *j, const char *s)
{
        put(j, s, strlen(s));
}

/* Before a value: a comma if it is not the first element, unless a key came just before. */
static void before_value(cli_json_writer *j)
{
        if (j->after_key) {
                j->after_key = false;
                return;
        }
        if (j->depth > 0) {
                if (j->has_member[j->depth - 1])
                        put(j, ",", 1);
                j->has_member[j->depth - 1] = true;
        }
}

static void open_(cli_json_writer *j, char c)
{
        before_value(j);
        put(j, &c, 1);
        /* computectl never nests deeper than a few levels: more is a bug, not input. */
        if (j->depth == CLI_JSON_MAX_DEPTH)
                abort();
        j->has_member[j->depth++] = false;
}

static void close_(cli_json_writer *j, char c)
{
        if (j->depth > 0)
                j->depth--;
        put(j, &c, 1);
}

void cli_json_object_begin(cli_json_writer *j)
{
        open_(j, '{');
}

void cli_json_object_end(cli_json_writer *j)
{
        close_(j, '}');
}

void cli_json_array_begin(cli_json_writer *j)
{
        open_(j, '[');
}

void cli_json_array_end(cli_json_writer *j)
{
        close_(j, ']');
}

void cli_json_key(cli_json_writer *j, const char *key)
{
        cli_json_string(j, key);
        put(j, ":", 1);
        j->after_key = true;
}

void cli_json_string_len(cli_json_writer *j, const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;

        before_value(j);
        put(j, "\"", 1);
        while (i < len) {
                size_t run = i, n;

                /* Copy the longest stretch that needs no escaping in one go. */
                while (run < len && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' &&
                       p[run] != '\\')
                        run++;
                put(j, s + i, run - i);
                i = run;
                if (i == len)
                        break;
                if (p[i] >= 0x80) {
                        n = cs_utf8_len(p + i, len - i);
                        if (n == 0) {
                                puts_(j, "\\ufffd");
                                n = 1;
                        } else {
                                put(j, s + i, n);
                        }
                        i += n;
                        continue;
                }
                switch (p[i]) {
                case '"':
                        puts_(j, "\\\"");
                        break;
                case '\\':
                        puts_(j, "\\\\");
                        break;
                case '\n':
                        puts_(j, "\\n");
                        break;
                case '\r':
                        puts_(j, "\\r");
                        break;
                case '\t':
                        puts_(j, "\\t");
                        break;
                default: {
                        char esc[8];
                        snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
                        puts_(j, esc);
                }
                }
                i++;
        }
        put(j, "\"", 1);
}

void cli_json_string(cli_json_writer *j, const char *s)
{
        if (!s) {
                cli_json_null(j);
                return;
        }
        cli_json_string_len(j, s, strlen(s));
}

/* Encoded in pieces of a multiple of 3 bytes (no padding inside) through a small buffer. */
#define BASE64_PIECE 192

void cli_json_base64(cli_json_writer *j, const uint8_t *data, size_t len)
{
        char out[BASE64_PIECE / 3 * 4 + 1];

        before_value(j);
        put(j, "\"", 1);
        for (size_t i = 0; i < len; i += BASE64_PIECE) {
                size_t n = len - i < BASE64_PIECE ? len - i : BASE64_PIECE;

                put(j, out, cs_base64_encode(data + i, n, out));
        }
        put(j, "\"", 1);
}

void cli_json_u64(cli_json_writer *j, uint64_t v)
{
        char b[24];

        before_value(j);
        snprintf(b, sizeof(b), "%" PRIu64, v);
        puts_(j, b);
}

void cli_json_i64(cli_json_writer *j, int64_t v)
{
        char b[24];

        before_value(j);
        snprintf(b, sizeof(b), "%" PRId64, v);
        puts_(j, b);
}

void cli_json_bool(cli_json_writer *j, bool v)
{
        before_value(j);
        puts_(j, v ? "true" : "false");
}

void cli_json_null(cli_json_writer *j)
{
        before_value(j);
        puts_(j, "null");
}

void cli_json_newline(cli_json_writer *j)
{
        put(j, "\n", 1);
}

void cli_json_kv_string(cli_json_writer *j, const char *key, const char *s)
{
        cli_json_key(j, key);
        cli_json_string(j, s);
}

void cli_json_kv_u64(cli_json_writer *j, const char *key, uint64_t v)
{
        cli_json_key(j, key);
        cli_json_u64(j, v);
}

void cli_json_kv_i64(cli_json_writer *j, const char *key, int64_t v)
{
        cli_json_key(j, key);
        cli_json_i64(j, v);
}

void cli_json_kv_bool(cli_json_writer *j, const char *key, bool v)
{
        cli_json_key(j, key);
        cli_json_bool(j, v);
}
