/* Unit tests of the RPC layer (shared/rpc_*.c) through the test.v1.Echo service.
 *
 * A real server on 127.0.0.1 with a port of its own, real channels, real gRPC core. Waits for
 * something to happen are bounded (a hang guard, not a timing assertion). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>

#include <cmocka.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice_buffer.h>
#include <grpc/support/time.h>

#include "metrics.h"
#include "rpc.h"
#include "util.h"
#include "test/v1/echo.pb-c.h"

#define MIB (1024 * 1024)

/* --- what the handlers saw ------------------------------------------------------------- */

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int streams_ended;            /* stream handlers that returned */
        int cancels_seen;             /* handlers that saw their call end early */
        grpc_status_code last_cancel; /* the status those handlers got */
        char last_request_id[RPC_REQUEST_ID_MAX + 1];
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void seen_reset(void)
{
        pthread_mutex_lock(&seen.lock);
        seen.streams_ended = 0;
        seen.cancels_seen = 0;
        seen.last_cancel = GRPC_STATUS_OK;
        pthread_mutex_unlock(&seen.lock);
}

static void seen_cancel(grpc_status_code code)
{
        pthread_mutex_lock(&seen.lock);
        seen.cancels_seen++;
        seen.last_cancel = code;
        pthread_cond_broadcast(&seen.cond);
        pthread_mutex_unlock(&seen.lock);
}

/* Waits (at most 10 s: a hang guard) until *counter reaches n. */
static int seen_wait(int *counter, int n)
{
        int64_t deadline = cs_now_monotonic_ms() + 10000;
        int v;

        pthread_mutex_lock(&seen.lock);
        while (*counter < n && cs_now_monotonic_ms() < deadline) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 50 * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&seen.cond, &seen.lock, &ts);
        }
        v = *counter;
        pthread_mutex_unlock(&seen.lock);
        return v;
}

/* --- the Echo service ------------------------------------------------------------------ */

static int own_port;

static uint8_t *fill_payload(rpc_call *call, size_t size, uint32_t seq)
{
        uint8_t *p = rpc_call_alloc(call, size);

        for (size_t i = 0; i < size; i++)
                p[i] = (uint8_t)(i * 31 + seq);
        return p;
}

static int echo_unary(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                      void *userdata, cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        Test__V1__EchoResponse *resp = (void *)resp_msg;

        (void)userdata;
        if (strcmp(req->text, "fail") == 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "asked to fail");
        pthread_mutex_lock(&seen.lock);
        snprintf(seen.last_request_id, sizeof(seen.last_request_id), "%s",
                 rpc_call_request_id(call));
        pthread_mutex_unlock(&seen.lock);
        resp->text = req->text; /* points into the request: lives as long as the call */
        if (req->payload_size) {
                resp->payload.len = req->payload_size;
                resp->payload.data = fill_payload(call, req->payload_size, 0);
        } else {
                resp->payload = req->payload;
        }
        return 0;
}

/* "wait": sends nothing and waits in poll(2) on the cancel fd, as a handler blocked on pipes
 * would. "relay:X": streams "X" from this same server through a child call and relays it.
 * Otherwise: `count` messages, seq 0.., each with payload_size bytes, delay_ms apart. */
static int echo_stream(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata,
                       cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        int r = 0;

        (void)userdata;
        if (strcmp(req->text, "wait") == 0) {
                struct pollfd pfd = { .fd = rpc_call_cancel_fd(call), .events = POLLIN };
                if (poll(&pfd, 1, 20000) == 1 && rpc_call_cancelled(call)) {
                        seen_cancel(rpc_call_cancel_status(call));
                        r = cs_error_set(err, rpc_call_cancel_status(call), "cancelled");
                } else {
                        r = cs_error_set(err, GRPC_STATUS_INTERNAL, "never cancelled");
                }
        } else if (strncmp(req->text, "relay:", 6) == 0) {
                char target[64];
                rpc_channel *ch;
                rpc_stream *st = NULL;
                Test__V1__EchoRequest inner = *req;
                rpc_call_options opts = { .parent = call };

                inner.text = req->text + 6;
                snprintf(target, sizeof(target), "127.0.0.1:%d", own_port);
                ch = rpc_channel_new(target);
                r = rpc_stream_open(ch, "/test.v1.Echo/Stream", &inner.base,
                                    &test__v1__echo_response__descriptor, &opts, &st, err);
                if (r == 0)
                        r = rpc_stream_relay(call, st, NULL, NULL, err);
                rpc_stream_free(st);
                rpc_channel_free(ch);
        } else {
                for (uint32_t i = 0; i < req->count && r == 0; i++) {
                        Test__V1__EchoResponse resp = TEST__V1__ECHO_RESPONSE__INIT;
                        _cleanup_free_ uint8_t *payload = cs_xmalloc(req->payload_size);

                        for (size_t j = 0; j < req->payload_size; j++)
                                payload[j] = (uint8_t)(j * 31 + i);
                        resp.seq = i;
                        resp.text = req->text;
                        resp.payload.len = req->payload_size;
                        resp.payload.data = payload;
                        r = rpc_call_send(call, &resp.base, err);
                        if (r < 0 && (*err)->code != GRPC_STATUS_RESOURCE_EXHAUSTED)
                                seen_cancel((*err)->code);
                        if (r == 0 && req->delay_ms)
                                usleep(req->delay_ms * 1000);
                }
        }
        pthread_mutex_lock(&seen.lock);
        seen.streams_ended++;
        pthread_cond_broadcast(&seen.cond);
        pthread_mutex_unlock(&seen.lock);
        return r;
}

