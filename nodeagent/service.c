/* nodeagent.v1.NodeAgent: protobuf in, internal structs to the registry, exec and workspace
 * modules, protobuf out. The only file of the agent that includes generated headers.
 *
 * Both modes share everything past the lookup: a SandboxRef becomes a referenced registry
 * sandbox (local: sb_acquire by sandbox_id; kube: the pod's container found by kube_find and
 * attached with sb_attach), and exec, file I/O and usage run on that the same way. */
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
#include "path.h"
#include "pbconv.h"
#include "util.h"
#include "uuid.h"
#include "workspace_io.h"

/* How long Exec waits for a STARTING sandbox when the request does not say. */
#define SVC_DEFAULT_WAIT_READY_MS (60 * 1000)
#define SVC_LIST_PAGE_MAX         1000
#define SVC_LIST_PAGE_DEFAULT     500

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

/* The sandbox id a SandboxRef names (local mode). */
static const char *ref_id(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, cs_error **err)
{
        if (!ref) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "ref is missing");
                return NULL;
        }
        if (ref->pod && ((ref->pod->pod_name && ref->pod->pod_name[0]) ||
                         (ref->pod->pod_namespace && ref->pod->pod_namespace[0]))) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "this agent runs in local mode: name the sandbox by sandbox_id, "
                             "not by pod");
                return NULL;
        }
        if (!cs_uuid_valid(ref->sandbox_id)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
                return NULL;
        }
        rpc_call_set_sandbox_id(call, ref->sandbox_id);
        return ref->sandbox_id;
}

/* --- kube mode: from a pod reference to a registry sandbox ---------------------------- */

#define KUBE_NAME_MAX 253 /* Kubernetes names (DNS subdomain); uids and container names fit */

static bool kube_name_ok(const char *s, bool required)
{
        size_t n = s ? strlen(s) : 0;

        if (n == 0)
                return !required;
        if (n > KUBE_NAME_MAX)
                return false;
        for (; *s; s++) {
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                      (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' || *s == '_'))
                        return false;
        }
        return true;
}

/* Checks a kube-mode SandboxRef; fills *ret (strings borrowed) and the workspace mount path. */
static int kube_ref_check(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, kube_ref *ret,
                          const char **ret_mount_path, cs_error **err)
{
        const Nodeagent__V1__PodRef *pod = ref ? ref->pod : NULL;

        if (!pod || !pod->pod_namespace[0] || !pod->pod_name[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "this agent runs in kube mode: ref.pod with pod_namespace "
                                    "and pod_name is required");
        if (!kube_name_ok(pod->pod_namespace, true) || !kube_name_ok(pod->pod_name, true) ||
            !kube_name_ok(pod->pod_uid, false) || !kube_name_ok(pod->container_name, false))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "pod_namespace, pod_name, pod_uid and container_name must be "
                                    "Kubernetes names of at most %d characters",
                                    KUBE_NAME_MAX);
        if (ref->sandbox_id[0]) {
                if (!cs_uuid_valid(ref->sandbox_id))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "sandbox_id is not a valid UUID");
                rpc_call_set_sandbox_id(call, ref->sandbox_id);
        }
        if (!kube_namespace_served(svc.kube, pod->pod_namespace))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                                    "pods of namespace %s are not served by this agent "
                                    "(--pod-namespaces)",
                                    pod->pod_namespace);
        *ret_mount_path = pod->mount_path[0] ? pod->mount_path : SB_DEFAULT_MOUNT_PATH;
        if (cs_mount_path_check(*ret_mount_path, err) < 0)
                return -1;
        *ret = (kube_ref){ .pod_namespace = pod->pod_namespace,
                           .pod_name = pod->pod_name,
                           .pod_uid = pod->pod_uid,
                           .container_name = pod->container_name };
        return 0;
}

