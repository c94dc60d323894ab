/* Unit tests of shared/base64.c: RFC 4648 vectors, every length round trip, streaming in any
 * pieces, padding and alphabet errors with their offsets, the output bound, size overflow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base64.h"
#include "error.h"
#include "util.h"

/* Decodes s whole with flags; asserts success and that it gives want[0..want_len). */
static void assert_decodes(const char *s, unsigned flags, const void *want, size_t want_len)
{
        _cleanup_free_ uint8_t *out = NULL;
        _cleanup_error_ cs_error *err = NULL;
        size_t n = 0;

        if (cs_base64_decode(s, strlen(s), flags, &out, &n, &err) < 0)
                fail_msg("\"%s\": %s", s, err->msg);
        assert_int_equal(n, want_len);
        assert_memory_equal(out, want, n);
        assert_int_equal(out[n], '\0');
}

/* Decodes in[0..len) with flags; asserts it is refused with code and a message holding
 * `what` (NULL: any). */
static void assert_refused_len(const char *in, size_t len, unsigned flags, grpc_status_code code,
                               const char *what)
{
        uint8_t *out = (uint8_t *)"untouched";
        _cleanup_error_ cs_error *err = NULL;
        size_t n = 12345;

        if (cs_base64_decode(in, len, flags, &out, &n, &err) == 0)
                fail_msg("\"%.*s\" decoded to %zu bytes", (int)len, in, n);
        assert_non_null(err);
        assert_int_equal(err->code, code);
        if (what && !strstr(err->msg, what))
                fail_msg("\"%.*s\": \"%s\" does not say \"%s\"", (int)len, in, err->msg, what);
        assert_string_equal((char *)out, "untouched");
        assert_int_equal(n, 12345);
}

static void assert_refused(const char *s, unsigned flags, const char *what)
{
        assert_refused_len(s, strlen(s), flags, GRPC_STATUS_INVALID_ARGUMENT, what);
}

