/* The server half of the RPC layer.
 *
 * Threads: one poller thread drains the server's completion queue and runs the tag callbacks
 * (all short, none block). Each accepted call gets a detached handler thread that runs the
 * method's handler as plain blocking code and waits on the call's condition variable for its
 * own batches. The number of handler threads is capped by max_calls.
 *
 * Lifetime of a call: two references, one held by the pending RECV_CLOSE_ON_SERVER op and one
 * by the handler thread (or, for a call refused at the door, by its status batch). Whoever
 * drops the last one frees the call and tells the server, which waits for every call to be
 * gone before it lets go of gRPC. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "metrics.h"
#include "rpc_internal.h"
#include "share.h"
#include "util.h"
#include "uuid.h"

typedef struct srv_method {
        const rpc_method *m;
        /* A bidirectional method: its handler, and `m` points at `own` (path, types and
         * userdata; neither unary nor stream). NULL for the others. */
        const rpc_bidi_method *bidi;
        rpc_method own;
        rpc_server *srv;
        void *handle; /* from grpc_server_register_method */
        rpc_tag accept_tag;
        /* Filled by gRPC when a call for this method arrives. */
        grpc_call *call;
        gpr_timespec deadline;
        grpc_metadata_array md;
        grpc_byte_buffer *payload;
        /* The catch-all slot: calls for methods nobody registered (details says which). */
        bool unknown;
        grpc_call_details details;
        /* Counted for rpc_server_metrics, as the gRPC ecosystem's Prometheus middleware does:
         * calls accepted, calls ended by status code (refusals at the door included), and
         * the time from accept to the final status. Not for the unknown slot. */
        _Atomic uint64_t started;
        _Atomic uint64_t handled[GRPC_STATUS_UNAUTHENTICATED + 1];
        cs_histogram seconds;
} srv_method;

#define SRV_MAX_METHODS 32

struct rpc_server {
        char *listen;
        char *tls_cert, *tls_key, *tls_ca; /* PEM copies; all NULL: plaintext */
        bool tls_client_ca_optional;       /* cert and key alone: TLS without client certs */
        unsigned max_calls;
        cs_share *peer_share; /* calls in flight per peer (rpc_peer_key) */
        int64_t grace_ms;
        int max_message;
        cs_log_level access_level; /* of a call that ended OK (rpc_server_options) */

        grpc_server *server;
        grpc_completion_queue *cq;
        pthread_t poller;
        bool started;
        int port;

        srv_method methods[SRV_MAX_METHODS];
        size_t n_methods;
        srv_method unknown; /* gRPC core leaves unregistered calls pending: refuse them */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        unsigned active;     /* handler threads running */
        unsigned live_calls; /* rpc_call objects not yet freed */
        bool shutting_down;
        bool shutdown_notified;
        bool shutdown_finished;
        rpc_tag shutdown_tag;
};

typedef struct arena_block {
        struct arena_block *next;
        void (*cleanup)(void *); /* rpc_call_defer: run at the end instead of holding data */
        void *arg;
        max_align_t data[];
} arena_block;

struct rpc_call {
        rpc_server *srv;
        srv_method *sm; /* NULL for a call to an unregistered method */
        const rpc_method *method;
        grpc_call *call;
        gpr_timespec deadline;
        int64_t deadline_ms;
        int64_t accepted_ns; /* monotonic, for grpc_server_handling_seconds */
        grpc_metadata_array md;
        grpc_byte_buffer *payload;
        char *peer;
        char peer_key[CS_SHARE_KEY_MAX + 1];
        bool share_held; /* holds one unit of srv->peer_share until the handler ends */
        char request_id[RPC_REQUEST_ID_MAX + 1];
        char *sandbox_id;
        arena_block *arena;
        /* The access log's fields the handler added (strings on the arena), and its level
         * for a call that ends OK. */
        cs_log_field log_fields[RPC_CALL_LOG_FIELDS_MAX];
        size_t n_log_fields;
        cs_log_level access_level;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        int refs;

        rpc_tag close_tag;
        int close_cancelled;  /* written by gRPC when the close op completes */
        int64_t cancelled_ms; /* monotonic, when `cancelled` became true (set before it) */
        atomic_bool cancelled;
        int cancel_fd;

        /* Bidirectional calls: the read batch, apart from the send's so that one read and one
         * send may be in flight at once (from two threads). A read left pending by
         * rpc_call_recv_abandon holds a reference until gRPC completes it. */
        rpc_tag recv_tag;
        bool recv_pending, recv_ok, recv_abandoned;
        grpc_byte_buffer *recv_bb;

        rpc_tag send_tag;
        bool send_done;
        bool send_ok;
        grpc_byte_buffer *in_flight; /* the message whose send has not completed yet */
        grpc_byte_buffer *raw_resp;  /* rpc_call_respond_raw: the unary response as is */
        rpc_bytes req_bytes;         /* the method's request_bytes_field, as it arrived */
        const char *resp_field;      /* rpc_call_respond_bytes: the field, and its bytes */
        grpc_slice resp_bytes;
        bool initial_md_sent;
        grpc_metadata initial_md[1];
        grpc_slice status_details;
};

static void call_unref(rpc_call *c);

/* --- small accessors ------------------------------------------------------------------- */

const char *rpc_call_method(const rpc_call *c)
{
        return c->method->path;
}

const char *rpc_call_peer(const rpc_call *c)
{
        return c->peer ? c->peer : "unknown";
}

const char *rpc_call_request_id(const rpc_call *c)
{
        return c->request_id;
}

int64_t rpc_call_deadline_ms(const rpc_call *c)
{
        return c->deadline_ms;
}

bool rpc_call_cancelled(rpc_call *c)
{
        return atomic_load(&c->cancelled);
}

int rpc_call_cancel_fd(const rpc_call *c)
{
        return c->cancel_fd;
}

grpc_call *rpc_call_grpc(rpc_call *c)
{
        return c->call;
}

/* A client's deadline is ours minus the time its request took to reach us, so its timer
 * fires first and its cancel arrives just before our deadline: a cancel this close to the
 * deadline is the deadline's doing (what the client itself reports). */
#define RPC_DEADLINE_SLACK_MS 200

grpc_status_code rpc_call_cancel_status(rpc_call *c)
{
        /* When the call was cancelled, not when the handler asks (it may ask much later). */
        int64_t at = atomic_load(&c->cancelled) ? c->cancelled_ms : cs_now_monotonic_ms();

        return at >= c->deadline_ms - RPC_DEADLINE_SLACK_MS ? GRPC_STATUS_DEADLINE_EXCEEDED
                                                            : GRPC_STATUS_CANCELLED;
}

