/* The client half of the RPC layer: blocking unary calls and server-streaming reads.
 *
 * Each call has a completion queue of its own, drained only by the thread that uses the call,
 * so no poller thread is needed. Cancellation from another thread goes through
 * grpc_call_cancel(), which gRPC makes safe to call at any time. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/impl/codegen/propagation_bits.h>
#include <grpc/support/time.h>

#include "rpc_internal.h"
#include "util.h"

struct rpc_channel {
        grpc_channel *channel;
        char *target;
};

/* The process-wide client TLS of rpc_client_tls_set(): PEM copies; ca NULL = plaintext. */
static struct {
        pthread_mutex_t lock;
        char *ca, *cert, *key, *server_name;
} client_tls = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool nonempty(const char *s)
{
        return s && *s;
}

static char *dup_or_null(const char *s)
{
        return nonempty(s) ? cs_xstrdup(s) : NULL;
}

static void free_secret(char *s)
{
        if (s)
                explicit_bzero(s, strlen(s));
        free(s);
}

int rpc_client_tls_set(const char *ca_pem, const char *cert_pem, const char *key_pem,
                       const char *server_name, cs_error **err)
{
        char *old[4];

        if (!nonempty(ca_pem) && (nonempty(cert_pem) || nonempty(key_pem) || nonempty(server_name)))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "client TLS: a client certificate, key or server name was "
                                    "given without a CA to check the server against");
        if (nonempty(cert_pem) != nonempty(key_pem))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "client TLS: the client certificate and its key go together "
                                    "(only the %s was given)",
                                    nonempty(cert_pem) ? "certificate" : "key");
        if (nonempty(ca_pem) && rpc_tls_check_pem(ca_pem, nonempty(cert_pem) ? cert_pem : NULL,
                                                  nonempty(key_pem) ? key_pem : NULL, err) < 0)
                return cs_error_prefix(err, "client TLS");

        pthread_mutex_lock(&client_tls.lock);
        old[0] = client_tls.ca;
        old[1] = client_tls.cert;
        old[2] = client_tls.key;
        old[3] = client_tls.server_name;
        client_tls.ca = dup_or_null(ca_pem);
        client_tls.cert = dup_or_null(cert_pem);
        client_tls.key = dup_or_null(key_pem);
        client_tls.server_name = dup_or_null(server_name);
        pthread_mutex_unlock(&client_tls.lock);
        free(old[0]);
        free(old[1]);
        free_secret(old[2]);
        free(old[3]);
        return 0;
}

bool rpc_client_tls_enabled(void)
{
        bool r;

        pthread_mutex_lock(&client_tls.lock);
        r = client_tls.ca != NULL;
        pthread_mutex_unlock(&client_tls.lock);
        return r;
}

rpc_channel *rpc_channel_new(const char *target)
{
        rpc_channel *ch = cs_xcalloc(1, sizeof(*ch));
        grpc_channel_credentials *creds;
        grpc_arg args[RPC_N_SIZE_ARGS + 4];
        grpc_channel_args cargs = { .num_args = RPC_N_SIZE_ARGS + 3, .args = args };

        rpc_size_args(args, RPC_MAX_MESSAGE_BYTES);
        /* A peer that comes back is reached within a second: gRPC's default backoff grows to
         * two minutes, during which every call would fail with UNAVAILABLE. */
        args[RPC_N_SIZE_ARGS] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                            .key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                                            .value.integer = 100 };
        args[RPC_N_SIZE_ARGS + 1] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                                .key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                                                .value.integer = 100 };
        args[RPC_N_SIZE_ARGS + 2] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                                .key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                                                .value.integer = 1000 };
        ch->target = cs_xstrdup(target);

        /* The lock is held until gRPC has copied what it needs (credentials and arguments):
         * a concurrent rpc_client_tls_set() cannot free the text under it. */
        pthread_mutex_lock(&client_tls.lock);
        if (client_tls.ca) {
                grpc_ssl_pem_key_cert_pair pair = { .private_key = client_tls.key,
                                                    .cert_chain = client_tls.cert };
                creds = grpc_ssl_credentials_create(client_tls.ca, client_tls.cert ? &pair : NULL,
                                                    NULL, NULL);
                if (client_tls.server_name)
                        args[cargs.num_args++] =
                                (grpc_arg){ .type = GRPC_ARG_STRING,
                                            .key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG,
                                            .value.string = client_tls.server_name };
        } else {
                creds = grpc_insecure_credentials_create();
        }
        ch->channel = grpc_channel_create(target, creds, &cargs);
        pthread_mutex_unlock(&client_tls.lock);
        grpc_channel_credentials_release(creds);
        return ch;
}