/* Echo/Bulk: the payload is not decoded (request_bytes_field) and is answered with
 * rpc_call_respond_bytes. "relay" passes it on to Bulk on this same server from the slices
 * it arrived in; payload_size asks for that many bytes back instead; `seq` says in how many
 * pieces the payload arrived. */
static int echo_bulk(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                     void *userdata, cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        Test__V1__EchoResponse *resp = (void *)resp_msg;
        const rpc_bytes *data = rpc_call_request_bytes(call);
        uint8_t *copy, *p;
        size_t sum = 0;

        (void)userdata;
        if (!data || req->payload.len)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "the payload was decoded");
        for (size_t i = 0; i < data->n_iov; i++)
                sum += data->iov[i].iov_len;
        if (sum != data->len)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "pieces of %zu bytes, not %zu", sum,
                                    data->len);
        if (strcmp(req->text, "relay") == 0) {
                char target[64];
                rpc_channel *ch;
                grpc_byte_buffer *got = NULL;
                Test__V1__EchoRequest inner = *req;
                rpc_call_options opts = { .parent = call, .bytes_field = "payload", .bytes = data };
                int r;

                inner.text = "relayed";
                snprintf(target, sizeof(target), "127.0.0.1:%d", own_port);
                ch = rpc_channel_new(target);
                r = rpc_unary_raw(ch, "/test.v1.Echo/Bulk", &inner.base, &opts, &got, err);
                rpc_channel_free(ch);
                if (r == 0)
                        rpc_call_respond_raw(call, got);
                return r;
        }
        resp->text = req->text;
        resp->seq = (uint32_t)data->n_iov;
        if (req->payload_size) {
                p = cs_xmalloc(req->payload_size);
                memset(p, 0x5a, req->payload_size);
                rpc_call_respond_bytes(call, "payload", p, req->payload_size, free);
                return 0;
        }
        p = copy = cs_xmalloc(data->len + 1);
        for (size_t i = 0; i < data->n_iov; i++) {
                memcpy(p, data->iov[i].iov_base, data->iov[i].iov_len);
                p += data->iov[i].iov_len;
        }
        rpc_call_respond_bytes(call, "payload", copy, data->len, free);
        return 0;
}

static const rpc_method echo_methods[] = {
        { .path = "/test.v1.Echo/Unary",
          .request = &test__v1__echo_request__descriptor,
          .response = &test__v1__echo_response__descriptor,
          .unary = echo_unary },
        { .path = "/test.v1.Echo/Stream",
          .request = &test__v1__echo_request__descriptor,
          .response = &test__v1__echo_response__descriptor,
          .stream = echo_stream },
        { .path = "/test.v1.Echo/Bulk",
          .request = &test__v1__echo_request__descriptor,
          .response = &test__v1__echo_response__descriptor,
          .unary = echo_bulk,
          .request_bytes_field = "payload" },
};

static rpc_server *echo_server_start(unsigned max_calls, int64_t grace_ms)
{
        rpc_server_options opts = { .listen = "127.0.0.1:0",
                                    .max_calls = max_calls,
                                    .grace_ms = grace_ms };
        rpc_server *srv = rpc_server_new(&opts);
        cs_error *err = NULL;

        for (size_t i = 0; i < ARRAY_SIZE(echo_methods); i++)
                assert_int_equal(rpc_server_add_method(srv, &echo_methods[i], &err), 0);
        assert_int_equal(rpc_server_start(srv, &err), 0);
        assert_null(err);
        return srv;
}

static rpc_channel *channel_to(rpc_server *srv)
{
        char target[64];

        snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(srv));
        return rpc_channel_new(target);
}

/* The shared fixture: one server and one channel for most tests. */
static rpc_server *server;
static rpc_channel *channel;
static int fds_before;