const char *rpc_call_metadata(const rpc_call *c, const char *key, size_t *ret_len)
{
        size_t klen = strlen(key);

        for (size_t i = 0; i < c->md.count; i++) {
                const grpc_metadata *m = &c->md.metadata[i];
                if (GRPC_SLICE_LENGTH(m->key) == klen &&
                    memcmp(GRPC_SLICE_START_PTR(m->key), key, klen) == 0) {
                        /* Text values are not terminated in the slice: copy onto the arena. */
                        size_t len = GRPC_SLICE_LENGTH(m->value);
                        char *v = rpc_call_alloc((rpc_call *)c, len + 1);
                        memcpy(v, GRPC_SLICE_START_PTR(m->value), len);
                        if (ret_len)
                                *ret_len = len;
                        return v;
                }
        }
        return NULL;
}

void rpc_call_set_sandbox_id(rpc_call *c, const char *sandbox_id)
{
        free(c->sandbox_id);
        c->sandbox_id = sandbox_id ? cs_xstrdup(sandbox_id) : NULL;
}

void rpc_call_add_log_field(rpc_call *c, cs_log_field f)
{
        static const char *const layer_keys[] = { "method", "code", "duration_ms", "peer",
                                                  "error" };
        size_t i = 0;

        for (size_t k = 0; k < ARRAY_SIZE(layer_keys); k++) {
                if (f.key && strcmp(f.key, layer_keys[k]) == 0)
                        return; /* the layer's own: a JSON object has each key once */
        }
        if (!cs_log_key_valid(f.key))
                return;
        if (f.type == CS_LOG_FIELD_STR && f.v.s)
                f.v.s = rpc_call_strdup(c, f.v.s);
        while (i < c->n_log_fields && strcmp(c->log_fields[i].key, f.key) != 0)
                i++;
        if (i == RPC_CALL_LOG_FIELDS_MAX)
                return;
        c->log_fields[i] = f;
        if (i == c->n_log_fields)
                c->n_log_fields++;
}

void rpc_call_set_access_level(rpc_call *c, cs_log_level level)
{
        c->access_level = level;
}

void *rpc_call_alloc(rpc_call *c, size_t size)
{
        arena_block *b = cs_xcalloc(1, sizeof(*b) + size);

        b->next = c->arena;
        c->arena = b;
        return b->data;
}

void rpc_call_respond_raw(rpc_call *c, grpc_byte_buffer *bb)
{
        if (c->raw_resp)
                grpc_byte_buffer_destroy(c->raw_resp);
        c->raw_resp = bb;
}

const rpc_bytes *rpc_call_request_bytes(rpc_call *c)
{
        return c->method->request_bytes_field ? &c->req_bytes : NULL;
}

/* For slices whose data the caller keeps alive. */
static void no_free(void *p)
{
        (void)p;
}

void rpc_call_respond_bytes(rpc_call *c, const char *field, void *data, size_t len,
                            void (*free_fn)(void *))
{
        if (c->resp_field)
                grpc_slice_unref(c->resp_bytes);
        c->resp_field = field;
        c->resp_bytes = grpc_slice_new_with_user_data(data, len, free_fn ? free_fn : no_free, data);
}

void rpc_call_defer(rpc_call *c, void (*fn)(void *), void *arg)
{
        arena_block *b = cs_xcalloc(1, sizeof(*b));

        b->cleanup = fn;
        b->arg = arg;
        b->next = c->arena;
        c->arena = b;
}

char *rpc_call_strdup(rpc_call *c, const char *s)
{
        size_t len = strlen(s);
        char *d = rpc_call_alloc(c, len + 1);

        memcpy(d, s, len);
        return d;
}

void rpc_call_log(rpc_call *c, cs_log_level level, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        cs_logv(level, c->request_id, c->sandbox_id, fmt, ap);
        va_end(ap);
}

/* Who a call counts against for the per-peer share. An IP peer is its address without the
 * port (all connections of one host share), except loopback and unix peers: every local
 * client has the same address, so there the connection (address with port) is the peer,
 * and the frontend's per-tenant share is what separates local clients. */
void rpc_peer_key(const char *peer, char *ret_key, size_t len)
{
        const char *end = NULL;
        bool local = strncmp(peer, "unix:", 5) == 0 || strncmp(peer, "ipv4:127.", 9) == 0 ||
                     strncmp(peer, "ipv6:[::1]", 10) == 0 ||
                     strncmp(peer, "ipv6:[::ffff:127.", 17) == 0;

        if (!local && (strncmp(peer, "ipv4:", 5) == 0 || strncmp(peer, "ipv6:", 5) == 0))
                end = strrchr(peer, ':');
        snprintf(ret_key, len, "%.*s", end ? (int)(end - peer) : (int)strlen(peer), peer);
}

unsigned rpc_peer_share(unsigned max_calls, unsigned per_peer)
{
        if (per_peer == 0)
                return max_calls;
        return per_peer < max_calls ? per_peer : max_calls;
}

static void call_give_share(rpc_call *c)
{
        if (c->share_held)
                cs_share_give(c->srv->peer_share, c->peer_key);
        c->share_held = false;
}

/* --- call lifetime --------------------------------------------------------------------- */

static void call_free(rpc_call *c)
{
        rpc_server *srv = c->srv;

        while (c->arena) {
                arena_block *next = c->arena->next;
                if (c->arena->cleanup)
                        c->arena->cleanup(c->arena->arg);
                free(c->arena);
                c->arena = next;
        }
        if (c->in_flight)
                grpc_byte_buffer_destroy(c->in_flight);
        if (c->recv_bb)
                grpc_byte_buffer_destroy(c->recv_bb);
        if (c->raw_resp)
                grpc_byte_buffer_destroy(c->raw_resp);
        if (c->resp_field)
                grpc_slice_unref(c->resp_bytes);
        rpc_bytes_clear(&c->req_bytes);
        grpc_call_unref(c->call);
        grpc_metadata_array_destroy(&c->md);
        if (c->payload)
                grpc_byte_buffer_destroy(c->payload);
        grpc_slice_unref(c->status_details);
        gpr_free(c->peer);
        free(c->sandbox_id);
        close(c->cancel_fd);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c);

        pthread_mutex_lock(&srv->lock);
        srv->live_calls--;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
}

