/* A small RPC layer over the gRPC core C API and protobuf-c.
 *
 * Server: a table of methods (unary or server-streaming; bidirectional ones are registered
 * apart, see rpc_bidi_method) with a handler each. Every accepted call runs its handler on a
 * thread of its own, so a handler is plain blocking code: it gets the decoded request and
 * returns a response or an error. A streaming handler sends with
 * rpc_call_send(), which blocks until the transport has taken the previous message: gRPC
 * flow control then holds back a producer that outruns its reader, and no queue grows
 * without bound.
 * Cancellation by the client and expiry of the deadline are seen at once (a
 * RECV_CLOSE_ON_SERVER op is kept pending from the start of every call) and reported through
 * rpc_call_cancelled(), rpc_call_cancel_fd() and failing sends.
 *
 * Client: channels, unary calls and server-streaming reads with deadlines and cancellation.
 * A call started with a `parent` server call is cancelled when the parent is, and inherits
 * its deadline (gRPC core's propagation): that is the relay used by the frontend.
 *
 * Limits: every message is capped at RPC_MAX_MESSAGE_BYTES in both directions, on servers and
 * channels alike; a larger one fails the call with RESOURCE_EXHAUSTED and nothing else. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "error.h"
#include "log.h"

/* The API moves up to 16 MiB of data per call; the rest of a message (path, ids, framing of
 * the fields) needs far less than the 64 KiB on top. */
#define RPC_DATA_MAX_BYTES    (16 * 1024 * 1024)
#define RPC_MAX_MESSAGE_BYTES (RPC_DATA_MAX_BYTES + 64 * 1024)

/* HTTP/2 sizing on every server and channel: frame size, and the bytes a stream may have in
 * flight before its reader acknowledges them (per stream; flow control bounds the rest). */
#define RPC_HTTP2_FRAME_BYTES  (1024 * 1024)
#define RPC_HTTP2_WINDOW_BYTES (1024 * 1024)

/* Defaults for rpc_server_options. */
#define RPC_DEFAULT_MAX_CALLS 256
/* Distinct peers counted at once for the per-peer share; a peer beyond them is refused. */
#define RPC_MAX_PEERS        4096
#define RPC_DEFAULT_GRACE_MS 10000

/* Request ids: taken from the caller's x-request-id metadata when it is sane, made up
 * otherwise, passed on to calls made with a parent, and logged with every line. */
#define RPC_REQUEST_ID_HEADER "x-request-id"
#define RPC_REQUEST_ID_MAX    64

typedef struct rpc_server rpc_server;
typedef struct rpc_call rpc_call;

/* --- server ---------------------------------------------------------------------------- */

/* A unary handler fills `resp` (already initialised for the method's response type) and
 * returns 0, or returns -1 with *err set. Anything `resp` points to must outlive the handler:
 * use rpc_call_alloc()/rpc_call_strdup(), point into the request, or use static storage.
 * The layer frees the request and everything allocated on the call once the call ends. */
typedef int (*rpc_unary_fn)(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                            void *userdata, cs_error **err);

/* A streaming handler sends any number of messages with rpc_call_send() and returns 0 (the
 * call ends with OK) or -1 with *err set (the call ends with that status). */
typedef int (*rpc_stream_fn)(rpc_call *call, const ProtobufCMessage *req, void *userdata,
                             cs_error **err);

typedef struct rpc_method {
        const char *path; /* "/package.Service/Method" */
        const ProtobufCMessageDescriptor *request;
        const ProtobufCMessageDescriptor *response;
        rpc_unary_fn unary; /* exactly one of unary and stream is set */
        rpc_stream_fn stream;
        void *userdata;
        /* NULL, or the name of a top-level bytes field of the request that is left where it
         * arrived instead of being decoded into one contiguous copy: the handler reads it
         * with rpc_call_request_bytes(), and the decoded request has it empty. For bulk
         * data (WriteFile's 16 MiB), which is then written out or relayed without a copy. */
        const char *request_bytes_field;
} rpc_method;

/* A bidirectional-streaming method (registered with rpc_server_add_bidi_method): no request
 * is read for it; its handler reads each with rpc_call_recv(), answers with rpc_call_send(),
 * and returns as a streaming handler does (0: the call ends with OK; -1 with *err: with that
 * status). */
typedef int (*rpc_bidi_fn)(rpc_call *call, void *userdata, cs_error **err);

typedef struct rpc_bidi_method {
        const char *path; /* "/package.Service/Method" */
        const ProtobufCMessageDescriptor *request;
        const ProtobufCMessageDescriptor *response;
        rpc_bidi_fn handler;
        void *userdata;
} rpc_bidi_method;

