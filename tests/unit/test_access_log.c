/* Unit tests of the RPC layer's access log (shared/rpc_server.c): one line per call, served
 * or refused, with the layer's fields and the handler's; its level by outcome; and
 * rpc_stream_relay_last, which hands a relay its last message.
 *
 * A real server on 127.0.0.1 (test.v1.Echo), real channels; stderr goes to a file that the
 * tests read back as JSON lines. Waits are bounded (a hang guard, not a timing assertion). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "rpc.h"
#include "util.h"
#include "test/v1/echo.pb-c.h"

#define TENANT "t\"en\\ant\nx"

static int log_fd = -1, saved_stderr = -1;
static FILE *test_stderr, *real_stderr;
static rpc_server *info_srv, *debug_srv;
static rpc_channel *info_ch, *debug_ch;
static int info_port;

static const char *const many_keys[] = {
        "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09",
        "k10", "k11", "k12", "k13", "k14", "k15", "k16", "k17", "k18", "k19",
        "k20", "k21", "k22", "k23", "k24", "k25", "k26", "k27", "k28", "k29",
};

/* Unary: adds its fields, then answers as the text says: "fail" (FAILED_PRECONDITION),
 * "internal" (INTERNAL), "many" (more fields than a call keeps), else OK. */
static int h_unary(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                   void *userdata, cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        Test__V1__EchoResponse *resp = (void *)resp_msg;

        (void)userdata;
        rpc_call_set_sandbox_id(call, "sb-1");
        rpc_call_add_log_field(call, CS_LOG_STR("tenant", "replaced"));
        rpc_call_add_log_field(call, CS_LOG_STR("tenant", TENANT));
        rpc_call_add_log_field(call, CS_LOG_INT("exit_code", -7));
        /* The layer's own keys and bad keys are refused (no slot taken, no duplicate key). */
        rpc_call_add_log_field(call, CS_LOG_STR("code", "forged"));
        rpc_call_add_log_field(call, CS_LOG_STR("msg", "forged"));
        rpc_call_add_log_field(call, CS_LOG_STR("Bad Key", "forged"));
        if (strcmp(req->text, "many") == 0) {
                for (size_t i = 0; i < ARRAY_SIZE(many_keys); i++)
                        rpc_call_add_log_field(call, CS_LOG_UINT(many_keys[i], i));
        }
        if (strcmp(req->text, "fail") == 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION, "asked to fail");
        if (strcmp(req->text, "internal") == 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "broken inside");
        resp->text = req->text;
        return 0;
}

/* Stream: "relay:N" relays N messages of this server's own stream and logs the last one's
 * seq (rpc_stream_relay_last); else `count` messages, seq 0... */
static int h_stream(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata, cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        int r = 0;

        (void)userdata;
        if (strncmp(req->text, "relay:", 6) == 0) {
                char target[64];
                Test__V1__EchoRequest inner = TEST__V1__ECHO_REQUEST__INIT;
                rpc_call_options opts = { .parent = call };
                ProtobufCMessage *last = NULL;
                rpc_stream *st = NULL;
                rpc_channel *ch;

                inner.text = "inner";
                inner.count = (uint32_t)atoi(req->text + 6);
                snprintf(target, sizeof(target), "127.0.0.1:%d", info_port);
                ch = rpc_channel_new(target);
                r = rpc_stream_open(ch, "/test.v1.Echo/Stream", &inner.base,
                                    &test__v1__echo_response__descriptor, &opts, &st, err);
                if (r == 0)
                        r = rpc_stream_relay_last(call, st, &last, err);
                rpc_stream_free(st);
                rpc_channel_free(ch);
                rpc_call_add_log_field(call, CS_LOG_BOOL("had_last", last != NULL));
                if (last)
                        rpc_call_add_log_field(
                                call,
                                CS_LOG_UINT("last_seq", ((Test__V1__EchoResponse *)last)->seq));
                if (last)
                        protobuf_c_message_free_unpacked(last, NULL);
                return r;
        }
        for (uint32_t i = 0; i < req->count && r == 0; i++) {
                Test__V1__EchoResponse resp = TEST__V1__ECHO_RESPONSE__INIT;

                resp.seq = i;
                resp.text = req->text;
                r = rpc_call_send(call, &resp.base, err);
        }
        return r;
}

