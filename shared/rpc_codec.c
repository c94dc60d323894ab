/* Message encoding shared by the server and client halves of the RPC layer. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <malloc.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string.h>

#include "rpc_internal.h"
#include "util.h"

int rpc_message_pack(const ProtobufCMessage *msg, size_t max, grpc_byte_buffer **ret,
                     cs_error **err)
{
        size_t size = protobuf_c_message_get_packed_size(msg);
        grpc_slice slice;

        if (size > max)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "%s message of %zu bytes is over the %zu-byte cap",
                                    msg->descriptor->name, size, max);
        slice = grpc_slice_malloc(size);
        protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
        *ret = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        return 0;
}

/* Reads a base-128 varint; returns its length, 0 if malformed or truncated. */
static size_t wire_varint(const uint8_t *p, size_t len, uint64_t *ret)
{
        uint64_t v = 0;

        for (size_t i = 0; i < len && i < 10; i++) {
                v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
                if (!(p[i] & 0x80)) {
                        *ret = v;
                        return i + 1;
                }
        }
        return 0;
}

#define WIRE_MAX_DEPTH 32

/* protobuf-c keeps strings NUL-terminated without a length: a NUL inside one would cut it
 * short without anyone noticing (a path "a\0/../x" would silently become "a"). Walks the
 * encoded message and names the first string field that holds a NUL byte, if any. The bytes
 * have already been decoded successfully, so only well-formed input reaches here. */
static const char *wire_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                                   size_t len, int depth)
{
        while (len > 0 && depth < WIRE_MAX_DEPTH) {
                uint64_t key, n = 0;
                size_t k = wire_varint(p, len, &key);
                const ProtobufCFieldDescriptor *f;

                if (!k)
                        return NULL;
                p += k;
                len -= k;
                switch (key & 7) {
                case 0: /* varint */
                        k = wire_varint(p, len, &n);
                        if (!k)
                                return NULL;
                        break;
                case 1: /* 64-bit */
                        k = 8;
                        break;
                case 5: /* 32-bit */
                        k = 4;
                        break;
                case 2: /* length-delimited */
                        k = wire_varint(p, len, &n);
                        if (!k || n > len - k)
                                return NULL;
                        f = protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3));
                        if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + k, 0, n))
                                return f->name;
                        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                                const char *bad =
                                        wire_nul_string(f->descriptor, p + k, n, depth + 1);
                                if (bad)
                                        return bad;
                        }
                        k += n;
                        break;
                default:
                        return NULL;
                }
                if (k > len)
                        return NULL;
                p += k;
                len -= k;
        }
        return NULL;
}

int rpc_message_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                       const char *what, grpc_status_code bad_code, ProtobufCMessage **ret,
                       cs_error **err)
{
        grpc_byte_buffer_reader reader;
        grpc_slice slice;
        ProtobufCMessage *msg;

        if (!grpc_byte_buffer_reader_init(&reader, bb))
                return cs_error_set(err, bad_code, "%s: cannot read the %s bytes", desc->name,
                                    what);
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                        GRPC_SLICE_START_PTR(slice));
        if (!msg) {
                grpc_slice_unref(slice);
                return cs_error_set(err, bad_code, "malformed %s: not a valid %s", what,
                                    desc->name);
        }
        {
                const char *field = wire_nul_string(desc, GRPC_SLICE_START_PTR(slice),
                                                    GRPC_SLICE_LENGTH(slice), 0);
                grpc_slice_unref(slice);
                if (field) {
                        protobuf_c_message_free_unpacked(msg, NULL);
                        return cs_error_set(err, bad_code, "%s: field %s contains a NUL byte", what,
                                            field);
                }
        }
        *ret = msg;
        return 0;
}

void rpc_size_args(grpc_arg args[RPC_N_SIZE_ARGS], int max_message)
{
        args[0] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                              .value.integer = max_message };
        args[1] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                              .value.integer = max_message };
        /* Bulk data (16 MiB file calls, exec output) moves in fewer, larger HTTP/2 frames
         * (the default is 16 KiB) ... */
        args[2] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_HTTP2_MAX_FRAME_SIZE,
                              .value.integer = RPC_HTTP2_FRAME_BYTES };
        /* ... and a stream may have more in flight than the default 64 KiB window before the
         * reader acknowledges it. Flow control still bounds what a slow reader costs. */
        args[3] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                              .value.integer = RPC_HTTP2_WINDOW_BYTES };
        args[4] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE,
                              .value.integer = RPC_HTTP2_WINDOW_BYTES };
        /* gRPC's bandwidth-delay probing grows the windows as it sees fit (measured: about
         * 7 MiB buffered per stream whose client stopped reading). A fixed window keeps that
         * cost to RPC_HTTP2_WINDOW_BYTES per stream. */
        args[5] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_HTTP2_BDP_PROBE,
                              .value.integer = 0 };
}