/* Bytes of a message kept in the slices they arrived in (reference counted, never copied):
 * `iov` views them for writev(2), `slices` hands them on (rpc_call_options.bytes, which
 * sends slices.length bytes). */
typedef struct rpc_bytes {
        size_t len; /* total */
        struct iovec *iov;
        size_t n_iov;
        grpc_slice_buffer slices;
} rpc_bytes;

typedef struct rpc_server_options {
        const char *listen; /* "host:port"; port 0 picks a free one (see rpc_server_port) */
        unsigned max_calls; /* calls running at once; more get RESOURCE_EXHAUSTED. 0: default */
        /* Calls one peer (rpc_peer_key) may run at once, so that a greedy peer is refused
         * before it fills max_calls for everyone. 0: no per-peer share (max_calls). Capped at
         * max_calls. */
        unsigned max_calls_per_peer;
        int64_t grace_ms;   /* how long shutdown lets calls finish before cancelling them */
        size_t max_message; /* 0: RPC_MAX_MESSAGE_BYTES */
        /* TLS, as PEM text: the server's certificate (chain) and private key, and the CA
         * every client certificate must chain to. All three set: the port serves mutual TLS
         * only: it requires a client certificate and verifies it against the CA (a client
         * without one, or with one from another CA, fails its handshake). All NULL:
         * plaintext. Certificate and key without a CA: with tls_client_ca_optional, TLS only
         * without client certificates (the frontend's public port); without it, like any
         * other mix, rpc_server_start() fails with INVALID_ARGUMENT (the internal link is
         * mutual TLS or nothing). Copied by rpc_server_new(). */
        const char *tls_cert_pem;
        const char *tls_key_pem;
        const char *tls_ca_pem;
        bool tls_client_ca_optional;
        /* The level of the access-log line of a call that ends OK (see "access log" below);
         * 0 is CS_LOG_DEBUG. */
        cs_log_level access_log_level;
} rpc_server_options;

/* Creates a server. Methods are added with rpc_server_add_method() before rpc_server_start().
 * The caller owns the server and frees it with rpc_server_free(). */
rpc_server *rpc_server_new(const rpc_server_options *opts);

/* Registers a method. The method struct must outlive the server (use static tables). */
int rpc_server_add_method(rpc_server *srv, const rpc_method *method, cs_error **err);

/* Registers a bidirectional method, as rpc_server_add_method() does. */
int rpc_server_add_bidi_method(rpc_server *srv, const rpc_bidi_method *method, cs_error **err);

/* Binds the listen address and starts serving. INVALID_ARGUMENT for bad TLS material (see
 * rpc_tls_check_pem), UNAVAILABLE when the address cannot be bound. */
int rpc_server_start(rpc_server *srv, cs_error **err);

/* True when the server was given TLS material (it serves TLS only). */
bool rpc_server_tls(const rpc_server *srv);

/* True when it also requires client certificates (a client CA was given: mutual TLS). */
bool rpc_server_tls_mutual(const rpc_server *srv);

/* The bound port (useful with port 0), valid after rpc_server_start(). */
int rpc_server_port(const rpc_server *srv);

/* True once rpc_server_shutdown() has begun (health checks report NOT_SERVING). */
bool rpc_server_shutting_down(rpc_server *srv);

/* Graceful shutdown: stops accepting calls, lets those in flight finish for grace_ms, then
 * cancels the rest and waits for their handlers to return. Idempotent. */
void rpc_server_shutdown(rpc_server *srv);

/* Shuts down (if not done yet) and frees. NULL is accepted. */
void rpc_server_free(rpc_server *srv);

/* Number of calls whose handler is running (for tests and metrics). */
unsigned rpc_server_active_calls(rpc_server *srv);

/* Writes grpc_server_started_total, grpc_server_handled_total and
 * grpc_server_handling_seconds (the names and labels of the gRPC ecosystem's Prometheus
 * middleware) for every registered method. Safe while calls run. */
struct cs_mpage;
void rpc_server_metrics(rpc_server *srv, struct cs_mpage *page);

/* --- the call a handler is serving -------------------------------------------------------- */

const char *rpc_call_method(const rpc_call *call);
const char *rpc_call_peer(const rpc_call *call);
const char *rpc_call_request_id(const rpc_call *call);

/* The deadline as milliseconds on the monotonic clock (cs_now_monotonic_ms), INT64_MAX when
 * the client set none. */
int64_t rpc_call_deadline_ms(const rpc_call *call);