static sb_status kube_status(rt_state st)
{
        switch (st) {
        case RT_RUNNING:
                return SB_READY;
        case RT_CREATED:
                return SB_STARTING;
        case RT_STOPPED:
                return SB_FAILED;
        default:
                return 0; /* not asked */
        }
}

/* The registry's sandbox for a found container, referenced. */
static int kube_attach(const kube_pod *pod, const char *mount_path, const char *label,
                       sandbox **ret, cs_error **err)
{
        _cleanup_free_ char *ws = kube_workspace_dir(svc.kube, pod, mount_path);
        sb_attach_spec spec;

        /* One registry entry per container and mount: a mount path the container does not
         * have (but the default one, which ListSandboxes uses) makes none. */
        if (!ws && strcmp(mount_path, SB_DEFAULT_MOUNT_PATH) != 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "the container has no volume mounted at %s: no workspace "
                                    "to reach",
                                    mount_path);
        spec = (sb_attach_spec){
                .container_id = pod->container_id,
                .mount_path = mount_path,
                .workspace_dir = ws ? ws : "",
                .cgroup_path = pod->pod_cgroup,
                .label = label,
                .image = pod->c.image,
                .host_pid = pod->pid,
                .created_at_ms = pod->created_ms,
                .cpu_millis = pod->c.cpu_millis,
                .memory_bytes = pod->c.memory_bytes,
                .status = kube_status(pod->state),
                .status_message = pod->state == RT_STOPPED ? "the container has exited" : "",
        };
        return sb_attach(svc.reg, &spec, ret, err);
}

/* Kube mode: the pod's container as a referenced sandbox. need_ready (exec): a created
 * container is waited for up to wait_ready_ms, a stopped one is FAILED_PRECONDITION. */
static int kube_acquire(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, bool need_ready,
                        int64_t wait_ready_ms, int cancel_fd, kube_pod *pod, sandbox **ret,
                        cs_error **err)
{
        const char *mount_path;
        kube_ref kr;
        int64_t deadline = cs_now_monotonic_ms() + wait_ready_ms;

        if (kube_ref_check(call, ref, &kr, &mount_path, err) < 0 ||
            kube_find(svc.kube, &kr, need_ready, pod, err) < 0)
                return -1;
        while (need_ready && pod->state == RT_CREATED) {
                if (cs_now_monotonic_ms() >= deadline) {
                        cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                     "pod %s/%s: container %s is still starting", kr.pod_namespace,
                                     kr.pod_name, pod->container_id);
                        goto fail;
                }
                if (cs_fd_readable(cancel_fd)) {
                        cs_error_set(err, GRPC_STATUS_CANCELLED, "cancelled while waiting");
                        goto fail;
                }
                usleep(100 * 1000);
                if (svc.rt->ops->state(svc.rt, pod->container_id, &pod->state, NULL, err) < 0)
                        goto fail;
        }
        if (need_ready && pod->state != RT_RUNNING) {
                cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                             "pod %s/%s: container %s is not running (%s)", kr.pod_namespace,
                             kr.pod_name, pod->container_id,
                             pod->state == RT_ABSENT ? "gone" : "exited");
                goto fail;
        }
        if (kube_attach(pod, mount_path, ref->sandbox_id, ret, err) < 0)
                goto fail;
        return 0;
fail:
        kube_pod_clear(pod);
        return -1;
}

/* Either mode: the sandbox a ref names, referenced (release with sb_release). */
static int acquire(rpc_call *call, const Nodeagent__V1__SandboxRef *ref, bool need_ready,
                   int64_t wait_ready_ms, int cancel_fd, sandbox **ret, cs_error **err)
{
        const char *id;

        if (svc.kube) {
                kube_pod pod = { 0 };
                if (kube_acquire(call, ref, need_ready, wait_ready_ms, cancel_fd, &pod, ret, err) <
                    0)
                        return -1;
                kube_pod_clear(&pod);
                return 0;
        }
        id = ref_id(call, ref, err);
        if (!id)
                return -1;
        return sb_acquire(svc.reg, id, need_ready, wait_ready_ms, cancel_fd, ret, err);
}

