/* nodeagent.v1.NodeAgent: protobuf in, internal structs to the sandbox source, exec and
 * workspace modules, protobuf out. The only file of the agent that includes generated headers.
 *
 * Where sandboxes come from is the source's business (source.h: local registry or kube
 * finder, picked once by main.c): a SandboxRef becomes a src_ref, the source gives back a
 * referenced registry sandbox, and exec, file I/O and usage run on that the same way whatever
 * the source. Nothing here asks which source it is. */
#include "service.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_metrics.h"
#include "compute/v1/compute.pb-c.h"
#include "exec.h"
#include "hostpath.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "pbconv.h"
#include "session.h"
#include "util.h"
#include "workspace_io.h"

/* How long Exec waits for a STARTING sandbox when the request does not say. */
#define SVC_DEFAULT_WAIT_READY_MS (60 * 1000)
/* The least DestroySandbox.grace accepted (docs/nodeagent.md); none is the agent's default. */
#define SB_MIN_DESTROY_GRACE_MS 1000

static agent_service svc;

/* GetAgentInfo reports the source's kind as the AgentMode of the same number. */
_Static_assert((int)SRC_LOCAL == (int)NODEAGENT__V1__AGENT_MODE__AGENT_MODE_LOCAL &&
                       (int)SRC_KUBE == (int)NODEAGENT__V1__AGENT_MODE__AGENT_MODE_KUBE,
               "src_kind numbers are nodeagent.v1.AgentMode's");

/* --- conversions ----------------------------------------------------------------------- */

/* Copies an sb_info into a SandboxInfo that lives on the call's arena. */
static Nodeagent__V1__SandboxInfo *info_to_pb(rpc_call *call, const sb_info *in)
{
        Nodeagent__V1__SandboxInfo *m = rpc_call_alloc(call, sizeof(*m));

        nodeagent__v1__sandbox_info__init(m);
        m->sandbox_id = rpc_call_strdup(call, in->id);
        m->tenant_id = rpc_call_strdup(call, in->tenant_id);
        m->session_id = rpc_call_strdup(call, in->session_id);
        m->status = (Compute__V1__SandboxStatus)in->status;
        m->status_message = rpc_call_strdup(call, in->status_message);
        m->created_at = pb_timestamp(call, in->created_at_ms);
        m->destroyed_at = pb_timestamp(call, in->destroyed_at_ms);
        m->delete_after = pb_timestamp(call, in->delete_after_ms);
        m->usage = pb_usage(call, &in->usage);
        m->image = rpc_call_strdup(call, in->image);
        m->mount_path = rpc_call_strdup(call, in->mount_path);
        m->cpu_millis = in->cpu_millis;
        m->memory_bytes = in->memory_bytes;
        m->max_runtime = pb_duration(call, in->max_runtime_ms);
        m->network = pb_network(call, &in->network);
        return m;
}

/* A source's entry as a SandboxInfo on the call's arena, with its pod if it is in one. */
static Nodeagent__V1__SandboxInfo *entry_to_pb(rpc_call *call, const src_entry *in)
{
        Nodeagent__V1__SandboxInfo *m = info_to_pb(call, &in->info);
        Nodeagent__V1__PodRef *p;

        if (!in->pod.pod_namespace)
                return m;
        p = rpc_call_alloc(call, sizeof(*p));
        nodeagent__v1__pod_ref__init(p);
        p->pod_namespace = rpc_call_strdup(call, in->pod.pod_namespace);
        p->pod_name = rpc_call_strdup(call, in->pod.pod_name);
        p->pod_uid = rpc_call_strdup(call, in->pod.pod_uid);
        p->container_name = rpc_call_strdup(call, in->pod.container_name);
        p->mount_path = rpc_call_strdup(call, in->pod.mount_path);
        m->pod = p;
        return m;
}