/* The first value of a request metadata key (lower case), or NULL. Binary ("-bin") values
 * are returned with their length in ret_len, which may be NULL for text values. */
const char *rpc_call_metadata(const rpc_call *call, const char *key, size_t *ret_len);

/* Adds the sandbox id to every later log line of this call. The string is copied. */
void rpc_call_set_sandbox_id(rpc_call *call, const char *sandbox_id);

/* True once the client cancelled, the connection dropped, the deadline passed or the server
 * cancelled the call during shutdown. */
bool rpc_call_cancelled(rpc_call *call);

/* An eventfd that becomes readable when rpc_call_cancelled() becomes true, for handlers
 * that wait in poll(2) on other fds. Owned by the call: do not close or read it. */
int rpc_call_cancel_fd(const rpc_call *call);

/* Why the call was cancelled, as the status the handler should end with
 * (DEADLINE_EXCEEDED or CANCELLED): DEADLINE_EXCEEDED when it was cancelled at its deadline
 * or within 200 ms before it (the client's own timer, which fires first, cancels it then).
 * Only meaningful when rpc_call_cancelled(). */
grpc_status_code rpc_call_cancel_status(rpc_call *call);

/* Streaming handlers: sends one message. One message may be in flight per call: this first
 * blocks until the transport has taken the previous one, so producing the next message
 * overlaps sending this one, and a slow reader still holds the producer back (at most one
 * encoded message waits in the layer). Returns -1 with CANCELLED or DEADLINE_EXCEEDED when
 * the call ended first, with RESOURCE_EXHAUSTED when the message is over the size cap. The
 * caller keeps `msg` (it is encoded before this returns). */
int rpc_call_send(rpc_call *call, const ProtobufCMessage *msg, cs_error **err);

/* Bidirectional handlers: reads the next request (of the method's request type). Reads are
 * independent of sends: one thread may block here while another sends with rpc_call_send
 * (one read and one send in flight at once; never two reads at once). Returns 1 with
 * *ret_msg (the caller frees it with protobuf_c_message_free_unpacked), 0 once the client
 * has closed its side or the read was abandoned (rpc_call_recv_abandon), -1 with CANCELLED
 * or DEADLINE_EXCEEDED when the call ended, RESOURCE_EXHAUSTED for a request over max_bytes
 * (the server's message cap applies before), INVALID_ARGUMENT for one that does not decode.
 * A cancel that gRPC reports to the read before the call's close op may come back as 0:
 * either way the handler should return, and the layer ends a cancelled call as cancelled. */
int rpc_call_recv(rpc_call *call, size_t max_bytes, ProtobufCMessage **ret_msg, cs_error **err);

/* rpc_call_recv, except that after idle_ms (> 0) without a message it abandons the read
 * (rpc_call_recv_abandon: later reads return 0) and returns -1 with DEADLINE_EXCEEDED, for a
 * stream a client must not hold open doing nothing. idle_ms 0: no limit. */
int rpc_call_recv_idle(rpc_call *call, size_t max_bytes, int64_t idle_ms,
                       ProtobufCMessage **ret_msg, cs_error **err);

/* Makes a rpc_call_recv that blocks (and every later one) return 0 at once, e.g. when the
 * handler is done and its reader thread must end while the client still has its side open.
 * A read still pending in gRPC is left to the layer, which drops what it brings. Safe from
 * any thread. */
void rpc_call_recv_abandon(rpc_call *call);

/* Zeroed memory and string copies that live until the call ends. Never NULL. */
void *rpc_call_alloc(rpc_call *call, size_t size);
char *rpc_call_strdup(rpc_call *call, const char *s);

/* For relays: answers a unary call with a message already encoded by someone else (e.g.
 * read with rpc_unary_raw), instead of encoding `resp`. The call takes bb. */
void rpc_call_respond_raw(rpc_call *call, grpc_byte_buffer *bb);

/* For methods with a request_bytes_field: that field's bytes, as they arrived (len 0 when
 * the request had none). Valid until the call ends. NULL for other methods. */
const rpc_bytes *rpc_call_request_bytes(rpc_call *call);

/* For bulk responses: the unary response is sent as `resp` plus its bytes field `field`
 * holding data[0..len), which is not copied into the encoding but sent from where it is,
 * then freed with free_fn once gRPC is done with it, whatever happens to the call. That can
 * be after the call has ended, on one of gRPC's threads: data must be memory of its own
 * (malloc'ed, with free), never the call's (rpc_call_alloc); free_fn NULL is for static
 * data only. resp's own `field` must be left empty. Over the message cap, the call fails
 * with RESOURCE_EXHAUSTED. From the handler's thread. */