static void call_unref(rpc_call *c)
{
        int left;

        pthread_mutex_lock(&c->lock);
        left = --c->refs;
        pthread_mutex_unlock(&c->lock);
        if (left == 0)
                call_free(c);
}

/* Poller: the RECV_CLOSE_ON_SERVER op completed: the call is over, one way or another. */
static void on_close(void *owner, bool ok)
{
        rpc_call *c = owner;

        (void)ok;
        if (c->close_cancelled) {
                uint64_t one = 1;
                c->cancelled_ms = cs_now_monotonic_ms();
                atomic_store(&c->cancelled, true);
                (void)!write(c->cancel_fd, &one, sizeof(one));
        }
        call_unref(c);
}

/* Poller: a batch started by the handler thread completed; wake the thread. */
static void on_send(void *owner, bool ok)
{
        rpc_call *c = owner;

        pthread_mutex_lock(&c->lock);
        c->send_done = true;
        c->send_ok = ok;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* Poller: a read batch completed; wakes the reader, or drops what an abandoned read got. */
static void on_recv(void *owner, bool ok)
{
        rpc_call *c = owner;
        grpc_byte_buffer *drop = NULL;

        pthread_mutex_lock(&c->lock);
        c->recv_pending = false;
        c->recv_ok = ok;
        if (c->recv_abandoned)
                drop = TAKE_PTR(c->recv_bb);
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (drop)
                grpc_byte_buffer_destroy(drop);
        call_unref(c); /* the read's reference */
}

/* Poller: the status batch of a call refused at the door completed. */
static void on_refused(void *owner, bool ok)
{
        (void)ok;
        call_unref(owner);
}

/* Adds SEND_INITIAL_METADATA (with our x-request-id) to ops if it has not been sent yet. */
static size_t add_initial_metadata(rpc_call *c, grpc_op *ops)
{
        if (c->initial_md_sent)
                return 0;
        c->initial_md_sent = true;
        c->initial_md[0].key = grpc_slice_from_static_string(RPC_REQUEST_ID_HEADER);
        c->initial_md[0].value =
                grpc_slice_from_static_buffer(c->request_id, strlen(c->request_id));
        ops[0] = (grpc_op){ .op = GRPC_OP_SEND_INITIAL_METADATA };
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = c->initial_md;
        return 1;
}

/* Starts a batch on the handler thread. Returns whether it was started. */
static bool call_start_batch(rpc_call *c, const grpc_op *ops, size_t n)
{
        grpc_call_error e;

        pthread_mutex_lock(&c->lock);
        c->send_done = false;
        pthread_mutex_unlock(&c->lock);
        e = grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL);
        if (e != GRPC_CALL_OK) {
                rpc_call_log(c, CS_LOG_ERROR, "%s: grpc_call_start_batch: %s", c->method->path,
                             grpc_call_error_to_string(e));
                pthread_mutex_lock(&c->lock);
                c->send_done = true;
                c->send_ok = false;
                pthread_mutex_unlock(&c->lock);
                return false;
        }
        return true;
}

/* Waits for the batch started last, if any, and releases its message. Returns whether it
 * succeeded. */
static bool call_wait_batch(rpc_call *c)
{
        bool ok;

        pthread_mutex_lock(&c->lock);
        while (!c->send_done)
                pthread_cond_wait(&c->cond, &c->lock);
        ok = c->send_ok;
        pthread_mutex_unlock(&c->lock);
        if (c->in_flight) {
                grpc_byte_buffer_destroy(c->in_flight);
                c->in_flight = NULL;
        }
        return ok;
}

/* Sends the final status (plus the response, for a unary call that succeeded), after any
 * message still in flight. */
static void call_finish(rpc_call *c, grpc_byte_buffer *resp, const cs_error *err)
{
        grpc_op ops[3];
        size_t n;

        call_wait_batch(c);
        n = add_initial_metadata(c, ops);
        if (resp) {
                ops[n] = (grpc_op){ .op = GRPC_OP_SEND_MESSAGE };
                ops[n++].data.send_message.send_message = resp;
        }
        c->status_details = grpc_slice_from_copied_string(err ? err->msg : "");
        ops[n] = (grpc_op){ .op = GRPC_OP_SEND_STATUS_FROM_SERVER };
        ops[n].data.send_status_from_server.status = err ? err->code : GRPC_STATUS_OK;
        ops[n++].data.send_status_from_server.status_details = &c->status_details;
        if (call_start_batch(c, ops, n))
                call_wait_batch(c);
}

/* The error for a call that ended before the handler was done with it. */
static int call_ended_error(rpc_call *c, cs_error **err)
{
        grpc_status_code code = rpc_call_cancel_status(c);

        return cs_error_set(err, code, "%s",
                            code == GRPC_STATUS_DEADLINE_EXCEEDED
                                    ? "deadline exceeded"
                                    : "call cancelled (by the client, or at shutdown)");
}

/* Sends bb, which the call now owns. One message may be in flight: this waits for the
 * previous one first, so that reading the next message overlaps sending this one while a
 * slow reader still holds the sender back. */
static int call_send_owned(rpc_call *c, grpc_byte_buffer *bb, cs_error **err)
{
        grpc_op ops[2];
        size_t n;

        if (!call_wait_batch(c) || rpc_call_cancelled(c)) {
                grpc_byte_buffer_destroy(bb);
                return call_ended_error(c, err);
        }
        n = add_initial_metadata(c, ops);
        ops[n] = (grpc_op){ .op = GRPC_OP_SEND_MESSAGE };
        ops[n++].data.send_message.send_message = bb;
        c->in_flight = bb;
        if (!call_start_batch(c, ops, n))
                return call_ended_error(c, err);
        return 0;
}

int rpc_call_send_raw(rpc_call *c, grpc_byte_buffer *bb, cs_error **err)
{
        /* A copy shares bb's slices (reference counts, no data copied). */
        return call_send_owned(c, grpc_byte_buffer_copy(bb), err);
}

int rpc_call_send(rpc_call *c, const ProtobufCMessage *msg, cs_error **err)
{
        grpc_byte_buffer *bb = NULL;

        if (rpc_call_cancelled(c))
                return call_ended_error(c, err);
        if (rpc_message_pack(msg, (size_t)c->srv->max_message, &bb, err) < 0)
                return -1;
        return call_send_owned(c, bb, err);
}

int rpc_call_recv(rpc_call *c, size_t max_bytes, ProtobufCMessage **ret_msg, cs_error **err)
{
        return rpc_call_recv_idle(c, max_bytes, 0, ret_msg, err);
}

