/* compute.v1.ComputeService: protobuf in, service_core.c's checks and scheduler call, protobuf
 * out; exec and file calls relayed to the node agent that holds the sandbox. Owns the
 * registered copy of the frontend_service; touches the calls it serves. */
#include "service.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "compute/v1/compute.pb-c.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "pbconv.h"
#include "service_core.h"
#include "util.h"

#define NA(name) "/nodeagent.v1.NodeAgent/" name

static frontend_service svc;

/* --- conversions ----------------------------------------------------------------------- */

static Nodeagent__V1__SandboxRef *route_ref(rpc_call *call, const fe_route *route)
{
        Nodeagent__V1__SandboxRef *ref = rpc_call_alloc(call, sizeof(*ref));

        nodeagent__v1__sandbox_ref__init(ref);
        ref->sandbox_id = rpc_call_strdup(call, route->sandbox_id);
        if (route->pod_name[0]) {
                Nodeagent__V1__PodRef *pod = rpc_call_alloc(call, sizeof(*pod));
                nodeagent__v1__pod_ref__init(pod);
                pod->pod_namespace = rpc_call_strdup(call, route->pod_namespace);
                pod->pod_name = rpc_call_strdup(call, route->pod_name);
                pod->pod_uid = rpc_call_strdup(call, route->pod_uid);
                pod->mount_path = rpc_call_strdup(call, route->mount_path);
                ref->pod = pod;
        }
        return ref;
}

/* --- the access log (rpc.h): what each method adds to its line ----------------------- */

/* Usage under the API's UsageMetrics field names. */
static void log_usage(rpc_call *call, const usage_metrics *u)
{
        rpc_call_add_log_field(call, CS_LOG_UINT("cpu_ms", u->cpu_ms));
        rpc_call_add_log_field(call, CS_LOG_UINT("memory_peak_bytes", u->memory_peak_bytes));
        rpc_call_add_log_field(call, CS_LOG_UINT("memory_avg_bytes", u->memory_avg_bytes));
        rpc_call_add_log_field(call, CS_LOG_UINT("disk_read_bytes", u->disk_read_bytes));
        rpc_call_add_log_field(call, CS_LOG_UINT("disk_write_bytes", u->disk_write_bytes));
        rpc_call_add_log_field(call, CS_LOG_UINT("network_egress_bytes", u->network_egress_bytes));
        rpc_call_add_log_field(call,
                               CS_LOG_UINT("network_ingress_bytes", u->network_ingress_bytes));
}

/* How an exec ended (ExecCompleted): exit_code, signal, outcome (exited, signaled,
 * oom_killed, cancelled or timed_out), wall_ms and its usage. */
static void log_exec_completed(rpc_call *call, const Compute__V1__ExecCompleted *done)
{
        usage_metrics u = { 0 };
        const char *outcome = done->timed_out    ? "timed_out"
                              : done->cancelled  ? "cancelled"
                              : done->oom_killed ? "oom_killed"
                              : done->signal     ? "signaled"
                                                 : "exited";

        rpc_call_add_log_field(call, CS_LOG_STR("outcome", outcome));
        rpc_call_add_log_field(call, CS_LOG_INT("exit_code", done->exit_code));
        rpc_call_add_log_field(call, CS_LOG_INT("signal", done->signal));
        rpc_call_add_log_field(call, CS_LOG_INT("wall_ms", pb_duration_ms(done->wall_time)));
        pb_usage_read(done->usage, &u);
        log_usage(call, &u);
}

/* --- lifecycle ------------------------------------------------------------------------- */

static int h_create(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                    void *userdata, cs_error **err)
{
        const Compute__V1__CreateSandboxRequest *req = (const void *)req_msg;
        Compute__V1__CreateSandboxResponse *resp = (void *)resp_msg;
        const Compute__V1__WorkspaceSpec *ws = req->workspace;
        const Compute__V1__ResourceLimits *lim = req->limits;
        const Compute__V1__NetworkSpec *net = req->network;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_view v = { 0 };
        fe_spec spec = {
                .tenant_id = req->tenant_id,
                .session_id = req->session_id,
                .image = req->image,
                .storage_class = ws ? ws->storage_class : "",
                .size = ws ? ws->size : "",
                .mount_path = ws ? ws->mount_path : "",
                .cpu_millis = lim ? lim->cpu_millis : 0,
                .memory_bytes = lim ? lim->memory_bytes : 0,
                .max_runtime_ms = lim ? pb_duration_ms(lim->max_runtime) : 0,
                .egress = net ? (cs_egress)net->egress : CS_EGRESS_UNSPECIFIED,
                .allow_domains = net ? (const char *const *)net->allow_domains : NULL,
                .n_allow_domains = net ? net->n_allow_domains : 0,
                .allow_cidrs = net ? (const char *const *)net->allow_cidrs : NULL,
                .n_allow_cidrs = net ? net->n_allow_cidrs : 0,
        };

        (void)userdata;
        if (fe_service_create(&svc, &spec, &ctx, &v, err) < 0)
                return -1;
        rpc_call_set_sandbox_id(call, v.id); /* the access log names it */
        resp->sandbox_id = rpc_call_strdup(call, v.id);
        /* The reference: "Always STARTING on success", a warm claim (already READY) and a
         * retried create (any status) included; DescribeSandbox tells the current status. */
        resp->status = COMPUTE__V1__SANDBOX_STATUS__SANDBOX_STATUS_STARTING;
        resp->created_at = pb_timestamp(call, v.created_at_ms);
        fe_view_clear(&v);
        return 0;
}

