/* The compute API as the benchmark's client sees it: the project's RPC client, one channel
 * shared by every thread (as one client process would). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "util.h"
#include "uuid.h"

/* How long a create may keep getting UNAVAILABLE (the frontend has not reached its agent
 * yet) and how long a sandbox may take to become READY. */
#define SVC_UNAVAILABLE_RETRY_MS 30000
#define SVC_READY_TIMEOUT_MS     60000
#define SVC_POLL_MS              20

static const rpc_call_options unary_opts = { .timeout_ms = BENCH_UNARY_TIMEOUT_MS };

static void sleep_ms(int ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

        nanosleep(&ts, NULL);
}

int svc_create(bench_ctx *b, char ret_id[static 37], cs_error **err)
{
        return svc_create_ex(b, 0, ret_id, err);
}

int svc_create_ex(bench_ctx *b, uint32_t cpu_millis, char ret_id[static 37], cs_error **err)
{
        char session[CS_UUID_STRLEN + 1];
        Compute__V1__CreateSandboxRequest req = COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT;
        Compute__V1__ResourceLimits limits = COMPUTE__V1__RESOURCE_LIMITS__INIT;
        int64_t give_up = cs_now_monotonic_ms() + SVC_UNAVAILABLE_RETRY_MS;

        cs_uuid_generate(session);
        req.tenant_id = b->tenant;
        req.session_id = session;
        if (cpu_millis) {
                limits.cpu_millis = cpu_millis;
                req.limits = &limits;
        }
        for (;;) {
                ProtobufCMessage *resp = NULL;
                cs_error *e = NULL;

                if (rpc_unary(b->ch, BENCH_METHOD("CreateSandbox"), &req.base,
                              &compute__v1__create_sandbox_response__descriptor, &unary_opts, &resp,
                              &e) == 0) {
                        const Compute__V1__CreateSandboxResponse *r = (const void *)resp;
                        snprintf(ret_id, 37, "%s", r->sandbox_id);
                        protobuf_c_message_free_unpacked(resp, NULL);
                        return 0;
                }
                if (e->code != GRPC_STATUS_UNAVAILABLE || cs_now_monotonic_ms() > give_up) {
                        *err = e;
                        return cs_error_prefix(err, "CreateSandbox");
                }
                cs_error_free(e);
                sleep_ms(100);
        }
}

int svc_status(bench_ctx *b, const char *id, int *ret_status, cs_error **err)
{
        Compute__V1__DescribeSandboxRequest req = COMPUTE__V1__DESCRIBE_SANDBOX_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;

        req.sandbox_id = (char *)id;
        if (rpc_unary(b->ch, BENCH_METHOD("DescribeSandbox"), &req.base,
                      &compute__v1__describe_sandbox_response__descriptor, &unary_opts, &resp,
                      err) < 0)
                return cs_error_prefix(err, "DescribeSandbox");
        *ret_status = (int)((const Compute__V1__DescribeSandboxResponse *)resp)->status;
        protobuf_c_message_free_unpacked(resp, NULL);
        return 0;
}

int svc_wait_ready(bench_ctx *b, const char *id, cs_error **err)
{
        int64_t give_up = cs_now_monotonic_ms() + SVC_READY_TIMEOUT_MS;

        for (;;) {
                int st;

                if (svc_status(b, id, &st, err) < 0)
                        return -1;
                if (st == COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_READY)
                        return 0;
                if (st != COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING)
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "sandbox %s: status %d instead of READY", id, st);
                if (cs_now_monotonic_ms() > give_up)
                        return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                            "sandbox %s: not READY after %d ms", id,
                                            SVC_READY_TIMEOUT_MS);
                sleep_ms(SVC_POLL_MS);
        }
}

int svc_destroy(bench_ctx *b, const char *id, cs_error **err)
{
        Compute__V1__DestroySandboxRequest req = COMPUTE__V1__DESTROY_SANDBOX_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;

        req.sandbox_id = (char *)id;
        if (rpc_unary(b->ch, BENCH_METHOD("DestroySandbox"), &req.base,
                      &compute__v1__destroy_sandbox_response__descriptor, &unary_opts, &resp,
                      err) < 0)
                return cs_error_prefix(err, "DestroySandbox %s", id);
        protobuf_c_message_free_unpacked(resp, NULL);
        return 0;
}

/* Handles one event; returns 1 when it was the ExecCompleted. */
static int exec_event(const Compute__V1__ExecEvent *ev, svc_output_fn on_stdout, void *userdata,
                      svc_exec_result *ret)
{
        switch (ev->event_case) {
        case COMPUTE__V1__EXEC_EVENT__EVENT_STDOUT:
                ret->stdout_bytes += ev->stdout->data.len;
                if (on_stdout)
                        on_stdout(userdata, ev->stdout->data.data, ev->stdout->data.len);
                return 0;
        case COMPUTE__V1__EXEC_EVENT__EVENT_STDERR: {
                size_t have = ret->stderr_bytes < sizeof(ret->stderr_head) - 1
                                      ? (size_t)ret->stderr_bytes
                                      : sizeof(ret->stderr_head) - 1;
                size_t n = ev->stderr->data.len;

                if (n > sizeof(ret->stderr_head) - 1 - have)
                        n = sizeof(ret->stderr_head) - 1 - have;
                memcpy(ret->stderr_head + have, ev->stderr->data.data, n);
                ret->stderr_head[have + n] = '\0';
                ret->stderr_bytes += ev->stderr->data.len;
                return 0;
        }
        case COMPUTE__V1__EXEC_EVENT__EVENT_COMPLETED:
                ret->exit_code = ev->completed->exit_code;
                ret->cancelled = ev->completed->cancelled;
                ret->timed_out = ev->completed->timed_out;
                ret->cpu_ms = ev->completed->usage ? ev->completed->usage->cpu_ms : 0;
                return 1;
        default:
                return 0;
        }
}

