/* Fuzz target: the RPC layer's protobuf wire reader (shared/rpc_codec.c), what turns the bytes
 * of a gRPC message into a request (the frontend's and the agent's servers) or a response
 * (the frontend reading its agents): rpc_message_unpack, which refuses strings holding a NUL,
 * and rpc_message_unpack_bytes, which leaves a bulk bytes field in the received slices.
 *
 * Input: byte 0 picks the message type (index into wire_types, modulo its size), byte 1 how
 * the rest is cut into slices (0: one slice; k: slices of k bytes, each its own allocation,
 * as gRPC hands over a message that came in several frames), the rest is the message.
 *
 * Beyond "no crash": a refusal carries the status asked for and a message; every string of
 * a decoded message is valid UTF-8 without a NUL (checked on the decoded message, walking it
 * through its descriptors: every field, sub-messages, repeated fields, map entries, oneofs;
 * an oracle independent of the reader's check on the wire); a decoded message re-encodes, and that
 * encoding decodes to one that encodes the same bytes; for the types with a bulk field,
 * rpc_message_unpack_bytes accepts exactly what rpc_message_unpack accepts, its bytes are the
 * field's contents, and the rest of the message is the same.
 *
 * Owns: this file. Touches nothing but the code under test. */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/v1/compute.pb-c.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "rpc_internal.h"
#include "utf8.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct wire_type {
        const ProtobufCMessageDescriptor *desc;
        const char *bulk; /* the bytes field the RPC layer leaves in the slices, if any */
} wire_type;

/* Every request the two servers decode, and every response the frontend decodes from an
 * agent. The order is the seeds' first byte (TYPES in tests/fuzz/make_rpc_wire_seeds.py): append
 * only. */
static const wire_type wire_types[] = {
        { &compute__v1__create_sandbox_request__descriptor, NULL },
        { &compute__v1__describe_sandbox_request__descriptor, NULL },
        { &compute__v1__destroy_sandbox_request__descriptor, NULL },
        { &compute__v1__exec_command_request__descriptor, NULL },
        { &compute__v1__read_file_request__descriptor, NULL },
        { &compute__v1__write_file_request__descriptor, "data" },
        { &compute__v1__list_files_request__descriptor, NULL },
        { &nodeagent__v1__get_agent_info_request__descriptor, NULL },
        { &nodeagent__v1__create_sandbox_request__descriptor, NULL },
        { &nodeagent__v1__destroy_sandbox_request__descriptor, NULL },
        { &nodeagent__v1__get_sandbox_request__descriptor, NULL },
        { &nodeagent__v1__list_sandboxes_request__descriptor, NULL },
        { &nodeagent__v1__exec_request__descriptor, NULL },
        { &nodeagent__v1__read_file_request__descriptor, NULL },
        { &nodeagent__v1__write_file_request__descriptor, "data" },
        { &nodeagent__v1__list_files_request__descriptor, NULL },
        { &nodeagent__v1__get_usage_request__descriptor, NULL },
        { &nodeagent__v1__get_agent_info_response__descriptor, NULL },
        { &nodeagent__v1__create_sandbox_response__descriptor, NULL },
        { &nodeagent__v1__destroy_sandbox_response__descriptor, NULL },
        { &nodeagent__v1__get_sandbox_response__descriptor, NULL },
        { &nodeagent__v1__list_sandboxes_response__descriptor, NULL },
        { &compute__v1__exec_event__descriptor, NULL },
        { &compute__v1__read_file_response__descriptor, "data" },
        { &compute__v1__write_file_response__descriptor, NULL },
        { &compute__v1__list_files_response__descriptor, NULL },
        { &nodeagent__v1__get_usage_response__descriptor, NULL },
        { &compute__v1__list_sandboxes_request__descriptor, NULL },
};

#define FUZZ_BAD_CODE GRPC_STATUS_INVALID_ARGUMENT
#define FUZZ_MAX_MSG  ((size_t)1 << 30) /* no cap of its own: the code under test is the reader */

/* A byte buffer of p[0..len), in slices of `chunk` bytes (0: one), each copied on its own. */
static grpc_byte_buffer *make_buffer(const uint8_t *p, size_t len, size_t chunk)
{
        size_t n = chunk && len ? (len + chunk - 1) / chunk : 1;
        _cleanup_free_ grpc_slice *s = cs_xcalloc(n, sizeof(*s));
        grpc_byte_buffer *bb;

        for (size_t i = 0; i < n; i++) {
                size_t off = chunk ? i * chunk : 0, k = chunk ? chunk : len;
                if (k > len - off)
                        k = len - off;
                s[i] = grpc_slice_from_copied_buffer((const char *)p + off, k);
        }
        bb = grpc_raw_byte_buffer_create(s, n);
        for (size_t i = 0; i < n; i++)
                grpc_slice_unref(s[i]);
        return bb;
}

/* The encoding of m, as the RPC layer sends it; malloc'd. */
static uint8_t *encode(const ProtobufCMessage *m, size_t *ret_len)
{
        grpc_byte_buffer *bb = NULL;
        grpc_byte_buffer_reader reader;
        grpc_slice s;
        uint8_t *out;

        if (rpc_message_pack(m, FUZZ_MAX_MSG, &bb, NULL) < 0 ||
            !grpc_byte_buffer_reader_init(&reader, bb))
                abort();
        s = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        *ret_len = GRPC_SLICE_LENGTH(s);
        out = cs_xmalloc(*ret_len + 1);
        memcpy(out, GRPC_SLICE_START_PTR(s), *ret_len);
        grpc_slice_unref(s);
        grpc_byte_buffer_destroy(bb);
        return out;
}