static const rpc_method methods[] = {
        { "/test.v1.Echo/Unary", &test__v1__echo_request__descriptor,
          &test__v1__echo_response__descriptor, h_unary, NULL, NULL, NULL },
        { "/test.v1.Echo/Stream", &test__v1__echo_request__descriptor,
          &test__v1__echo_response__descriptor, NULL, h_stream, NULL, NULL },
};

static rpc_server *server_start(cs_log_level level, rpc_channel **ret_ch, int *ret_port)
{
        rpc_server_options opts = { .listen = "127.0.0.1:0", .access_log_level = level };
        rpc_server *srv = rpc_server_new(&opts);
        cs_error *err = NULL;
        char target[64];

        for (size_t i = 0; i < ARRAY_SIZE(methods); i++)
                assert_int_equal(rpc_server_add_method(srv, &methods[i], &err), 0);
        assert_int_equal(rpc_server_start(srv, &err), 0);
        snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(srv));
        *ret_ch = rpc_channel_new(target);
        if (ret_port)
                *ret_port = rpc_server_port(srv);
        return srv;
}

static int group_setup(void **state)
{
        char path[] = "/tmp/cs-test-access-log-XXXXXX";

        (void)state;
        log_fd = mkstemp(path);
        assert_true(log_fd >= 0);
        unlink(path);
        saved_stderr = dup(STDERR_FILENO);
        dup2(log_fd, STDERR_FILENO);
        /* The logger writes to fd 2 (the file); cmocka's messages go to the real stderr. */
        test_stderr = fdopen(saved_stderr, "w");
        setvbuf(test_stderr, NULL, _IONBF, 0);
        real_stderr = stderr;
        stderr = test_stderr;
        cs_log_setup(CS_LOG_INFO, true);
        rpc_global_init();
        info_srv = server_start(CS_LOG_INFO, &info_ch, &info_port);
        debug_srv = server_start(CS_LOG_DEBUG, &debug_ch, NULL);
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        rpc_channel_free(info_ch);
        rpc_channel_free(debug_ch);
        rpc_server_free(info_srv);
        rpc_server_free(debug_srv);
        rpc_global_shutdown();
        stderr = real_stderr;
        dup2(saved_stderr, STDERR_FILENO);
        fclose(test_stderr); /* and saved_stderr */
        close(log_fd);
        cs_log_setup(CS_LOG_INFO, false);
        return 0;
}

/* The access lines of request id rid so far that have the field `key` (every line of the
 * log must be JSON, each key once). */
static json_t *access_lines(const char *rid, const char *key)
{
        json_t *out = json_array();
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;
        ssize_t n;
        char *line, *save = NULL;

        for (off_t off = 0;; off += n) {
                if (cap - len < 65536) {
                        cap = cap ? cap * 2 : 262144;
                        buf = realloc(buf, cap);
                        assert_non_null(buf);
                }
                n = pread(log_fd, buf + len, cap - len - 1, off);
                assert_true(n >= 0);
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        buf[len] = '\0';
        for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                json_error_t e;
                json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &e);

                if (!j)
                        fail_msg("log line is not JSON (%s): %s", e.text, line);
                if (strcmp(json_string_value(json_object_get(j, "msg")) ?: "", "access") == 0 &&
                    strcmp(json_string_value(json_object_get(j, "request_id")) ?: "", rid) == 0 &&
                    json_object_get(j, key))
                        json_array_append(out, j);
                json_decref(j);
        }
        return out;
}

