/* nodeagent.v1.NodeAgent: protobuf in, internal structs to the registry, exec and workspace
 * modules, protobuf out. The only file of the agent that includes generated headers. */
#include "service.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute/v1/compute.pb-c.h"
#include "exec.h"
#include "nodeagent/v1/nodeagent.pb-c.h"
#include "pbconv.h"
#include "util.h"
#include "uuid.h"
#include "workspace_io.h"

/* How long Exec waits for a STARTING sandbox when the request does not say. */
#define SVC_DEFAULT_WAIT_READY_MS (60 * 1000)
#define SVC_LIST_PAGE_MAX         1000

static agent_service svc;

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
        return m;
}

/* The sandbox id a SandboxRef names. Kube pod references need the kube discovery, which this
 * agent does not run. */
static const char *ref_id(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, cs_error **err)
{
        if (!ref) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "ref is missing");
                return NULL;
        }
        if (ref->pod && ref->pod->pod_name && ref->pod->pod_name[0]) {
                cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED,
                             "pod references need an agent in kube mode; this one is local");
                return NULL;
        }
        if (!cs_uuid_valid(ref->sandbox_id)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
                return NULL;
        }
        rpc_call_set_sandbox_id(call, ref->sandbox_id);
        return ref->sandbox_id;
}

/* --- lifecycle ------------------------------------------------------------------------- */

static int h_get_agent_info(rpc_call *call, const ProtobufCMessage *req_msg,
                            ProtobufCMessage *resp_msg, void *userdata, cs_error **err)
{
        Nodeagent__V1__GetAgentInfoResponse *resp = (void *)resp_msg;
        sb_info *infos = NULL;
        size_t n = 0;

        (void)req_msg;
        (void)userdata;
        resp->node_name = (char *)svc.node_name;
        resp->agent_version = (char *)svc.version;
        resp->mode = NODEAGENT__V1__AGENT_MODE__AGENT_MODE_LOCAL;
        resp->runtime = (char *)svc.rt->ops->name;
        resp->runtime_version = (char *)svc.runtime_version;
        resp->cgroup_version = svc.cg->version == CGROUP_V2 ? "v2" : "v1";
        resp->started_at = pb_timestamp(call, svc.started_at_ms);
        resp->max_sandboxes = svc.max_sandboxes;
        sb_counts(svc.reg, &resp->sandboxes_live, &resp->sandboxes_ready,
                  &resp->sandboxes_destroyed, &resp->execs_running);
        resp->cpu_millis_capacity = svc.cpu_millis_capacity;
        resp->memory_bytes_capacity = svc.memory_bytes_capacity;
        if (sb_list(svc.reg, false, &infos, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                resp->cpu_millis_allocated += infos[i].cpu_millis;
                resp->memory_bytes_allocated += infos[i].memory_bytes;
        }
        sb_infos_free(infos, n);
        return 0;
}

static int h_create(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                    void *userdata, cs_error **err)
{
        const Nodeagent__V1__CreateSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__CreateSandboxResponse *resp = (void *)resp_msg;
        int64_t max_runtime = pb_duration_ms(req->max_runtime);
        sb_info info = { 0 };
        bool created = false;
        sb_spec spec = {
                .id = req->sandbox_id,
                .tenant_id = req->tenant_id,
                .session_id = req->session_id,
                .image = req->image,
                .mount_path = req->mount_path,
                .cpu_millis = req->cpu_millis,
                .memory_bytes = req->memory_bytes,
                .max_runtime_ms = max_runtime,
        };

        (void)userdata;
        rpc_call_set_sandbox_id(call, req->sandbox_id);
        if (max_runtime < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "max_runtime is negative");
        if (sb_create(svc.reg, &spec, &info, &created, err) < 0)
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
        const char *id = ref_id(call, req->ref, err);
        int64_t grace = req->grace ? pb_duration_ms(req->grace) : -1;
        sb_info info = { 0 };

        (void)userdata;
        if (!id)
                return -1;
        if (req->grace && grace < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "grace is negative");
        if (sb_destroy(svc.reg, id, grace, &info, err) < 0)
                return -1;
        resp->sandbox = info_to_pb(call, &info);
        sb_info_clear(&info);
        return 0;
}

static int h_get(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                 void *userdata, cs_error **err)
{
        const Nodeagent__V1__GetSandboxRequest *req = (const void *)req_msg;
        Nodeagent__V1__GetSandboxResponse *resp = (void *)resp_msg;
        const char *id = ref_id(call, req->ref, err);
        sb_info info = { 0 };

        (void)userdata;
        if (!id || sb_describe(svc.reg, id, &info, err) < 0)
                return -1;
        resp->sandbox = info_to_pb(call, &info);
        sb_info_clear(&info);
        return 0;
}

static int h_list(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                  void *userdata, cs_error **err)
{
        const Nodeagent__V1__ListSandboxesRequest *req = (const void *)req_msg;
        Nodeagent__V1__ListSandboxesResponse *resp = (void *)resp_msg;
        size_t page = req->page_size && req->page_size < SVC_LIST_PAGE_MAX ? req->page_size
                                                                           : SVC_LIST_PAGE_MAX;
        size_t offset = 0, n = 0;
        sb_info *infos = NULL;
        char *end = NULL;

        (void)userdata;
        if (req->page_token[0]) {
                unsigned long long v = strtoull(req->page_token, &end, 10);
                if (!end || *end || v > 1000000)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "page_token is not one this agent gave");
                offset = (size_t)v;
        }
        if (sb_list(svc.reg, req->include_destroyed, &infos, &n, err) < 0)
                return -1;
        if (offset < n) {
                size_t count = n - offset < page ? n - offset : page;
                resp->sandboxes = rpc_call_alloc(call, count * sizeof(*resp->sandboxes));
                for (size_t i = 0; i < count; i++)
                        resp->sandboxes[i] = info_to_pb(call, &infos[offset + i]);
                resp->n_sandboxes = count;
                if (offset + count < n) {
                        char token[32];
                        snprintf(token, sizeof(token), "%zu", offset + count);
                        resp->next_page_token = rpc_call_strdup(call, token);
                }
        }
        sb_infos_free(infos, n);
        return 0;
}