/* A SandboxRef as the source reads it; NULL when the call gives none. Strings borrowed. */
static const src_ref *ref_from_pb(const Nodeagent__V1__SandboxRef *ref, src_ref *buf)
{
        const Nodeagent__V1__PodRef *pod;

        if (!ref)
                return NULL;
        pod = ref->pod;
        *buf = (src_ref){ .sandbox_id = ref->sandbox_id,
                          .pod_namespace = pod ? pod->pod_namespace : "",
                          .pod_name = pod ? pod->pod_name : "",
                          .pod_uid = pod ? pod->pod_uid : "",
                          .container_name = pod ? pod->container_name : "",
                          .mount_path = pod ? pod->mount_path : "" };
        return buf;
}

static void call_set_sandbox_id(void *userdata, const char *sandbox_id)
{
        rpc_call_set_sandbox_id(userdata, sandbox_id);
}

/* What the source sees of the call: its name for the logs and, if cancellable, its cancel fd. */
static src_call call_ctx(rpc_call *call, int cancel_fd)
{
        return (src_call){ .cancel_fd = cancel_fd,
                           .set_sandbox_id = call_set_sandbox_id,
                           .userdata = call };
}

/* The sandbox a ref names, referenced (release with sb_release). */
static int acquire(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, bool need_ready,
                   int64_t wait_ready_ms, int cancel_fd, sandbox **ret, cs_error **err)
{
        src_call c = call_ctx(call, cancel_fd);
        src_ref r;

        return svc.src->ops->acquire(svc.src, &c, ref_from_pb(ref, &r), need_ready, wait_ready_ms,
                                     ret, err);
}

/* --- lifecycle ------------------------------------------------------------------------- */

static int h_get_agent_info(rpc_call *call, const ProtobufCMessage *req_msg,
                            ProtobufCMessage *resp_msg, void *userdata, cs_error **err)
{
        Nodeagent__V1__GetAgentInfoResponse *resp = (void *)resp_msg;
        src_counts n = { 0 };

        (void)req_msg;
        (void)userdata;
        resp->node_name = (char *)svc.node_name;
        resp->agent_version = (char *)svc.version;
        resp->mode = (Nodeagent__V1__AgentMode)svc.src->ops->kind;
        resp->runtime = (char *)svc.rt->ops->name;
        resp->runtime_version = (char *)svc.runtime_version;
        resp->cgroup_version = svc.cg->version == CS_CGROUP_V2 ? "v2" : "v1";
        resp->started_at = pb_timestamp(call, svc.started_at_ms);
        resp->cpu_millis_capacity = svc.cpu_millis_capacity;
        resp->memory_bytes_capacity = svc.memory_bytes_capacity;
        resp->spawner_enabled = svc.spawner_enabled;
        if (svc.src->ops->counts(svc.src, &n, err) < 0)
                return -1;
        if (n.partial) {
                rpc_call_log(call, CS_LOG_WARN, "%s", n.partial->msg);
                cs_error_free(n.partial);
        }
        resp->max_sandboxes = n.max_sandboxes;
        resp->sandboxes_live = n.live;
        resp->sandboxes_ready = n.ready;
        resp->sandboxes_destroyed = n.destroyed;
        resp->execs_running = n.execs_running;
        resp->warm_ready = n.warm_ready;
        resp->cpu_millis_allocated = n.cpu_millis_allocated;
        resp->memory_bytes_allocated = n.memory_bytes_allocated;
        return 0;
}

static int h_create(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                    void *userdata, cs_error **err)
{
        const Nodeagent__V1__CreateSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__CreateSandboxResponse *resp = (void *)resp_msg;
        src_call c = call_ctx(call, -1);
        sb_info info = { 0 };
        cs_netpolicy network;
        bool created = false;
        int r;
        sb_spec spec = {
                .id = req->sandbox_id,
                .tenant_id = req->tenant_id,
                .session_id = req->session_id,
                .image = req->image,
                .mount_path = req->mount_path,
                .cpu_millis = req->cpu_millis,
                .memory_bytes = req->memory_bytes,
                .max_runtime_ms = pb_duration_ms(req->max_runtime),
                .workspace_bytes = req->workspace_bytes,
                .network = &network,
        };

        (void)userdata;
        /* The frontend checked it too; the agent trusts no caller's checks. */
        if (pb_network_read(req->network, &network, err) < 0)
                return -1;
        r = svc.src->ops->create(svc.src, &c, &spec, &info, &created, err);
        cs_netpolicy_clear(&network);
        if (r < 0)
                return -1;
        resp->sandbox = info_to_pb(call, &info);
        resp->created = created;
        if (created)
                rpc_call_log(call, CS_LOG_INFO, "sandbox created for tenant %s session %s",
                             info.tenant_id, info.session_id);
        sb_info_clear(&info);
        return 0;
}