static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb)
{
        ProtobufCMessage *m = NULL;
        cs_error *err = NULL;

        if (rpc_message_unpack(desc, bb, "request", FUZZ_BAD_CODE, &m, &err) < 0) {
                if (m || !err || err->code != FUZZ_BAD_CODE || !err->msg || !err->msg[0])
                        abort();
                cs_error_free(err);
                return NULL;
        }
        if (!m || err || m->descriptor != desc)
                abort();
        return m;
}

static void check_string(const char *str)
{
        if (str && !cs_utf8_valid(str, strlen(str)))
                abort();
}

/* Every string in m, at any depth, is UTF-8 (proto3's rule, which the reader enforces). */
static void check_strings(const ProtobufCMessage *m, int depth)
{
        const ProtobufCMessageDescriptor *d = m->descriptor;

        if (depth > 64)
                abort(); /* the reader's depth cap is lower */
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                const char *at = (const char *)m + f->offset;
                size_t n = 1;
                const void *const *v = (const void *const *)(const void *)at;

                if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
                    *(const uint32_t *)(const void *)((const char *)m + f->quantifier_offset) !=
                            f->id)
                        continue; /* another member of the oneof is set */
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        n = *(const size_t *)(const void *)((const char *)m + f->quantifier_offset);
                        v = *(const void *const *const *)(const void *)at;
                }
                for (size_t j = 0; j < n; j++) {
                        if (f->type == PROTOBUF_C_TYPE_STRING)
                                check_string(v[j]);
                        else if (v[j])
                                check_strings(v[j], depth + 1);
                }
        }
}

/* A decoded message survives a round trip: encode, decode, encode gives the same bytes. */
static void check_round_trip(const ProtobufCMessage *m)
{
        size_t len1, len2;
        _cleanup_free_ uint8_t *b1 = encode(m, &len1);
        grpc_byte_buffer *bb = make_buffer(b1, len1, 0);
        ProtobufCMessage *again = decode(m->descriptor, bb);
        _cleanup_free_ uint8_t *b2 = NULL;

        grpc_byte_buffer_destroy(bb);
        if (!again)
                abort();
        b2 = encode(again, &len2);
        if (len1 != len2 || memcmp(b1, b2, len1) != 0)
                abort();
        protobuf_c_message_free_unpacked(again, NULL);
}

/* rpc_message_unpack_bytes against rpc_message_unpack (whole: its result, NULL if refused). */
static void check_bulk(const wire_type *t, grpc_byte_buffer *bb, ProtobufCMessage *whole)
{
        const ProtobufCFieldDescriptor *f = rpc_bytes_field(t->desc, t->bulk);
        ProtobufCMessage *m = NULL;
        cs_error *err = NULL;
        rpc_bytes bytes;
        ProtobufCBinaryData *field, saved;
        size_t off = 0, len1, len2;
        _cleanup_free_ uint8_t *b1 = NULL, *b2 = NULL;

        if (!f)
                abort();
        rpc_bytes_init(&bytes);
        if (rpc_message_unpack_bytes(t->desc, bb, f, "request", FUZZ_BAD_CODE, &m, &bytes, &err) <
            0) {
                /* Refused: exactly when the plain reader refuses, and with nothing kept. */
                if (whole || m || !err || err->code != FUZZ_BAD_CODE || bytes.len ||
                    bytes.slices.count)
                        abort();
                cs_error_free(err);
                rpc_bytes_clear(&bytes);
                return;
        }
        if (!whole || err || !m)
                abort();
        /* The bytes left in the slices are the field's contents... */
        field = (void *)((char *)whole + f->offset);
        if (bytes.len != field->len || bytes.n_iov != bytes.slices.count)
                abort();
        for (size_t i = 0; i < bytes.n_iov; i++) {
                if (bytes.iov[i].iov_len > field->len - off ||
                    memcmp(bytes.iov[i].iov_base, field->data + off, bytes.iov[i].iov_len) != 0)
                        abort();
                off += bytes.iov[i].iov_len;
        }
        if (off != field->len || ((ProtobufCBinaryData *)(void *)((char *)m + f->offset))->len != 0)
                abort();
        /* ... and the rest of the message is the plain reader's without the field. */
        saved = *field;
        *field = (ProtobufCBinaryData){ 0 };
        b1 = encode(whole, &len1);
        *field = saved;
        b2 = encode(m, &len2);
        if (len1 != len2 || memcmp(b1, b2, len1) != 0)
                abort();
        protobuf_c_message_free_unpacked(m, NULL);
        rpc_bytes_clear(&bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const wire_type *t;
        grpc_byte_buffer *bb;
        ProtobufCMessage *m;

        if (size < 2)
                return -1; /* not an input of this target: kept out of the corpus */
        t = &wire_types[data[0] % ARRAY_SIZE(wire_types)];
        bb = make_buffer(data + 2, size - 2, data[1]);
        m = decode(t->desc, bb);
        if (m)
                check_strings(m, 0);
        if (m)
                check_round_trip(m);
        if (t->bulk)
                check_bulk(t, bb, m);
        if (m)
                protobuf_c_message_free_unpacked(m, NULL);
        grpc_byte_buffer_destroy(bb);
        return 0;
}