void rpc_call_respond_bytes(rpc_call *call, const char *field, void *data, size_t len,
                            void (*free_fn)(void *));

/* Runs fn(arg) when the call ends (after the response is sent), e.g. to free a message the
 * response points into. From the handler's thread only. */
void rpc_call_defer(rpc_call *call, void (*fn)(void *), void *arg);

/* The access log: every call, served or refused, ends with one line (cs_log_fields,
 * message "access") with the fields method (the path), code (the status's name, e.g.
 * NOT_FOUND), duration_ms (from accept to the status sent), peer, the call's request id and
 * sandbox id, then the fields its handler added, then error (the status message) for a
 * call that failed. Its level: the server's access_log_level (or the call's own, set by
 * rpc_call_set_access_level) for a call that ended OK; at least INFO for one that ended
 * with an error; WARN for one refused before any handler ran (a cap, an unknown method,
 * shutdown); ERROR for a server fault (INTERNAL, UNKNOWN, DATA_LOSS). */
#define RPC_CALL_LOG_FIELDS_MAX 24

/* Adds a field to the call's access-log line (key: a string constant, see cs_log_field;
 * not one of the layer's own: method, code, duration_ms, peer, error); a string value is
 * copied. Adding a key again replaces its value; fields beyond RPC_CALL_LOG_FIELDS_MAX, and
 * fields with a key the logger or the layer refuses, are dropped. From the handler's
 * thread. */
void rpc_call_add_log_field(rpc_call *call, cs_log_field field);

/* The level of this call's access-log line when it ends OK (e.g. health checks, which
 * probes make every few seconds: debug). From the handler's thread. */
void rpc_call_set_access_level(rpc_call *call, cs_log_level level);

