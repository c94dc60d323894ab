/* The RPC layer's bidirectional calls, both sides (shared/rpc_server.c, rpc_client.c): a
 * read and a send in flight at once from two threads, echo in step, a handler that ends while
 * its client still has its side open (rpc_call_recv_abandon), a read with an idle limit
 * (rpc_call_recv_idle), and no call left behind. Over
 * loopback with test.v1's messages on a path of their own. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "rpc.h"
#include "util.h"
#include "test/v1/echo.pb-c.h"

#define N_MESSAGES 1000

/* Echo: each request answered with its text and a seq, until the client half-closes. */
static int chat(rpc_call *call, void *userdata, cs_error **err)
{
        uint32_t seq = 0;

        (void)userdata;
        for (;;) {
                Test__V1__EchoRequest *req = NULL;
                Test__V1__EchoResponse resp = TEST__V1__ECHO_RESPONSE__INIT;
                int r = rpc_call_recv(call, 1 << 20, (ProtobufCMessage **)&req, err);

                if (r <= 0)
                        return r;
                resp.text = req->text;
                resp.seq = seq++;
                r = rpc_call_send(call, &resp.base, err);
                protobuf_c_message_free_unpacked(&req->base, NULL);
                if (r < 0)
                        return -1;
        }
}

typedef struct reader {
        rpc_call *call;
        int got, last;
} reader;

static void *reader_main(void *arg)
{
        reader *rd = arg;

        for (;;) {
                ProtobufCMessage *msg = NULL;
                cs_error *err = NULL;
                int r = rpc_call_recv(rd->call, 1 << 20, &msg, &err);

                rd->last = r;
                cs_error_free(err);
                if (r <= 0)
                        return NULL;
                rd->got++;
                protobuf_c_message_free_unpacked(msg, NULL);
        }
}

/* Duplex: a reader thread takes the client's messages while this thread sends N_MESSAGES
 * responses; then the read is abandoned (the client never half-closes) and the call ends. */
static int duplex(rpc_call *call, void *userdata, cs_error **err)
{
        reader rd = { .call = call };
        pthread_t t;
        int r = 0;

        (void)userdata;
        assert_int_equal(pthread_create(&t, NULL, reader_main, &rd), 0);
        for (uint32_t i = 0; i < N_MESSAGES && r == 0; i++) {
                Test__V1__EchoResponse resp = TEST__V1__ECHO_RESPONSE__INIT;

                resp.text = "from the server";
                resp.seq = i;
                r = rpc_call_send(call, &resp.base, err);
        }
        rpc_call_recv_abandon(call);
        pthread_join(t, NULL);
        assert_int_equal(rd.last, 0); /* abandoned: 0, not an error */
        return r;
}

#define IDLE_MS 1000

/* Echo, but a client that sends nothing for IDLE_MS ends the call (DEADLINE_EXCEEDED). */
static int idle_echo(rpc_call *call, void *userdata, cs_error **err)
{
        (void)userdata;
        for (;;) {
                Test__V1__EchoRequest *req = NULL;
                Test__V1__EchoResponse resp = TEST__V1__ECHO_RESPONSE__INIT;
                int r = rpc_call_recv_idle(call, 1 << 20, IDLE_MS, (ProtobufCMessage **)&req, err);

                if (r <= 0)
                        return r;
                resp.text = req->text;
                r = rpc_call_send(call, &resp.base, err);
                protobuf_c_message_free_unpacked(&req->base, NULL);
                if (r < 0)
                        return -1;
        }
}

static const rpc_bidi_method idle_method = {
        "/test.v1.Echo/Idle",
        &test__v1__echo_request__descriptor,
        &test__v1__echo_response__descriptor,
        idle_echo,
        NULL,
};

static const rpc_bidi_method chat_method = {
        "/test.v1.Echo/Chat",
        &test__v1__echo_request__descriptor,
        &test__v1__echo_response__descriptor,
        chat,
        NULL,
};
static const rpc_bidi_method duplex_method = {
        "/test.v1.Echo/Duplex",
        &test__v1__echo_request__descriptor,
        &test__v1__echo_response__descriptor,
        duplex,
        NULL,
};

static rpc_server *server;
static rpc_channel *channel;

static int setup(void **state)
{
        rpc_server_options opts = { .listen = "127.0.0.1:0", .max_calls = 16, .grace_ms = 1000 };
        cs_error *err = NULL;
        char target[64];

        (void)state;
        rpc_global_init();
        server = rpc_server_new(&opts);
        assert_int_equal(rpc_server_add_bidi_method(server, &chat_method, &err), 0);
        assert_int_equal(rpc_server_add_bidi_method(server, &duplex_method, &err), 0);
        assert_int_equal(rpc_server_add_bidi_method(server, &idle_method, &err), 0);
        assert_int_equal(rpc_server_start(server, &err), 0);
        snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(server));
        channel = rpc_channel_new(target);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        rpc_channel_free(channel);
        rpc_server_free(server); /* waits for every call: a leaked one would hang here */
        rpc_global_shutdown();
        return 0;
}