static int count_dir(const char *path)
{
        DIR *d = opendir(path);
        int n = 0;

        if (!d)
                return -1;
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static int group_setup(void **state)
{
        (void)state;
        /* gRPC keeps its poller's epoll and wakeup fds for the life of the process: count
         * after it is up. */
        rpc_global_init();
        fds_before = count_dir("/proc/self/fd");
        server = echo_server_start(64, 2000);
        own_port = rpc_server_port(server);
        channel = channel_to(server);
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        rpc_channel_free(channel);
        rpc_server_free(server);
        rpc_global_shutdown();
        return 0;
}

static Test__V1__EchoResponse *unary(rpc_channel *ch, Test__V1__EchoRequest *req,
                                     const rpc_call_options *opts, cs_error **err)
{
        ProtobufCMessage *resp = NULL;

        if (rpc_unary(ch, "/test.v1.Echo/Unary", &req->base, &test__v1__echo_response__descriptor,
                      opts, &resp, err) < 0)
                return NULL;
        return (Test__V1__EchoResponse *)resp;
}

static rpc_stream *stream_open(rpc_channel *ch, const char *text, uint32_t count,
                               uint32_t payload_size, uint32_t delay_ms,
                               const rpc_call_options *opts)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        rpc_stream *st = NULL;
        cs_error *err = NULL;

        req.text = (char *)text;
        req.count = count;
        req.payload_size = payload_size;
        req.delay_ms = delay_ms;
        assert_int_equal(rpc_stream_open(ch, "/test.v1.Echo/Stream", &req.base,
                                         &test__v1__echo_response__descriptor, opts, &st, &err),
                         0);
        return st;
}

/* Reads until the stream ends; returns the messages read and fills *ret_err. */
static int stream_drain(rpc_stream *st, cs_error **ret_err)
{
        ProtobufCMessage *msg;
        int n = 0;

        while (rpc_stream_read(st, &msg, ret_err) == 1) {
                protobuf_c_message_free_unpacked(msg, NULL);
                n++;
        }
        return n;
}

/* --- tests ----------------------------------------------------------------------------- */

static void test_unary_round_trip(void **state)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        rpc_call_options opts = { .timeout_ms = 5000, .request_id = "req-unit-1" };
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;
        uint8_t bytes[] = { 0, 1, 2, 255 };

        (void)state;
        req.text = "hello";
        req.payload.data = bytes;
        req.payload.len = sizeof(bytes);
        resp = unary(channel, &req, &opts, &err);
        assert_null(err);
        assert_non_null(resp);
        assert_string_equal(resp->text, "hello");
        assert_int_equal(resp->payload.len, sizeof(bytes));
        assert_memory_equal(resp->payload.data, bytes, sizeof(bytes));
        assert_string_equal(seen.last_request_id, "req-unit-1");
        protobuf_c_message_free_unpacked(&resp->base, NULL);

        /* A handler's error arrives as its status and message. */
        req.text = "fail";
        assert_null(unary(channel, &req, NULL, &err));
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_FAILED_PRECONDITION);
        assert_string_equal(err->msg, "asked to fail");
        cs_error_free(err);
}

/* grpc_server_* counts each call once, by its method and final code, with a duration. */
static void test_server_metrics(void **state)
{
        rpc_server *srv = echo_server_start(8, 2000);
        rpc_channel *ch = channel_to(srv);
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        rpc_stream *st;
        cs_error *err = NULL;
        cs_mpage page = { 0 };

        (void)state;
        req.text = "hello";
        resp = unary(ch, &req, NULL, &err);
        assert_non_null(resp);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        req.text = "fail";
        assert_null(unary(ch, &req, NULL, &err));
        cs_error_free(err);
        err = NULL;
        st = stream_open(ch, "s", 3, 1, 0, NULL);
        assert_int_equal(stream_drain(st, &err), 3);
        rpc_stream_free(st);
        rpc_channel_free(ch);
        rpc_server_shutdown(srv); /* every handler has counted its end */

        rpc_server_metrics(srv, &page);
        for (const char *want =
                     "# TYPE grpc_server_started_total counter\n\0"
                     "grpc_server_started_total{grpc_service=\"test.v1.Echo\",grpc_method="
                     "\"Unary\",grpc_type=\"unary\"} 2\n\0"
                     "grpc_server_started_total{grpc_service=\"test.v1.Echo\",grpc_method="
                     "\"Stream\",grpc_type=\"server_stream\"} 1\n\0"
                     "grpc_server_handled_total{grpc_service=\"test.v1.Echo\",grpc_method="
                     "\"Unary\",grpc_type=\"unary\",grpc_code=\"OK\"} 1\n\0"
                     "grpc_server_handled_total{grpc_service=\"test.v1.Echo\",grpc_method="
                     "\"Unary\",grpc_type=\"unary\",grpc_code=\"FailedPrecondition\"} 1\n\0"
                     "grpc_server_handled_total{grpc_service=\"test.v1.Echo\",grpc_method="
                     "\"Stream\",grpc_type=\"server_stream\",grpc_code=\"OK\"} 1\n\0"
                     "grpc_server_handling_seconds_count{grpc_service=\"test.v1.Echo\","
                     "grpc_method=\"Unary\",grpc_type=\"unary\"} 2\n\0"
                     "# TYPE grpc_server_handling_seconds histogram\n\0";
             *want; want += strlen(want) + 1)
                if (!strstr(page.text, want))
                        fail_msg("no '%s' in:\n%s", want, page.text);
        cs_mpage_free(&page);
        rpc_server_free(srv);
}

static void test_unknown_method(void **state)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(rpc_unary(channel, "/test.v1.Echo/Nope", &req.base,
                                   &test__v1__echo_response__descriptor, NULL, &resp, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_UNIMPLEMENTED);
        cs_error_free(err);
}