static void test_rfc4648_vectors(void **state)
{
        static const char *const vectors[][2] = {
                { "", "" },
                { "f", "Zg==" },
                { "fo", "Zm8=" },
                { "foo", "Zm9v" },
                { "foob", "Zm9vYg==" },
                { "fooba", "Zm9vYmE=" },
                { "foobar", "Zm9vYmFy" },
        };
        (void)state;

        for (size_t i = 0; i < ARRAY_SIZE(vectors); i++) {
                const char *raw = vectors[i][0], *enc = vectors[i][1];
                char out[16];
                size_t len = 99;

                memset(out, 'X', sizeof(out));
                assert_int_equal(cs_base64_encoded_len(strlen(raw), &len), 0);
                assert_int_equal(len, strlen(enc));
                assert_int_equal(cs_base64_encode((const uint8_t *)raw, strlen(raw), out), len);
                assert_string_equal(out, enc);
                assert_decodes(enc, 0, raw, strlen(raw));
        }
        /* All 64 characters, both alphabets. */
        {
                static const uint8_t all[] = { 0x00, 0x10, 0x83, 0x10, 0x51, 0x87, 0x20, 0x92,
                                               0x8b, 0x30, 0xd3, 0x8f, 0x41, 0x14, 0x93, 0x51,
                                               0x55, 0x97, 0x61, 0x96, 0x9b, 0x71, 0xd7, 0x9f,
                                               0x82, 0x18, 0xa3, 0x92, 0x59, 0xa7, 0xa2, 0x9a,
                                               0xab, 0xb2, 0xdb, 0xaf, 0xc3, 0x1c, 0xb3, 0xd3,
                                               0x5d, 0xb7, 0xe3, 0x9e, 0xbb, 0xf3, 0xdf, 0xbf };
                char out[65];

                cs_base64_encode(all, sizeof(all), out);
                assert_string_equal(
                        out, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
                assert_decodes(out, 0, all, sizeof(all));
                assert_decodes("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
                               CS_BASE64_URL_SAFE, all, sizeof(all));
        }
}

/* Every length 0..300 of every byte value: encode, decode whole and one character at a time,
 * and the encoding of 3-byte-multiple pieces concatenates to the whole's. */
static void test_round_trip_every_length(void **state)
{
        uint8_t raw[300], got[300];
        char enc[401], pieces[401];
        (void)state;

        for (size_t i = 0; i < sizeof(raw); i++)
                raw[i] = (uint8_t)(i * 151 + 7);
        for (size_t len = 0; len <= sizeof(raw); len++) {
                size_t n = cs_base64_encode(raw, len, enc), p = 0, dlen = 0;
                _cleanup_error_ cs_error *err = NULL;
                cs_base64_decoder d;

                assert_int_equal(n, (len + 2) / 3 * 4);
                assert_int_equal(strlen(enc), n);
                assert_decodes(enc, 0, raw, len);

                pieces[0] = '\0';
                cs_base64_decoder_init(&d, 0, got, len);
                for (size_t i = 0; i < n; i++)
                        assert_int_equal(cs_base64_decoder_feed(&d, enc + i, 1, &err), 0);
                assert_int_equal(cs_base64_decoder_finish(&d, &dlen, &err), 0);
                assert_int_equal(dlen, len);
                assert_memory_equal(got, raw, len);

                for (size_t off = 0; off < len; off += 6)
                        p += cs_base64_encode(raw + off, len - off < 6 ? len - off : 6, pieces + p);
                assert_string_equal(pieces, enc);
                assert_true(cs_base64_decoded_max(n) >= len);
        }
}

/* What `base64` prints (lines of 76 and a final newline), fed in pieces that cut lines and
 * quanta anywhere, with CS_BASE64_SKIP_SPACE. */
static void test_stream_wrapped_lines(void **state)
{
        uint8_t raw[1000], got[1000];
        char enc[1400], wrapped[1500];
        size_t n, w = 0;
        (void)state;

        for (size_t i = 0; i < sizeof(raw); i++)
                raw[i] = (uint8_t)(i ^ (i >> 3));
        n = cs_base64_encode(raw, sizeof(raw), enc);
        for (size_t i = 0; i < n; i++) {
                wrapped[w++] = enc[i];
                if (i % 76 == 75 || i == n - 1)
                        wrapped[w++] = '\n';
        }
        for (size_t step = 1; step < 90; step += 7) {
                _cleanup_error_ cs_error *err = NULL;
                cs_base64_decoder d;
                size_t dlen = 0;

                cs_base64_decoder_init(&d, CS_BASE64_SKIP_SPACE, got, sizeof(got));
                for (size_t off = 0; off < w; off += step)
                        assert_int_equal(cs_base64_decoder_feed(&d, wrapped + off,
                                                                w - off < step ? w - off : step,
                                                                &err),
                                         0);
                assert_int_equal(cs_base64_decoder_finish(&d, &dlen, &err), 0);
                assert_int_equal(dlen, sizeof(raw));
                assert_memory_equal(got, raw, sizeof(raw));
        }
        assert_decodes(" Zm9v\r\n\tYg ==\n", CS_BASE64_SKIP_SPACE, "foob", 4);
        assert_refused("Zm9v\nYg==", 0, "offset 4: not a base64 character");
}

static void test_padding(void **state)
{
        (void)state;
        /* Unpadded input only with the flag, and only where a quantum may end. */
        assert_decodes("Zg", CS_BASE64_PAD_OPTIONAL, "f", 1);
        assert_decodes("Zm8", CS_BASE64_PAD_OPTIONAL, "fo", 2);
        assert_decodes("Zm9v", CS_BASE64_PAD_OPTIONAL, "foo", 3);
        assert_decodes("Zg==", CS_BASE64_PAD_OPTIONAL, "f", 1);
        assert_refused("Zg", 0, "ends inside a quantum");
        assert_refused("Zm8", 0, "ends inside a quantum");
        assert_refused("Z", CS_BASE64_PAD_OPTIONAL, "a quantum of one character");
        assert_refused("Zm9vZ", CS_BASE64_PAD_OPTIONAL, "offset 5: a quantum of one character");

        assert_refused("Zg=", 0, "offset 3: the '=' padding ends early");
        assert_refused("Zg=", CS_BASE64_PAD_OPTIONAL, "padding ends early");
        assert_refused("Zg===", 0, "offset 4: more '=' than the quantum needs");
        assert_refused("Zm8==", 0, "offset 4: more '=' than the quantum needs");
        assert_refused("=", 0, "offset 0: '=' where no padding may be");
        assert_refused("Z===", 0, "offset 1: '=' where no padding may be");
        assert_refused("Zm9v=", 0, "offset 4: '=' where no padding may be");
        assert_refused("Zg==Zg==", 0, "offset 4: data after the padding");
        assert_decodes("Zg= =", CS_BASE64_SKIP_SPACE, "f", 1); /* whitespace is anywhere */
        /* Padding with its quantum's unused bits set: not the canonical encoding of anything. */
        assert_refused("Zh==", 0, "offset 2: non-zero bits after the data");
        assert_refused("Zm9=", 0, "offset 3: non-zero bits after the data");
        assert_refused("Zh", CS_BASE64_PAD_OPTIONAL, "non-zero bits after the data");
}

static void test_invalid_characters(void **state)
{
        static const char bad[] = { '!', '.', '*', '-', '_', ':', '\0', '\x7f', '\x80', '\xff' };
        (void)state;

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                char s[] = "Zm9vYmFy";

                s[5] = bad[i];
                assert_refused_len(s, 8, 0, GRPC_STATUS_INVALID_ARGUMENT,
                                   "offset 5: not a base64 character");
        }
        assert_refused("Zm 9v", 0, "offset 2: not a base64 character");
        assert_refused("Zm-_", 0, "offset 2");
        assert_refused("Zm-_", CS_BASE64_SKIP_SPACE | CS_BASE64_PAD_OPTIONAL, "offset 2");
        assert_decodes("Zm-_", CS_BASE64_URL_SAFE, "\x66\x6f\xbf", 3);
        assert_refused("Zm+/!", CS_BASE64_URL_SAFE, "offset 4");
}