/* The PodRef a kube snapshot reports: the pod as found, with uid and container name. */
static Nodeagent__V1__PodRef *pod_to_pb(rpc_call *call, const kube_pod *pod, const char *mount_path)
{
        Nodeagent__V1__PodRef *m = rpc_call_alloc(call, sizeof(*m));

        nodeagent__v1__pod_ref__init(m);
        m->pod_namespace = rpc_call_strdup(call, pod->c.pod_namespace);
        m->pod_name = rpc_call_strdup(call, pod->c.pod_name);
        m->pod_uid = rpc_call_strdup(call, pod->c.pod_uid);
        m->container_name = rpc_call_strdup(call, pod->c.container_name);
        m->mount_path = rpc_call_strdup(call, mount_path);
        return m;
}

/* Kube mode: one pod's SandboxInfo, with live status and usage. */
static int kube_describe(rpc_call *call, const Nodeagent__V1__SandboxRef *ref,
                         Nodeagent__V1__SandboxInfo **ret, cs_error **err)
{
        kube_pod pod = { 0 };
        sandbox *sb;
        sb_info info = { 0 };
        const char *mount_path;
        kube_ref kr;

        /* With the state (one runsc state): GetSandbox and GetUsage report it. */
        if (kube_ref_check(call, ref, &kr, &mount_path, err) < 0 ||
            kube_find(svc.kube, &kr, true, &pod, err) < 0)
                return -1;
        if (kube_attach(&pod, mount_path, ref->sandbox_id, &sb, err) < 0) {
                kube_pod_clear(&pod);
                return -1;
        }
        sb_snapshot(svc.reg, sb, &info);
        sb_release(svc.reg, sb);
        free(info.id);
        info.id = cs_xstrdup(ref->sandbox_id); /* the call's, not the entry's first label */
        *ret = info_to_pb(call, &info);
        (*ret)->pod = pod_to_pb(call, &pod, mount_path);
        sb_info_clear(&info);
        kube_pod_clear(&pod);
        return 0;
}

static const char kube_no_create[] =
        "CreateSandbox is not available in kube mode: the frontend creates the pod through the "
        "Kubernetes API server";
static const char kube_no_destroy[] =
        "DestroySandbox is not available in kube mode: the frontend deletes the pod (read the "
        "final usage with GetUsage first)";

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
        resp->mode = svc.kube ? NODEAGENT__V1__AGENT_MODE__AGENT_MODE_KUBE
                              : NODEAGENT__V1__AGENT_MODE__AGENT_MODE_LOCAL;
        resp->runtime = (char *)svc.rt->ops->name;
        resp->runtime_version = (char *)svc.runtime_version;
        resp->cgroup_version = svc.cg->version == CGROUP_V2 ? "v2" : "v1";
        resp->started_at = pb_timestamp(call, svc.started_at_ms);
        resp->max_sandboxes = svc.max_sandboxes;
        sb_counts(svc.reg, &resp->sandboxes_live, &resp->sandboxes_ready,
                  &resp->sandboxes_destroyed, &resp->execs_running);
        resp->cpu_millis_capacity = svc.cpu_millis_capacity;
        resp->memory_bytes_capacity = svc.memory_bytes_capacity;
        if (svc.kube) {
                /* The pods on this node, as the runsc root shows them now. A failure to list
                 * leaves the counts at 0: this call is the link's readiness probe. */
                kube_pod *pods = NULL;
                cs_error *lerr = NULL;

                resp->max_sandboxes = 0;
                resp->sandboxes_live = resp->sandboxes_ready = resp->sandboxes_destroyed = 0;
                if (kube_list(svc.kube, "", &pods, &n, &lerr) < 0) {
                        rpc_call_log(call, CS_LOG_WARN, "cannot list the pods: %s", lerr->msg);
                        cs_error_free(lerr);
                        return 0;
                }
                for (size_t i = 0; i < n; i++) {
                        resp->sandboxes_live++;
                        resp->sandboxes_ready += pods[i].state == RT_RUNNING;
                        resp->cpu_millis_allocated += pods[i].c.cpu_millis;
                        resp->memory_bytes_allocated += pods[i].c.memory_bytes;
                }
                kube_pods_free(pods, n);
                return 0;
        }
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
        if (svc.kube)
                return cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED, "%s", kube_no_create);
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
        const char *id;
        int64_t grace = req->grace ? pb_duration_ms(req->grace) : -1;
        sb_info info = { 0 };

        (void)userdata;
        if (svc.kube)
                return cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED, "%s", kube_no_destroy);
        id = ref_id(call, req->ref, err);
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