static int h_destroy(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                     void *userdata, cs_error **err)
{
        const Nodeagent__V1__DestroySandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__DestroySandboxResponse *resp = (void *)resp_msg;
        int64_t grace = pb_duration_ms(req->grace);
        src_call c = call_ctx(call, -1);
        sb_info info = { 0 };
        src_ref r;

        (void)userdata;
        /* A grace below the minimum would skip the soft delete (docs/nodeagent.md). */
        if (req->grace && grace < SB_MIN_DESTROY_GRACE_MS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "grace must be at least %d s", SB_MIN_DESTROY_GRACE_MS / 1000);
        if (svc.src->ops->destroy(svc.src, &c, ref_from_pb(req->ref, &r),
                                  req->grace ? &grace : NULL, &info, err) < 0)
                return -1;
        resp->sandbox = info_to_pb(call, &info);
        sb_info_clear(&info);
        return 0;
}

/* The sandbox a ref names, as its source reports it. Allocated in the call. */
static int describe(rpc_call *call, const Nodeagent__V1__SandboxRef *ref,
                    Nodeagent__V1__SandboxInfo **ret, cs_error **err)
{
        src_call c = call_ctx(call, -1);
        src_entry e = { 0 };
        src_ref r;

        if (svc.src->ops->describe(svc.src, &c, ref_from_pb(ref, &r), &e, err) < 0)
                return -1;
        *ret = entry_to_pb(call, &e);
        src_entry_clear(&e);
        return 0;
}

static int h_get(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                 void *userdata, cs_error **err)
{
        const Nodeagent__V1__GetSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__GetSandboxResponse *resp = (void *)resp_msg;

        (void)userdata;
        return describe(call, req->ref, &resp->sandbox, err);
}

static int h_list(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                  void *userdata, cs_error **err)
{
        const Nodeagent__V1__ListSandboxesRequest *req = (const void *)req_msg;
        Nodeagent__V1__ListSandboxesResponse *resp = (void *)resp_msg;
        src_page page = { .token = req->page_token,
                          .size = req->page_size,
                          .include_destroyed = req->include_destroyed };
        _cleanup_free_ char *next = NULL;
        src_entry *entries = NULL;
        size_t n = 0;

        (void)userdata;
        if (svc.src->ops->list(svc.src, &page, &entries, &n, &next, err) < 0)
                return -1;
        resp->sandboxes = rpc_call_alloc(call, (n + 1) * sizeof(*resp->sandboxes));
        for (size_t i = 0; i < n; i++)
                resp->sandboxes[i] = entry_to_pb(call, &entries[i]);
        resp->n_sandboxes = n;
        if (next)
                resp->next_page_token = rpc_call_strdup(call, next);
        src_entries_free(entries, n);
        return 0;
}

static int h_get_usage(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                       void *userdata, cs_error **err)
{
        const Nodeagent__V1__GetUsageRequest *req = (const void *)req_msg;
        Nodeagent__V1__GetUsageResponse *resp = (void *)resp_msg;
        Nodeagent__V1__SandboxInfo *sb;

        (void)userdata;
        if (describe(call, req->ref, &sb, err) < 0)
                return -1;
        resp->sandbox_id = sb->sandbox_id;
        resp->status = sb->status;
        resp->usage = sb->usage;
        resp->measured_at = pb_timestamp(call, cs_now_realtime_ms());
        return 0;
}

/* --- exec ------------------------------------------------------------------------------ */

static Compute__V1__ExecEvent event_new(rpc_call *call, Google__Protobuf__Timestamp *ts)
{
        Compute__V1__ExecEvent ev = COMPUTE__V1__EXEC_EVENT__INIT;
        struct timespec now;

        clock_gettime(CLOCK_REALTIME, &now);
        google__protobuf__timestamp__init(ts);
        ts->seconds = now.tv_sec;
        ts->nanos = (int32_t)now.tv_nsec;
        ev.emitted_at = ts;
        (void)call;
        return ev;
}