int rpc_call_recv_idle(rpc_call *c, size_t max_bytes, int64_t idle_ms, ProtobufCMessage **ret_msg,
                       cs_error **err)
{
        grpc_op op = { .op = GRPC_OP_RECV_MESSAGE };
        int64_t until = idle_ms > 0 ? cs_now_monotonic_ms() + idle_ms : INT64_MAX;
        grpc_byte_buffer *bb = NULL;
        grpc_call_error e;
        size_t len;
        bool ok;
        int r;

        *ret_msg = NULL;
        if (!c->sm || !c->sm->bidi)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: not a bidirectional method",
                                    c->method->path);
        pthread_mutex_lock(&c->lock);
        if (c->recv_abandoned || c->recv_pending) {
                /* Abandoned (the pending read, if any, is the layer's now). */
                pthread_mutex_unlock(&c->lock);
                return 0;
        }
        if (rpc_call_cancelled(c)) {
                pthread_mutex_unlock(&c->lock);
                return call_ended_error(c, err);
        }
        c->recv_pending = true;
        c->refs++; /* the read's, dropped by on_recv */
        pthread_mutex_unlock(&c->lock);
        op.data.recv_message.recv_message = &c->recv_bb;
        e = grpc_call_start_batch(c->call, &op, 1, &c->recv_tag, NULL);
        if (e != GRPC_CALL_OK) {
                rpc_call_log(c, CS_LOG_ERROR, "%s: grpc_call_start_batch: %s", c->method->path,
                             grpc_call_error_to_string(e));
                pthread_mutex_lock(&c->lock);
                c->recv_pending = false;
                c->refs--; /* the handler's is still held: never the last */
                pthread_mutex_unlock(&c->lock);
                return call_ended_error(c, err);
        }
        pthread_mutex_lock(&c->lock);
        while (c->recv_pending && !c->recv_abandoned) {
                if (cs_cond_wait_until(&c->cond, &c->lock, until) == ETIMEDOUT && c->recv_pending &&
                    !c->recv_abandoned) {
                        /* The pending read is the layer's now, as after an abandon. */
                        c->recv_abandoned = true;
                        pthread_mutex_unlock(&c->lock);
                        return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                            "%s: no message from the client in %" PRId64 " ms",
                                            c->method->path, idle_ms);
                }
        }
        if (c->recv_pending) { /* abandoned while it waited */
                pthread_mutex_unlock(&c->lock);
                return 0;
        }
        ok = c->recv_ok;
        bb = TAKE_PTR(c->recv_bb);
        pthread_mutex_unlock(&c->lock);
        if (!ok) {
                if (bb)
                        grpc_byte_buffer_destroy(bb);
                return call_ended_error(c, err);
        }
        if (!bb) /* the client's half-close, or the end of a cancelled call */
                return rpc_call_cancelled(c) ? call_ended_error(c, err) : 0;
        len = grpc_byte_buffer_length(bb);
        if (len > max_bytes)
                r = cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "%s: a request of %zu bytes, over the method's %zu",
                                 c->method->path, len, max_bytes);
        else
                r = rpc_message_unpack(c->method->request, bb, "request",
                                       GRPC_STATUS_INVALID_ARGUMENT, ret_msg, err);
        grpc_byte_buffer_destroy(bb);
        return r < 0 ? -1 : 1;
}

void rpc_call_recv_abandon(rpc_call *c)
{
        pthread_mutex_lock(&c->lock);
        c->recv_abandoned = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* --- handler thread -------------------------------------------------------------------- */

static bool status_is_server_fault(grpc_status_code code)
{
        return code == GRPC_STATUS_INTERNAL || code == GRPC_STATUS_UNKNOWN ||
               code == GRPC_STATUS_DATA_LOSS;
}

/* Encodes a unary response with the bytes given to rpc_call_respond_bytes(). */
static int pack_with_bytes(rpc_call *c, const ProtobufCMessage *resp, grpc_byte_buffer **ret,
                           cs_error **err)
{
        const ProtobufCFieldDescriptor *f = rpc_bytes_field(resp->descriptor, c->resp_field);

        if (!f)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s has no bytes field %s",
                                    resp->descriptor->name, c->resp_field);
        return rpc_message_pack_bytes(resp, (size_t)c->srv->max_message, f, &c->resp_bytes, 1,
                                      GRPC_SLICE_LENGTH(c->resp_bytes), ret, err);
}

/* Runs the handler; returns the encoded unary response (NULL for streams and on error). */
static grpc_byte_buffer *call_dispatch(rpc_call *c, cs_error **err)
{
        const rpc_method *m = c->method;
        ProtobufCMessage *req = NULL, *resp;
        grpc_byte_buffer *bb = NULL;
        int r;

        if (c->sm && c->sm->bidi) { /* it reads its requests itself */
                if (c->sm->bidi->handler(c, m->userdata, err) < 0 && err && !*err)
                        cs_error_set(err, GRPC_STATUS_INTERNAL, "%s failed without saying why",
                                     m->path);
                return NULL;
        }
        if (!c->payload) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: no request message", m->path);
                return NULL;
        }
        if (m->request_bytes_field
                    ? rpc_message_unpack_bytes(m->request, c->payload,
                                               rpc_bytes_field(m->request, m->request_bytes_field),
                                               "request", GRPC_STATUS_INVALID_ARGUMENT, &req,
                                               &c->req_bytes, err) < 0
                    : rpc_message_unpack(m->request, c->payload, "request",
                                         GRPC_STATUS_INVALID_ARGUMENT, &req, err) < 0)
                return NULL;

        if (m->stream) {
                r = m->stream(c, req, m->userdata, err);
        } else {
                resp = rpc_call_alloc(c, m->response->sizeof_message);
                protobuf_c_message_init(m->response, resp);
                r = m->unary(c, req, resp, m->userdata, err);
                if (r == 0 && c->raw_resp)
                        bb = TAKE_PTR(c->raw_resp);
                else if (r == 0 && c->resp_field)
                        pack_with_bytes(c, resp, &bb, err);
                else if (r == 0)
                        rpc_message_pack(resp, (size_t)c->srv->max_message, &bb, err);
        }
        if (r < 0 && err && !*err)
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s failed without saying why", m->path);
        protobuf_c_message_free_unpacked(req, NULL);
        return bb;
}

