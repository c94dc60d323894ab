/* Message encoding shared by the server and client halves of the RPC layer. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/slice_buffer.h>
#include <grpc/support/time.h>
#include <malloc.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

#include "rpc_internal.h"
#include "utf8.h"
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

/* The field number of a key, as protobuf-c reads it: 32 bits, whatever a longer key holds. */
#define WIRE_FIELD(key) ((uint32_t)((key) >> 3))

/* What a walk of a message protobuf-c has decoded finds wrong with it. */
typedef enum wire_fault {
        WIRE_FINE,
        WIRE_NUL,        /* a string field holds a NUL byte */
        WIRE_UTF8,       /* a string field is not valid UTF-8 */
        WIRE_FIELD_ZERO, /* a field numbered 0 */
} wire_fault;

/* protobuf-c keeps strings NUL-terminated without a length: a NUL inside one would cut it
 * short without anyone noticing (a path "a\0/../x" would silently become "a").
 * It also takes a key of field number 0 for an unknown field when the key is written in more
 * than one byte (80 00: its check looks at the first byte only), and re-encodes it as 00,
 * which it refuses: a message that does not survive a round trip through the frontend
 * (found by tests/fuzz/fuzz_rpc_wire.c). Protobuf has no field 0: refused like a NUL.
 * Proto3 strings are UTF-8; protobuf-c does not check it, and a string that is not would be
 * stored, listed and sent on to every strict client, which then fails to decode it (issue
 * 12's attack pass: a WriteFile path "bad\xff\xfe.txt" made ListFiles fail in Python):
 * refused too, in requests and responses alike.
 * Walks the encoded message, nested messages (map entries among them) and every element of a
 * repeated field included; for WIRE_NUL and WIRE_UTF8, names[0..*ret_depth] is the field's
 * path from the top ("env", "value" for a map entry's value). The bytes have already been
 * decoded successfully, so only well-formed input reaches here. */
static wire_fault wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                             int depth, const char **names, int *ret_depth)
{
        while (len > 0 && depth < WIRE_MAX_DEPTH) {
                uint64_t key, n = 0;
                size_t k = wire_varint(p, len, &key);
                const ProtobufCFieldDescriptor *f;
                wire_fault fault;

                if (!k)
                        return WIRE_FINE;
                if (WIRE_FIELD(key) == 0)
                        return WIRE_FIELD_ZERO;
                p += k;
                len -= k;
                switch (key & 7) {
                case 0: /* varint */
                        k = wire_varint(p, len, &n);
                        if (!k)
                                return WIRE_FINE;
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
                                return WIRE_FINE;
                        f = protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3));
                        if (f)
                                names[depth] = f->name;
                        *ret_depth = depth;
                        if (f && f->type == PROTOBUF_C_TYPE_STRING) {
                                if (memchr(p + k, 0, n))
                                        return WIRE_NUL;
                                if (!cs_utf8_valid(p + k, n))
                                        return WIRE_UTF8;
                        }
                        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                                fault = wire_check(f->descriptor, p + k, n, depth + 1, names,
                                                   ret_depth);
                                if (fault != WIRE_FINE)
                                        return fault;
                        }
                        k += n;
                        break;
                default:
                        return WIRE_FINE;
                }
                if (k > len)
                        return WIRE_FINE;
                p += k;
                len -= k;
        }
        return WIRE_FINE;
}