void rpc_channel_free(rpc_channel *ch)
{
        if (!ch)
                return;
        grpc_channel_destroy(ch->channel);
        free(ch->target);
        free(ch);
}

const char *rpc_channel_target(const rpc_channel *ch)
{
        return ch->target;
}

/* State common to unary and streaming calls. */
typedef struct client_call {
        grpc_call *call;
        grpc_completion_queue *cq;
        grpc_metadata md[1];
        char request_id[RPC_REQUEST_ID_MAX + 1];
        grpc_byte_buffer *request;
        grpc_metadata_array initial_md;
        grpc_metadata_array trailing_md;
        grpc_status_code status;
        grpc_slice details;
        /* A bidirectional call's queue is plucked, by tag: one thread may read while another
         * sends, each waiting for its own batch. */
        bool pluck;
} client_call;

/* pluck: a bidirectional call's queue (see client_call.pluck); req NULL for those. */
static int client_call_init_ex(client_call *cc, rpc_channel *ch, const char *method,
                               const ProtobufCMessage *req, const rpc_call_options *opts,
                               bool pluck, cs_error **err)
{
        rpc_call *parent = opts ? opts->parent : NULL;
        const char *rid = opts ? opts->request_id : NULL;
        gpr_timespec deadline = rpc_deadline_from_timeout(opts ? opts->timeout_ms : 0);

        memset(cc, 0, sizeof(*cc));
        cc->pluck = pluck;
        grpc_metadata_array_init(&cc->initial_md);
        grpc_metadata_array_init(&cc->trailing_md);
        cc->details = grpc_empty_slice();
        if (!req) {
                /* A bidirectional call: its messages are sent later (rpc_stream_send). */
        } else if (opts && opts->bytes) {
                const ProtobufCFieldDescriptor *f =
                        rpc_bytes_field(req->descriptor, opts->bytes_field);
                if (!f)
                        return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s has no bytes field %s",
                                            req->descriptor->name,
                                            opts->bytes_field ? opts->bytes_field : "(none)");
                if (rpc_message_pack_bytes(req, RPC_MAX_MESSAGE_BYTES, f,
                                           opts->bytes->slices.slices, opts->bytes->slices.count,
                                           opts->bytes->slices.length, &cc->request, err) < 0)
                        return -1;
        } else if (rpc_message_pack(req, RPC_MAX_MESSAGE_BYTES, &cc->request, err) < 0) {
                return -1;
        }

        if (!rid && parent)
                rid = rpc_call_request_id(parent);
        if (rid && rpc_request_id_valid(rid, strlen(rid))) {
                snprintf(cc->request_id, sizeof(cc->request_id), "%s", rid);
                cc->md[0].key = grpc_slice_from_static_string(RPC_REQUEST_ID_HEADER);
                cc->md[0].value =
                        grpc_slice_from_static_buffer(cc->request_id, strlen(cc->request_id));
        }

        cc->cq = cc->pluck ? grpc_completion_queue_create_for_pluck(NULL)
                           : grpc_completion_queue_create_for_next(NULL);
        cc->call = grpc_channel_create_call(
                ch->channel, parent ? rpc_call_grpc(parent) : NULL, GRPC_PROPAGATE_DEFAULTS, cc->cq,
                grpc_slice_from_static_string(method), NULL, deadline, NULL);
        if (!cc->call)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: cannot create the call",
                                    method);
        return 0;
}

static int client_call_init(client_call *cc, rpc_channel *ch, const char *method,
                            const ProtobufCMessage *req, const rpc_call_options *opts,
                            cs_error **err)
{
        return client_call_init_ex(cc, ch, method, req, opts, false, err);
}

/* Fills ops[0..3] with the ops that open a call and send its one request. */
static size_t client_call_send_ops(client_call *cc, grpc_op *ops)
{
        ops[0] = (grpc_op){ .op = GRPC_OP_SEND_INITIAL_METADATA };
        ops[0].data.send_initial_metadata.count = cc->request_id[0] ? 1 : 0;
        ops[0].data.send_initial_metadata.metadata = cc->md;
        ops[1] = (grpc_op){ .op = GRPC_OP_SEND_MESSAGE };
        ops[1].data.send_message.send_message = cc->request;
        ops[2] = (grpc_op){ .op = GRPC_OP_SEND_CLOSE_FROM_CLIENT };
        ops[3] = (grpc_op){ .op = GRPC_OP_RECV_INITIAL_METADATA };
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &cc->initial_md;
        return 4;
}