static int h_describe(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                      void *userdata, cs_error **err)
{
        const Compute__V1__DescribeSandboxRequest *req = (const void *)req_msg;
        Compute__V1__DescribeSandboxResponse *resp = (void *)resp_msg;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_view v = { 0 };

        (void)userdata;
        if (fe_service_describe(&svc, req->sandbox_id, &ctx, &v, err) < 0)
                return -1;
        resp->sandbox_id = req->sandbox_id;
        resp->status = (Compute__V1__SandboxStatus)v.status;
        resp->created_at = pb_timestamp(call, v.created_at_ms);
        resp->current_uptime = pb_duration(call, fe_view_uptime_ms(&v, cs_now_realtime_ms()));
        resp->current_usage = pb_usage(call, &v.usage);
        resp->status_reason = rpc_call_strdup(call, v.reason ?: "");
        resp->network = pb_network(call, &v.network);
        fe_view_clear(&v);
        return 0;
}

/* One sandbox of a listing, on the call's arena. */
static Compute__V1__SandboxSummary *summary_of(rpc_call *call, const fe_view *v, int64_t now_ms)
{
        Compute__V1__SandboxSummary *m = rpc_call_alloc(call, sizeof(*m));

        compute__v1__sandbox_summary__init(m);
        m->sandbox_id = rpc_call_strdup(call, v->id);
        m->tenant_id = rpc_call_strdup(call, v->tenant_id ?: "");
        m->session_id = rpc_call_strdup(call, v->session_id ?: "");
        m->status = (Compute__V1__SandboxStatus)v->status;
        m->status_reason = rpc_call_strdup(call, v->reason ?: "");
        m->created_at = pb_timestamp(call, v->created_at_ms);
        m->current_uptime = pb_duration(call, fe_view_uptime_ms(v, now_ms));
        m->current_usage = pb_usage(call, &v->usage);
        m->destroyed_at = pb_timestamp(call, v->destroyed_at_ms);
        m->network = pb_network(call, &v->network);
        if (v->cpu_millis || v->memory_bytes || v->max_runtime_ms) {
                Compute__V1__ResourceLimits *lim = rpc_call_alloc(call, sizeof(*lim));

                compute__v1__resource_limits__init(lim);
                lim->cpu_millis = v->cpu_millis;
                lim->memory_bytes = v->memory_bytes;
                lim->max_runtime = pb_duration(call, v->max_runtime_ms);
                m->limits = lim;
        }
        return m;
}

static int h_list(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                  void *userdata, cs_error **err)
{
        const Compute__V1__ListSandboxesRequest *req = (const void *)req_msg;
        Compute__V1__ListSandboxesResponse *resp = (void *)resp_msg;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_view_list l = { 0 };
        char next[FE_LIST_TOKEN_MAX + 1];
        int64_t now = cs_now_realtime_ms();

        (void)userdata;
        if (fe_service_list(&svc, req->tenant_id, (fe_status)req->status, req->page_size,
                            req->page_token, &ctx, &l, next, err) < 0)
                return -1;
        resp->n_sandboxes = l.n;
        resp->sandboxes = rpc_call_alloc(call, (l.n + 1) * sizeof(*resp->sandboxes));
        for (size_t i = 0; i < l.n; i++)
                resp->sandboxes[i] = summary_of(call, &l.v[i], now);
        resp->next_page_token = rpc_call_strdup(call, next);
        rpc_call_add_log_field(call, CS_LOG_UINT("sandboxes", l.n));
        fe_view_list_clear(&l);
        return 0;
}