/* Decodes len bytes at data into a message of type desc, refusing what wire_check finds. */
static int decode(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                  const char *what, grpc_status_code bad_code, ProtobufCMessage **ret,
                  cs_error **err)
{
        ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, len, data);
        const char *names[WIRE_MAX_DEPTH] = { 0 };
        char field[256] = "";
        int depth = 0, r = -1;
        wire_fault fault;

        if (!msg)
                return cs_error_set(err, bad_code, "malformed %s: not a valid %s", what,
                                    desc->name);
        fault = wire_check(desc, data, len, 0, names, &depth);
        /* The field's path, "env.value" for a map entry's value: the name a client knows. */
        for (int i = 0; i <= depth && names[i]; i++) {
                size_t w = strlen(field);

                snprintf(field + w, sizeof(field) - w, "%s%s", i ? "." : "", names[i]);
        }
        switch (fault) {
        case WIRE_FINE:
                *ret = msg;
                return 0;
        case WIRE_NUL:
                cs_error_set(err, bad_code, "%s: field %s contains a NUL byte", what, field);
                break;
        case WIRE_UTF8:
                cs_error_set(err, bad_code, "%s: field %s is not valid UTF-8", what, field);
                break;
        case WIRE_FIELD_ZERO:
                cs_error_set(err, bad_code, "malformed %s: not a valid %s (a field numbered 0)",
                             what, desc->name);
                break;
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        return r;
}

int rpc_message_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                       const char *what, grpc_status_code bad_code, ProtobufCMessage **ret,
                       cs_error **err)
{
        grpc_byte_buffer_reader reader;
        grpc_slice slice;
        int r;

        if (!grpc_byte_buffer_reader_init(&reader, bb))
                return cs_error_set(err, bad_code, "%s: cannot read the %s bytes", desc->name,
                                    what);
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        r = decode(desc, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice), what, bad_code, ret,
                   err);
        grpc_slice_unref(slice);
        return r;
}

/* --- messages with a bytes field left where it is -------------------------------------- */

const ProtobufCFieldDescriptor *rpc_bytes_field(const ProtobufCMessageDescriptor *desc,
                                                const char *name)
{
        const ProtobufCFieldDescriptor *f =
                name ? protobuf_c_message_descriptor_get_field_by_name(desc, name) : NULL;

        if (!f || f->type != PROTOBUF_C_TYPE_BYTES || f->label == PROTOBUF_C_LABEL_REPEATED)
                return NULL;
        return f;
}

void rpc_bytes_init(rpc_bytes *b)
{
        *b = (rpc_bytes){ 0 };
        grpc_slice_buffer_init(&b->slices);
}

void rpc_bytes_clear(rpc_bytes *b)
{
        grpc_slice_buffer_destroy(&b->slices);
        free(b->iov);
        rpc_bytes_init(b);
}

/* Encodes a varint into buf (room for 10 bytes); returns its length. */
static size_t put_varint(uint8_t *buf, uint64_t v)
{
        size_t n = 0;

        while (v >= 0x80) {
                buf[n++] = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        buf[n++] = (uint8_t)v;
        return n;
}

int rpc_message_pack_bytes(const ProtobufCMessage *msg, size_t max,
                           const ProtobufCFieldDescriptor *field, const grpc_slice *slices,
                           size_t n, size_t len, grpc_byte_buffer **ret, cs_error **err)
{
        size_t size = protobuf_c_message_get_packed_size(msg);
        uint8_t head[20];
        size_t hlen = put_varint(head, ((uint64_t)field->id << 3) | 2);
        grpc_slice *all;

        hlen += put_varint(head + hlen, len);
        if (len > max || size + hlen > max - len)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "%s message of %zu bytes is over the %zu-byte cap",
                                    msg->descriptor->name, size + hlen + len, max);
        /* The other fields, then the field's key and length, then the bytes where they are:
         * fields may come in any order. */
        all = cs_xcalloc(n + 1, sizeof(*all));
        all[0] = grpc_slice_malloc(size + hlen);
        protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(all[0]));
        memcpy(GRPC_SLICE_START_PTR(all[0]) + size, head, hlen);
        memcpy(all + 1, slices, n * sizeof(*slices));
        *ret = grpc_raw_byte_buffer_create(all, n + 1); /* takes its own references */
        grpc_slice_unref(all[0]);
        free(all);
        return 0;
}

/* A read position in a slice buffer. */
typedef struct wire_cursor {
        const grpc_slice_buffer *sb;
        size_t slice, off; /* in sb->slices[slice] */
        size_t pos;        /* from the start */
} wire_cursor;

