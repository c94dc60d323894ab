/* Base64 (RFC 4648 section 4, the standard alphabet): the project's one encoder and decoder.
 *
 * Encoding always pads. Decoding is strict by default: only the alphabet, '=' padding to a
 * whole quantum, nothing after the padding, and zero bits where the last character has more
 * bits than the data (the one canonical encoding); flags relax it for known producers
 * (`base64` wraps its lines, kubeconfigs may hold URL-safe or unpadded text). Invalid input is
 * refused with INVALID_ARGUMENT and the offset of the first bad character; output never goes
 * past the buffer the caller gave. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Decoder flags. */
#define CS_BASE64_SKIP_SPACE   0x1u /* ignore ' ', '\t', '\r', '\n' anywhere */
#define CS_BASE64_PAD_OPTIONAL 0x2u /* the input may end without its '=' padding */
#define CS_BASE64_URL_SAFE     0x4u /* accept '-' and '_' (RFC 4648 section 5) as 62 and 63 */

/* Characters that encoding len bytes takes (without a terminating NUL) into *ret_len. 0, or
 * -1 when that count (plus the NUL) would not fit in a size_t. */
int cs_base64_encoded_len(size_t len, size_t *ret_len);

/* Encodes in[0..len) into out, padded, NUL-terminated: out holds at least the
 * cs_base64_encoded_len() count plus one (the caller checks that it is defined). Returns the
 * characters written, without the NUL. Pieces of a multiple of 3 bytes encode to text that
 * concatenates to the encoding of the whole. */
size_t cs_base64_encode(const uint8_t *in, size_t len, char *out);

/* The most bytes any len characters decode to (no overflow for any len). */
size_t cs_base64_decoded_max(size_t len);

/* A decoder that takes its input in pieces of any size (a stream cut anywhere) and writes into
 * a buffer the caller owns. Its fields are private. */
typedef struct cs_base64_decoder {
        unsigned flags;
        uint32_t acc;    /* the current quantum's bits */
        unsigned chars;  /* alphabet characters in the current quantum (0..3) */
        unsigned pad;    /* '=' seen; after one, only '=' (and whitespace) may follow */
        size_t offset;   /* input characters consumed, for error messages */
        const char *bad; /* why the input was refused, NULL while it is valid */
        grpc_status_code bad_code;
        size_t bad_offset;
        uint8_t *out;
        size_t len, cap;
} cs_base64_decoder;

/* Starts decoding into out[0..cap) (out may be NULL when cap is 0). */
void cs_base64_decoder_init(cs_base64_decoder *d, unsigned flags, uint8_t *out, size_t cap);

/* Decodes the next piece. 0, or -1 with INVALID_ARGUMENT in *err when the input is not base64
 * (or OUT_OF_RANGE when it decodes to more than cap bytes); once refused, every later call
 * fails the same way. */
int cs_base64_decoder_feed(cs_base64_decoder *d, const char *in, size_t len, cs_error **err);

/* Ends the input: checks that it stopped on a quantum (or, with CS_BASE64_PAD_OPTIONAL, where
 * a quantum may end), and stores the bytes decoded in *ret_len. 0, or -1 with *err. */
int cs_base64_decoder_finish(cs_base64_decoder *d, size_t *ret_len, cs_error **err);

/* Decodes in[0..len) whole into a new buffer (*ret, NUL-terminated for text, the caller frees
 * it) of *ret_len bytes. 0, or -1 with *err (and *ret untouched). */
int cs_base64_decode(const char *in, size_t len, unsigned flags, uint8_t **ret, size_t *ret_len,
                     cs_error **err);