/* The sandbox a ref names, as the agent reports it (kube: found from the runsc root; local:
 * the record). Allocated in the call. */
static int describe(rpc_call *call, const Nodeagent__V1__SandboxRef *ref,
                    Nodeagent__V1__SandboxInfo **ret, cs_error **err)
{
        const char *id;
        sb_info info = { 0 };

        if (svc.kube)
                return kube_describe(call, ref, ret, err);
        id = ref_id(call, ref, err);
        if (!id || sb_describe(svc.reg, id, &info, err) < 0)
                return -1;
        *ret = info_to_pb(call, &info);
        sb_info_clear(&info);
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

/* ListSandboxes' page_size: 0 is the default, anything above the cap is the cap. */
static size_t list_page_size(uint32_t asked)
{
        if (!asked)
                return SVC_LIST_PAGE_DEFAULT;
        return asked < SVC_LIST_PAGE_MAX ? asked : SVC_LIST_PAGE_MAX;
}

/* Kube mode: every pod's sandbox container on this node, ordered by (namespace, name,
 * container id); the page token is the last of those returned, "namespace/name/id". */
static int kube_list_sandboxes(rpc_call *call, const Nodeagent__V1__ListSandboxesRequest *req,
                               Nodeagent__V1__ListSandboxesResponse *resp, cs_error **err)
{
        size_t page = list_page_size(req->page_size);
        _cleanup_free_ char *token = NULL;
        char *after[3] = { NULL, NULL, NULL };
        kube_pod *pods = NULL;
        size_t n = 0, start = 0, count;

        if (req->page_token[0]) {
                char *save = NULL, *part;
                size_t k = 0;
                token = cs_xstrdup(req->page_token);
                for (part = strtok_r(token, "/", &save); part && k < 3;
                     part = strtok_r(NULL, "/", &save))
                        after[k++] = part;
                if (k != 3 || part || strlen(req->page_token) > 3 * 300)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "page_token is not one this agent gave");
        }
        if (kube_list(svc.kube, "", &pods, &n, err) < 0)
                return -1;
        if (after[0]) {
                while (start < n) {
                        const kube_pod *p = &pods[start];
                        int c = strcmp(p->c.pod_namespace, after[0]);
                        if (!c)
                                c = strcmp(p->c.pod_name, after[1]);
                        if (!c)
                                c = strcmp(p->container_id, after[2]);
                        if (c > 0)
                                break;
                        start++;
                }
        }
        count = n - start < page ? n - start : page;
        resp->sandboxes = rpc_call_alloc(call, (count + 1) * sizeof(*resp->sandboxes));
        for (size_t i = 0; i < count; i++) {
                const kube_pod *p = &pods[start + i];
                sandbox *sb;
                sb_info info = { 0 };

                if (kube_attach(p, SB_DEFAULT_MOUNT_PATH, "", &sb, err) < 0) {
                        kube_pods_free(pods, n);
                        return -1;
                }
                sb_snapshot(svc.reg, sb, &info);
                sb_release(svc.reg, sb);
                free(info.id);
                info.id = cs_xstrdup("");
                resp->sandboxes[resp->n_sandboxes] = info_to_pb(call, &info);
                resp->sandboxes[resp->n_sandboxes]->pod = pod_to_pb(call, p, SB_DEFAULT_MOUNT_PATH);
                resp->n_sandboxes++;
                sb_info_clear(&info);
        }
        if (start + count < n && count > 0) {
                const kube_pod *last = &pods[start + count - 1];
                char *t = cs_xasprintf("%s/%s/%s", last->c.pod_namespace, last->c.pod_name,
                                       last->container_id);
                resp->next_page_token = rpc_call_strdup(call, t);
                free(t);
        }
        kube_pods_free(pods, n);
        return 0;
}