int svc_exec(bench_ctx *b, const char *id, const char *const *argv, svc_output_fn on_stdout,
             void *userdata, svc_exec_result *ret, cs_error **err)
{
        Compute__V1__ExecCommandRequest req = COMPUTE__V1__EXEC_COMMAND_REQUEST__INIT;
        Google__Protobuf__Duration timeout = GOOGLE__PROTOBUF__DURATION__INIT;
        const rpc_call_options opts = { .timeout_ms = BENCH_STREAM_TIMEOUT_MS };
        rpc_stream *st = NULL;
        bool completed = false;
        size_t n_args = 0;
        int r;

        memset(ret, 0, sizeof(*ret));
        while (argv[n_args + 1])
                n_args++;
        timeout.seconds = 600; /* the server's cap */
        req.sandbox_id = (char *)id;
        req.command = (char *)argv[0];
        req.n_args = n_args;
        req.args = (char **)argv + 1;
        req.timeout = &timeout;
        if (rpc_stream_open(b->ch, BENCH_METHOD("ExecCommand"), &req.base,
                            &compute__v1__exec_event__descriptor, &opts, &st, err) < 0)
                return cs_error_prefix(err, "ExecCommand %s", argv[0]);
        for (;;) {
                ProtobufCMessage *msg = NULL;

                r = rpc_stream_read(st, &msg, err);
                if (r <= 0)
                        break;
                if (exec_event((const Compute__V1__ExecEvent *)msg, on_stdout, userdata, ret))
                        completed = true;
                protobuf_c_message_free_unpacked(msg, NULL);
        }
        rpc_stream_free(st);
        if (r < 0)
                return cs_error_prefix(err, "ExecCommand %s", argv[0]);
        if (!completed)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "ExecCommand %s: the stream ended without ExecCompleted",
                                    argv[0]);
        return 0;
}

int svc_exec_ok(bench_ctx *b, const char *id, const char *const *argv, svc_output_fn on_stdout,
                void *userdata, svc_exec_result *ret, cs_error **err)
{
        if (svc_exec(b, id, argv, on_stdout, userdata, ret, err) < 0)
                return -1;
        if (ret->exit_code != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "ExecCommand %s: exit code %d%s%s%s",
                                    argv[0], ret->exit_code, ret->timed_out ? " (timed out)" : "",
                                    ret->stderr_head[0] ? ": " : "", ret->stderr_head);
        return 0;
}

int svc_write(bench_ctx *b, const char *id, const char *path, const uint8_t *data, size_t len,
              bool append, cs_error **err)
{
        Compute__V1__WriteFileRequest req = COMPUTE__V1__WRITE_FILE_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        int64_t written;

        req.sandbox_id = (char *)id;
        req.path = (char *)path;
        req.data.data = (uint8_t *)data;
        req.data.len = len;
        req.append = append;
        if (rpc_unary(b->ch, BENCH_METHOD("WriteFile"), &req.base,
                      &compute__v1__write_file_response__descriptor, &unary_opts, &resp, err) < 0)
                return cs_error_prefix(err, "WriteFile %s", path);
        written = ((const Compute__V1__WriteFileResponse *)resp)->bytes_written;
        protobuf_c_message_free_unpacked(resp, NULL);
        if (written != (int64_t)len)
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "WriteFile %s: %lld bytes written of %zu", path,
                                    (long long)written, len);
        return 0;
}

int svc_read(bench_ctx *b, const char *id, const char *path, int64_t offset, uint8_t *buf,
             size_t max, size_t *ret_len, cs_error **err)
{
        Compute__V1__ReadFileRequest req = COMPUTE__V1__READ_FILE_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        rpc_bytes data;
        size_t got = 0;

        req.sandbox_id = (char *)id;
        req.path = (char *)path;
        req.offset = offset;
        req.max_bytes = (int64_t)max;
        /* The data is copied once, from the pieces it arrived in to buf, as a client that
         * keeps it would. */
        rpc_bytes_init(&data);
        if (rpc_unary_bytes(b->ch, BENCH_METHOD("ReadFile"), &req.base,
                            &compute__v1__read_file_response__descriptor, "data", &unary_opts,
                            &resp, &data, err) < 0)
                return cs_error_prefix(err, "ReadFile %s", path);
        protobuf_c_message_free_unpacked(resp, NULL);
        if (data.len > max) {
                rpc_bytes_clear(&data);
                return cs_error_set(err, GRPC_STATUS_INTERNAL,
                                    "ReadFile %s: %zu bytes returned for max_bytes %zu", path,
                                    data.len, max);
        }
        for (size_t i = 0; i < data.n_iov; i++) {
                memcpy(buf + got, data.iov[i].iov_base, data.iov[i].iov_len);
                got += data.iov[i].iov_len;
        }
        *ret_len = got;
        rpc_bytes_clear(&data);
        return 0;
}