static int sink_write(void *userdata, int stream, const uint8_t *data, size_t len, cs_error **err)
{
        rpc_call *call = userdata;
        Google__Protobuf__Timestamp ts;
        Compute__V1__ExecEvent ev = event_new(call, &ts);
        Compute__V1__StdoutLine out = COMPUTE__V1__STDOUT_LINE__INIT;
        Compute__V1__StderrLine errl = COMPUTE__V1__STDERR_LINE__INIT;

        if (stream == EXEC_STDOUT) {
                out.data = (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)data };
                ev.event_case = COMPUTE__V1__EXEC_EVENT__EVENT_STDOUT;
                ev.stdout = &out;
        } else {
                errl.data = (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)data };
                ev.event_case = COMPUTE__V1__EXEC_EVENT__EVENT_STDERR;
                ev.stderr = &errl;
        }
        return rpc_call_send(call, &ev.base, err);
}

static int send_completed(rpc_call *call, const exec_result *res, cs_error **err)
{
        Google__Protobuf__Timestamp ts;
        Compute__V1__ExecEvent ev = event_new(call, &ts);
        Compute__V1__ExecCompleted done = COMPUTE__V1__EXEC_COMPLETED__INIT;

        done.exit_code = res->exit_code;
        done.wall_time = pb_duration(call, res->wall_ms);
        done.cancelled = res->cancelled;
        done.timed_out = res->timed_out;
        done.signal = res->signal;
        done.oom_killed = res->oom_killed;
        done.usage = pb_usage(call, &res->usage);
        ev.event_case = COMPUTE__V1__EXEC_EVENT__EVENT_COMPLETED;
        ev.completed = &done;
        return rpc_call_send(call, &ev.base, err);
}

/* Exec and ExecSession (input set): runs req and ends the stream with its ExecCompleted, or
 * with the client's bad message (ExecSession). */
static int run_exec(rpc_call *call, const Nodeagent__V1__ExecRequest *req, const exec_input *input,
                    cs_error **err)
{
        int64_t wait_ready = pb_duration_ms(req->wait_ready_timeout);
        int64_t timeout = pb_duration_ms(req->timeout);
        exec_sink sink = { .write = sink_write, .userdata = call };
        exec_result res = { 0 };
        exec_request er;
        char **keys, **values;
        sandbox *sb = NULL;
        int64_t start;
        int r;

        if (wait_ready < 0 || timeout < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "timeout and wait_ready_timeout must not be negative");
        keys = rpc_call_alloc(call, (req->n_env + 1) * sizeof(*keys));
        values = rpc_call_alloc(call, (req->n_env + 1) * sizeof(*values));
        for (size_t i = 0; i < req->n_env; i++) {
                keys[i] = req->env[i]->key;
                values[i] = req->env[i]->value;
        }
        er = (exec_request){ .command = req->command,
                             .args = req->args,
                             .n_args = req->n_args,
                             .env_keys = keys,
                             .env_values = values,
                             .n_env = req->n_env,
                             .working_dir = req->working_dir,
                             .timeout_ms = timeout,
                             .input = input };
        if (exec_validate(&er, err) < 0)
                return -1;
        if (acquire(call, req->ref, true, wait_ready ? wait_ready : SVC_DEFAULT_WAIT_READY_MS,
                    rpc_call_cancel_fd(call), &sb, err) < 0)
                return -1;
        sink.cancel_fd = rpc_call_cancel_fd(call);
        start = cs_now_monotonic_ns();
        na_metrics_exec_started();
        r = exec_run(svc.reg, svc.rt, sb, &er, &sink, &res, err);
        na_metrics_exec_ended(r < 0            ? NA_EXEC_ERROR
                              : res.oom_killed ? NA_EXEC_OOM
                              : res.timed_out  ? NA_EXEC_TIMEOUT
                              : res.cancelled  ? NA_EXEC_CANCELLED
                              : res.signal     ? NA_EXEC_SIGNALED
                                               : NA_EXEC_EXITED,
                              cs_now_monotonic_ns() - start);
        sb_release(svc.reg, sb);
        if (r < 0) {
                rpc_call_log(call, CS_LOG_DEBUG, "exec %s: failed via %s: %s", req->command,
                             res.path ? res.path : "spawner", (*err)->msg);
                return -1;
        }
        rpc_call_log(call, CS_LOG_DEBUG,
                     "exec %s: exit %d signal %d%s%s%s in %" PRId64 " ms via %s%s%s%s",
                     req->command, res.exit_code, res.signal, res.cancelled ? " cancelled" : "",
                     res.timed_out ? " timed out" : "", res.oom_killed ? " OOM" : "", res.wall_ms,
                     res.path, res.fallback[0] ? " (" : "", res.fallback,
                     res.fallback[0] ? ")" : "");
        if (res.input_err) {
                /* ExecSession: the client's bad message ended it, and is the call's end. */
                *err = res.input_err;
                return -1;
        }
        /* The last event, always; if the client is gone it fails quietly. */
        return send_completed(call, &res, err);
}