static void client_call_status_op(client_call *cc, grpc_op *op)
{
        *op = (grpc_op){ .op = GRPC_OP_RECV_STATUS_ON_CLIENT };
        op->data.recv_status_on_client.trailing_metadata = &cc->trailing_md;
        op->data.recv_status_on_client.status = &cc->status;
        op->data.recv_status_on_client.status_details = &cc->details;
}

/* Turns the call's final status into an error. Returns 0 for OK. */
static int client_call_status(const client_call *cc, const char *method, cs_error **err)
{
        size_t len = GRPC_SLICE_LENGTH(cc->details);

        if (cc->status == GRPC_STATUS_OK)
                return 0;
        if (len == 0)
                return cs_error_set(err, cc->status, "%s: %s", method, cs_status_name(cc->status));
        return cs_error_set(err, cc->status, "%.*s", (int)len,
                            (const char *)GRPC_SLICE_START_PTR(cc->details));
}

static void client_call_destroy(client_call *cc)
{
        if (cc->call)
                grpc_call_unref(cc->call);
        if (cc->cq) {
                grpc_completion_queue_shutdown(cc->cq);
                while ((cc->pluck ? grpc_completion_queue_pluck(
                                            cc->cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                                  : grpc_completion_queue_next(
                                            cc->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL))
                               .type != GRPC_QUEUE_SHUTDOWN)
                        ;
                grpc_completion_queue_destroy(cc->cq);
        }
        if (cc->request)
                grpc_byte_buffer_destroy(cc->request);
        grpc_metadata_array_destroy(&cc->initial_md);
        grpc_metadata_array_destroy(&cc->trailing_md);
        grpc_slice_unref(cc->details);
}

int rpc_unary_raw(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                  const rpc_call_options *opts, grpc_byte_buffer **ret, cs_error **err)
{
        client_call cc;
        grpc_byte_buffer *resp = NULL;
        grpc_op ops[6];
        size_t n;
        int r = -1;

        if (client_call_init(&cc, ch, method, req, opts, err) < 0)
                goto out;
        n = client_call_send_ops(&cc, ops);
        ops[n] = (grpc_op){ .op = GRPC_OP_RECV_MESSAGE };
        ops[n++].data.recv_message.recv_message = &resp;
        client_call_status_op(&cc, &ops[n++]);
        if (grpc_call_start_batch(cc.call, ops, n, &cc, NULL) != GRPC_CALL_OK) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: cannot start the call", method);
                goto out;
        }
        /* One batch, one event: it carries the status, whatever happened. */
        grpc_completion_queue_next(cc.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (client_call_status(&cc, method, err) < 0)
                goto out;
        if (!resp) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: the server sent no response", method);
                goto out;
        }
        *ret = TAKE_PTR(resp);
        r = 0;
out:
        if (resp)
                grpc_byte_buffer_destroy(resp);
        client_call_destroy(&cc);
        return r;
}

int rpc_unary(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
              ProtobufCMessage **ret_resp, cs_error **err)
{
        grpc_byte_buffer *resp = NULL;
        int r;

        if (rpc_unary_raw(ch, method, req, opts, &resp, err) < 0)
                return -1;
        r = rpc_message_unpack(resp_desc, resp, "response", GRPC_STATUS_INTERNAL, ret_resp, err);
        grpc_byte_buffer_destroy(resp);
        return r;
}

int rpc_unary_bytes(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const char *bytes_field,
                    const rpc_call_options *opts, ProtobufCMessage **ret_resp, rpc_bytes *ret_bytes,
                    cs_error **err)
{
        const ProtobufCFieldDescriptor *f = rpc_bytes_field(resp_desc, bytes_field);
        grpc_byte_buffer *resp = NULL;
        int r;

        if (!f)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s has no bytes field %s",
                                    resp_desc->name, bytes_field ? bytes_field : "(none)");
        if (rpc_unary_raw(ch, method, req, opts, &resp, err) < 0)
                return -1;
        r = rpc_message_unpack_bytes(resp_desc, resp, f, "response", GRPC_STATUS_INTERNAL, ret_resp,
                                     ret_bytes, err);
        grpc_byte_buffer_destroy(resp);
        return r;
}

/* --- streams --------------------------------------------------------------------------- */

enum {
        TAG_START,
        TAG_STATUS,
        TAG_RECV,
        TAG_SEND, /* bidirectional calls: a message or the half-close */
        N_TAGS
};