/* The call's access-log line (rpc.h, "access log"). refused: no handler ran. */
static void call_log_access(rpc_call *c, grpc_status_code code, const char *msg, bool refused)
{
        cs_log_field f[4 + RPC_CALL_LOG_FIELDS_MAX + 1];
        size_t n = 0;
        cs_log_level level = c->access_level;

        if (status_is_server_fault(code))
                level = CS_LOG_ERROR;
        else if (refused)
                level = CS_LOG_WARN;
        else if (code != GRPC_STATUS_OK && level < CS_LOG_INFO)
                level = CS_LOG_INFO;
        if (!cs_log_enabled(level))
                return;
        f[n++] = CS_LOG_STR("method", c->method->path);
        f[n++] = CS_LOG_STR("code", cs_status_name(code));
        f[n++] = CS_LOG_INT("duration_ms", (cs_now_monotonic_ns() - c->accepted_ns) / 1000000);
        f[n++] = CS_LOG_STR("peer", rpc_call_peer(c));
        for (size_t i = 0; i < c->n_log_fields; i++)
                f[n++] = c->log_fields[i];
        if (code != GRPC_STATUS_OK)
                f[n++] = CS_LOG_STR("error", msg);
        cs_log_fields(level, c->request_id, c->sandbox_id, f, n, "access");
}

/* The call ended with code: counted for rpc_server_metrics. */
static void call_count_handled(rpc_call *c, grpc_status_code code)
{
        if (!c->sm)
                return;
        if ((unsigned)code > GRPC_STATUS_UNAUTHENTICATED)
                code = GRPC_STATUS_UNKNOWN;
        atomic_fetch_add_explicit(&c->sm->handled[code], 1, memory_order_relaxed);
        cs_histogram_observe(&c->sm->seconds, cs_now_monotonic_ns() - c->accepted_ns);
}

static void *handler_main(void *arg)
{
        rpc_call *c = arg;
        rpc_server *srv = c->srv;
        _cleanup_error_ cs_error *err = NULL;
        grpc_byte_buffer *resp;

        resp = call_dispatch(c, &err);
        /* A call that ended early ends with why: a handler's CANCELLED (e.g. from a child
         * call cancelled with it) says DEADLINE_EXCEEDED when the deadline is what ended it,
         * as the client saw, in the metrics and the access log; also when the child call
         * ended before our own cancel arrived (the deadline reached the agent first). */
        if ((rpc_call_cancelled(c) && (!err || err->code == GRPC_STATUS_CANCELLED)) ||
            (err && err->code == GRPC_STATUS_CANCELLED &&
             rpc_call_cancel_status(c) == GRPC_STATUS_DEADLINE_EXCEEDED)) {
                cs_error_free(TAKE_PTR(err));
                call_ended_error(c, &err);
        }
        call_finish(c, resp, err);
        call_count_handled(c, err ? err->code : GRPC_STATUS_OK);
        if (resp)
                grpc_byte_buffer_destroy(resp);

        call_log_access(c, err ? err->code : GRPC_STATUS_OK, err ? err->msg : NULL, false);

        call_give_share(c);
        pthread_mutex_lock(&srv->lock);
        srv->active--;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
        call_unref(c);
        return NULL;
}

/* --- accepting calls ------------------------------------------------------------------- */

static void method_request_next(srv_method *sm);

/* Takes the request id from the caller's metadata when sane, else makes one up. */
static void call_init_request_id(rpc_call *c)
{
        size_t len = 0;
        const char *id = rpc_call_metadata(c, RPC_REQUEST_ID_HEADER, &len);

        if (id && rpc_request_id_valid(id, len)) {
                memcpy(c->request_id, id, len);
                c->request_id[len] = '\0';
        } else {
                cs_uuid_generate(c->request_id);
        }
}

static rpc_call *call_new(srv_method *sm)
{
        rpc_call *c = cs_xcalloc(1, sizeof(*c));
        int64_t left;

        c->srv = sm->srv;
        c->sm = sm->unknown ? NULL : sm;
        c->accepted_ns = cs_now_monotonic_ns();
        c->access_level = sm->srv->access_level;
        if (c->sm)
                atomic_fetch_add_explicit(&sm->started, 1, memory_order_relaxed);
        c->method = sm->m;
        c->call = TAKE_PTR(sm->call);
        c->deadline = sm->deadline;
        c->md = sm->md;
        grpc_metadata_array_init(&sm->md);
        c->payload = TAKE_PTR(sm->payload);
        c->peer = grpc_call_get_peer(c->call);
        rpc_peer_key(c->peer ? c->peer : "unknown", c->peer_key, sizeof(c->peer_key));
        c->status_details = grpc_empty_slice();
        rpc_bytes_init(&c->req_bytes);
        c->refs = 2; /* the close op, and the handler (or the refusal batch) */
        pthread_mutex_init(&c->lock, NULL);
        cs_cond_init_monotonic(&c->cond);
        c->close_tag = (rpc_tag){ .fn = on_close, .owner = c };
        c->send_tag = (rpc_tag){ .fn = on_send, .owner = c };
        c->recv_tag = (rpc_tag){ .fn = on_recv, .owner = c };
        c->send_done = true; /* no batch started yet */
        c->send_ok = true;
        c->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->cancel_fd < 0)
                abort(); /* only fails when out of fds or memory; nothing sane is left */
        left = rpc_deadline_remaining_ms(c->deadline);
        c->deadline_ms = left == INT64_MAX ? INT64_MAX : cs_now_monotonic_ms() + left;
        call_init_request_id(c);
        return c;
}

/* Ends a call that will not get a handler, without blocking the poller. */
static void call_refuse(rpc_call *c, grpc_status_code code, const char *msg)
{
        grpc_op ops[2];
        size_t n = add_initial_metadata(c, ops);

        call_log_access(c, code, msg, true);
        call_count_handled(c, code);
        c->send_tag.fn = on_refused;
        c->status_details = grpc_slice_from_copied_string(msg);
        ops[n] = (grpc_op){ .op = GRPC_OP_SEND_STATUS_FROM_SERVER };
        ops[n].data.send_status_from_server.status = code;
        ops[n++].data.send_status_from_server.status_details = &c->status_details;
        if (grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL) != GRPC_CALL_OK)
                call_unref(c);
}

/* The method an rpc_call for an unregistered path points at. */
static const rpc_method unknown_method = { .path = "(unknown method)" };