static void test_stream_10000_in_order(void **state)
{
        rpc_stream *st = stream_open(channel, "many", 10000, 16, 0, NULL);
        ProtobufCMessage *msg;
        cs_error *err = NULL;
        uint32_t n = 0;

        (void)state;
        while (rpc_stream_read(st, &msg, &err) == 1) {
                Test__V1__EchoResponse *r = (void *)msg;
                assert_int_equal(r->seq, n);
                assert_int_equal(r->payload.len, 16);
                assert_int_equal(r->payload.data[15], (uint8_t)(15 * 31 + n));
                protobuf_c_message_free_unpacked(msg, NULL);
                n++;
        }
        assert_null(err);
        assert_int_equal(n, 10000);
        /* Reading past the end keeps answering "ended with OK". */
        assert_int_equal(rpc_stream_read(st, &msg, &err), 0);
        rpc_stream_free(st);
}

static void test_16mib_both_ways(void **state)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;
        _cleanup_free_ uint8_t *big = cs_xmalloc(16 * MIB);

        (void)state;
        for (size_t i = 0; i < 16 * MIB; i++)
                big[i] = (uint8_t)(i ^ (i >> 13));
        req.text = "big";
        req.payload.data = big;
        req.payload.len = 16 * MIB;
        resp = unary(channel, &req, NULL, &err);
        assert_null(err);
        assert_int_equal(resp->payload.len, 16 * MIB);
        assert_memory_equal(resp->payload.data, big, 16 * MIB);
        protobuf_c_message_free_unpacked(&resp->base, NULL);

        /* And a 16 MiB message on a stream, server to client. */
        rpc_stream *st = stream_open(channel, "bigstream", 2, 16 * MIB, 0, NULL);
        assert_int_equal(stream_drain(st, &err), 2);
        assert_null(err);
        rpc_stream_free(st);
}

/* Sends `size` bytes (taking ownership of buf) as a request for `method` with raw gRPC core,
 * with no client-side cap or encoding, so that only the server can refuse it. */
static grpc_status_code raw_call(int port, const char *method, uint8_t *buf, size_t size)
{
        char target[64];
        grpc_arg arg = { .type = GRPC_ARG_INTEGER,
                         .key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                         .value.integer = -1 };
        grpc_channel_args args = { .num_args = 1, .args = &arg };
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
        grpc_channel *ch;
        grpc_call *call;
        grpc_slice slice;
        grpc_byte_buffer *bb;
        grpc_metadata_array md, trailing;
        grpc_byte_buffer *resp = NULL;
        grpc_status_code status = GRPC_STATUS_OK;
        grpc_slice details;
        grpc_op ops[6] = {
                { .op = GRPC_OP_SEND_INITIAL_METADATA },  { .op = GRPC_OP_SEND_MESSAGE },
                { .op = GRPC_OP_SEND_CLOSE_FROM_CLIENT }, { .op = GRPC_OP_RECV_INITIAL_METADATA },
                { .op = GRPC_OP_RECV_MESSAGE },           { .op = GRPC_OP_RECV_STATUS_ON_CLIENT }
        };

        slice = grpc_slice_new(buf, size, free);
        bb = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        snprintf(target, sizeof(target), "127.0.0.1:%d", port);
        ch = grpc_channel_create(target, creds, &args);
        grpc_channel_credentials_release(creds);
        call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                        grpc_slice_from_static_string(method), NULL,
                                        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        grpc_metadata_array_init(&md);
        grpc_metadata_array_init(&trailing);
        ops[1].data.send_message.send_message = bb;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
        ops[4].data.recv_message.recv_message = &resp;
        ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
        ops[5].data.recv_status_on_client.status = &status;
        ops[5].data.recv_status_on_client.status_details = &details;
        assert_int_equal(grpc_call_start_batch(call, ops, 6, (void *)1, NULL), GRPC_CALL_OK);
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

        if (resp)
                grpc_byte_buffer_destroy(resp);
        grpc_byte_buffer_destroy(bb);
        grpc_slice_unref(details);
        grpc_metadata_array_destroy(&md);
        grpc_metadata_array_destroy(&trailing);
        grpc_call_unref(call);
        grpc_channel_destroy(ch);
        grpc_completion_queue_shutdown(cq);
        while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
                ;
        grpc_completion_queue_destroy(cq);
        return status;
}

static grpc_status_code raw_unary(int port, uint8_t *buf, size_t size)
{
        return raw_call(port, "/test.v1.Echo/Unary", buf, size);
}

/* A valid EchoRequest of `size` bytes: field 2 (payload), length-delimited, zeros. */
static grpc_status_code raw_unary_of_size(int port, size_t size)
{
        uint8_t *buf = cs_xcalloc(1, size);
        size_t len = size - 5;

        buf[0] = 0x12;
        for (int i = 1; i <= 4; i++) {
                buf[i] = (uint8_t)((len & 0x7f) | (i < 4 ? 0x80 : 0));
                len >>= 7;
        }
        return raw_unary(port, buf, size);
}