static bool cur_byte(wire_cursor *c, uint8_t *ret)
{
        while (c->slice < c->sb->count && c->off == GRPC_SLICE_LENGTH(c->sb->slices[c->slice])) {
                c->slice++;
                c->off = 0;
        }
        if (c->slice == c->sb->count)
                return false;
        *ret = GRPC_SLICE_START_PTR(c->sb->slices[c->slice])[c->off++];
        c->pos++;
        return true;
}

/* Reads a varint of at most max bytes: 10 for a value, 5 for a key or a length, as
 * protobuf-c allows (a longer one fails the message there too). Like protobuf-c, bits past
 * the 64th are dropped, not refused: this reader must accept exactly what it accepts (a
 * difference found by tests/fuzz/fuzz_rpc_wire.c). */
#define VARINT_MAX_VALUE 10
#define VARINT_MAX_KEY   5

static bool cur_varint(wire_cursor *c, int max, uint64_t *ret)
{
        uint64_t v = 0;
        uint8_t b;

        for (int i = 0; i < max; i++) {
                if (!cur_byte(c, &b))
                        return false;
                v |= (uint64_t)(b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

/* Moves n bytes on, copying them to *copy (and advancing it) and/or adding references to
 * them to refs when given. False when fewer than n bytes are left. */
static bool cur_take(wire_cursor *c, uint64_t n, uint8_t **copy, grpc_slice_buffer *refs)
{
        while (n > 0) {
                const grpc_slice *s;
                size_t k;

                if (c->slice == c->sb->count)
                        return false;
                s = &c->sb->slices[c->slice];
                if (c->off == GRPC_SLICE_LENGTH(*s)) {
                        c->slice++;
                        c->off = 0;
                        continue;
                }
                k = GRPC_SLICE_LENGTH(*s) - c->off;
                if (k > n)
                        k = (size_t)n;
                if (copy) {
                        memcpy(*copy, GRPC_SLICE_START_PTR(*s) + c->off, k);
                        *copy += k;
                }
                if (refs)
                        grpc_slice_buffer_add(refs, grpc_slice_sub(*s, c->off, c->off + k));
                c->off += k;
                c->pos += k;
                n -= k;
        }
        return true;
}

/* Walks the top-level fields of the message in sb. Every field but `bulk` is counted in
 * *rest_len and, when rest is given, copied there (advancing it); of the occurrences of
 * `bulk`, the one numbered `keep` (from 0) has its length put in *keep_len and references
 * to its contents added to refs. Returns the number of occurrences of `bulk`, or -1 if sb
 * does not hold a well-formed message. */
static long wire_split(const grpc_slice_buffer *sb, uint32_t bulk, long keep, uint8_t **rest,
                       size_t *rest_len, grpc_slice_buffer *refs, size_t *keep_len)
{
        wire_cursor c = { .sb = sb };
        long seen = 0;

        for (;;) {
                wire_cursor start = c;
                uint64_t key, n = 0;
                uint8_t b;

                if (!cur_byte(&c, &b))
                        return seen; /* the end, between two fields */
                c = start;
                if (!cur_varint(&c, VARINT_MAX_KEY, &key) || WIRE_FIELD(key) == 0)
                        return -1;
                switch (key & 7) {
                case 0: /* varint */
                        if (!cur_varint(&c, VARINT_MAX_VALUE, &n))
                                return -1;
                        n = 0;
                        break;
                case 1: /* 64-bit */
                        n = 8;
                        break;
                case 5: /* 32-bit */
                        n = 4;
                        break;
                case 2: /* length-delimited */
                        if (!cur_varint(&c, VARINT_MAX_KEY, &n) || n > INT32_MAX)
                                return -1;
                        break;
                default: /* groups: not in proto3 */
                        return -1;
                }
                if (WIRE_FIELD(key) == bulk && (key & 7) == 2) {
                        bool kept = seen++ == keep;
                        if (kept)
                                *keep_len = (size_t)n;
                        if (!cur_take(&c, n, NULL, kept ? refs : NULL))
                                return -1;
                        continue;
                }
                if (!cur_take(&c, n, NULL, NULL))
                        return -1;
                *rest_len += c.pos - start.pos;
                if (rest)
                        cur_take(&start, c.pos - start.pos, rest, NULL);
        }
}

int rpc_message_unpack_bytes(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                             const ProtobufCFieldDescriptor *field, const char *what,
                             grpc_status_code bad_code, ProtobufCMessage **ret,
                             rpc_bytes *ret_bytes, cs_error **err)
{
        grpc_byte_buffer_reader reader;
        grpc_slice_buffer sb;
        grpc_slice s;
        _cleanup_free_ uint8_t *rest = NULL;
        uint8_t *p;
        size_t rest_len = 0, bulk_len = 0;
        long n;
        int r = -1;

        rpc_bytes_clear(ret_bytes);
        if (!grpc_byte_buffer_reader_init(&reader, bb))
                return cs_error_set(err, bad_code, "%s: cannot read the %s bytes", desc->name,
                                    what);
        /* The message as it arrived (decompressed if it was compressed): references only. */
        grpc_slice_buffer_init(&sb);
        while (grpc_byte_buffer_reader_next(&reader, &s))
                grpc_slice_buffer_add(&sb, s);
        grpc_byte_buffer_reader_destroy(&reader);

        /* Twice: the first walk checks the framing and sizes the rest of the message; the
         * second copies it and takes the last occurrence of the field, as decoding would. */
        n = wire_split(&sb, field->id, -1, NULL, &rest_len, NULL, &bulk_len);
        if (n < 0) {
                cs_error_set(err, bad_code, "malformed %s: not a valid %s", what, desc->name);
                goto out;
        }
        p = rest = cs_xmalloc(rest_len ? rest_len : 1);
        rest_len = 0;
        if (wire_split(&sb, field->id, n - 1, &p, &rest_len, &ret_bytes->slices, &bulk_len) != n)
                abort(); /* the same bytes walked twice */
        if (decode(desc, rest, rest_len, what, bad_code, ret, err) < 0)
                goto out;
        ret_bytes->len = n > 0 ? bulk_len : 0;
        ret_bytes->n_iov = ret_bytes->slices.count;
        ret_bytes->iov = cs_xcalloc(ret_bytes->n_iov + 1, sizeof(*ret_bytes->iov));
        for (size_t i = 0; i < ret_bytes->n_iov; i++)
                ret_bytes->iov[i] = (struct iovec){
                        .iov_base = GRPC_SLICE_START_PTR(ret_bytes->slices.slices[i]),
                        .iov_len = GRPC_SLICE_LENGTH(ret_bytes->slices.slices[i]),
                };
        r = 0;
out:
        if (r < 0)
                rpc_bytes_clear(ret_bytes);
        grpc_slice_buffer_destroy(&sb);
        return r;
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
 *   in again (measured: a third of the client's CPU while it received a 1 GiB stream);
 * - with a thread per call it makes up to 8 arenas per core, each keeping its own free
 *   memory: the servers' peak RSS under 256 concurrent calls grew by the trim threshold
 *   times the arenas (frontend: 54 -> 69 MiB).
 * From 1 MiB up, memory comes from mmap and goes back when freed; below it, each of at most
 * RPC_MALLOC_ARENAS arenas keeps up to 1 MiB free at its top for the next message. The
 * handlers spend their time in system calls, so few arenas cost little contention
 * (measured: the same call rates). */
#define RPC_MALLOC_THRESHOLD (1024 * 1024)
#define RPC_MALLOC_ARENAS    4

void rpc_global_init(void)
{
        mallopt(M_MMAP_THRESHOLD, RPC_MALLOC_THRESHOLD);
        mallopt(M_TRIM_THRESHOLD, RPC_MALLOC_THRESHOLD);
        mallopt(M_ARENA_MAX, RPC_MALLOC_ARENAS);
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