/* Poller: a call for a method nobody registered: UNIMPLEMENTED, as gRPC servers answer. */
static void on_accept_unknown(srv_method *sm)
{
        rpc_server *srv = sm->srv;
        grpc_op close_op = { .op = GRPC_OP_RECV_CLOSE_ON_SERVER };
        rpc_call *c = call_new(sm);
        _cleanup_free_ char *msg =
                cs_xasprintf("unknown method %.*s", (int)GRPC_SLICE_LENGTH(sm->details.method),
                             (const char *)GRPC_SLICE_START_PTR(sm->details.method));

        grpc_call_details_destroy(&sm->details);
        grpc_call_details_init(&sm->details);
        method_request_next(sm);
        close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
        if (grpc_call_start_batch(c->call, &close_op, 1, &c->close_tag, NULL) != GRPC_CALL_OK)
                abort(); /* a fresh call always takes its close op */
        pthread_mutex_lock(&srv->lock);
        srv->live_calls++;
        pthread_mutex_unlock(&srv->lock);
        call_refuse(c, GRPC_STATUS_UNIMPLEMENTED, msg);
}

/* Poller: a new call arrived for sm's method. */
static void on_accept(void *owner, bool ok)
{
        srv_method *sm = owner;
        rpc_server *srv = sm->srv;
        grpc_op close_op = { .op = GRPC_OP_RECV_CLOSE_ON_SERVER };
        rpc_call *c;
        pthread_t thread;
        pthread_attr_t attr;
        bool refuse;
        const char *why = NULL;
        _cleanup_free_ char *share_msg = NULL;

        if (!ok)
                return; /* the server is shutting down: no call, no new request */
        if (sm->unknown) {
                on_accept_unknown(sm);
                return;
        }
        c = call_new(sm);
        method_request_next(sm);

        close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
        if (grpc_call_start_batch(c->call, &close_op, 1, &c->close_tag, NULL) != GRPC_CALL_OK)
                abort(); /* a fresh call always takes its close op */

        pthread_mutex_lock(&srv->lock);
        srv->live_calls++;
        refuse = srv->shutting_down || srv->active >= srv->max_calls;
        if (refuse)
                why = srv->shutting_down ? "server is shutting down" : "too many calls in flight";
        else
                srv->active++;
        pthread_mutex_unlock(&srv->lock);
        /* The per-peer share first refuses a greedy peer; the global cap stays the last line. */
        if (!refuse && !(c->share_held = cs_share_take(srv->peer_share, c->peer_key))) {
                pthread_mutex_lock(&srv->lock);
                srv->active--;
                pthread_mutex_unlock(&srv->lock);
                share_msg = cs_xasprintf("peer share: %u calls in flight from %s already "
                                         "(--max-calls-per-peer)",
                                         cs_share_limit(srv->peer_share), c->peer_key);
                call_refuse(c, GRPC_STATUS_RESOURCE_EXHAUSTED, share_msg);
                return;
        }
        if (refuse) {
                call_refuse(c,
                            srv->shutting_down ? GRPC_STATUS_UNAVAILABLE
                                               : GRPC_STATUS_RESOURCE_EXHAUSTED,
                            why);
                return;
        }

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, handler_main, c) != 0) {
                call_give_share(c);
                pthread_mutex_lock(&srv->lock);
                srv->active--;
                pthread_mutex_unlock(&srv->lock);
                call_refuse(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "cannot start a handler thread");
        }
        pthread_attr_destroy(&attr);
}

static void method_request_next(srv_method *sm)
{
        grpc_call_error e;

        if (sm->unknown)
                e = grpc_server_request_call(sm->srv->server, &sm->call, &sm->details, &sm->md,
                                             sm->srv->cq, sm->srv->cq, &sm->accept_tag);
        else
                e = grpc_server_request_registered_call(
                        sm->srv->server, sm->handle, &sm->call, &sm->deadline, &sm->md,
                        sm->bidi ? NULL : &sm->payload, sm->srv->cq, sm->srv->cq, &sm->accept_tag);
        if (e != GRPC_CALL_OK)
                log_error("%s: cannot wait for calls: %s", sm->m->path,
                          grpc_call_error_to_string(e));
}

/* --- server ---------------------------------------------------------------------------- */

static void *poller_main(void *arg)
{
        rpc_server *srv = arg;

        for (;;) {
                grpc_event ev = grpc_completion_queue_next(
                        srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
                if (ev.type == GRPC_QUEUE_SHUTDOWN)
                        break;
                if (ev.type == GRPC_OP_COMPLETE) {
                        rpc_tag *tag = ev.tag;
                        tag->fn(tag->owner, ev.success);
                }
        }
        return NULL;
}

static void on_shutdown(void *owner, bool ok)
{
        rpc_server *srv = owner;

        (void)ok;
        pthread_mutex_lock(&srv->lock);
        srv->shutdown_notified = true;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
}

rpc_server *rpc_server_new(const rpc_server_options *opts)
{
        rpc_server *srv = cs_xcalloc(1, sizeof(*srv));
        unsigned share;
        grpc_arg args[RPC_N_SIZE_ARGS + 2];
        grpc_channel_args cargs = { .num_args = ARRAY_SIZE(args), .args = args };

        srv->listen = cs_xstrdup(opts->listen);
        srv->tls_cert = opts->tls_cert_pem ? cs_xstrdup(opts->tls_cert_pem) : NULL;
        srv->tls_key = opts->tls_key_pem ? cs_xstrdup(opts->tls_key_pem) : NULL;
        srv->tls_ca = opts->tls_ca_pem ? cs_xstrdup(opts->tls_ca_pem) : NULL;
        srv->tls_client_ca_optional = opts->tls_client_ca_optional;
        srv->max_calls = opts->max_calls ? opts->max_calls : RPC_DEFAULT_MAX_CALLS;
        /* A share of every call is no share (the global cap refuses first): no table to scan
         * per call then. Each peer in the table holds a call in flight, so it never needs
         * more entries than max_calls. */
        share = rpc_peer_share(srv->max_calls, opts->max_calls_per_peer);
        srv->peer_share =
                cs_share_new(share < srv->max_calls ? share : 0,
                             srv->max_calls < RPC_MAX_PEERS ? srv->max_calls : RPC_MAX_PEERS);
        srv->grace_ms = opts->grace_ms >= 0 ? opts->grace_ms : RPC_DEFAULT_GRACE_MS;
        srv->max_message = (int)(opts->max_message ? opts->max_message : RPC_MAX_MESSAGE_BYTES);
        srv->access_level = opts->access_log_level;
        pthread_mutex_init(&srv->lock, NULL);
        cs_cond_init_monotonic(&srv->cond);
        srv->shutdown_tag = (rpc_tag){ .fn = on_shutdown, .owner = srv };
        srv->unknown = (srv_method){ .m = &unknown_method, .srv = srv, .unknown = true };
        srv->unknown.accept_tag = (rpc_tag){ .fn = on_accept, .owner = &srv->unknown };
        grpc_metadata_array_init(&srv->unknown.md);
        grpc_call_details_init(&srv->unknown.details);

        rpc_size_args(args, srv->max_message);
        /* Bound the streams a single connection may open (Debian's gRPC predates the HTTP/2
         * rapid-reset fix). Set above max_calls so that a call over the cap is refused with
         * RESOURCE_EXHAUSTED at once rather than queued by the client's transport. */
        args[RPC_N_SIZE_ARGS] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                            .key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                            .value.integer = (int)srv->max_calls * 2 + 8 };
        /* gRPC sets SO_REUSEPORT by default: a second server on a busy port would then "bind"
         * and take half of the connections. Fail instead. */
        args[RPC_N_SIZE_ARGS + 1] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                                .key = (char *)GRPC_ARG_ALLOW_REUSEPORT,
                                                .value.integer = 0 };
        srv->server = grpc_server_create(&cargs, NULL);
        srv->cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
        return srv;
}