static void test_nul_in_string_rejected(void **state)
{
        static const uint8_t text_with_nul[] = { 0x0a, 0x03, 'a', 0x00, 'b' };
        static const uint8_t fine[] = { 0x0a, 0x03, 'a', 'b', 'c', 0x12, 0x02, 0x00, 0x00 };
        uint8_t *buf;

        (void)state;
        /* A NUL in a string field: protobuf-c would cut it to "a"; the layer refuses it. */
        buf = cs_xmalloc(sizeof(text_with_nul));
        memcpy(buf, text_with_nul, sizeof(text_with_nul));
        assert_int_equal(raw_unary(own_port, buf, sizeof(text_with_nul)),
                         GRPC_STATUS_INVALID_ARGUMENT);
        /* NULs in a bytes field are data. */
        buf = cs_xmalloc(sizeof(fine));
        memcpy(buf, fine, sizeof(fine));
        assert_int_equal(raw_unary(own_port, buf, sizeof(fine)), GRPC_STATUS_OK);
}

/* Proto3 strings are UTF-8: a string field that is not (a lone 0xff, an overlong '/', a
 * surrogate, a cut sequence) is refused before any handler sees it; valid multi-byte text and
 * any bytes in a bytes field pass. */
static void test_invalid_utf8_in_string_rejected(void **state)
{
        static const uint8_t bad[][8] = {
                { 0x0a, 0x05, 'b', 'a', 'd', 0xff, 0xfe }, /* the attack pass's path */
                { 0x0a, 0x02, 0xc0, 0xaf },                /* overlong '/' */
                { 0x0a, 0x03, 0xed, 0xa0, 0x80 },          /* a UTF-16 surrogate */
                { 0x0a, 0x02, 0xe2, 0x82 },                /* a sequence cut short */
        };
        static const uint8_t fine[] = { 0x0a, 0x06, 0xc3, 0xa9, 0xe2, 0x82,
                                        0xac, 'x',  0x12, 0x02, 0xff, 0xfe };
        uint8_t *buf;

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                size_t len = 2 + bad[i][1];

                buf = cs_xmalloc(len);
                memcpy(buf, bad[i], len);
                assert_int_equal(raw_unary(own_port, buf, len), GRPC_STATUS_INVALID_ARGUMENT);
        }
        buf = cs_xmalloc(sizeof(fine));
        memcpy(buf, fine, sizeof(fine));
        assert_int_equal(raw_unary(own_port, buf, sizeof(fine)), GRPC_STATUS_OK);
}