/* The one access line of rid with the field `key`, waited for (it is written once the status
 * is sent, which may be after the client has it); NULL when there is none after wait_ms. A
 * call made with a parent has the parent's request id: `key` tells them apart. */
static json_t *access_line_with(const char *rid, const char *key, int64_t wait_ms)
{
        int64_t deadline = cs_now_monotonic_ms() + wait_ms;

        for (;;) {
                json_t *a = access_lines(rid, key);
                json_t *line = NULL;

                if (json_array_size(a) > 0) {
                        assert_int_equal(json_array_size(a), 1);
                        line = json_incref(json_array_get(a, 0));
                }
                json_decref(a);
                if (line || cs_now_monotonic_ms() >= deadline)
                        return line;
                usleep(20000);
        }
}

static json_t *access_line(const char *rid, int64_t wait_ms)
{
        return access_line_with(rid, "method", wait_ms);
}

static const char *str(json_t *line, const char *key)
{
        return json_string_value(json_object_get(line, key));
}

static int unary(rpc_channel *ch, const char *method, const char *text, const char *rid)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        rpc_call_options opts = { .timeout_ms = 10000, .request_id = rid };
        ProtobufCMessage *resp = NULL;
        cs_error *err = NULL;
        int code;

        req.text = (char *)text;
        if (rpc_unary(ch, method, &req.base, &test__v1__echo_response__descriptor, &opts, &resp,
                      &err) == 0) {
                protobuf_c_message_free_unpacked(resp, NULL);
                return GRPC_STATUS_OK;
        }
        code = err->code;
        cs_error_free(err);
        return code;
}

static void test_ok_call(void **state)
{
        json_t *line;

        (void)state;
        assert_int_equal(unary(info_ch, "/test.v1.Echo/Unary", "hi", "rid-ok"), GRPC_STATUS_OK);
        line = access_line("rid-ok", 10000);
        assert_non_null(line);
        assert_string_equal(str(line, "level"), "info");
        assert_string_equal(str(line, "method"), "/test.v1.Echo/Unary");
        assert_string_equal(str(line, "code"), "OK");
        assert_true(json_is_integer(json_object_get(line, "duration_ms")));
        assert_true(strncmp(str(line, "peer"), "ipv4:127.0.0.1:", 15) == 0);
        assert_string_equal(str(line, "sandbox_id"), "sb-1");
        /* Added twice: the last value, escaped on the way and whole on the way back. */
        assert_string_equal(str(line, "tenant"), TENANT);
        assert_int_equal(json_integer_value(json_object_get(line, "exit_code")), -7);
        assert_null(json_object_get(line, "error"));
        assert_null(json_object_get(line, "Bad Key"));
        assert_string_equal(str(line, "msg"), "access");
        json_decref(line);
}

/* A server whose OK lines are debug: none at info, but its failures are. */
static void test_levels(void **state)
{
        json_t *line;

        (void)state;
        assert_int_equal(unary(debug_ch, "/test.v1.Echo/Unary", "fail", "rid-fail"),
                         GRPC_STATUS_FAILED_PRECONDITION);
        line = access_line("rid-fail", 10000);
        assert_non_null(line);
        assert_string_equal(str(line, "level"), "info");
        assert_string_equal(str(line, "code"), "FAILED_PRECONDITION");
        assert_string_equal(str(line, "error"), "asked to fail");
        json_decref(line);

        assert_int_equal(unary(debug_ch, "/test.v1.Echo/Unary", "internal", "rid-internal"),
                         GRPC_STATUS_INTERNAL);
        line = access_line("rid-internal", 10000);
        assert_non_null(line);
        assert_string_equal(str(line, "level"), "error");
        assert_string_equal(str(line, "error"), "broken inside");
        json_decref(line);

        /* The failures above were logged after this call ended: its line would be there. */
        assert_int_equal(unary(debug_ch, "/test.v1.Echo/Unary", "hi", "rid-debug-ok"),
                         GRPC_STATUS_OK);
        assert_int_equal(unary(debug_ch, "/test.v1.Echo/Unary", "fail", "rid-after"),
                         GRPC_STATUS_FAILED_PRECONDITION);
        json_decref(access_line("rid-after", 10000));
        assert_null(access_line("rid-debug-ok", 0));
}

