/* Pieces shared by rpc_server.c and rpc_client.c; not part of the layer's API. */
#pragma once

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "rpc.h"

/* A completion-queue tag: the poller calls fn(owner, ok) when the batch completes. */
typedef struct rpc_tag {
        void (*fn)(void *owner, bool ok);
        void *owner;
} rpc_tag;

/* Encodes msg into a new byte buffer (one allocation, no extra copy). RESOURCE_EXHAUSTED
 * when the encoding is larger than max. The caller destroys *ret. */
int rpc_message_pack(const ProtobufCMessage *msg, size_t max, grpc_byte_buffer **ret,
                     cs_error **err);

/* Decodes a byte buffer into a new message of type desc (free with
 * protobuf_c_message_free_unpacked). INVALID_ARGUMENT (what = "request") or INTERNAL
 * (what = "response") when the bytes do not decode. */
int rpc_message_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                       const char *what, grpc_status_code bad_code, ProtobufCMessage **ret,
                       cs_error **err);

/* The field of desc named `name` when it is a singular bytes field, else NULL. */
const ProtobufCFieldDescriptor *rpc_bytes_field(const ProtobufCMessageDescriptor *desc,
                                                const char *name);

/* rpc_message_pack, plus the bytes field `field` (empty in msg) holding the n slices, len
 * bytes in all: the byte buffer takes references to them, no copy. */
int rpc_message_pack_bytes(const ProtobufCMessage *msg, size_t max,
                           const ProtobufCFieldDescriptor *field, const grpc_slice *slices,
                           size_t n, size_t len, grpc_byte_buffer **ret, cs_error **err);

/* rpc_message_unpack, except for the bytes field `field`: it is not decoded (the message has
 * it empty) and its contents go to *ret_bytes as references to bb's slices. A field that
 * occurs twice keeps its last occurrence, as protobuf decoding does. On failure *ret_bytes
 * is left empty. */
int rpc_message_unpack_bytes(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                             const ProtobufCFieldDescriptor *field, const char *what,
                             grpc_status_code bad_code, ProtobufCMessage **ret,
                             rpc_bytes *ret_bytes, cs_error **err);

/* Channel/server arguments shared by both sides: message size caps and HTTP/2 sizing. */
#define RPC_N_SIZE_ARGS 6
void rpc_size_args(grpc_arg args[RPC_N_SIZE_ARGS], int max_message);

/* Milliseconds from now until a gpr deadline (any clock); INT64_MAX for an infinite one. */
int64_t rpc_deadline_remaining_ms(gpr_timespec deadline);

/* A gpr deadline timeout_ms from now on the monotonic clock; infinite when timeout_ms <= 0. */
gpr_timespec rpc_deadline_from_timeout(int64_t timeout_ms);

/* True if s may be used as a request id (printable ASCII, 1..RPC_REQUEST_ID_MAX chars). */
bool rpc_request_id_valid(const char *s, size_t len);

/* Sends an already encoded message (the caller keeps bb): rpc_call_send without the
 * encoding, for relays. */
int rpc_call_send_raw(rpc_call *call, grpc_byte_buffer *bb, cs_error **err);

/* Reads the next message without decoding it: 1 with *ret (the caller destroys it), 0 at a
 * clean end, -1 with the status. */
int rpc_stream_read_raw(rpc_stream *st, grpc_byte_buffer **ret, cs_error **err);

/* The server call behind a handler's rpc_call, for parent propagation. */
grpc_call *rpc_call_grpc(rpc_call *call);

/* The key a call counts against in the per-peer share: an IP peer without its port; a
 * loopback or unix peer with it (the connection), since all local clients look alike.
 * Written into ret_key (len bytes, cut if longer). */
void rpc_peer_key(const char *peer, char *ret_key, size_t len);

/* The per-peer share in effect: per_peer, or max_calls (no share of its own) when 0; at most
 * max_calls. */
unsigned rpc_peer_share(unsigned max_calls, unsigned per_peer);