static int h_list(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                  void *userdata, cs_error **err)
{
        const Nodeagent__V1__ListSandboxesRequest *req = (const void *)req_msg;
        Nodeagent__V1__ListSandboxesResponse *resp = (void *)resp_msg;
        size_t page = list_page_size(req->page_size);
        size_t offset = 0, n = 0;
        sb_info *infos = NULL;
        char *end = NULL;

        (void)userdata;
        if (svc.kube)
                return kube_list_sandboxes(call, req, resp, err);
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

static int h_exec(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata, cs_error **err)
{
        const Nodeagent__V1__ExecRequest *req = (const void *)req_msg;
        int64_t wait_ready = pb_duration_ms(req->wait_ready_timeout);
        int64_t timeout = pb_duration_ms(req->timeout);
        exec_sink sink = { .write = sink_write, .userdata = call };
        exec_result res = { 0 };
        exec_request er;
        char **keys, **values;
        sandbox *sb = NULL;
        int r;

        (void)userdata;
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
        if (acquire(call, req->ref, true, wait_ready ? wait_ready : SVC_DEFAULT_WAIT_READY_MS,
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
        if (svc.kube)
                fd = kube_open_workspace(svc.kube, sb_workspace_dir(*ret_sb), err);
        else if ((fd = open(sb_workspace_dir(*ret_sb), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
                cs_error_errno(err, errno, "cannot open the workspace");
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
        if (r == 0)
                sb_count_file_io(svc.reg, sb, rr.len, 0);
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
          &nodeagent__v1__get_agent_info_response__descriptor, h_get_agent_info, NULL, NULL, NULL },
        { NA("CreateSandbox"), &nodeagent__v1__create_sandbox_request__descriptor,
          &nodeagent__v1__create_sandbox_response__descriptor, h_create, NULL, NULL, NULL },
        { NA("DestroySandbox"), &nodeagent__v1__destroy_sandbox_request__descriptor,
          &nodeagent__v1__destroy_sandbox_response__descriptor, h_destroy, NULL, NULL, NULL },
        { NA("GetSandbox"), &nodeagent__v1__get_sandbox_request__descriptor,
          &nodeagent__v1__get_sandbox_response__descriptor, h_get, NULL, NULL, NULL },
        { NA("ListSandboxes"), &nodeagent__v1__list_sandboxes_request__descriptor,
          &nodeagent__v1__list_sandboxes_response__descriptor, h_list, NULL, NULL, NULL },
        { NA("Exec"), &nodeagent__v1__exec_request__descriptor,
          &compute__v1__exec_event__descriptor, NULL, h_exec, NULL, NULL },
        { NA("ReadFile"), &nodeagent__v1__read_file_request__descriptor,
          &compute__v1__read_file_response__descriptor, h_read_file, NULL, NULL, NULL },
        { NA("WriteFile"), &nodeagent__v1__write_file_request__descriptor,
          &compute__v1__write_file_response__descriptor, h_write_file, NULL, NULL, "data" },
        { NA("ListFiles"), &nodeagent__v1__list_files_request__descriptor,
          &compute__v1__list_files_response__descriptor, h_list_files, NULL, NULL, NULL },
        { NA("GetUsage"), &nodeagent__v1__get_usage_request__descriptor,
          &nodeagent__v1__get_usage_response__descriptor, h_get_usage, NULL, NULL, NULL },
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