static int h_exec(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata, cs_error **err)
{
        (void)userdata;
        return run_exec(call, (const Nodeagent__V1__ExecRequest *)req_msg, NULL, err);
}

/* --- ExecSession ----------------------------------------------------------------------- */

/* The client's side of a session: its messages, checked (shared/session.h), one at a time. */
typedef struct session_in {
        rpc_call *call;
        session_state st;
        Nodeagent__V1__ExecSessionRequest *cur; /* the message handed out last */
} session_in;

static session_msg session_msg_of(const Nodeagent__V1__ExecSessionRequest *r)
{
        session_msg m = { .kind = SESSION_NONE };

        switch (r->kind_case) {
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_START:
                m.kind = SESSION_START;
                m.tty = r->start->tty;
                m.has_size = r->start->size != NULL;
                if (r->start->size) {
                        m.rows = r->start->size->rows;
                        m.cols = r->start->size->cols;
                }
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_STDIN:
                m.kind = SESSION_STDIN;
                m.stdin_len = r->stdin.len;
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_CLOSE_STDIN:
                m.kind = SESSION_CLOSE_STDIN;
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_RESIZE:
                m.kind = SESSION_RESIZE;
                m.has_size = true;
                m.rows = r->resize->rows;
                m.cols = r->resize->cols;
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_SIGNAL:
                m.kind = SESSION_SIGNAL;
                m.signo = r->signal;
                break;
        default:
                break;
        }
        return m;
}

/* Reads and checks the next message. 1 (s->cur holds it), 0 at the client's end, -1. */
static int session_recv(session_in *s, cs_error **err)
{
        ProtobufCMessage *msg = NULL;
        session_msg m;
        const char *why;
        int r;

        if (s->cur)
                protobuf_c_message_free_unpacked(&TAKE_PTR(s->cur)->base, NULL);
        r = rpc_call_recv(s->call, RPC_MAX_MESSAGE_BYTES, &msg, err);
        if (r <= 0)
                return r;
        s->cur = (Nodeagent__V1__ExecSessionRequest *)msg;
        m = session_msg_of(s->cur);
        why = session_check(&s->st, &m);
        if (why)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s", why);
        return 1;
}

static int session_next(void *userdata, exec_input_msg *out, cs_error **err)
{
        session_in *s = userdata;
        const Nodeagent__V1__ExecSessionRequest *r;
        int n;

        do {
                n = session_recv(s, err);
                if (n <= 0)
                        return n;
                r = s->cur;
        } while (r->kind_case == NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_STDIN &&
                 r->stdin.len == 0);
        *out = (exec_input_msg){ 0 };
        switch (r->kind_case) {
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_STDIN:
                *out = (exec_input_msg){ .kind = SESSION_STDIN,
                                         .data = r->stdin.data,
                                         .len = r->stdin.len };
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_CLOSE_STDIN:
                out->kind = SESSION_CLOSE_STDIN;
                break;
        case NODEAGENT__V1__EXEC_SESSION_REQUEST__KIND_RESIZE:
                *out = (exec_input_msg){ .kind = SESSION_RESIZE,
                                         .rows = r->resize->rows,
                                         .cols = r->resize->cols };
                break;
        default:
                *out = (exec_input_msg){ .kind = SESSION_SIGNAL, .signo = r->signal };
                break;
        }
        return 1;
}