/* Registers m, or the bidirectional method bidi (m then its `own`). */
static int add_method(rpc_server *srv, const rpc_method *m, const rpc_bidi_method *bidi,
                      cs_error **err);

int rpc_server_add_method(rpc_server *srv, const rpc_method *m, cs_error **err)
{
        if (!m->unary == !m->stream)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s: set exactly one of unary and stream", m->path);
        return add_method(srv, m, NULL, err);
}

int rpc_server_add_bidi_method(rpc_server *srv, const rpc_bidi_method *bidi, cs_error **err)
{
        if (!bidi->handler || !bidi->request || !bidi->response)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "%s: a bidirectional method needs a handler and its types",
                                    bidi->path);
        return add_method(srv, NULL, bidi, err);
}

static int add_method(rpc_server *srv, const rpc_method *m, const rpc_bidi_method *bidi,
                      cs_error **err)
{
        const char *path = bidi ? bidi->path : m->path;
        srv_method *sm;

        if (srv->started)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: server already started", path);
        if (srv->n_methods == SRV_MAX_METHODS)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: more than %d methods", path,
                                    SRV_MAX_METHODS);
        if (m && m->request_bytes_field && !rpc_bytes_field(m->request, m->request_bytes_field))
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: %s has no bytes field %s",
                                    m->path, m->request->name, m->request_bytes_field);
        sm = &srv->methods[srv->n_methods];
        /* A bidirectional call's requests are read by its handler (rpc_call_recv). */
        sm->handle = grpc_server_register_method(
                srv->server, path, NULL,
                bidi ? GRPC_SRM_PAYLOAD_NONE : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!sm->handle)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: cannot register", path);
        if (bidi) {
                sm->own = (rpc_method){ .path = bidi->path,
                                        .request = bidi->request,
                                        .response = bidi->response,
                                        .userdata = bidi->userdata };
                sm->bidi = bidi;
                m = &sm->own;
        }
        sm->m = m;
        sm->srv = srv;
        sm->accept_tag = (rpc_tag){ .fn = on_accept, .owner = sm };
        grpc_metadata_array_init(&sm->md);
        cs_histogram_init(&sm->seconds, cs_histogram_default_bounds, cs_histogram_default_n);
        srv->n_methods++;
        return 0;
}

/* The grpc_code label as go-grpc-prometheus writes it (Go's codes.Code names), so that
 * dashboards and alerts written for it work unchanged. */
static const char *rpc_code_name(grpc_status_code code)
{
        static const char *const names[] = {
                "OK",
                "Canceled",
                "Unknown",
                "InvalidArgument",
                "DeadlineExceeded",
                "NotFound",
                "AlreadyExists",
                "PermissionDenied",
                "ResourceExhausted",
                "FailedPrecondition",
                "Aborted",
                "OutOfRange",
                "Unimplemented",
                "Internal",
                "Unavailable",
                "DataLoss",
                "Unauthenticated",
        };

        return (unsigned)code < ARRAY_SIZE(names) ? names[code] : "Unknown";
}

/* The labels of a method's series: grpc_service and grpc_method ("/package.Service/Method"
 * split), grpc_type, and grpc_code when the caller sets code[0]. */
typedef struct method_labels {
        char service[128], method[128], code[32];
        const char *v[9];
} method_labels;

static const char *const *labels_of(const srv_method *sm, method_labels *l, bool with_code)
{
        const char *path = sm->m->path, *slash = strrchr(path, '/');

        snprintf(l->service, sizeof(l->service), "%.*s", slash ? (int)(slash - path - 1) : 0,
                 path + 1);
        snprintf(l->method, sizeof(l->method), "%s", slash ? slash + 1 : path);
        l->v[0] = "grpc_service";
        l->v[1] = l->service;
        l->v[2] = "grpc_method";
        l->v[3] = l->method;
        l->v[4] = "grpc_type";
        l->v[5] = sm->m->unary ? "unary" : sm->bidi ? "bidi_stream" : "server_stream";
        l->v[6] = with_code ? "grpc_code" : NULL;
        l->v[7] = l->code;
        l->v[8] = NULL;
        return l->v;
}

void rpc_server_metrics(rpc_server *srv, cs_mpage *p)
{
        method_labels l;

        cs_mpage_family(p, "grpc_server_started_total", "counter",
                        "Total number of RPCs started on the server.");
        for (size_t i = 0; i < srv->n_methods; i++)
                cs_mpage_sample_u64(
                        p, "grpc_server_started_total", labels_of(&srv->methods[i], &l, false),
                        atomic_load_explicit(&srv->methods[i].started, memory_order_relaxed));
        cs_mpage_family(p, "grpc_server_handled_total", "counter",
                        "Total number of RPCs completed on the server, regardless of success "
                        "or failure.");
        for (size_t i = 0; i < srv->n_methods; i++) {
                srv_method *sm = &srv->methods[i];
                const char *const *labels = labels_of(sm, &l, true);

                /* Every method has its OK series; other codes once they happened. */
                for (unsigned k = 0; k < ARRAY_SIZE(sm->handled); k++) {
                        uint64_t n = atomic_load_explicit(&sm->handled[k], memory_order_relaxed);

                        if (n == 0 && k != GRPC_STATUS_OK)
                                continue;
                        snprintf(l.code, sizeof(l.code), "%s", rpc_code_name((grpc_status_code)k));
                        cs_mpage_sample_u64(p, "grpc_server_handled_total", labels, n);
                }
        }
        cs_mpage_family(p, "grpc_server_handling_seconds", "histogram",
                        "Histogram of response latency (seconds) of gRPC that had been "
                        "application-level handled by the server.");
        for (size_t i = 0; i < srv->n_methods; i++)
                cs_mpage_histogram(p, "grpc_server_handling_seconds",
                                   labels_of(&srv->methods[i], &l, false),
                                   &srv->methods[i].seconds);
}

