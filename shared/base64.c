/* Base64 encoding and strict, streaming decoding (base64.h): the one copy the project keeps. */
#include "base64.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int cs_base64_encoded_len(size_t len, size_t *ret_len)
{
        size_t quanta = len / 3 + (len % 3 != 0);

        if (quanta > (SIZE_MAX - 1) / 4)
                return -1;
        *ret_len = quanta * 4;
        return 0;
}

size_t cs_base64_encode(const uint8_t *in, size_t len, char *out)
{
        char *o = out;
        size_t i = 0;

        for (; len - i >= 3; i += 3) {
                uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

                *o++ = alphabet[v >> 18];
                *o++ = alphabet[(v >> 12) & 63];
                *o++ = alphabet[(v >> 6) & 63];
                *o++ = alphabet[v & 63];
        }
        if (len - i > 0) {
                uint32_t v = (uint32_t)in[i] << 16;

                if (len - i == 2)
                        v |= (uint32_t)in[i + 1] << 8;
                *o++ = alphabet[v >> 18];
                *o++ = alphabet[(v >> 12) & 63];
                *o++ = len - i == 2 ? alphabet[(v >> 6) & 63] : '=';
                *o++ = '=';
        }
        *o = '\0';
        return (size_t)(o - out);
}

size_t cs_base64_decoded_max(size_t len)
{
        /* A partial quantum of 2 or 3 characters (unpadded) holds at most 2 bytes. */
        return len / 4 * 3 + len % 4;
}

void cs_base64_decoder_init(cs_base64_decoder *d, unsigned flags, uint8_t *out, size_t cap)
{
        memset(d, 0, sizeof(*d));
        d->flags = flags;
        d->out = out;
        d->cap = cap;
}

/* 1 + the 6 bits of each character of the standard alphabet; 0 for every other byte. */
static const uint8_t decode_table[256] = {
        ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,
        ['H'] = 8,  ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
        ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
        ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28,
        ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35,
        ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
        ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
        ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
        ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63,
        ['/'] = 64
};

/* The character's 6 bits, or -1 when it is not in the alphabet the flags allow. */
static int char_value(const cs_base64_decoder *d, unsigned char c)
{
        if (decode_table[c])
                return decode_table[c] - 1;
        if (c == '-' && (d->flags & CS_BASE64_URL_SAFE))
                return 62;
        if (c == '_' && (d->flags & CS_BASE64_URL_SAFE))
                return 63;
        return -1;
}

static bool is_space(unsigned char c)
{
        return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int report(const cs_base64_decoder *d, cs_error **err)
{
        if (d->bad_code == GRPC_STATUS_OUT_OF_RANGE)
                return cs_error_set(err, d->bad_code, "base64 data decodes to more than %zu bytes",
                                    d->cap);
        return cs_error_set(err, d->bad_code, "invalid base64 at offset %zu: %s", d->bad_offset,
                            d->bad);
}

static int refuse_as(cs_base64_decoder *d, grpc_status_code code, const char *why, cs_error **err)
{
        d->bad = why;
        d->bad_code = code;
        d->bad_offset = d->offset;
        return report(d, err);
}

static int refuse(cs_base64_decoder *d, const char *why, cs_error **err)
{
        return refuse_as(d, GRPC_STATUS_INVALID_ARGUMENT, why, err);
}

static int emit(cs_base64_decoder *d, uint8_t byte, cs_error **err)
{
        if (d->len == d->cap)
                return refuse_as(d, GRPC_STATUS_OUT_OF_RANGE, "output full", err);
        d->out[d->len++] = byte;
        return 0;
}

/* Writes the bytes of a partial quantum of 2 or 3 characters (ended by padding or by the end
 * of unpadded input); the bits below them must be zero. */
static int emit_partial(cs_base64_decoder *d, cs_error **err)
{
        unsigned spare = d->chars == 2 ? 4 : 2;

        if (d->chars < 2)
                return refuse(d, "a quantum of one character", err);
        if (d->acc & ((1u << spare) - 1))
                return refuse(d, "non-zero bits after the data", err);
        d->acc >>= spare;
        if (d->chars == 3 && emit(d, (uint8_t)(d->acc >> 8), err) < 0)
                return -1;
        return emit(d, (uint8_t)d->acc, err);
}

static int feed_pad(cs_base64_decoder *d, cs_error **err)
{
        if (d->pad == 0) {
                if (d->chars < 2)
                        return refuse(d, "'=' where no padding may be", err);
                if (emit_partial(d, err) < 0)
                        return -1;
        } else if (d->chars == 0) {
                return refuse(d, "more '=' than the quantum needs", err);
        }
        d->pad++;
        if (d->chars + d->pad == 4)
                d->chars = 0; /* the quantum is complete; pad > 0 marks the end of the data */
        return 0;
}

static int feed_char(cs_base64_decoder *d, unsigned char c, cs_error **err)
{
        int v;

        if (is_space(c) && (d->flags & CS_BASE64_SKIP_SPACE))
                return 0;
        if (c == '=')
                return feed_pad(d, err);
        v = char_value(d, c);
        if (v < 0)
                return refuse(d, "not a base64 character", err);
        if (d->pad > 0)
                return refuse(d, "data after the padding", err);
        d->acc = d->acc << 6 | (uint32_t)v;
        if (++d->chars < 4)
                return 0;
        d->chars = 0;
        if (emit(d, (uint8_t)(d->acc >> 16), err) < 0 || emit(d, (uint8_t)(d->acc >> 8), err) < 0 ||
            emit(d, (uint8_t)d->acc, err) < 0)
                return -1;
        d->acc = 0;
        return 0;
}

int cs_base64_decoder_feed(cs_base64_decoder *d, const char *in, size_t len, cs_error **err)
{
        if (d->bad)
                return report(d, err);
        for (size_t i = 0; i < len; i++, d->offset++) {
                unsigned v = decode_table[(unsigned char)in[i]];

                /* The common case here: a character of the alphabet that does not end a
                 * quantum, before any padding. feed_char() does the rest. */
                if (v && d->chars < 3 && d->pad == 0) {
                        d->acc = d->acc << 6 | (v - 1);
                        d->chars++;
                        continue;
                }
                if (feed_char(d, (unsigned char)in[i], err) < 0)
                        return -1;
        }
        return 0;
}

int cs_base64_decoder_finish(cs_base64_decoder *d, size_t *ret_len, cs_error **err)
{
        if (d->bad)
                return report(d, err);
        if (d->chars > 0) {
                if (d->pad > 0)
                        return refuse(d, "the '=' padding ends early", err);
                if (!(d->flags & CS_BASE64_PAD_OPTIONAL))
                        return refuse(d, "the input ends inside a quantum", err);
                if (emit_partial(d, err) < 0)
                        return -1;
                d->chars = 0;
        }
        *ret_len = d->len;
        return 0;
}

int cs_base64_decode(const char *in, size_t len, unsigned flags, uint8_t **ret, size_t *ret_len,
                     cs_error **err)
{
        size_t cap = cs_base64_decoded_max(len), n;
        _cleanup_free_ uint8_t *out = cs_xmalloc(cap + 1);
        cs_base64_decoder d;

        cs_base64_decoder_init(&d, flags, out, cap);
        if (cs_base64_decoder_feed(&d, in, len, err) < 0 ||
            cs_base64_decoder_finish(&d, &n, err) < 0)
                return -1;
        out[n] = '\0';
        *ret = TAKE_PTR(out);
        *ret_len = n;
        return 0;
}