static void session_abandon(void *userdata)
{
        session_in *s = userdata;

        rpc_call_recv_abandon(s->call);
}

static int h_exec_session(rpc_call *call, void *userdata, cs_error **err)
{
        session_in s = { .call = call };
        const Nodeagent__V1__ExecSessionStart *start;
        exec_input in = { .next = session_next, .abandon = session_abandon, .userdata = &s };
        int r;

        (void)userdata;
        r = session_recv(&s, err);
        if (r == 0)
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "the ExecSession stream ended before its start");
        if (r <= 0)
                goto out;
        start = s.cur->start;
        if (!start->exec) {
                r = cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "start.exec is missing");
                goto out;
        }
        in.tty = start->tty;
        in.rows = start->size ? start->size->rows : 0;
        in.cols = start->size ? start->size->cols : 0;
        if (in.tty && (!in.rows || !in.cols)) {
                in.rows = SESSION_DEFAULT_ROWS;
                in.cols = SESSION_DEFAULT_COLS;
        }
        in.idle_ms = svc.session_idle_ms;
        /* start stays alive: session_next frees only the messages after it. */
        {
                Nodeagent__V1__ExecSessionRequest *first = TAKE_PTR(s.cur);
                r = run_exec(call, first->start->exec, &in, err);
                protobuf_c_message_free_unpacked(&first->base, NULL);
        }
out:
        if (s.cur)
                protobuf_c_message_free_unpacked(&s.cur->base, NULL);
        return r < 0 ? -1 : 0;
}

/* --- workspace files ------------------------------------------------------------------- */

/* Acquires the sandbox and opens its workspace root. */
static int open_workspace(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, sandbox **ret_sb,
                          ws_root *ret_root, cs_error **err)
{
        int fd;

        if (acquire(call, ref, false, 0, -1, ret_sb, err) < 0)
                return -1;
        if (!sb_workspace_dir(*ret_sb)[0]) {
                /* Kube mode: the pod has no volume mounted there. */
                cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                             "the container has no volume mounted at %s: no workspace to reach",
                             sb_mount_path(*ret_sb));
                sb_release(svc.reg, *ret_sb);
                return -1;
        }
        fd = svc.src->ops->open_workspace(svc.src, sb_workspace_dir(*ret_sb), err);
        if (fd < 0) {
                sb_release(svc.reg, *ret_sb);
                return -1;
        }
        *ret_root = (ws_root){ .dirfd = fd, .mount_path = sb_mount_path(*ret_sb) };
        return 0;
}

static void close_workspace(sandbox *sb, ws_root *root)
{
        close(root->dirfd);
        sb_release(svc.reg, sb);
}

static int h_read_file(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                       void *userdata, cs_error **err)
{
        const Nodeagent__V1__ReadFileRequest *req = (const void *)req_msg;
        Compute__V1__ReadFileResponse *resp = (void *)resp_msg;
        ws_read_result rr = { 0 };
        sandbox *sb;
        ws_root root;
        int r;

        (void)userdata;
        if (open_workspace(call, req->ref, &sb, &root, err) < 0)
                return -1;
        r = ws_read(&root, req->path, req->offset, req->max_bytes, &rr, err);
        if (r == 0) {
                sb_count_file_io(svc.reg, sb, rr.len, 0);
                na_metrics_file_bytes(false, rr.len);
        }
        close_workspace(sb, &root);
        if (r < 0)
                return -1;
        /* The data is sent from where it was read, and freed once sent: no copy. */
        rpc_call_respond_bytes(call, "data", rr.data, rr.len, free);
        resp->total_size = rr.total_size;
        resp->eof = rr.eof;
        return 0;
}