/* The decoder writes no byte past its buffer: more output is OUT_OF_RANGE, and stays so. */
static void test_output_bound(void **state)
{
        uint8_t buf[4] = { 0xaa, 0xaa, 0xaa, 0xaa };
        _cleanup_error_ cs_error *err = NULL, *again = NULL, *fin = NULL;
        cs_base64_decoder d;
        size_t n = 77;
        (void)state;

        cs_base64_decoder_init(&d, 0, buf, 2);
        assert_int_equal(cs_base64_decoder_feed(&d, "Zm9v", 4, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_OUT_OF_RANGE);
        assert_non_null(strstr(err->msg, "more than 2 bytes"));
        assert_memory_equal(buf, "fo\xaa\xaa", 4);
        assert_int_equal(cs_base64_decoder_feed(&d, "", 0, &again), -1);
        assert_int_equal(again->code, GRPC_STATUS_OUT_OF_RANGE);
        assert_int_equal(cs_base64_decoder_finish(&d, &n, &fin), -1);
        assert_int_equal(n, 77);

        /* An empty buffer takes an empty input, and nothing else. */
        cs_base64_decoder_init(&d, 0, NULL, 0);
        assert_int_equal(cs_base64_decoder_feed(&d, "", 0, NULL), 0);
        assert_int_equal(cs_base64_decoder_finish(&d, &n, NULL), 0);
        assert_int_equal(n, 0);
        cs_base64_decoder_init(&d, 0, NULL, 0);
        assert_int_equal(cs_base64_decoder_feed(&d, "Zg==", 4, NULL), -1);
}

/* The size arithmetic never wraps. */
static void test_size_limits(void **state)
{
        size_t quanta = (SIZE_MAX - 1) / 4, len = 0;
        (void)state;

        assert_int_equal(cs_base64_encoded_len(quanta * 3, &len), 0);
        assert_int_equal(len, quanta * 4);
        len = 1;
        assert_int_equal(cs_base64_encoded_len(quanta * 3 + 1, &len), -1);
        assert_int_equal(cs_base64_encoded_len(SIZE_MAX, &len), -1);
        assert_int_equal(len, 1);
        assert_int_equal(cs_base64_decoded_max(SIZE_MAX), SIZE_MAX / 4 * 3 + 3);
        assert_true(cs_base64_decoded_max(SIZE_MAX) < SIZE_MAX);
        assert_int_equal(cs_base64_decoded_max(0), 0);
        assert_int_equal(cs_base64_decoded_max(8), 6);
        assert_int_equal(cs_base64_decoded_max(7), 6); /* "Zm9vYmE" is 5: a bound, not a count */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rfc4648_vectors),
                cmocka_unit_test(test_round_trip_every_length),
                cmocka_unit_test(test_stream_wrapped_lines),
                cmocka_unit_test(test_padding),
                cmocka_unit_test(test_invalid_characters),
                cmocka_unit_test(test_output_bound),
                cmocka_unit_test(test_size_limits),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