static int h_get_usage(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                       void *userdata, cs_error **err)
{
        const Nodeagent__V1__GetUsageRequest *req = (const void *)req_msg;
        Nodeagent__V1__GetUsageResponse *resp = (void *)resp_msg;
        const char *id = ref_id(call, req->ref, err);
        sb_info info = { 0 };

        (void)userdata;
        if (!id || sb_describe(svc.reg, id, &info, err) < 0)
                return -1;
        resp->sandbox_id = rpc_call_strdup(call, info.id);
        resp->status = (Compute__V1__SandboxStatus)info.status;
        resp->usage = pb_usage(call, &info.usage);
        resp->measured_at = pb_timestamp(call, cs_now_realtime_ms());
        sb_info_clear(&info);
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

static int h_exec(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata, cs_error **err)
{
        const Nodeagent__V1__ExecRequest *req = (const void *)req_msg;
        const char *id = ref_id(call, req->ref, err);
        int64_t wait_ready = pb_duration_ms(req->wait_ready_timeout);
        int64_t timeout = pb_duration_ms(req->timeout);
        exec_sink sink = { .write = sink_write, .userdata = call };
        exec_result res = { 0 };
        exec_request er;
        char **keys, **values;
        sandbox *sb = NULL;
        int r;

        (void)userdata;
        if (!id)
                return -1;
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
                             .timeout_ms = timeout };
        if (exec_validate(&er, err) < 0)
                return -1;
        if (sb_acquire(svc.reg, id, true, wait_ready ? wait_ready : SVC_DEFAULT_WAIT_READY_MS,
                       rpc_call_cancel_fd(call), &sb, err) < 0)
                return -1;
        sink.cancel_fd = rpc_call_cancel_fd(call);
        r = exec_run(svc.reg, svc.rt, sb, &er, &sink, &res, err);
        sb_release(svc.reg, sb);
        if (r < 0)
                return -1;
        rpc_call_log(call, CS_LOG_DEBUG, "exec %s: exit %d signal %d%s%s%s in %" PRId64 " ms",
                     req->command, res.exit_code, res.signal, res.cancelled ? " cancelled" : "",
                     res.timed_out ? " timed out" : "", res.oom_killed ? " OOM" : "", res.wall_ms);
        /* The last event, always; if the client is gone it fails quietly. */
        return send_completed(call, &res, err);
}