static void wait_idle(void)
{
        for (int i = 0; i < 500 && rpc_server_active_calls(server); i++)
                usleep(10000);
        assert_int_equal(rpc_server_active_calls(server), 0);
}

static void test_echo_in_step(void **state)
{
        rpc_call_options opts = { .timeout_ms = 30000 };
        rpc_stream *st = NULL;
        cs_error *err = NULL;
        char text[32];

        (void)state;
        assert_int_equal(rpc_stream_open_bidi(channel, "/test.v1.Echo/Chat",
                                              &test__v1__echo_response__descriptor, &opts, &st,
                                              &err),
                         0);
        for (uint32_t i = 0; i < 100; i++) {
                Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
                Test__V1__EchoResponse *resp = NULL;

                snprintf(text, sizeof(text), "m%u", i);
                req.text = text;
                assert_int_equal(rpc_stream_send(st, &req.base, &err), 0);
                assert_int_equal(rpc_stream_read(st, (ProtobufCMessage **)&resp, &err), 1);
                assert_string_equal(resp->text, text);
                assert_int_equal(resp->seq, i);
                protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
        rpc_stream_close_send(st);
        {
                ProtobufCMessage *msg = NULL;
                assert_int_equal(rpc_stream_read(st, &msg, &err), 0); /* OK after half-close */
        }
        /* Sending after the end fails, it does not crash or block. */
        {
                Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
                assert_int_equal(rpc_stream_send(st, &req.base, &err), -1);
                assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
                cs_error_free(TAKE_PTR(err));
        }
        rpc_stream_free(st);
        wait_idle();
}

typedef struct sender {
        rpc_stream *st;
        int sent;
} sender;

static void *sender_main(void *arg)
{
        sender *s = arg;

        for (int i = 0; i < N_MESSAGES; i++) {
                Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
                cs_error *err = NULL;

                req.text = "from the client";
                if (rpc_stream_send(s->st, &req.base, &err) < 0) {
                        cs_error_free(err);
                        return NULL; /* the call ended first: the server stops reading */
                }
                s->sent++;
        }
        return NULL;
}

static void test_duplex_and_abandoned_read(void **state)
{
        rpc_call_options opts = { .timeout_ms = 30000 };
        sender s = { 0 };
        cs_error *err = NULL;
        pthread_t t;
        int n = 0, r;

        (void)state;
        assert_int_equal(rpc_stream_open_bidi(channel, "/test.v1.Echo/Duplex",
                                              &test__v1__echo_response__descriptor, &opts, &s.st,
                                              &err),
                         0);
        assert_int_equal(pthread_create(&t, NULL, sender_main, &s), 0);
        for (;;) {
                Test__V1__EchoResponse *resp = NULL;

                r = rpc_stream_read(s.st, (ProtobufCMessage **)&resp, &err);
                if (r <= 0)
                        break;
                assert_int_equal(resp->seq, (uint32_t)n);
                n++;
                protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
        /* Every response, then OK, though the client never half-closed. */
        assert_int_equal(r, 0);
        assert_int_equal(n, N_MESSAGES);
        pthread_join(t, NULL);
        assert_true(s.sent > 0);
        rpc_stream_free(s.st);
        wait_idle();
}

/* A client that keeps sending is served past the idle limit; one that stops is ended with
 * DEADLINE_EXCEEDED, and the call is gone. */
static void test_idle_limit(void **state)
{
        rpc_call_options opts = { .timeout_ms = 30000 };
        rpc_stream *st = NULL;
        cs_error *err = NULL;
        ProtobufCMessage *msg = NULL;

        (void)state;
        assert_int_equal(rpc_stream_open_bidi(channel, "/test.v1.Echo/Idle",
                                              &test__v1__echo_response__descriptor, &opts, &st,
                                              &err),
                         0);
        for (int i = 0; i < 8; i++) { /* 8 x IDLE_MS / 5: longer than the limit in all */
                Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;

                req.text = "still here";
                assert_int_equal(rpc_stream_send(st, &req.base, &err), 0);
                assert_int_equal(rpc_stream_read(st, &msg, &err), 1);
                protobuf_c_message_free_unpacked(msg, NULL);
                usleep(IDLE_MS / 5 * 1000);
        }
        assert_int_equal(rpc_stream_read(st, &msg, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_DEADLINE_EXCEEDED);
        assert_non_null(strstr(err->msg, "no message from the client in 1000 ms"));
        cs_error_free(err);
        rpc_stream_free(st);
        wait_idle();
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_echo_in_step),
                cmocka_unit_test(test_duplex_and_abandoned_read),
                cmocka_unit_test(test_idle_limit),
        };

        return cmocka_run_group_tests(tests, setup, teardown);
}