int64_t rpc_deadline_remaining_ms(gpr_timespec deadline)
{
        gpr_timespec now, left;

        if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0)
                return INT64_MAX;
        now = gpr_now(deadline.clock_type);
        left = gpr_time_sub(deadline, now);
        return gpr_time_to_millis(left);
}

gpr_timespec rpc_deadline_from_timeout(int64_t timeout_ms)
{
        if (timeout_ms <= 0)
                return gpr_inf_future(GPR_CLOCK_MONOTONIC);
        return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                            gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

bool rpc_request_id_valid(const char *s, size_t len)
{
        if (len == 0 || len > RPC_REQUEST_ID_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] <= 0x20 || s[i] >= 0x7f)
                        return false;
        }
        return true;
}

/* Every process of the project moves messages of up to 16 MiB (exec output in 256 KiB
 * events, file data in calls of up to 16 MiB) from several threads. glibc's defaults suit
 * neither size:
 * - its mmap threshold follows the largest block freed, so after one 16 MiB message such
 *   buffers come from per-thread arenas, which keep them after free (measured: an idle
 *   agent holding ~100 MiB after 1 GiB of file calls);
 * - once that threshold is fixed, the trim threshold stays at 128 KiB, so every 256 KiB
 *   event freed at the top of an arena gives its pages back, and the next one faults them
 *   in again (measured: a third of the client's CPU while it received a 1 GiB stream).
 * From 1 MiB up, memory comes from mmap and goes back when freed; below it, an arena keeps
 * up to 1 MiB free at its top for the next message. */
#define RPC_MALLOC_THRESHOLD (1024 * 1024)

void rpc_global_init(void)
{
        mallopt(M_MMAP_THRESHOLD, RPC_MALLOC_THRESHOLD);
        mallopt(M_TRIM_THRESHOLD, RPC_MALLOC_THRESHOLD);
        grpc_init();
}

void rpc_global_shutdown(void)
{
        grpc_shutdown_blocking();
}

/* --- TLS material ------------------------------------------------------------------------ */

/* Never prompt for a passphrase (OpenSSL's default reads one from the terminal). */
static int no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
        (void)buf;
        (void)size;
        (void)rwflag;
        (void)userdata;
        return -1;
}

/* OpenSSL's reason for the last error in this thread's queue, for messages. */
static const char *ssl_reason(void)
{
        unsigned long e = ERR_peek_last_error();
        const char *r = e ? ERR_reason_error_string(e) : NULL;

        return r ? r : "unknown reason";
}

/* Reads every PEM certificate of pem (other text between them is ignored, as gRPC does).
 * The first is returned in *ret_first when asked for. Fails when there is none or when one
 * does not decode. */
static int read_certs(const char *pem, const char *what, X509 **ret_first, cs_error **err)
{
        BIO *bio = BIO_new_mem_buf(pem, -1);
        unsigned long e;
        X509 *x;
        int n = 0;

        if (!bio)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        while ((x = PEM_read_bio_X509(bio, NULL, no_passphrase, NULL))) {
                if (n == 0 && ret_first)
                        *ret_first = x;
                else
                        X509_free(x);
                n++;
        }
        BIO_free(bio);
        /* The loop ends with "no start line" at the end of the text; anything else is a
         * certificate that did not decode. */
        e = ERR_peek_last_error();
        if (ERR_GET_LIB(e) != ERR_LIB_PEM || ERR_GET_REASON(e) != PEM_R_NO_START_LINE)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: a PEM certificate does not decode (%s)", what,
                                    ssl_reason());
        if (n == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "%s: no PEM certificate in it (expected -----BEGIN "
                                    "CERTIFICATE-----)",
                                    what);
        return n;
}

static int check_pem(const char *ca_pem, const char *cert_pem, const char *key_pem, cs_error **err)
{
        X509 *leaf = NULL;
        EVP_PKEY *key = NULL;
        BIO *bio = NULL;
        int r = -1;

        if (ca_pem && read_certs(ca_pem, "CA", NULL, err) < 0)
                goto out;
        if (cert_pem && read_certs(cert_pem, "certificate", &leaf, err) < 0)
                goto out;
        if (!key_pem) {
                r = 0;
                goto out;
        }
        if (!cert_pem) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "private key: given without a certificate");
                goto out;
        }
        bio = BIO_new_mem_buf(key_pem, -1);
        key = bio ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL) : NULL;
        if (!key) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "private key: not an unencrypted PEM private key (%s)", ssl_reason());
                goto out;
        }
        if (X509_check_private_key(leaf, key) != 1) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "private key: it does not belong to the certificate (%s)",
                             ssl_reason());
                goto out;
        }
        r = 0;
out:
        EVP_PKEY_free(key);
        BIO_free(bio);
        X509_free(leaf);
        return r;
}

int rpc_tls_check_pem(const char *ca_pem, const char *cert_pem, const char *key_pem, cs_error **err)
{
        int r;

        /* OpenSSL's error queue is per thread: start clean, leave it clean. */
        ERR_clear_error();
        r = check_pem(ca_pem, cert_pem, key_pem, err);
        ERR_clear_error();
        return r;
}