/* Logs with the call's request id and sandbox id. */
void rpc_call_log(rpc_call *call, cs_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* --- client ------------------------------------------------------------------------------ */

typedef struct rpc_channel rpc_channel;
typedef struct rpc_stream rpc_stream;

typedef struct rpc_call_options {
        int64_t timeout_ms;     /* <= 0: none (or the parent's deadline) */
        rpc_call *parent;       /* cancel with, and inherit the deadline of, this server call */
        const char *request_id; /* sent as x-request-id; NULL: the parent's, if any */
        /* Set both to send `bytes` as the request's bytes field named bytes_field (left
         * empty in the request itself) straight from its slices, without a copy: a relay
         * passing on what rpc_call_request_bytes() returned. */
        const char *bytes_field;
        const rpc_bytes *bytes;
} rpc_call_options;

/* Process-wide client TLS, used by every rpc_channel_new() after it (channels made before
 * keep what they had). Meant to be called once at startup, before any channel; safe from any
 * thread, and callable before rpc_global_init() (the PEM text is copied and checked here,
 * the gRPC credentials are made per channel).
 * - ca_pem NULL or "": plaintext channels (the default); cert_pem, key_pem and server_name
 *   must then be NULL or "" too.
 * - ca_pem set: TLS; the server's certificate must chain to this CA (the system roots are
 *   never used) and name the server (below). cert_pem and key_pem, both or neither: the
 *   client certificate (chain) and its private key, presented when the server asks (servers
 *   with rpc_server_options TLS require one).
 * - server_name set: the server's certificate is checked against this fixed DNS name
 *   (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, also sent as SNI) instead of the target's host, so a
 *   pod reached by its IP can hold a certificate for a stable name. NULL or "": checked
 *   against the host in the target (a DNS name, or an IP address in an IP SAN).
 * INVALID_ARGUMENT (and nothing changes) on a bad mix or bad PEM (see rpc_tls_check_pem). */
int rpc_client_tls_set(const char *ca_pem, const char *cert_pem, const char *key_pem,
                       const char *server_name, cs_error **err);

/* True when rpc_channel_new() currently makes TLS channels. */
bool rpc_client_tls_enabled(void);

/* Checks TLS material before gRPC gets it (gRPC itself only fails a handshake or a bind,
 * without saying why): ca_pem holds one or more PEM certificates (text around them is
 * ignored, as gRPC does), every one of which decodes; cert_pem likewise (a chain, leaf first);
 * key_pem an unencrypted PEM private key that belongs to the first certificate of cert_pem
 * (cert_pem is then required). NULL arguments are not checked. -1 with INVALID_ARGUMENT and a
 * message that says which part is wrong and why. */
int rpc_tls_check_pem(const char *ca_pem, const char *cert_pem, const char *key_pem,
                      cs_error **err);

/* Opens a channel to target ("host:port"). Connection happens lazily, on the first call.
 * Plaintext, or TLS as set by rpc_client_tls_set(). Owned by the caller: rpc_channel_free(). */
rpc_channel *rpc_channel_new(const char *target);
void rpc_channel_free(rpc_channel *ch);
const char *rpc_channel_target(const rpc_channel *ch);

/* A unary call. On success *ret_resp is a message of type resp_desc that the caller frees
 * with protobuf_c_message_free_unpacked(*ret_resp, NULL). On failure, -1 and *err carries the
 * server's status and message (or the transport's). opts may be NULL. */
int rpc_unary(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
              ProtobufCMessage **ret_resp, cs_error **err);

/* rpc_unary, but the response is returned undecoded (the caller destroys *ret): for relays
 * that pass a response on as it is. */
int rpc_unary_raw(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                  const rpc_call_options *opts, grpc_byte_buffer **ret, cs_error **err);

/* rpc_unary, except for the response's bytes field named bytes_field: it is not decoded
 * (the message has it empty) but left in *ret_bytes, in the slices it arrived in, for the
 * caller to write out or compare without a copy. *ret_bytes must have been set up with
 * rpc_bytes_init(); the caller releases it with rpc_bytes_clear(). */
int rpc_unary_bytes(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const char *bytes_field,
                    const rpc_call_options *opts, ProtobufCMessage **ret_resp, rpc_bytes *ret_bytes,
                    cs_error **err);

/* An empty rpc_bytes, and releasing one (it is empty again afterwards). */
void rpc_bytes_init(rpc_bytes *b);
void rpc_bytes_clear(rpc_bytes *b);

/* Starts a server-streaming call. The caller owns *ret and frees it with rpc_stream_free(). */
int rpc_stream_open(rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
                    rpc_stream **ret, cs_error **err);

/* Starts a bidirectional call: no request yet; send them with rpc_stream_send (then
 * rpc_stream_close_send), read the responses with rpc_stream_read. One thread may send while
 * another reads (one of each at a time). */
int rpc_stream_open_bidi(rpc_channel *ch, const char *method,
                         const ProtobufCMessageDescriptor *resp_desc, const rpc_call_options *opts,
                         rpc_stream **ret, cs_error **err);

/* Sends one message on a bidirectional call. Waits first for the transport to take the
 * previous one, so a server that stops reading holds the sender back (one message in
 * flight). UNAVAILABLE once the call has ended (its status comes from rpc_stream_read). */
int rpc_stream_send(rpc_stream *st, const ProtobufCMessage *msg, cs_error **err);

/* Half-closes a bidirectional call (after the message in flight): the server reads its end. */
void rpc_stream_close_send(rpc_stream *st);

/* Reads the next message: returns 1 with *ret_msg (caller frees it with
 * protobuf_c_message_free_unpacked), 0 at the end of a stream that ended with OK, or -1 with
 * the status the stream ended with. */
int rpc_stream_read(rpc_stream *st, ProtobufCMessage **ret_msg, cs_error **err);

/* Cancels the call; a read in progress returns -1 with CANCELLED. Safe from any thread. */
void rpc_stream_cancel(rpc_stream *st);

/* Cancels the call if it has not ended, waits for the transport to let go, frees. */
void rpc_stream_free(rpc_stream *st);

/* Relays every message of `out` (a call opened with `in` as parent) to `in` until it ends.
 * Without `each`, messages pass through undecoded; `each`, when set, may edit a decoded
 * message before it is sent. Returns 0 when `out` ended with
 * OK, -1 with its status otherwise, or with the reason `in` could not take a message. */
typedef void (*rpc_relay_fn)(ProtobufCMessage *msg, void *userdata);
int rpc_stream_relay(rpc_call *in, rpc_stream *out, rpc_relay_fn each, void *userdata,
                     cs_error **err);

/* rpc_stream_relay without `each` (messages pass undecoded), which also hands back the last
 * message relayed, decoded, in *ret_last: NULL when none passed (or it did not decode);
 * otherwise the caller frees it with protobuf_c_message_free_unpacked. Set whatever the
 * return. For a stream whose last message says how it ended (ExecCommand's completed
 * event). */
int rpc_stream_relay_last(rpc_call *in, rpc_stream *out, ProtobufCMessage **ret_last,
                          cs_error **err);

/* Process-wide set-up and tear-down of gRPC core: call once in main (and in tests). The
 * set-up also tunes malloc for the messages the project moves (rpc_codec.c). */
void rpc_global_init(void);
void rpc_global_shutdown(void);
