/* The kube sandbox source (see source.h): a pod's gVisor container, found under the kubelet's
 * runsc root by the kube finder (kube.c) and attached to the registry (sb_attach), which then
 * holds only that container's accounting. The kubelet creates and removes the containers:
 * CreateSandbox and DestroySandbox are UNIMPLEMENTED here.
 *
 * Owns: the kube mode's checks of a pod reference (names, served namespaces, mount path), the
 * wait for a created container to run, and its page tokens (the last pod listed).
 * May touch: the finder, the registry's public API and the runtime's state query. No lock of
 * its own: the finder and the registry lock themselves. */
#include "source.h"

#include <string.h>
#include <unistd.h>

#include "path.h"
#include "util.h"
#include "uuid.h"

#define KUBE_NAME_MAX 253 /* Kubernetes names (DNS subdomain); uids and container names fit */

/* How often a created container's state is read again while an exec waits for it. */
#define KUBE_READY_POLL_US (100 * 1000)

typedef struct source_kube {
        source base;
        kube_finder *kf;
        sb_registry *reg;
        runtime *rt;
} source_kube;

static source_kube *kube_of(source *s)
{
        return (source_kube *)s;
}

static const char kube_no_create[] =
        "CreateSandbox is not available in kube mode: the frontend creates the pod through the "
        "Kubernetes API server";
static const char kube_no_destroy[] =
        "DestroySandbox is not available in kube mode: the frontend deletes the pod (read the "
        "final usage with GetUsage first)";

static bool kube_name_ok(const char *s, bool required)
{
        size_t n = strlen(s);

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

/* Checks a pod reference; fills *ret (strings borrowed from ref) and the mount path. */
static int ref_check(source_kube *k, const src_call *c, const src_ref *ref, kube_ref *ret,
                     const char **ret_mount_path, cs_error **err)
{
        if (!ref || !ref->pod_namespace[0] || !ref->pod_name[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "this agent runs in kube mode: ref.pod with pod_namespace "
                                    "and pod_name is required");
        if (!kube_name_ok(ref->pod_namespace, true) || !kube_name_ok(ref->pod_name, true) ||
            !kube_name_ok(ref->pod_uid, false) || !kube_name_ok(ref->container_name, false))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "pod_namespace, pod_name, pod_uid and container_name must be "
                                    "Kubernetes names of at most %d characters",
                                    KUBE_NAME_MAX);
        if (ref->sandbox_id[0]) {
                if (!cs_uuid_valid(ref->sandbox_id))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "sandbox_id is not a valid UUID");
                if (c && c->set_sandbox_id)
                        c->set_sandbox_id(c->userdata, ref->sandbox_id);
        }
        if (!kube_namespace_served(k->kf, ref->pod_namespace))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                                    "pods of namespace %s are not served by this agent "
                                    "(--pod-namespaces)",
                                    ref->pod_namespace);
        *ret_mount_path = ref->mount_path[0] ? ref->mount_path : CS_DEFAULT_MOUNT_PATH;
        if (cs_mount_path_check(*ret_mount_path, err) < 0)
                return -1;
        *ret = (kube_ref){ .pod_namespace = ref->pod_namespace,
                           .pod_name = ref->pod_name,
                           .pod_uid = ref->pod_uid,
                           .container_name = ref->container_name };
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
static int attach(source_kube *k, const kube_pod *pod, const char *mount_path, const char *label,
                  sandbox **ret, cs_error **err)
{
        _cleanup_free_ char *ws = kube_workspace_dir(k->kf, pod, mount_path);
        _cleanup_free_ char *spawner = kube_spawner_dir(k->kf, pod);
        sb_attach_spec spec;

        /* One registry entry per container and mount: a mount path the container does not
         * have (but the default one, which ListSandboxes uses) makes none. */
        if (!ws && strcmp(mount_path, CS_DEFAULT_MOUNT_PATH) != 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "the container has no volume mounted at %s: no workspace "
                                    "to reach",
                                    mount_path);
        spec = (sb_attach_spec){
                .container_id = pod->container_id,
                .mount_path = mount_path,
                .workspace_dir = ws ? ws : "",
                .spawner_dir = spawner,
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
        return sb_attach(k->reg, &spec, ret, err);
}

/* Waits up to deadline (monotonic) for a created container to run; pod->state is updated. */
static int wait_running(source_kube *k, const src_call *c, const kube_ref *kr, kube_pod *pod,
                        int64_t deadline, cs_error **err)
{
        while (pod->state == RT_CREATED) {
                if (cs_now_monotonic_ms() >= deadline)
                        return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                            "pod %s/%s: container %s is still starting",
                                            kr->pod_namespace, kr->pod_name, pod->container_id);
                if (cs_fd_readable(c ? c->cancel_fd : -1))
                        return cs_error_set(err, GRPC_STATUS_CANCELLED, "cancelled while waiting");
                usleep(KUBE_READY_POLL_US);
                if (k->rt->ops->state(k->rt, pod->container_id, &pod->state, NULL, err) < 0)
                        return -1;
        }
        if (pod->state != RT_RUNNING)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "pod %s/%s: container %s is not running (%s)",
                                    kr->pod_namespace, kr->pod_name, pod->container_id,
                                    pod->state == RT_ABSENT ? "gone" : "exited");
        return 0;
}