static int h_destroy(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                     void *userdata, cs_error **err)
{
        const Compute__V1__DestroySandboxRequest *req = (const void *)req_msg;
        Compute__V1__DestroySandboxResponse *resp = (void *)resp_msg;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_view v = { 0 };

        (void)userdata;
        if (fe_service_destroy(&svc, req->sandbox_id, &ctx, &v, err) < 0)
                return -1;
        log_usage(call, &v.usage); /* the final usage, in the access log with the tenant */
        resp->sandbox_id = req->sandbox_id;
        resp->total_usage = pb_usage(call, &v.usage);
        fe_view_clear(&v);
        return 0;
}

/* --- exec ------------------------------------------------------------------------------ */

/* The completed event is always an exec's last: how the command ended, for the access log.
 * Frees last. */
static void log_last_event(rpc_call *call, ProtobufCMessage *last)
{
        if (!last)
                return;
        if (((Compute__V1__ExecEvent *)last)->event_case ==
            COMPUTE__V1__EXEC_EVENT__EVENT_COMPLETED)
                log_exec_completed(call, ((Compute__V1__ExecEvent *)last)->completed);
        protobuf_c_message_free_unpacked(last, NULL);
}

/* The agent's ExecRequest for req on route, on the call's arena. */
static void exec_request_out(rpc_call *call, const Compute__V1__ExecCommandRequest *req,
                             const fe_route *route, Nodeagent__V1__ExecRequest *ret)
{
        Nodeagent__V1__ExecRequest out = NODEAGENT__V1__EXEC_REQUEST__INIT;
        Nodeagent__V1__ExecRequest__EnvEntry *env;

        out.ref = route_ref(call, route);
        out.command = req->command;
        out.n_args = req->n_args;
        out.args = req->args;
        out.working_dir = req->working_dir;
        out.timeout = req->timeout;
        out.wait_ready_timeout = pb_duration(call, svc.wait_ready_ms);
        out.n_env = req->n_env;
        out.env = rpc_call_alloc(call, (req->n_env + 1) * sizeof(*out.env));
        env = rpc_call_alloc(call, (req->n_env + 1) * sizeof(*env));
        for (size_t i = 0; i < req->n_env; i++) {
                nodeagent__v1__exec_request__env_entry__init(&env[i]);
                env[i].key = req->env[i]->key;
                env[i].value = req->env[i]->value;
                out.env[i] = &env[i];
        }
        *ret = out;
}

static int h_exec(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata, cs_error **err)
{
        const Compute__V1__ExecCommandRequest *req = (const void *)req_msg;
        Nodeagent__V1__ExecRequest out;
        rpc_call_options opts = { .parent = call };
        rpc_stream *st = NULL;
        ProtobufCMessage *last = NULL;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_route route;
        int r;

        (void)userdata;
        if (fe_service_exec_route(&svc, req->sandbox_id, req->command, pb_duration_ms(req->timeout),
                                  &ctx, &route, err) < 0)
                return -1;
        exec_request_out(call, req, &route, &out);
        /* The agent's stream is a child of this call: cancelling this one cancels it, and
         * one message is relayed at a time, so backpressure reaches the process. */
        r = rpc_stream_open(route.channel, NA("Exec"), &out.base,
                            &compute__v1__exec_event__descriptor, &opts, &st, err);
        if (r == 0)
                r = rpc_stream_relay_last(call, st, &last, err);
        rpc_stream_free(st);
        fe_route_release(&route);
        log_last_event(call, last);
        return r;
}

/* --- ExecSession ----------------------------------------------------------------------- */

static void session_request_free(void *msg)
{
        protobuf_c_message_free_unpacked(msg, NULL);
}

/* The client-to-agent direction of a session, on a thread of its own: each message of the
 * client is sent on to the agent as it is (compute.v1.ExecSessionRequest and the agent's
 * keep the same field numbers for everything but start), one at a time, so an agent that
 * stops reading (the command does not read its stdin) stops this reading the client: gRPC
 * flow control then holds the client back. The agent checks the sequence rules; this side
 * only refuses a second start (the agent's start is another message). */
typedef struct session_pump {
        rpc_call *call;
        rpc_stream *st;
        cs_error *err; /* the client's bad message: the call's end */
        pthread_t thread;
} session_pump;

