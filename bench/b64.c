/* base64, for the exec-based transfer (how tools move files through a shell). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char b64_alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void b64_encode(const uint8_t *in, size_t len, char *out)
{
        for (size_t i = 0; i + 3 <= len; i += 3) {
                uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

                *out++ = b64_alphabet[v >> 18];
                *out++ = b64_alphabet[(v >> 12) & 63];
                *out++ = b64_alphabet[(v >> 6) & 63];
                *out++ = b64_alphabet[v & 63];
        }
}

/* -1: whitespace (skipped), -2: padding, -3: not base64. */
static int8_t b64_value(uint8_t c)
{
        if (c >= 'A' && c <= 'Z')
                return (int8_t)(c - 'A');
        if (c >= 'a' && c <= 'z')
                return (int8_t)(c - 'a' + 26);
        if (c >= '0' && c <= '9')
                return (int8_t)(c - '0' + 52);
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        if (c == '\n' || c == '\r' || c == ' ')
                return -1;
        if (c == '=')
                return -2;
        return -3;
}

void b64_decode_feed(b64_decoder *d, const uint8_t *in, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                int8_t v = b64_value(in[i]);

                if (v == -1)
                        continue;
                if (v == -2) {
                        d->nbits = 0; /* padding ends a quantum: drop the partial bits */
                        continue;
                }
                if (v < 0) {
                        d->bad = true;
                        continue;
                }
                d->acc = (d->acc << 6) | (uint32_t)v;
                d->nbits += 6;
                if (d->nbits >= 8) {
                        d->nbits -= 8;
                        if (d->len < d->cap)
                                d->out[d->len] = (uint8_t)(d->acc >> d->nbits);
                        else
                                d->bad = true;
                        d->len++;
                }
        }
}