struct rpc_stream {
        client_call cc;
        const ProtobufCMessageDescriptor *resp_desc;
        char *method;
        bool pending[N_TAGS]; /* batches started and not yet completed */
        bool ended;           /* the status has been read */
        grpc_byte_buffer *recv;
        grpc_byte_buffer *send; /* bidirectional: the message in flight */
        bool send_failed, send_closed;
};

/* Drains the stream's queue until the batch `tag` has completed. */
static void stream_wait(rpc_stream *st, int tag)
{
        if (st->cc.pluck) {
                if (st->pending[tag]) {
                        grpc_event ev = grpc_completion_queue_pluck(
                                st->cc.cq, &st->pending[tag], gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                NULL);
                        if (ev.type == GRPC_OP_COMPLETE && tag == TAG_SEND && !ev.success)
                                st->send_failed = true;
                        st->pending[tag] = false;
                }
                return;
        }
        while (st->pending[tag]) {
                grpc_event ev = grpc_completion_queue_next(
                        st->cc.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
                if (ev.type == GRPC_OP_COMPLETE)
                        st->pending[(bool *)ev.tag - st->pending] = false;
        }
}

static int stream_start(rpc_stream *st, int tag, const grpc_op *ops, size_t n)
{
        if (grpc_call_start_batch(st->cc.call, ops, n, &st->pending[tag], NULL) != GRPC_CALL_OK)
                return -1;
        st->pending[tag] = true;
        return 0;
}

int rpc_stream_open(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
                    rpc_stream **ret, cs_error **err)
{
        rpc_stream *st = cs_xcalloc(1, sizeof(*st));
        grpc_op ops[4], status_op;
        size_t n;

        st->resp_desc = resp_desc;
        st->method = cs_xstrdup(method);
        if (client_call_init(&st->cc, ch, method, req, opts, err) < 0)
                goto fail;
        n = client_call_send_ops(&st->cc, ops);
        client_call_status_op(&st->cc, &status_op);
        if (stream_start(st, TAG_START, ops, n) < 0 ||
            stream_start(st, TAG_STATUS, &status_op, 1) < 0) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: cannot start the call", method);
                goto fail;
        }
        *ret = st;
        return 0;
fail:
        rpc_stream_free(st);
        return -1;
}

int rpc_stream_open_bidi(rpc_channel *ch, const char *method,
                         const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
                         rpc_stream **ret, cs_error **err)
{
        rpc_stream *st = cs_xcalloc(1, sizeof(*st));
        grpc_op ops[2], status_op;

        st->resp_desc = resp_desc;
        st->method = cs_xstrdup(method);
        if (client_call_init_ex(&st->cc, ch, method, NULL, opts, true, err) < 0)
                goto fail;
        ops[0] = (grpc_op){ .op = GRPC_OP_SEND_INITIAL_METADATA };
        ops[0].data.send_initial_metadata.count = st->cc.request_id[0] ? 1 : 0;
        ops[0].data.send_initial_metadata.metadata = st->cc.md;
        ops[1] = (grpc_op){ .op = GRPC_OP_RECV_INITIAL_METADATA };
        ops[1].data.recv_initial_metadata.recv_initial_metadata = &st->cc.initial_md;
        client_call_status_op(&st->cc, &status_op);
        if (stream_start(st, TAG_START, ops, 2) < 0 ||
            stream_start(st, TAG_STATUS, &status_op, 1) < 0) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: cannot start the call", method);
                goto fail;
        }
        *ret = st;
        return 0;
fail:
        rpc_stream_free(st);
        return -1;
}

/* Waits for the send in flight; false when it (or an earlier one) failed: the call ended. */
static bool stream_send_wait(rpc_stream *st)
{
        stream_wait(st, TAG_SEND);
        if (st->send) {
                grpc_byte_buffer_destroy(st->send);
                st->send = NULL;
        }
        return !st->send_failed;
}

int rpc_stream_send(rpc_stream *st, const ProtobufCMessage *msg, cs_error **err)
{
        grpc_op op = { .op = GRPC_OP_SEND_MESSAGE };

        if (!stream_send_wait(st) || st->send_closed)
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "%s: the call has ended",
                                    st->method);
        if (rpc_message_pack(msg, RPC_MAX_MESSAGE_BYTES, &st->send, err) < 0)
                return -1;
        op.data.send_message.send_message = st->send;
        if (stream_start(st, TAG_SEND, &op, 1) < 0) {
                st->send_failed = true;
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "%s: the call has ended",
                                    st->method);
        }
        return 0;
}