static int h_write_file(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Nodeagent__V1__WriteFileRequest *req = (const void *)req_msg;
        Compute__V1__WriteFileResponse *resp = (void *)resp_msg;
        /* The data stays in the pieces it arrived in (the method's request_bytes_field). */
        const rpc_bytes *data = rpc_call_request_bytes(call);
        sandbox *sb;
        ws_root root;
        int r;

        (void)userdata;
        if (data->len > WS_DATA_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "data of %zu bytes is over the %u-byte cap per call; "
                                    "write in chunks with append",
                                    data->len, WS_DATA_MAX);
        if (open_workspace(call, req->ref, &sb, &root, err) < 0)
                return -1;
        /* No set-id bits: the agent runs as root and files it creates are root's. */
        r = ws_writev(&root, req->path, data->iov, data->n_iov, data->len, req->append,
                      req->mode & 01777, &resp->bytes_written, err);
        if (r == 0) {
                sb_count_file_io(svc.reg, sb, 0, (uint64_t)resp->bytes_written);
                na_metrics_file_bytes(true, (uint64_t)resp->bytes_written);
        }
        close_workspace(sb, &root);
        return r;
}

static int h_list_files(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Nodeagent__V1__ListFilesRequest *req = (const void *)req_msg;
        Compute__V1__ListFilesResponse *resp = (void *)resp_msg;
        ws_entry *entries = NULL;
        size_t n = 0;
        bool truncated = false;
        sandbox *sb;
        ws_root root;
        int r;

        (void)userdata;
        if (open_workspace(call, req->ref, &sb, &root, err) < 0)
                return -1;
        r = ws_list(&root, req->path, req->recursive, req->max_entries, &entries, &n, &truncated,
                    err);
        close_workspace(sb, &root);
        if (r < 0)
                return -1;
        resp->entries = rpc_call_alloc(call, n * sizeof(*resp->entries));
        for (size_t i = 0; i < n; i++) {
                Compute__V1__FileEntry *e = rpc_call_alloc(call, sizeof(*e));
                compute__v1__file_entry__init(e);
                e->path = rpc_call_strdup(call, entries[i].path);
                e->size = entries[i].size;
                e->is_dir = entries[i].is_dir;
                e->mode = entries[i].mode;
                e->modified_at = pb_timestamp(call, 1);
                e->modified_at->seconds = entries[i].mtime_sec;
                e->modified_at->nanos = entries[i].mtime_nsec;
                resp->entries[i] = e;
        }
        resp->n_entries = n;
        resp->truncated = truncated;
        ws_entries_free(entries, n);
        return 0;
}

/* --- no host path to a client --------------------------------------------------------- */

/* Host directories no error message may name to a client, beyond agent_service.host_dirs:
 * those of the node whatever the configuration (cgroups, /proc, the kubelet's and containerd's
 * trees, the default state directory). */
static const char *const builtin_host_dirs[] = { "/sys/fs/cgroup",   "/proc",
                                                 "/run/containerd",  "/var/lib/kubelet",
                                                 "/var/lib/compute", NULL };

/* Words of the runtime's own errors (runsc's stderr, its RPCs to the sentry and gofer). */
static const char *const runtime_internals[] = { "runsc", "urpc", "containerManager", "gofer",
                                                 NULL };

/* A message that quotes the runtime keeps what the agent said before the quote and says "the
 * sandbox runtime failed" instead: "cannot destroy sandbox X: /usr/bin/runsc: … urpc …"
 * becomes "cannot destroy sandbox X: the sandbox runtime failed". NULL when none is quoted. */
static char *hide_runtime_internals(const char *msg)
{
        const char *first = NULL, *cut = NULL;

        for (const char *const *w = runtime_internals; *w; w++) {
                const char *at = strstr(msg, *w);
                if (at && (!first || at < first))
                        first = at;
        }
        if (!first)
                return NULL;
        for (const char *p = msg; (p = strstr(p, ": ")) && p < first; p += 2)
                cut = p;
        if (!cut)
                return cs_xstrdup("the sandbox runtime failed");
        return cs_xasprintf("%.*s: the sandbox runtime failed", (int)(cut - msg), msg);
}