bool rpc_server_tls(const rpc_server *srv)
{
        return srv->tls_ca || srv->tls_cert || srv->tls_key;
}

bool rpc_server_tls_mutual(const rpc_server *srv)
{
        return srv->tls_ca != NULL;
}

/* The port's credentials: plaintext; mutual TLS with a client certificate required and
 * verified against the CA; or, when the CA is optional and absent, TLS without client
 * certificates. NULL with *err when the TLS material is incomplete or bad. */
static grpc_server_credentials *server_credentials(rpc_server *srv, cs_error **err)
{
        grpc_ssl_pem_key_cert_pair pair = { .private_key = srv->tls_key,
                                            .cert_chain = srv->tls_cert };
        bool ca_needed = !srv->tls_client_ca_optional;

        if (!rpc_server_tls(srv))
                return grpc_insecure_server_credentials_create();
        if (!srv->tls_cert || !srv->tls_key || (ca_needed && !srv->tls_ca)) {
                const char *missing = !srv->tls_cert ? "certificate" : !srv->tls_key ? "key" : "CA";
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "server TLS needs a certificate, its key and %s, or none of them "
                             "(missing: the %s)",
                             ca_needed ? "a CA for the client certificates"
                                       : "optionally a CA for client certificates",
                             missing);
                return NULL;
        }
        if (rpc_tls_check_pem(srv->tls_ca, srv->tls_cert, srv->tls_key, err) < 0) {
                cs_error_prefix(err, "server TLS");
                return NULL;
        }
        /* The pair and the CA are copied by gRPC. */
        return grpc_ssl_server_credentials_create_ex(
                srv->tls_ca, &pair, 1,
                srv->tls_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                NULL);
}

int rpc_server_start(rpc_server *srv, cs_error **err)
{
        grpc_server_credentials *creds = server_credentials(srv, err);

        if (!creds)
                return -1;
        srv->port = grpc_server_add_http2_port(srv->server, srv->listen, creds);
        grpc_server_credentials_release(creds);
        if (srv->port <= 0)
                return cs_error_set(
                        err, GRPC_STATUS_UNAVAILABLE,
                        "cannot listen on %s (address in use or invalid%s)", srv->listen,
                        rpc_server_tls(srv) ? ", or gRPC refused the TLS material" : "");
        grpc_server_start(srv->server);
        if (pthread_create(&srv->poller, NULL, poller_main, srv) != 0)
                return cs_error_errno(err, errno, "cannot start the poller thread");
        srv->started = true;
        for (size_t i = 0; i < srv->n_methods; i++)
                method_request_next(&srv->methods[i]);
        method_request_next(&srv->unknown);
        return 0;
}

int rpc_server_port(const rpc_server *srv)
{
        return srv->port;
}

bool rpc_server_shutting_down(rpc_server *srv)
{
        bool r;

        pthread_mutex_lock(&srv->lock);
        r = srv->shutting_down;
        pthread_mutex_unlock(&srv->lock);
        return r;
}

unsigned rpc_server_active_calls(rpc_server *srv)
{
        unsigned n;

        pthread_mutex_lock(&srv->lock);
        n = srv->active;
        pthread_mutex_unlock(&srv->lock);
        return n;
}

/* Waits on the server's condition until pred() or the monotonic deadline (ms). */
static void wait_until(rpc_server *srv, bool (*pred)(rpc_server *), int64_t deadline_ms)
{
        while (!pred(srv)) {
                if (cs_cond_wait_until(&srv->cond, &srv->lock, deadline_ms) == ETIMEDOUT)
                        return;
        }
}

static bool no_handlers(rpc_server *srv)
{
        return srv->active == 0;
}

static bool all_gone(rpc_server *srv)
{
        return srv->live_calls == 0 && srv->shutdown_notified;
}

void rpc_server_shutdown(rpc_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        if (srv->shutting_down || !srv->started) {
                srv->shutting_down = true;
                pthread_mutex_unlock(&srv->lock);
                return;
        }
        srv->shutting_down = true;
        pthread_mutex_unlock(&srv->lock);

        /* Stop accepting; calls in flight go on. */
        grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);

        pthread_mutex_lock(&srv->lock);
        wait_until(srv, no_handlers, cs_now_monotonic_ms() + srv->grace_ms);
        if (srv->active > 0) {
                log_warn("shutdown: cancelling %u call(s) still running after %" PRId64 " ms",
                         srv->active, srv->grace_ms);
                pthread_mutex_unlock(&srv->lock);
                grpc_server_cancel_all_calls(srv->server);
                pthread_mutex_lock(&srv->lock);
        }
        wait_until(srv, all_gone, INT64_MAX);
        pthread_mutex_unlock(&srv->lock);

        grpc_completion_queue_shutdown(srv->cq);
        pthread_join(srv->poller, NULL);
        srv->shutdown_finished = true;
}

void rpc_server_free(rpc_server *srv)
{
        if (!srv)
                return;
        rpc_server_shutdown(srv);
        if (!srv->shutdown_finished) {
                /* Never started: no calls, no poller; the queue only needs draining. */
                grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);
                grpc_completion_queue_shutdown(srv->cq);
                poller_main(srv);
        }
        grpc_server_destroy(srv->server);
        grpc_completion_queue_destroy(srv->cq);
        for (size_t i = 0; i < srv->n_methods; i++)
                grpc_metadata_array_destroy(&srv->methods[i].md);
        grpc_metadata_array_destroy(&srv->unknown.md);
        grpc_call_details_destroy(&srv->unknown.details);
        pthread_cond_destroy(&srv->cond);
        pthread_mutex_destroy(&srv->lock);
        free(srv->listen);
        free(srv->tls_cert);
        if (srv->tls_key)
                explicit_bzero(srv->tls_key, strlen(srv->tls_key));
        free(srv->tls_key);
        free(srv->tls_ca);
        cs_share_free(srv->peer_share);
        free(srv);
}