/* A call refused before any handler (here: an unknown method) has its line too, at warn. */
static void test_refused(void **state)
{
        json_t *line;

        (void)state;
        assert_int_equal(unary(info_ch, "/test.v1.Echo/Nope", "hi", "rid-nope"),
                         GRPC_STATUS_UNIMPLEMENTED);
        line = access_line("rid-nope", 10000);
        assert_non_null(line);
        assert_string_equal(str(line, "level"), "warn");
        assert_string_equal(str(line, "code"), "UNIMPLEMENTED");
        assert_non_null(strstr(str(line, "error"), "/test.v1.Echo/Nope"));
        json_decref(line);
}

/* Fields beyond RPC_CALL_LOG_FIELDS_MAX are dropped, the first ones kept. */
static void test_field_cap(void **state)
{
        json_t *line;
        size_t kept = 0;

        (void)state;
        assert_int_equal(unary(info_ch, "/test.v1.Echo/Unary", "many", "rid-many"), GRPC_STATUS_OK);
        line = access_line("rid-many", 10000);
        assert_non_null(line);
        for (size_t i = 0; i < ARRAY_SIZE(many_keys); i++) {
                json_t *v = json_object_get(line, many_keys[i]);
                if (v) {
                        assert_int_equal(json_integer_value(v), i);
                        kept++;
                }
        }
        /* tenant and exit_code hold two of the call's slots. */
        assert_int_equal(kept, RPC_CALL_LOG_FIELDS_MAX - 2);
        assert_null(json_object_get(line, "cut"));
        json_decref(line);
}

/* rpc_stream_relay_last: every message relayed, the last one handed back decoded. */
static void test_relay_last(void **state)
{
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        rpc_call_options opts = { .timeout_ms = 10000, .request_id = "rid-relay" };
        rpc_stream *st = NULL;
        cs_error *err = NULL;
        ProtobufCMessage *msg;
        uint32_t n = 0;
        json_t *line;
        int r;

        (void)state;
        req.text = "relay:5";
        assert_int_equal(rpc_stream_open(info_ch, "/test.v1.Echo/Stream", &req.base,
                                         &test__v1__echo_response__descriptor, &opts, &st, &err),
                         0);
        while ((r = rpc_stream_read(st, &msg, &err)) == 1) {
                assert_int_equal(((Test__V1__EchoResponse *)msg)->seq, n++);
                protobuf_c_message_free_unpacked(msg, NULL);
        }
        assert_int_equal(r, 0);
        assert_int_equal(n, 5);
        rpc_stream_free(st);
        line = access_line_with("rid-relay", "had_last", 10000);
        assert_non_null(line);
        assert_true(json_is_true(json_object_get(line, "had_last")));
        assert_int_equal(json_integer_value(json_object_get(line, "last_seq")), 4);
        json_decref(line);

        /* An empty stream: no last message. */
        req.text = "relay:0";
        opts.request_id = "rid-relay-empty";
        assert_int_equal(rpc_stream_open(info_ch, "/test.v1.Echo/Stream", &req.base,
                                         &test__v1__echo_response__descriptor, &opts, &st, &err),
                         0);
        assert_int_equal(rpc_stream_read(st, &msg, &err), 0);
        rpc_stream_free(st);
        line = access_line_with("rid-relay-empty", "had_last", 10000);
        assert_non_null(line);
        assert_true(json_is_false(json_object_get(line, "had_last")));
        assert_null(json_object_get(line, "last_seq"));
        json_decref(line);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ok_call),    cmocka_unit_test(test_levels),
                cmocka_unit_test(test_refused),    cmocka_unit_test(test_field_cap),
                cmocka_unit_test(test_relay_last),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