/* An error built deep in the agent (a bundle, a pid file, a cgroup directory, runsc's stderr)
 * must not tell a tenant how the node is laid out or what the runtime said inside: the
 * runtime's words are cut (hide_runtime_internals), host paths become CS_HIDDEN_PATH. The full
 * message is logged here, once, for the operator. */
static int hide_host_paths(rpc_call *call, int r, cs_error **err)
{
        char *hidden = NULL;

        if (r >= 0 || !err || !*err || !(*err)->msg)
                return r;
        hidden = hide_runtime_internals((*err)->msg);
        if (hidden) {
                rpc_call_log(call, CS_LOG_INFO, "runtime error hidden from the client: %s",
                             (*err)->msg);
                free((*err)->msg);
                (*err)->msg = hidden;
                hidden = NULL;
        }
        if (svc.host_dirs)
                hidden = cs_paths_hide((*err)->msg, svc.host_dirs);
        if (hidden) {
                char *again = cs_paths_hide(hidden, builtin_host_dirs);

                if (again) {
                        free(hidden);
                        hidden = again;
                }
        } else {
                hidden = cs_paths_hide((*err)->msg, builtin_host_dirs);
        }
        if (!hidden)
                return r;
        rpc_call_log(call, CS_LOG_INFO, "host paths hidden from the client in: %s", (*err)->msg);
        free((*err)->msg);
        (*err)->msg = hidden;
        return r;
}

/* The handler a method's userdata names (the wrappers below call it, then hide host paths). */
typedef struct handler {
        rpc_unary_fn unary;
        rpc_stream_fn stream;
} handler;

static int unary_hiding(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                        void *userdata, cs_error **err)
{
        const handler *h = userdata;

        return hide_host_paths(call, h->unary(call, req, resp, NULL, err), err);
}

static int stream_hiding(rpc_call *call, const ProtobufCMessage *req, void *userdata,
                         cs_error **err)
{
        const handler *h = userdata;

        return hide_host_paths(call, h->stream(call, req, NULL, err), err);
}

/* --- the method table ------------------------------------------------------------------ */

#define NA(name) "/nodeagent.v1.NodeAgent/" name
#define D(name)  &nodeagent__v1__##name##__descriptor
#define C(name)  &compute__v1__##name##__descriptor
#define UNARY(method, req, resp, fn, bytes_field)                                                  \
        {                                                                                          \
                NA(method), req, resp, unary_hiding, NULL, &(handler){ .unary = fn }, bytes_field  \
        }

static int bidi_hiding(rpc_call *call, void *userdata, cs_error **err)
{
        return hide_host_paths(call, h_exec_session(call, userdata, err), err);
}

static const rpc_bidi_method session_method = {
        NA("ExecSession"), D(exec_session_request), C(exec_event), bidi_hiding, NULL,
};

static const rpc_method methods[] = {
        UNARY("GetAgentInfo", D(get_agent_info_request), D(get_agent_info_response),
              h_get_agent_info, NULL),
        UNARY("CreateSandbox", D(create_sandbox_request), D(create_sandbox_response), h_create,
              NULL),
        UNARY("DestroySandbox", D(destroy_sandbox_request), D(destroy_sandbox_response), h_destroy,
              NULL),
        UNARY("GetSandbox", D(get_sandbox_request), D(get_sandbox_response), h_get, NULL),
        UNARY("ListSandboxes", D(list_sandboxes_request), D(list_sandboxes_response), h_list, NULL),
        { NA("Exec"), D(exec_request), C(exec_event), NULL, stream_hiding,
          &(handler){ .stream = h_exec }, NULL },
        UNARY("ReadFile", D(read_file_request), C(read_file_response), h_read_file, NULL),
        UNARY("WriteFile", D(write_file_request), C(write_file_response), h_write_file, "data"),
        UNARY("ListFiles", D(list_files_request), C(list_files_response), h_list_files, NULL),
        UNARY("GetUsage", D(get_usage_request), D(get_usage_response), h_get_usage, NULL),
};

int agent_service_register(rpc_server *srv, const agent_service *s, cs_error **err)
{
        svc = *s;
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
                if (rpc_server_add_method(srv, &methods[i], err) < 0)
                        return -1;
        }
        return rpc_server_add_bidi_method(srv, &session_method, err);
}