static void *session_pump_main(void *arg)
{
        session_pump *p = arg;

        for (;;) {
                ProtobufCMessage *msg = NULL;
                cs_error *err = NULL;
                int r = rpc_call_recv(p->call, RPC_MAX_MESSAGE_BYTES, &msg, &err);

                if (r == 0) {
                        rpc_stream_close_send(p->st);
                        return NULL;
                }
                if (r < 0) {
                        /* A message that does not decode or is over the cap ends it; a cancel
                         * reaches the agent's stream by itself (a child of this call). */
                        if (err->code == GRPC_STATUS_INVALID_ARGUMENT ||
                            err->code == GRPC_STATUS_RESOURCE_EXHAUSTED) {
                                p->err = err;
                                rpc_stream_cancel(p->st);
                        } else {
                                cs_error_free(err);
                        }
                        return NULL;
                }
                if (((Compute__V1__ExecSessionRequest *)msg)->kind_case ==
                    COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_START) {
                        protobuf_c_message_free_unpacked(msg, NULL);
                        cs_error_set(&p->err, GRPC_STATUS_INVALID_ARGUMENT,
                                     "a second start in one ExecSession");
                        rpc_stream_cancel(p->st); /* the agent ends the command as on cancel */
                        return NULL;
                }
                r = rpc_stream_send(p->st, msg, &err);
                protobuf_c_message_free_unpacked(msg, NULL);
                if (r < 0) { /* the agent's stream ended: its status is the call's */
                        cs_error_free(err);
                        return NULL;
                }
        }
}

static int h_exec_session(rpc_call *call, void *userdata, cs_error **err)
{
        Nodeagent__V1__ExecSessionRequest first = NODEAGENT__V1__EXEC_SESSION_REQUEST__INIT;
        Nodeagent__V1__ExecSessionStart start = NODEAGENT__V1__EXEC_SESSION_START__INIT;
        Nodeagent__V1__ExecRequest out;
        Compute__V1__ExecSessionRequest *req = NULL;
        const Compute__V1__ExecCommandRequest *cmd;
        rpc_call_options opts = { .parent = call };
        session_pump pump = { .call = call };
        ProtobufCMessage *last = NULL;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_route route;
        bool pumping = false;
        int r;

        (void)userdata;
        r = rpc_call_recv(call, RPC_MAX_MESSAGE_BYTES, (ProtobufCMessage **)&req, err);
        if (r == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "the ExecSession stream ended before its start");
        if (r < 0)
                return -1;
        if (req->kind_case != COMPUTE__V1__EXEC_SESSION_REQUEST__KIND_START) {
                protobuf_c_message_free_unpacked(&req->base, NULL);
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "the first message of an ExecSession must be start");
        }
        rpc_call_defer(call, session_request_free, req);
        cmd = req->start->command;
        if (!cmd)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "start.command is missing");
        if (fe_service_exec_route(&svc, cmd->sandbox_id, cmd->command, pb_duration_ms(cmd->timeout),
                                  &ctx, &route, err) < 0)
                return -1;
        exec_request_out(call, cmd, &route, &out);
        start.exec = &out;
        start.tty = req->start->tty;
        start.size = req->start->size;
        first.kind_case = NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_START;
        first.start = &start;
        r = rpc_stream_open_bidi(route.channel, NA("ExecSession"),
                                 &compute__v1__exec_event__descriptor, &opts, &pump.st, err);
        if (r == 0)
                r = rpc_stream_send(pump.st, &first.base, err);
        if (r == 0) {
                pumping = pthread_create(&pump.thread, NULL, session_pump_main, &pump) == 0;
                if (!pumping)
                        r = cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                         "cannot start a session's thread");
        }
        if (r == 0)
                r = rpc_stream_relay_last(call, pump.st, &last, err);
        log_last_event(call, last);
        if (pumping) {
                rpc_call_recv_abandon(call);
                pthread_join(pump.thread, NULL);
        }
        if (pump.err) {
                /* The client's bad message, not the cancel it caused. */
                cs_error_free(*err);
                *err = TAKE_PTR(pump.err);
                r = -1;
        }
        rpc_stream_free(pump.st);
        fe_route_release(&route);
        return r;
}

/* --- files ----------------------------------------------------------------------------- */

/* Sends req to the agent on `route`, releases the route, and answers with the agent's response as
 * it is: the agent's file calls answer with the compute.v1 message this call answers with, so the
 * bytes (up to 16 MiB of file data) pass through undecoded. `data`, when given, is sent as
 * req's "data" field from the slices it arrived in (WriteFile's 16 MiB, never copied). */
static int relay_unary(rpc_call *call, fe_route *route, const char *method, ProtobufCMessage *req,
                       const rpc_bytes *data, cs_error **err)
{
        rpc_call_options opts = { .timeout_ms = svc.agent_timeout_ms,
                                  .parent = call,
                                  .bytes_field = data ? "data" : NULL,
                                  .bytes = data };
        grpc_byte_buffer *got = NULL;
        int r = rpc_unary_raw(route->channel, method, req, &opts, &got, err);

        fe_route_release(route);
        if (r < 0)
                return -1;
        rpc_call_respond_raw(call, got);
        return 0;
}