/* --- workspace files ------------------------------------------------------------------- */

/* Acquires the sandbox and opens its workspace root. */
static int open_workspace(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, sandbox **ret_sb,
                          ws_root *ret_root, cs_error **err)
{
        const char *id = ref_id(call, ref, err);
        int fd;

        if (!id || sb_acquire(svc.reg, id, false, 0, -1, ret_sb, err) < 0)
                return -1;
        fd = open(sb_workspace_dir(*ret_sb), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                cs_error_errno(err, errno, "cannot open the workspace");
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
        if (r == 0)
                sb_count_file_io(svc.reg, sb, rr.len, 0);
        close_workspace(sb, &root);
        if (r < 0)
                return -1;
        /* The response points at the data, freed once it has been sent: no copy. */
        rpc_call_defer(call, free, rr.data);
        resp->data.data = rr.data;
        resp->data.len = rr.len;
        resp->total_size = rr.total_size;
        resp->eof = rr.eof;
        return 0;
}

static int h_write_file(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Nodeagent__V1__WriteFileRequest *req = (const void *)req_msg;
        Compute__V1__WriteFileResponse *resp = (void *)resp_msg;
        sandbox *sb;
        ws_root root;
        int r;

        (void)userdata;
        if (req->data.len > WS_DATA_MAX)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "data of %zu bytes is over the %u-byte cap per call; "
                                    "write in chunks with append",
                                    req->data.len, WS_DATA_MAX);
        if (open_workspace(call, req->ref, &sb, &root, err) < 0)
                return -1;
        /* No set-id bits: the agent runs as root and files it creates are root's. */
        r = ws_write(&root, req->path, req->data.data, req->data.len, req->append,
                     req->mode & 01777, &resp->bytes_written, err);
        if (r == 0)
                sb_count_file_io(svc.reg, sb, 0, (uint64_t)resp->bytes_written);
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

/* --- the method table ------------------------------------------------------------------ */

#define NA(name) "/nodeagent.v1.NodeAgent/" name

static const rpc_method methods[] = {
        { NA("GetAgentInfo"), &nodeagent__v1__get_agent_info_request__descriptor,
          &nodeagent__v1__get_agent_info_response__descriptor, h_get_agent_info, NULL, NULL },
        { NA("CreateSandbox"), &nodeagent__v1__create_sandbox_request__descriptor,
          &nodeagent__v1__create_sandbox_response__descriptor, h_create, NULL, NULL },
        { NA("DestroySandbox"), &nodeagent__v1__destroy_sandbox_request__descriptor,
          &nodeagent__v1__destroy_sandbox_response__descriptor, h_destroy, NULL, NULL },
        { NA("GetSandbox"), &nodeagent__v1__get_sandbox_request__descriptor,
          &nodeagent__v1__get_sandbox_response__descriptor, h_get, NULL, NULL },
        { NA("ListSandboxes"), &nodeagent__v1__list_sandboxes_request__descriptor,
          &nodeagent__v1__list_sandboxes_response__descriptor, h_list, NULL, NULL },
        { NA("Exec"), &nodeagent__v1__exec_request__descriptor,
          &compute__v1__exec_event__descriptor, NULL, h_exec, NULL },
        { NA("ReadFile"), &nodeagent__v1__read_file_request__descriptor,
          &compute__v1__read_file_response__descriptor, h_read_file, NULL, NULL },
        { NA("WriteFile"), &nodeagent__v1__write_file_request__descriptor,
          &compute__v1__write_file_response__descriptor, h_write_file, NULL, NULL },
        { NA("ListFiles"), &nodeagent__v1__list_files_request__descriptor,
          &compute__v1__list_files_response__descriptor, h_list_files, NULL, NULL },
        { NA("GetUsage"), &nodeagent__v1__get_usage_request__descriptor,
          &nodeagent__v1__get_usage_response__descriptor, h_get_usage, NULL, NULL },
};

int agent_service_register(rpc_server *srv, const agent_service *s, cs_error **err)
{
        svc = *s;
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
                if (rpc_server_add_method(srv, &methods[i], err) < 0)
                        return -1;
        }
        return 0;
}