static int kube_acquire(source *s, const src_call *c, const src_ref *ref, bool need_ready,
                        int64_t wait_ready_ms, sandbox **ret, cs_error **err)
{
        source_kube *k = kube_of(s);
        int64_t deadline = cs_now_monotonic_ms() + wait_ready_ms;
        kube_pod pod = { 0 };
        const char *mount_path;
        kube_ref kr;
        int r;

        if (ref_check(k, c, ref, &kr, &mount_path, err) < 0 ||
            kube_find(k->kf, &kr, need_ready, &pod, err) < 0)
                return -1;
        r = need_ready ? wait_running(k, c, &kr, &pod, deadline, err) : 0;
        if (r == 0)
                r = attach(k, &pod, mount_path, ref->sandbox_id, ret, err);
        kube_pod_clear(&pod);
        return r;
}

static int kube_open(source *s, const char *workspace_dir, cs_error **err)
{
        return kube_open_workspace(kube_of(s)->kf, workspace_dir, err);
}

/* The pod a snapshot reports: as found, with uid and container name. */
static src_pod pod_copy(const kube_pod *pod, const char *mount_path)
{
        return (src_pod){ .pod_namespace = cs_xstrdup(pod->c.pod_namespace),
                          .pod_name = cs_xstrdup(pod->c.pod_name),
                          .pod_uid = cs_xstrdup(pod->c.pod_uid),
                          .container_name = cs_xstrdup(pod->c.container_name),
                          .mount_path = cs_xstrdup(mount_path) };
}

/* A found container's entry: attached, snapshotted (live usage), labelled `label`. */
static int entry_of(source_kube *k, const kube_pod *pod, const char *mount_path, const char *label,
                    src_entry *ret, cs_error **err)
{
        sandbox *sb;

        if (attach(k, pod, mount_path, label, &sb, err) < 0)
                return -1;
        *ret = (src_entry){ 0 };
        sb_snapshot(k->reg, sb, &ret->info);
        sb_release(k->reg, sb);
        free(ret->info.id);
        ret->info.id = cs_xstrdup(label); /* the call's, not the entry's first label */
        ret->pod = pod_copy(pod, mount_path);
        return 0;
}

static int kube_describe(source *s, const src_call *c, const src_ref *ref, src_entry *ret,
                         cs_error **err)
{
        source_kube *k = kube_of(s);
        kube_pod pod = { 0 };
        const char *mount_path;
        kube_ref kr;
        int r;

        /* With the state (one runsc state): GetSandbox and GetUsage report it. */
        if (ref_check(k, c, ref, &kr, &mount_path, err) < 0 ||
            kube_find(k->kf, &kr, true, &pod, err) < 0)
                return -1;
        r = entry_of(k, &pod, mount_path, ref->sandbox_id, ret, err);
        kube_pod_clear(&pod);
        return r;
}