static int h_read_file(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                       void *userdata, cs_error **err)
{
        const Compute__V1__ReadFileRequest *req = (const void *)req_msg;
        Nodeagent__V1__ReadFileRequest out = NODEAGENT__V1__READ_FILE_REQUEST__INIT;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_route route;

        (void)userdata;
        if (fe_service_read_route(&svc, req->sandbox_id, req->path, req->offset, req->max_bytes,
                                  &ctx, &route, err) < 0)
                return -1;
        out.ref = route_ref(call, &route);
        out.path = req->path;
        out.offset = req->offset;
        out.max_bytes = req->max_bytes;
        (void)resp_msg;
        return relay_unary(call, &route, NA("ReadFile"), &out.base, NULL, err);
}

static int h_write_file(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Compute__V1__WriteFileRequest *req = (const void *)req_msg;
        Nodeagent__V1__WriteFileRequest out = NODEAGENT__V1__WRITE_FILE_REQUEST__INIT;
        /* The data is not decoded (the method's request_bytes_field): it goes on to the agent
         * in the slices it arrived in. */
        const rpc_bytes *data = rpc_call_request_bytes(call);
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_route route;

        (void)userdata;
        if (fe_service_write_route(&svc, req->sandbox_id, req->path, data->len, &ctx, &route, err) <
            0)
                return -1;
        out.ref = route_ref(call, &route);
        out.path = req->path;
        out.append = req->append;
        out.mode = req->mode;
        (void)resp_msg;
        return relay_unary(call, &route, NA("WriteFile"), &out.base, data, err);
}

static int h_list_files(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Compute__V1__ListFilesRequest *req = (const void *)req_msg;
        Nodeagent__V1__ListFilesRequest out = NODEAGENT__V1__LIST_FILES_REQUEST__INIT;
        fe_ctx ctx = fe_ctx_from_call(call);
        fe_route route;

        (void)userdata;
        if (fe_service_list_route(&svc, req->sandbox_id, req->path, &ctx, &route, err) < 0)
                return -1;
        out.ref = route_ref(call, &route);
        out.path = req->path;
        out.recursive = req->recursive;
        out.max_entries = req->max_entries;
        (void)resp_msg;
        return relay_unary(call, &route, NA("ListFiles"), &out.base, NULL, err);
}

/* --- the method table ------------------------------------------------------------------ */

#define CS(name) "/compute.v1.ComputeService/" name

static const rpc_method methods[] = {
        { CS("CreateSandbox"), &compute__v1__create_sandbox_request__descriptor,
          &compute__v1__create_sandbox_response__descriptor, h_create, NULL, NULL, NULL },
        { CS("DestroySandbox"), &compute__v1__destroy_sandbox_request__descriptor,
          &compute__v1__destroy_sandbox_response__descriptor, h_destroy, NULL, NULL, NULL },
        { CS("DescribeSandbox"), &compute__v1__describe_sandbox_request__descriptor,
          &compute__v1__describe_sandbox_response__descriptor, h_describe, NULL, NULL, NULL },
        { CS("ExecCommand"), &compute__v1__exec_command_request__descriptor,
          &compute__v1__exec_event__descriptor, NULL, h_exec, NULL, NULL },
        { CS("ReadFile"), &compute__v1__read_file_request__descriptor,
          &compute__v1__read_file_response__descriptor, h_read_file, NULL, NULL, NULL },
        { CS("WriteFile"), &compute__v1__write_file_request__descriptor,
          &compute__v1__write_file_response__descriptor, h_write_file, NULL, NULL, "data" },
        { CS("ListFiles"), &compute__v1__list_files_request__descriptor,
          &compute__v1__list_files_response__descriptor, h_list_files, NULL, NULL, NULL },
        { CS("ListSandboxes"), &compute__v1__list_sandboxes_request__descriptor,
          &compute__v1__list_sandboxes_response__descriptor, h_list, NULL, NULL, NULL },
};

static const rpc_bidi_method session_method = {
        CS("ExecSession"),
        &compute__v1__exec_session_request__descriptor,
        &compute__v1__exec_event__descriptor,
        h_exec_session,
        NULL,
};

int frontend_service_register(rpc_server *srv, const frontend_service *s, cs_error **err)
{
        svc = *s;
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
                if (rpc_server_add_method(srv, &methods[i], err) < 0)
                        return -1;
        }
        return rpc_server_add_bidi_method(srv, &session_method, err);
}