static void test_over_cap_rejected(void **state)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;
        _cleanup_free_ uint8_t *big = cs_xcalloc(1, 17 * MIB);

        (void)state;
        /* A client that ignores the cap: the server refuses the message. */
        assert_int_equal(raw_unary_of_size(own_port, 17 * MIB), GRPC_STATUS_RESOURCE_EXHAUSTED);
        /* Our own client refuses to send it at all, with the same code. */
        req.payload.data = big;
        req.payload.len = 17 * MIB;
        assert_null(unary(channel, &req, NULL, &err));
        assert_int_equal(err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        cs_error_free(err);
        err = NULL;
        /* A response over the cap fails the call, not the server. */
        req.payload.len = 0;
        req.payload_size = 17 * MIB;
        assert_null(unary(channel, &req, NULL, &err));
        assert_int_equal(err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        cs_error_free(err);
        err = NULL;
        /* The server is unharmed. */
        req.payload_size = 0;
        req.text = "still here";
        resp = unary(channel, &req, NULL, &err);
        assert_null(err);
        assert_string_equal(resp->text, "still here");
        protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static Test__V1__EchoResponse *bulk(Test__V1__EchoRequest *req, const rpc_call_options *opts,
                                    cs_error **err)
{
        ProtobufCMessage *resp = NULL;

        if (rpc_unary(channel, "/test.v1.Echo/Bulk", &req->base,
                      &test__v1__echo_response__descriptor, opts, &resp, err) < 0)
                return NULL;
        return (Test__V1__EchoResponse *)resp;
}

/* A bytes field left undecoded on the way in, and sent from where it is on the way out:
 * large, empty, relayed from its slices, and with other fields around it. */
static void test_bytes_field_in_place(void **state)
{
        const size_t size = 5 * MIB + 123;
        _cleanup_free_ uint8_t *big = cs_xmalloc(size);
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;

        (void)state;
        for (size_t i = 0; i < size; i++)
                big[i] = (uint8_t)(i * 7 + (i >> 11));
        req.text = "around";
        req.count = 7;
        req.payload = (ProtobufCBinaryData){ .len = size, .data = big };
        resp = bulk(&req, NULL, &err);
        assert_null(err);
        assert_string_equal(resp->text, "around");
        assert_int_equal(resp->payload.len, size);
        assert_memory_equal(resp->payload.data, big, size);
        assert_true(resp->seq >= 1);
        protobuf_c_message_free_unpacked(&resp->base, NULL);

        /* Relayed: the relay sends the pieces it received, without gathering them. */
        req.text = "relay";
        resp = bulk(&req, NULL, &err);
        assert_null(err);
        assert_string_equal(resp->text, "relayed");
        assert_int_equal(resp->payload.len, size);
        assert_memory_equal(resp->payload.data, big, size);
        protobuf_c_message_free_unpacked(&resp->base, NULL);

        /* No payload at all. */
        req.text = "empty";
        req.payload = (ProtobufCBinaryData){ 0 };
        resp = bulk(&req, NULL, &err);
        assert_null(err);
        assert_int_equal(resp->payload.len, 0);
        assert_int_equal(resp->seq, 0);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* A client sending the bytes from slices of its own (rpc_call_options.bytes); with the field
 * also set in the message, it occurs twice and the last occurrence wins, as in decoding. */
static void test_bytes_field_from_slices(void **state)
{
        static const char parts[][8] = { "first-", "second-", "third" };
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        rpc_bytes b = { .len = 0 };
        rpc_call_options opts = { .bytes_field = "payload", .bytes = &b };
        cs_error *err = NULL;

        (void)state;
        grpc_slice_buffer_init(&b.slices);
        for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
                grpc_slice_buffer_add(&b.slices, grpc_slice_from_copied_string(parts[i]));
                b.len += strlen(parts[i]);
        }
        req.text = "slices";
        req.payload = (ProtobufCBinaryData){ .len = 3, .data = (uint8_t *)"old" };
        resp = bulk(&req, &opts, &err);
        assert_null(err);
        assert_int_equal(resp->payload.len, strlen("first-second-third"));
        assert_memory_equal(resp->payload.data, "first-second-third", resp->payload.len);
        protobuf_c_message_free_unpacked(&resp->base, NULL);

        /* A field that is not bytes cannot carry them. */
        opts.bytes_field = "text";
        assert_null(bulk(&req, &opts, &err));
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        cs_error_freep(&err);
        grpc_slice_buffer_destroy(&b.slices);
}

static grpc_status_code raw_bulk(const uint8_t *bytes, size_t size)
{
        uint8_t *buf = cs_xmalloc(size ? size : 1);

        memcpy(buf, bytes, size);
        return raw_call(own_port, "/test.v1.Echo/Bulk", buf, size);
}

/* Malformed framing around an undecoded field is refused as decoding would refuse it. */
static void test_bytes_field_malformed(void **state)
{
        /* payload (field 2) says 100 bytes, 3 follow */
        static const uint8_t truncated[] = { 0x12, 0x64, 'a', 'b', 'c' };
        /* a group (wire type 3), which proto3 has not */
        static const uint8_t group[] = { 0x1b, 0x1c };
        /* a key cut short */
        static const uint8_t short_key[] = { 0x12, 0x01, 'x', 0x80 };
        /* the payload's key, and then its length, padded to 6 bytes: protobuf-c allows 5 */
        static const uint8_t long_key[] = { 0x92, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00 };
        static const uint8_t long_len[] = { 0x12, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'x' };
        /* text with a NUL after the payload */
        static const uint8_t nul[] = { 0x12, 0x01, 'x', 0x0a, 0x03, 'a', 0x00, 'b' };
        /* text that is not UTF-8 after the payload */
        static const uint8_t not_utf8[] = { 0x12, 0x01, 'x', 0x0a, 0x02, 'a', 0xff };
        /* text, payload, count: fine */
        static const uint8_t fine[] = { 0x0a, 0x02, 'h', 'i', 0x12, 0x02, 0x00, 0x01, 0x18, 0x05 };
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(raw_bulk(truncated, sizeof(truncated)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(group, sizeof(group)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(short_key, sizeof(short_key)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(nul, sizeof(nul)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(not_utf8, sizeof(not_utf8)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(long_key, sizeof(long_key)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(long_len, sizeof(long_len)), GRPC_STATUS_INVALID_ARGUMENT);
        assert_int_equal(raw_bulk(fine, sizeof(fine)), GRPC_STATUS_OK);
        assert_int_equal(raw_bulk(fine, 0), GRPC_STATUS_OK);

        /* A response over the cap fails the call, not the server. */
        req.text = "big";
        req.payload_size = 17 * MIB;
        assert_null(bulk(&req, NULL, &err));
        assert_int_equal(err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        cs_error_freep(&err);
        req.payload_size = 3;
        resp = bulk(&req, NULL, &err);
        assert_null(err);
        assert_memory_equal(resp->payload.data, "ZZZ", 3);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* A request_bytes_field that is not a bytes field of the request is refused at registration. */
static void test_bytes_field_checked_at_registration(void **state)
{
        rpc_server_options o = { .listen = "127.0.0.1:0" };
        rpc_server *srv = rpc_server_new(&o);
        rpc_method m = echo_methods[0];
        cs_error *err = NULL;

        (void)state;
        m.request_bytes_field = "text";
        assert_int_equal(rpc_server_add_method(srv, &m, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        cs_error_freep(&err);
        m.request_bytes_field = "nonesuch";
        assert_int_equal(rpc_server_add_method(srv, &m, &err), -1);
        cs_error_freep(&err);
        rpc_server_free(srv);
}

static void test_client_cancel_seen_by_handler(void **state)
{
        ProtobufCMessage *msg;
        cs_error *err = NULL;
        rpc_stream *st;

        (void)state;
        seen_reset();
        /* A handler busy sending: its next send fails with CANCELLED. */
        st = stream_open(channel, "endless", 1000000, 1024, 1, NULL);
        for (int i = 0; i < 5; i++) {
                assert_int_equal(rpc_stream_read(st, &msg, &err), 1);
                protobuf_c_message_free_unpacked(msg, NULL);
        }
        rpc_stream_cancel(st);
        while (rpc_stream_read(st, &msg, &err) == 1)
                protobuf_c_message_free_unpacked(msg, NULL);
        assert_int_equal(err->code, GRPC_STATUS_CANCELLED);
        cs_error_free(err);
        err = NULL;
        rpc_stream_free(st);
        assert_int_equal(seen_wait(&seen.cancels_seen, 1), 1);
        assert_int_equal(seen.last_cancel, GRPC_STATUS_CANCELLED);

        /* A handler waiting in poll(2) learns it from the cancel fd, without sending. */
        st = stream_open(channel, "wait", 0, 0, 0, NULL);
        usleep(100 * 1000);
        rpc_stream_free(st); /* frees an unfinished stream: cancels it */
        assert_int_equal(seen_wait(&seen.cancels_seen, 2), 2);
        assert_int_equal(seen.last_cancel, GRPC_STATUS_CANCELLED);
        assert_int_equal(seen_wait(&seen.streams_ended, 2), 2);
}

static void test_deadline_mid_stream(void **state)
{
        rpc_call_options opts = { .timeout_ms = 300 };
        cs_error *err = NULL;
        rpc_stream *st;
        int n;

        (void)state;
        seen_reset();
        st = stream_open(channel, "slow", 1000000, 8, 10, &opts);
        n = stream_drain(st, &err);
        assert_true(n > 0); /* it was mid-stream when the deadline hit */
        assert_int_equal(err->code, GRPC_STATUS_DEADLINE_EXCEEDED);
        cs_error_free(err);
        err = NULL;
        rpc_stream_free(st);
        assert_int_equal(seen_wait(&seen.cancels_seen, 1), 1);
        assert_int_equal(seen.last_cancel, GRPC_STATUS_DEADLINE_EXCEEDED);

        /* A waiting handler is told too. */
        opts.timeout_ms = 200;
        st = stream_open(channel, "wait", 0, 0, 0, &opts);
        stream_drain(st, &err);
        assert_int_equal(err->code, GRPC_STATUS_DEADLINE_EXCEEDED);
        cs_error_free(err);
        rpc_stream_free(st);
        assert_int_equal(seen_wait(&seen.cancels_seen, 2), 2);
        assert_int_equal(seen.last_cancel, GRPC_STATUS_DEADLINE_EXCEEDED);
}

static void test_relay_in_order_and_cancel_propagates(void **state)
{
        ProtobufCMessage *msg;
        cs_error *err = NULL;
        rpc_stream *st;
        uint32_t n = 0;

        (void)state;
        st = stream_open(channel, "relay:inner", 500, 100, 0, NULL);
        while (rpc_stream_read(st, &msg, &err) == 1) {
                assert_int_equal(((Test__V1__EchoResponse *)msg)->seq, n++);
                protobuf_c_message_free_unpacked(msg, NULL);
        }
        assert_null(err);
        assert_int_equal(n, 500);
        rpc_stream_free(st);

        /* Cancelling the outer call cancels the inner one it started. */
        seen_reset();
        st = stream_open(channel, "relay:wait", 0, 0, 0, NULL);
        usleep(200 * 1000);
        rpc_stream_cancel(st);
        stream_drain(st, &err);
        assert_int_equal(err->code, GRPC_STATUS_CANCELLED);
        cs_error_free(err);
        rpc_stream_free(st);
        assert_int_equal(seen_wait(&seen.cancels_seen, 1), 1);  /* the inner "wait" handler */
        assert_int_equal(seen_wait(&seen.streams_ended, 2), 2); /* inner and relay */
}

static void test_call_cap(void **state)
{
        rpc_server *srv = echo_server_start(2, 1000);
        rpc_channel *ch = channel_to(srv);
        rpc_stream *a, *b;
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        Test__V1__EchoResponse *resp;
        cs_error *err = NULL;
        int64_t deadline = cs_now_monotonic_ms() + 10000;

        (void)state;
        a = stream_open(ch, "wait", 0, 0, 0, NULL);
        b = stream_open(ch, "wait", 0, 0, 0, NULL);
        while (rpc_server_active_calls(srv) < 2 && cs_now_monotonic_ms() < deadline)
                usleep(10 * 1000);
        assert_int_equal(rpc_server_active_calls(srv), 2);
        req.text = "third";
        assert_null(unary(ch, &req, NULL, &err));
        assert_int_equal(err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        cs_error_free(err);
        err = NULL;
        rpc_stream_free(a);
        rpc_stream_free(b);
        while (rpc_server_active_calls(srv) > 0 && cs_now_monotonic_ms() < deadline)
                usleep(10 * 1000);
        resp = unary(ch, &req, NULL, &err);
        assert_null(err);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        rpc_channel_free(ch);
        rpc_server_free(srv);
}

typedef struct reader {
        rpc_stream *st;
        pthread_t thread;
        int n;
        cs_error *err;
} reader;

static void *reader_main(void *arg)
{
        reader *r = arg;

        r->n = stream_drain(r->st, &r->err);
        return NULL;
}

static void test_shutdown_with_streams_in_flight(void **state)
{
        rpc_server *srv = echo_server_start(16, 300);
        rpc_channel *ch = channel_to(srv);
        reader endless[3], quick;
        int64_t deadline = cs_now_monotonic_ms() + 10000;

        (void)state;
        seen_reset();
        /* Three that would never end, one that ends well within the grace period. */
        for (int i = 0; i < 3; i++) {
                endless[i] = (reader){ .st = stream_open(ch, "endless", 1000000, 64, 5, NULL) };
                pthread_create(&endless[i].thread, NULL, reader_main, &endless[i]);
        }
        quick = (reader){ .st = stream_open(ch, "quick", 10, 64, 10, NULL) };
        pthread_create(&quick.thread, NULL, reader_main, &quick);
        while (rpc_server_active_calls(srv) < 4 && cs_now_monotonic_ms() < deadline)
                usleep(10 * 1000);
        assert_int_equal(rpc_server_active_calls(srv), 4);

        rpc_server_shutdown(srv);
        assert_int_equal(rpc_server_active_calls(srv), 0);
        assert_true(rpc_server_shutting_down(srv));

        pthread_join(quick.thread, NULL);
        assert_null(quick.err);
        assert_int_equal(quick.n, 10);
        for (int i = 0; i < 3; i++) {
                pthread_join(endless[i].thread, NULL);
                assert_non_null(endless[i].err);
                assert_true(endless[i].n > 0);
                cs_error_free(endless[i].err);
                rpc_stream_free(endless[i].st);
        }
        rpc_stream_free(quick.st);
        assert_int_equal(seen_wait(&seen.streams_ended, 4), 4);
        rpc_channel_free(ch);
        rpc_server_free(srv);
}

static void test_server_bind_failure(void **state)
{
        rpc_server_options opts = { .listen = "127.0.0.1:1" /* privileged, or in use */ };
        char addr[64];
        rpc_server *srv;
        cs_error *err = NULL;

        (void)state;
        /* The fixture's port is certainly taken. */
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", own_port);
        opts.listen = addr;
        srv = rpc_server_new(&opts);
        assert_int_equal(rpc_server_start(srv, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        cs_error_free(err);
        rpc_server_free(srv);
}

/* Runs last: once every server and channel is gone, no fd and no thread of ours is left.
 * (Sockets close asynchronously in gRPC's own threads: wait for them, bounded.) */
static void test_no_fd_or_thread_leaked(void **state)
{
        int64_t deadline = cs_now_monotonic_ms() + 5000;

        (void)state;
        rpc_channel_free(channel);
        channel = NULL;
        rpc_server_free(server);
        server = NULL;
        while (count_dir("/proc/self/fd") != fds_before && cs_now_monotonic_ms() < deadline)
                usleep(10 * 1000);
        assert_int_equal(count_dir("/proc/self/fd"), fds_before);

        /* With gRPC shut down too, the main thread is the only one left: every handler
         * thread has returned. ("." and ".." plus one task.) */
        rpc_global_shutdown();
        deadline = cs_now_monotonic_ms() + 5000;
        while (count_dir("/proc/self/task") != 3 && cs_now_monotonic_ms() < deadline)
                usleep(10 * 1000);
        assert_int_equal(count_dir("/proc/self/task"), 3);
        rpc_global_init(); /* the group teardown shuts down again */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_unary_round_trip),
                cmocka_unit_test(test_unknown_method),
                cmocka_unit_test(test_server_metrics),
                cmocka_unit_test(test_stream_10000_in_order),
                cmocka_unit_test(test_16mib_both_ways),
                cmocka_unit_test(test_over_cap_rejected),
                cmocka_unit_test(test_nul_in_string_rejected),
                cmocka_unit_test(test_invalid_utf8_in_string_rejected),
                cmocka_unit_test(test_bytes_field_in_place),
                cmocka_unit_test(test_bytes_field_from_slices),
                cmocka_unit_test(test_bytes_field_malformed),
                cmocka_unit_test(test_bytes_field_checked_at_registration),
                cmocka_unit_test(test_client_cancel_seen_by_handler),
                cmocka_unit_test(test_deadline_mid_stream),
                cmocka_unit_test(test_relay_in_order_and_cancel_propagates),
                cmocka_unit_test(test_call_cap),
                cmocka_unit_test(test_shutdown_with_streams_in_flight),
                cmocka_unit_test(test_server_bind_failure),
                cmocka_unit_test(test_no_fd_or_thread_leaked),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