/* Every pod's sandbox container on this node, ordered by (namespace, name, container id);
 * the page token is the last of those returned, "namespace/name/id". */
static int kube_list_page(source *s, const src_page *page, src_entry **ret, size_t *ret_n,
                          char **ret_next_token, cs_error **err)
{
        source_kube *k = kube_of(s);
        src_pod_key key;
        kube_pod *pods = NULL;
        src_entry *out;
        size_t n = 0, start, count;

        if (src_pod_key_parse(page->token, &key, err) < 0)
                return -1;
        if (kube_list(k->kf, "", &pods, &n, err) < 0) {
                free(key.buf);
                return -1;
        }
        start = src_pod_key_start(pods, n, &key);
        free(key.buf);
        count = src_page_count(n, start, page->size);
        out = cs_xcalloc(count ? count : 1, sizeof(*out));
        for (size_t i = 0; i < count; i++) {
                if (entry_of(k, &pods[start + i], CS_DEFAULT_MOUNT_PATH, "", &out[i], err) < 0) {
                        src_entries_free(out, i);
                        kube_pods_free(pods, n);
                        return -1;
                }
        }
        *ret_next_token = NULL;
        if (start + count < n && count > 0) {
                const kube_pod *last = &pods[start + count - 1];
                *ret_next_token = cs_xasprintf("%s/%s/%s", last->c.pod_namespace, last->c.pod_name,
                                               last->container_id);
        }
        *ret = out;
        *ret_n = count;
        kube_pods_free(pods, n);
        return 0;
}

/* The pods on this node, as the runsc root shows them now. A failure to list leaves the
 * counts at 0 and is reported as partial: the call still answers. */
static int kube_counts(source *s, src_counts *ret, cs_error **err)
{
        source_kube *k = kube_of(s);
        uint32_t unused;
        kube_pod *pods = NULL;
        size_t n = 0;

        (void)err;
        *ret = (src_counts){ 0 };
        sb_counts(k->reg, &unused, &unused, &unused, &ret->execs_running);
        if (kube_list(k->kf, "", &pods, &n, &ret->partial) < 0) {
                cs_error_prefix(&ret->partial, "cannot list the pods");
                return 0;
        }
        for (size_t i = 0; i < n; i++) {
                ret->live++;
                ret->ready += pods[i].state == RT_RUNNING;
                ret->cpu_millis_allocated += pods[i].c.cpu_millis;
                ret->memory_bytes_allocated += pods[i].c.memory_bytes;
        }
        kube_pods_free(pods, n);
        return 0;
}

static int kube_create(source *s, const src_call *c, const sb_spec *spec, sb_info *ret,
                       bool *ret_created, cs_error **err)
{
        (void)s, (void)c, (void)spec, (void)ret, (void)ret_created;
        return cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED, "%s", kube_no_create);
}

static int kube_destroy(source *s, const src_call *c, const src_ref *ref, const int64_t *grace_ms,
                        sb_info *ret, cs_error **err)
{
        (void)s, (void)c, (void)ref, (void)grace_ms, (void)ret;
        return cs_error_set(err, GRPC_STATUS_UNIMPLEMENTED, "%s", kube_no_destroy);
}

static void kube_free(source *s)
{
        source_kube *k = kube_of(s);

        kube_finder_free(k->kf);
        free(k);
}

static const source_ops kube_ops = {
        .name = "kube",
        .kind = SRC_KUBE,
        .create = kube_create,
        .destroy = kube_destroy,
        .acquire = kube_acquire,
        .open_workspace = kube_open,
        .describe = kube_describe,
        .list = kube_list_page,
        .counts = kube_counts,
        .free = kube_free,
};

source *source_kube_new(kube_finder *kf, sb_registry *reg, runtime *rt)
{
        source_kube *k = cs_xcalloc(1, sizeof(*k));

        k->base.ops = &kube_ops;
        k->kf = kf;
        k->reg = reg;
        k->rt = rt;
        return &k->base;
}