void rpc_stream_close_send(rpc_stream *st)
{
        grpc_op op = { .op = GRPC_OP_SEND_CLOSE_FROM_CLIENT };

        if (!stream_send_wait(st) || st->send_closed)
                return;
        st->send_closed = true;
        if (stream_start(st, TAG_SEND, &op, 1) < 0)
                st->send_failed = true;
}

int rpc_stream_read_raw(rpc_stream *st, grpc_byte_buffer **ret, cs_error **err)
{
        grpc_op op = { .op = GRPC_OP_RECV_MESSAGE };

        if (!st->ended) {
                op.data.recv_message.recv_message = &st->recv;
                if (stream_start(st, TAG_RECV, &op, 1) == 0)
                        stream_wait(st, TAG_RECV);
                if (st->recv) {
                        *ret = TAKE_PTR(st->recv);
                        return 1;
                }
                /* No message: the server has closed the stream. */
                stream_wait(st, TAG_STATUS);
                stream_wait(st, TAG_START);
                st->ended = true;
        }
        return client_call_status(&st->cc, st->method, err);
}

int rpc_stream_read(rpc_stream *st, ProtobufCMessage **ret_msg, cs_error **err)
{
        grpc_byte_buffer *bb = NULL;
        int r = rpc_stream_read_raw(st, &bb, err);

        if (r <= 0)
                return r;
        r = rpc_message_unpack(st->resp_desc, bb, "response", GRPC_STATUS_INTERNAL, ret_msg, err);
        grpc_byte_buffer_destroy(bb);
        if (r < 0) {
                rpc_stream_cancel(st);
                return -1;
        }
        return 1;
}

void rpc_stream_cancel(rpc_stream *st)
{
        grpc_call_cancel(st->cc.call, NULL);
}

void rpc_stream_free(rpc_stream *st)
{
        if (!st)
                return;
        if (st->cc.call && !st->ended)
                grpc_call_cancel(st->cc.call, NULL);
        for (int tag = 0; tag < N_TAGS; tag++)
                stream_wait(st, tag);
        if (st->recv)
                grpc_byte_buffer_destroy(st->recv);
        if (st->send)
                grpc_byte_buffer_destroy(st->send);
        client_call_destroy(&st->cc);
        free(st->method);
        free(st);
}

/* Passes messages on without decoding them: no copy, no allocation per message. With
 * ret_last, the last one relayed is kept there (the caller destroys it). */
static int relay_raw(rpc_call *in, rpc_stream *out, grpc_byte_buffer **ret_last, cs_error **err)
{
        for (;;) {
                grpc_byte_buffer *bb = NULL;
                int r = rpc_stream_read_raw(out, &bb, err);

                if (r <= 0)
                        return r;
                r = rpc_call_send_raw(in, bb, err);
                if (ret_last && r == 0) {
                        if (*ret_last)
                                grpc_byte_buffer_destroy(*ret_last);
                        *ret_last = bb;
                } else {
                        grpc_byte_buffer_destroy(bb);
                }
                if (r < 0) {
                        rpc_stream_cancel(out);
                        return -1;
                }
        }
}

int rpc_stream_relay_last(rpc_call *in, rpc_stream *out, ProtobufCMessage **ret_last,
                          cs_error **err)
{
        grpc_byte_buffer *last = NULL;
        int r = relay_raw(in, out, &last, err);

        *ret_last = NULL;
        if (last) {
                /* Decoded apart from the relay: a message that does not decode was still
                 * passed on as it came, and is only missing here. */
                _cleanup_error_ cs_error *ignored = NULL;
                rpc_message_unpack(out->resp_desc, last, "response", GRPC_STATUS_INTERNAL, ret_last,
                                   &ignored);
                grpc_byte_buffer_destroy(last);
        }
        return r;
}

int rpc_stream_relay(rpc_call *in, rpc_stream *out, rpc_relay_fn each, void *userdata,
                     cs_error **err)
{
        if (!each)
                return relay_raw(in, out, NULL, err);
        for (;;) {
                ProtobufCMessage *msg = NULL;
                int r = rpc_stream_read(out, &msg, err);

                if (r <= 0)
                        return r;
                each(msg, userdata);
                r = rpc_call_send(in, msg, err);
                protobuf_c_message_free_unpacked(msg, NULL);
                if (r < 0) {
                        rpc_stream_cancel(out);
                        return -1;
                }
        }
}
