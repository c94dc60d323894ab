/* The Kubernetes objects of a sandbox as plain JSON (see kube_objects.h): names, builders,
 * checks and readings. Owns nothing and keeps no state; touches only the JSON it builds. */
#include "kube_objects.h"

#include <ctype.h>
#include <stdlib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/sha.h>

#include "kube_client.h"
#include "listing.h"
#include "path.h"
#include "quantity.h"
#include "sandbox_limits.h"
#include "spawner_paths.h"
#include "usage_json.h"
#include "util.h"

#define KEEPALIVE         "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"
#define IMAGE_MAX         1024
#define STORAGE_CLASS_MAX 253

/* A valid label value: at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends
 * (tenant and session ids that are not are kept in the annotations only). */
static bool label_value_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
                return false;
        for (; *s; s++) {
                if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
                        return false;
        }
        return true;
}

/* "sbx-" and the first 16 bytes of sha256(tenant NUL session), in hex. The ids are printable
 * ASCII (the service checks), so the NUL keeps the key unambiguous: ("a/b", "c") and
 * ("a", "b/c") name different pods. */
void kobj_pod_name(const char *tenant, const char *session, char ret[static KOBJ_POD_NAME_LEN + 1])
{
        size_t nt = strlen(tenant), ns = strlen(session);
        _cleanup_free_ char *key = cs_xmalloc(nt + 1 + ns);
        uint8_t md[SHA256_DIGEST_LENGTH];

        memcpy(key, tenant, nt);
        key[nt] = '\0';
        memcpy(key + nt + 1, session, ns);
        SHA256((const unsigned char *)key, nt + 1 + ns, md);
        memcpy(ret, "sbx-", 4);
        for (int i = 0; i < 16; i++)
                snprintf(ret + 4 + 2 * i, 3, "%02x", md[i]);
}

bool kobj_streq0(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

const char *kobj_label(json_t *obj, const char *key)
{
        return json_string_value(kube_get_key(obj, "metadata", "labels", key, NULL));
}

const char *kobj_annotation(json_t *obj, const char *key)
{
        return json_string_value(kube_get_key(obj, "metadata", "annotations", key, NULL));
}

bool kobj_being_deleted(json_t *obj)
{
        return kube_get_str(obj, "metadata.deletionTimestamp") != NULL;
}

int64_t kobj_time_of(const char *s)
{
        int64_t ms = s ? kube_time_parse(s) : -1;

        return ms > 0 ? ms : 0;
}

static bool pod_ready(json_t *pod)
{
        json_t *conds = kube_get_key(pod, "status", "conditions", NULL), *c;
        size_t i;

        json_array_foreach(conds, i, c)
        {
                const char *type = json_string_value(json_object_get(c, "type"));
                const char *st = json_string_value(json_object_get(c, "status"));
                if (type && st && strcmp(type, "Ready") == 0)
                        return strcmp(st, "True") == 0;
        }
        return false;
}

/* The contract's mapping: Pending -> STARTING, Running and Ready -> READY, Running not
 * ready -> STARTING, Failed or Succeeded -> FAILED. */
fe_status kobj_pod_status(json_t *pod)
{
        const char *phase = kube_get_str(pod, "status.phase") ?: "";

        /* Being deleted by someone else (a destroy marks the PVC first, and the caller
         * checks that): it will not serve again. */
        if (kobj_being_deleted(pod))
                return FE_STATUS_FAILED;
        if (strcmp(phase, "Running") == 0)
                return pod_ready(pod) ? FE_STATUS_READY : FE_STATUS_STARTING;
        if (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)
                return FE_STATUS_FAILED;
        return FE_STATUS_STARTING;
}

/* The pod's condition of that type, or NULL. */
static json_t *pod_condition(json_t *pod, const char *type)
{
        json_t *conds = kube_get_key(pod, "status", "conditions", NULL), *c;
        size_t i;

        json_array_foreach(conds, i, c)
        {
                if (kobj_streq0(json_string_value(json_object_get(c, "type")), type))
                        return c;
        }
        return NULL;
}

/* The sandbox container's status, or NULL. */
static json_t *sandbox_container_status(json_t *pod)
{
        json_t *statuses = kube_get_key(pod, "status", "containerStatuses", NULL), *c;
        size_t i;

        json_array_foreach(statuses, i, c)
        {
                if (kobj_streq0(kube_get_str(c, "name"), SANDBOX_CONTAINER))
                        return c;
        }
        return NULL;
}

/* The sandbox container's spec, or NULL. */
static json_t *sandbox_container(json_t *pod)
{
        json_t *containers = kube_get_key(pod, "spec", "containers", NULL), *c;
        size_t i;

        json_array_foreach(containers, i, c)
        {
                if (kobj_streq0(kube_get_str(c, "name"), SANDBOX_CONTAINER))
                        return c;
        }
        return NULL;
}

/* lead ("...: ") and "REASON: message", "REASON" or "message"; the lead without its ": "
 * when there is neither. */
static char *reason_text(const char *lead, const char *reason, const char *msg)
{
        bool r = reason && reason[0], m = msg && msg[0];
        size_t n = strlen(lead);

        if (!r && !m)
                return cs_xasprintf("%.*s", (int)(n >= 2 ? n - 2 : n), lead);
        return cs_xasprintf("%s%s%s%s", lead, r ? reason : "", r && m ? ": " : "", m ? msg : "");
}

static char *oom_text(json_t *pod)
{
        uint64_t mem = 0;
        const char *limit = kube_get_str(sandbox_container(pod), "resources.limits.memory");

        if (limit && cs_quantity_parse(limit, &mem) == 0 && mem)
                return cs_xasprintf("the sandbox ran out of memory (limit %" PRIu64 " MiB)",
                                    mem >> 20);
        return cs_xstrdup("the sandbox ran out of memory");
}

/* Why the sandbox container ended (its state.terminated), or NULL when it has not. */
static char *terminated_text(json_t *pod)
{
        json_t *t = kube_get_key(sandbox_container_status(pod), "state", "terminated", NULL);
        const char *reason;
        json_t *code;

        if (!t)
                return NULL;
        reason = kube_get_str(t, "reason");
        if (kobj_streq0(reason, "OOMKilled"))
                return oom_text(pod);
        code = json_object_get(t, "exitCode");
        return cs_xasprintf(
                "the sandbox's container exited with code %" JSON_INTEGER_FORMAT "%s%s%s",
                json_integer_value(code), reason ? " (" : "", reason ?: "", reason ? ")" : "");
}

/* Whether the node the pod is on has stopped answering (the node controller marks its pods
 * so: Ready Unknown or NodeNotReady, the pod's reason NodeLost, a DisruptionTarget). */
static bool node_lost(json_t *pod)
{
        json_t *ready = pod_condition(pod, "Ready");

        return kobj_streq0(kube_get_str(pod, "status.reason"), "NodeLost") ||
               kobj_streq0(kube_get_str(ready, "status"), "Unknown") ||
               kobj_streq0(kube_get_str(ready, "reason"), "NodeNotReady");
}

/* The sandbox's max_runtime in seconds from its pod, 0 when it has none: the pod's
 * activeDeadlineSeconds, less the claim offset of a pod claimed from the warm pool (its
 * deadline counts from the pod's start, max_runtime from the claim). */
static int64_t pod_max_runtime_s(json_t *pod)
{
        json_t *deadline = kube_get_key(pod, "spec", "activeDeadlineSeconds", NULL);
        const char *off_s = kobj_annotation(pod, ANN_CLAIM_OFFSET);
        int64_t s, off;

        if (!json_is_integer(deadline) || json_integer_value(deadline) <= 0 ||
            json_integer_value(deadline) >= INT64_MAX / 1000)
                return 0;
        s = json_integer_value(deadline);
        off = off_s ? atoll(off_s) : 0;
        return off > 0 && off < s ? s - off : s;
}

char *kobj_pod_reason(json_t *pod)
{
        const char *phase = kube_get_str(pod, "status.phase") ?: "";
        const char *reason = kube_get_str(pod, "status.reason");
        const char *msg = kube_get_str(pod, "status.message");
        json_t *sched = pod_condition(pod, "PodScheduled");
        json_t *wait = kube_get_key(sandbox_container_status(pod), "state", "waiting", NULL);
        json_t *disruption = pod_condition(pod, "DisruptionTarget");
        char *t;

        if (kobj_pod_status(pod) == FE_STATUS_READY)
                return NULL;
        if (kobj_being_deleted(pod)) {
                if (disruption && kobj_streq0(kube_get_str(disruption, "status"), "True"))
                        return reason_text("the sandbox's pod is being evicted: ",
                                           kube_get_str(disruption, "reason"),
                                           kube_get_str(disruption, "message"));
                if (node_lost(pod))
                        return cs_xstrdup("the sandbox's node was lost");
                return cs_xstrdup("the sandbox's pod is being deleted");
        }
        if (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0) {
                int64_t max_s = pod_max_runtime_s(pod);

                if (kobj_streq0(reason, "DeadlineExceeded"))
                        return max_s ? cs_xasprintf("max_runtime of %" PRId64 " s exceeded", max_s)
                                     : cs_xstrdup("max_runtime exceeded");
                if (kobj_streq0(reason, "NodeLost"))
                        return cs_xstrdup("the sandbox's node was lost");
                t = terminated_text(pod);
                if (t)
                        return t;
                if (reason || msg)
                        return reason_text("the sandbox's pod failed: ", reason, msg);
                return cs_xstrdup("the sandbox's pod failed");
        }
        if (node_lost(pod))
                return cs_xstrdup("the sandbox's node is not responding (node lost)");
        t = terminated_text(pod);
        if (t)
                return t;
        if (wait) {
                const char *wr = kube_get_str(wait, "reason");
                /* The normal steps of a start are no reason to report. */
                if (wr && strcmp(wr, "ContainerCreating") != 0 &&
                    strcmp(wr, "PodInitializing") != 0) {
                        const char *lead = strstr(wr, "Image")
                                                   ? "the image cannot be pulled: "
                                                   : "the sandbox's container cannot start: ";
                        return reason_text(lead, wr, kube_get_str(wait, "message"));
                }
        }
        if (sched && kobj_streq0(kube_get_str(sched, "status"), "False"))
                return reason_text("the sandbox cannot be scheduled: ",
                                   kube_get_str(sched, "reason"), kube_get_str(sched, "message"));
        return NULL;
}

/* A CPU quantity in millicores ("500m", "2", "1.5"); 0 when it is not one. */
static uint32_t cpu_millis_of(const char *s)
{
        char *end = NULL;
        double cores;
        unsigned long long m;

        if (!s || !s[0])
                return 0;
        if (s[strlen(s) - 1] == 'm') {
                m = strtoull(s, &end, 10);
                return end && *end == 'm' && m <= UINT32_MAX ? (uint32_t)m : 0;
        }
        cores = strtod(s, &end);
        if (!end || *end || cores <= 0 || cores > 4e6)
                return 0;
        return (uint32_t)(cores * 1000.0 + 0.5);
}

void kobj_view_of_pod(const char *id, json_t *pod, fe_view *ret)
{
        json_t *c = sandbox_container(pod);
        const char *tenant = kobj_annotation(pod, ANN_TENANT_ID);
        const char *session = kobj_annotation(pod, ANN_SESSION_ID);
        const char *mem = kube_get_str(c, "resources.limits.memory");
        _cleanup_free_ char *reason = kobj_pod_reason(pod);
        uint64_t bytes = 0;

        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = kobj_pod_status(pod);
        ret->created_at_ms = kobj_pod_created_at(pod);
        ret->tenant_id = tenant ? cs_xstrdup(tenant) : NULL;
        ret->session_id = session ? cs_xstrdup(session) : NULL;
        ret->cpu_millis = cpu_millis_of(kube_get_str(c, "resources.limits.cpu"));
        if (mem && cs_quantity_parse(mem, &bytes) == 0)
                ret->memory_bytes = bytes;
        ret->max_runtime_ms = pod_max_runtime_s(pod) * 1000;
        ret->reason = fe_reason_clean(reason);
}

static uint64_t sub0(uint64_t a, uint64_t b)
{
        return a > b ? a - b : 0;
}

void kobj_usage_subtract_baseline(json_t *pod, usage_metrics *u)
{
        const char *text = kobj_annotation(pod, ANN_USAGE_BASELINE);
        _cleanup_json_ json_t *j = text ? json_loads(text, 0, NULL) : NULL;
        usage_metrics b;

        if (!j)
                return;
        usage_from_json(j, &b);
        u->cpu_ms = sub0(u->cpu_ms, b.cpu_ms);
        u->disk_read_bytes = sub0(u->disk_read_bytes, b.disk_read_bytes);
        u->disk_write_bytes = sub0(u->disk_write_bytes, b.disk_write_bytes);
        u->network_egress_bytes = sub0(u->network_egress_bytes, b.network_egress_bytes);
        u->network_ingress_bytes = sub0(u->network_ingress_bytes, b.network_ingress_bytes);
}

int64_t kobj_pod_created_at(json_t *pod)
{
        int64_t claimed = kobj_time_of(kobj_annotation(pod, ANN_CLAIMED_AT));

        return claimed ?: kobj_time_of(kube_get_str(pod, "metadata.creationTimestamp"));
}

bool kobj_pvc_destroyed(json_t *pvc)
{
        return pvc && kobj_annotation(pvc, ANN_DELETE_AFTER);
}

/* The view of a sandbox whose PVC records its destruction. */
void kobj_view_destroyed(const char *id, json_t *pvc, fe_view *ret)
{
        const char *usage = kobj_annotation(pvc, ANN_FINAL_USAGE);
        _cleanup_json_ json_t *j = usage ? json_loads(usage, 0, NULL) : NULL;
        const char *tenant, *session;

        memset(ret, 0, sizeof(*ret));
        ret->id = cs_xstrdup(id);
        ret->status = FE_STATUS_DESTROYED;
        ret->created_at_ms = kobj_time_of(kobj_annotation(pvc, ANN_CREATED_AT));
        if (!ret->created_at_ms)
                ret->created_at_ms = kobj_time_of(kube_get_str(pvc, "metadata.creationTimestamp"));
        ret->destroyed_at_ms = kobj_time_of(kobj_annotation(pvc, ANN_DESTROYED_AT));
        usage_from_json(j, &ret->usage);
        tenant = kobj_pvc_tenant(pvc);
        session = kobj_annotation(pvc, ANN_SESSION_ID) ?: kobj_label(pvc, LABEL_SESSION_ID);
        ret->tenant_id = tenant ? cs_xstrdup(tenant) : NULL;
        ret->session_id = session ? cs_xstrdup(session) : NULL;
}

const char *kobj_pvc_tenant(json_t *pvc)
{
        return kobj_annotation(pvc, ANN_TENANT_ID) ?: kobj_label(pvc, LABEL_TENANT_ID);
}

/* Where the pod mounts its workspace: the sandbox container's volumeMount of the
 * "workspace" volume (a pod's spec cannot change; its annotations can). */
const char *kobj_workspace_mount_path(json_t *pod)
{
        json_t *containers = kube_get_key(pod, "spec", "containers", NULL), *c, *m;
        size_t i, j;

        json_array_foreach(containers, i, c)
        {
                if (!kobj_streq0(kube_get_str(c, "name"), SANDBOX_CONTAINER))
                        continue;
                json_array_foreach(json_object_get(c, "volumeMounts"), j, m)
                {
                        if (kobj_streq0(kube_get_str(m, "name"), WORKSPACE_VOLUME))
                                return kube_get_str(m, "mountPath");
                }
        }
        return NULL;
}

/* A Kubernetes quantity as a PVC size takes it ("10Gi", "500M", "1.5Ti"): the one parser,
 * shared/quantity.c, says whether it is one. */
bool kobj_quantity_ok(const char *s)
{
        uint64_t bytes;

        return cs_quantity_parse(s, &bytes) == 0;
}

/* A DNS subdomain name (what a StorageClass is named by). */
bool kobj_dns_subdomain_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > STORAGE_CLASS_MAX || !isalnum((unsigned char)s[0]) ||
            !isalnum((unsigned char)s[n - 1]))
                return false;
        for (; *s; s++) {
                if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-' ||
                      *s == '.'))
                        return false;
        }
        return true;
}

static bool image_ok(const char *s)
{
        if (!s[0] || strlen(s) > IMAGE_MAX)
                return false;
        for (; *s; s++) {
                if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
                        return false;
        }
        return true;
}

/* The request with the defaults filled in, checked as the node agent checks it in local
 * mode (INVALID_ARGUMENT rather than the API server's 422 as INTERNAL). */
int kobj_spec_normalise(const char *default_storage_class, const char *default_size,
                        const fe_spec *in, kobj_spec *out, cs_error **err)
{
        *out = (kobj_spec){
                .tenant_id = in->tenant_id,
                .session_id = in->session_id,
                .image = in->image ?: "",
                .storage_class = in->storage_class && in->storage_class[0] ? in->storage_class
                                                                           : default_storage_class,
                .size = in->size && in->size[0] ? in->size : default_size,
                .mount_path = in->mount_path && in->mount_path[0] ? in->mount_path
                                                                  : CS_DEFAULT_MOUNT_PATH,
                .cpu_millis = in->cpu_millis ?: CS_DEFAULT_CPU_MILLIS,
                .memory_bytes = in->memory_bytes ?: CS_DEFAULT_MEMORY,
                .max_runtime_ms = in->max_runtime_ms ?: CS_DEFAULT_RUNTIME_MS,
        };
        /* The pods keep their deny-all NetworkPolicy (deploy/networkpolicy.yaml): sandbox
         * networking is built for local mode only so far. */
        if (in->egress == CS_EGRESS_ALLOWLIST || in->egress == CS_EGRESS_OPEN)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "egress %s is not available in kube mode yet: pods have no "
                                    "network (docs/api.md, Network)",
                                    cs_egress_name(in->egress));
        if (!out->image[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "image is empty and the frontend has no default "
                                    "(--sandbox-image, SANDBOX_IMAGE)");
        if (!image_ok(out->image))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "image must be 1..%d printable characters without spaces",
                                    IMAGE_MAX);
        if (cs_mount_path_check(out->mount_path, err) < 0)
                return -1;
        if (!kobj_quantity_ok(out->size))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "workspace size '%.40s' is not a quantity like 10Gi",
                                    out->size);
        if (out->storage_class[0] && !kobj_dns_subdomain_ok(out->storage_class))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "storage_class '%.64s' is not a valid StorageClass name",
                                    out->storage_class);
        if (out->cpu_millis < CS_MIN_CPU_MILLIS || out->cpu_millis > CS_MAX_CPU_MILLIS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "cpu_millis must be %d..%d",
                                    CS_MIN_CPU_MILLIS, CS_MAX_CPU_MILLIS);
        if (out->memory_bytes < CS_MIN_MEMORY || out->memory_bytes > CS_MAX_MEMORY)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "memory_bytes must be %llu..%llu", CS_MIN_MEMORY,
                                    CS_MAX_MEMORY);
        if (out->max_runtime_ms < CS_MIN_RUNTIME_MS || out->max_runtime_ms > CS_MAX_RUNTIME_MS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "max_runtime must be 1 s..24 h");
        return 0;
}

static json_t *labels_for(const kobj_spec *spec, const char *id)
{
        json_t *l = json_pack("{s:s, s:s, s:s}", LABEL_MANAGED_BY, MANAGED_BY, LABEL_APP_NAME,
                              SANDBOX_APP_NAME, LABEL_SANDBOX_ID, id);

        if (label_value_ok(spec->tenant_id))
                json_object_set_new(l, LABEL_TENANT_ID, json_string(spec->tenant_id));
        if (label_value_ok(spec->session_id))
                json_object_set_new(l, LABEL_SESSION_ID, json_string(spec->session_id));
        return l;
}

/* The resident exec path in a pod (docs/deploy.md): an init container of spawner_image
 * installs compute-init into an emptyDir, and the sandbox container runs it as its init, with
 * the binary and the spawner's socket directory (another emptyDir, where the node agent
 * listens) mounted read-only. */
static void add_spawner(json_t *pod, const char *spawner_image, json_t *res)
{
        json_t *spec = json_object_get(pod, "spec");
        json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
        json_t *mounts = json_object_get(c, "volumeMounts");
        json_t *volumes = json_object_get(spec, "volumes");

        json_object_set_new(spec, "initContainers",
                            json_pack("[{s:s, s:s, s:[s, s, s], s:{s:O, s:O}, s:[{s:s, s:s}]}]",
                                      "name", SPAWNER_INIT_CONTAINER, "image", spawner_image,
                                      "command", SPAWNER_IMAGE_BIN, "--install", CS_SPAWNER_BIN,
                                      "resources", "requests", res, "limits", res, "volumeMounts",
                                      "name", SPAWNER_BIN_VOLUME, "mountPath", CS_SPAWNER_BIN_DIR));
        json_object_set_new(c, "command",
                            json_pack("[s, s, s]", CS_SPAWNER_BIN, "--socket", CS_SPAWNER_SOCKET));
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", SPAWNER_BIN_VOLUME,
                                                "mountPath", CS_SPAWNER_BIN_DIR, "readOnly", 1));
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", SPAWNER_RUN_VOLUME,
                                                "mountPath", CS_SPAWNER_DIR, "readOnly", 1));
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", SPAWNER_BIN_VOLUME,
                                                 "emptyDir", "sizeLimit", "16Mi"));
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", SPAWNER_RUN_VOLUME,
                                                 "emptyDir", "sizeLimit", "1Mi"));
}

json_t *kobj_pod_build(const char *ns, const char *runtime_class, const char *spawner_image,
                       const kobj_spec *spec, const char *name, const char *id)
{
        _cleanup_free_ char *cpu = cs_xasprintf("%" PRIu32 "m", spec->cpu_millis);
        _cleanup_free_ char *mem = cs_xasprintf("%" PRIu64, spec->memory_bytes);
        _cleanup_free_ char *claim = cs_xasprintf("ws-%s", id);
        json_t *res = json_pack("{s:s, s:s}", "cpu", cpu, "memory", mem);
        json_t *pod = json_pack(
                "{s:s, s:s,"
                " s:{s:s, s:s, s:o, s:{s:s, s:s, s:s, s:s}},"
                " s:{s:s, s:b, s:b, s:I, s:I,"
                "    s:[{s:s, s:s, s:[s, s, s], s:{s:O, s:O}, s:[{s:s, s:s}]}],"
                "    s:[{s:s, s:{s:s}}]}}",
                "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", ns,
                "labels", labels_for(spec, id), "annotations", ANN_TENANT_ID, spec->tenant_id,
                ANN_SESSION_ID, spec->session_id, ANN_SANDBOX_ID, id, ANN_MOUNT_PATH,
                spec->mount_path, "spec", "restartPolicy", "Never", "automountServiceAccountToken",
                0, "enableServiceLinks", 0, "activeDeadlineSeconds",
                (json_int_t)((spec->max_runtime_ms + 999) / 1000), "terminationGracePeriodSeconds",
                (json_int_t)5, "containers", "name", SANDBOX_CONTAINER, "image", spec->image,
                "command", "/bin/sh", "-c", KEEPALIVE, "resources", "requests", res, "limits", res,
                "volumeMounts", "name", WORKSPACE_VOLUME, "mountPath", spec->mount_path, "volumes",
                "name", WORKSPACE_VOLUME, "persistentVolumeClaim", "claimName", claim);

        if (pod && spawner_image && spawner_image[0])
                add_spawner(pod, spawner_image, res);
        json_decref(res);
        if (pod && runtime_class[0])
                json_object_set_new(json_object_get(pod, "spec"), "runtimeClassName",
                                    json_string(runtime_class));
        return pod;
}

/* Whose the workspace is, as the pod says it: ListSandboxes finds a DESTROYED sandbox's
 * tenant there once its pod is gone (the label holds only ids that are label values). */
static json_t *owner_annotations(const kobj_spec *spec)
{
        json_t *a = json_object();

        if (spec->tenant_id && spec->tenant_id[0])
                json_object_set_new(a, ANN_TENANT_ID, json_string(spec->tenant_id));
        if (spec->session_id && spec->session_id[0])
                json_object_set_new(a, ANN_SESSION_ID, json_string(spec->session_id));
        return a;
}

/* The workspace PVC; with annotations (a destroy that found no PVC) when given. */
json_t *kobj_pvc_build(const char *ns, const kobj_spec *spec, const char *id, json_t *annotations)
{
        _cleanup_free_ char *name = cs_xasprintf("ws-%s", id);
        json_t *pvc = json_pack(
                "{s:s, s:s, s:{s:s, s:s, s:o, s:o},"
                " s:{s:[s], s:{s:{s:s}}}}",
                "apiVersion", "v1", "kind", "PersistentVolumeClaim", "metadata", "name", name,
                "namespace", ns, "labels", labels_for(spec, id), "annotations",
                annotations ? json_incref(annotations) : owner_annotations(spec), "spec",
                "accessModes", "ReadWriteOnce", "resources", "requests", "storage", spec->size);

        if (pvc && spec->storage_class[0])
                json_object_set_new(json_object_get(pvc, "spec"), "storageClassName",
                                    json_string(spec->storage_class));
        return pvc;
}

json_t *kobj_destroy_annotations(int64_t grace_s, json_t *pod, json_t *pvc, const usage_metrics *u,
                                 int64_t now)
{
        _cleanup_json_ json_t *usage = usage_to_json(u);
        _cleanup_free_ char *usage_text = json_dumps(usage, JSON_COMPACT);
        char destroyed[32], after[32], created[32];
        int64_t created_ms = pod ? kobj_pod_created_at(pod)
                                 : kobj_time_of(kube_get_str(pvc, "metadata.creationTimestamp"));

        json_t *a = json_pack("{s:s, s:s, s:s, s:s}", ANN_DELETE_AFTER,
                              kube_time_format(now + grace_s * 1000, after), ANN_DESTROYED_AT,
                              kube_time_format(now, destroyed), ANN_FINAL_USAGE, usage_text ?: "{}",
                              ANN_CREATED_AT, kube_time_format(created_ms ?: now, created));
        /* Whose it was (a PVC made before the PVCs carried it has it only on its pod). */
        const char *keys[] = { ANN_TENANT_ID, ANN_SESSION_ID };

        for (size_t i = 0; a && i < ARRAY_SIZE(keys); i++) {
                const char *v = pod ? kobj_annotation(pod, keys[i]) : NULL;
                if (!v && pvc)
                        v = kobj_annotation(pvc, keys[i]);
                if (v && v[0])
                        json_object_set_new(a, keys[i], json_string(v));
        }
        return a;
}

/* --- what the caches keep ---------------------------------------------------------------- */

/* One field kept by kobj_trim. A field with neither sub nor keys is a leaf: kept when it is a
 * scalar (string, number, boolean), dropped otherwise (no reader reads an object or array
 * there, and a hostile one could be large). With sub, an object keeps those of its fields, an
 * array keeps each element so (its non-objects as null, so an index still finds its element),
 * or only the elements whose field `match` is one of `values` when those are given (the
 * readers look elements up by that field, first match first: the order is kept). With keys,
 * a map (labels, annotations, data) keeps those keys' string values only. An object or array
 * the original has is kept, empty if nothing of it is: presence is something readers test
 * (a container's state.terminated). */
typedef struct kobj_keep {
        const char *key;
        const struct kobj_keep *sub;
        const char *const *keys;
        const char *match;
        const char *const *values;
} kobj_keep;

#define KEEP_END                                                                                   \
        {                                                                                          \
                .key = NULL                                                                        \
        }
#define LEAF(k)                                                                                    \
        {                                                                                          \
                .key = (k)                                                                         \
        }
#define SUB(k, s)                                                                                  \
        {                                                                                          \
                .key = (k), .sub = (s)                                                             \
        }
#define MAP(k, ks)                                                                                 \
        {                                                                                          \
                .key = (k), .keys = (ks)                                                           \
        }
#define SOME(k, s, m, vs)                                                                          \
        {                                                                                          \
                .key = (k), .sub = (s), .match = (m), .values = (vs)                               \
        }

/* THE WHITELIST. Everything the frontend reads of a cached object (scheduler_kube.c,
 * kube_pool.c, kube_agents.c, kube_api.c, kube_cache.c and the readers in this file) or of
 * what the GC lists (kube_gc.c) must be here: a reader of a field that is not reads NULL from
 * the cache, though the same code reading a direct GET sees it. Add a field here when you add
 * a reader of it; tests/unit/test_kube_objects.c checks that a trimmed object answers every
 * reading of this file as the whole one does. */

/* Every kind: the cache's key and freshness (kube_cache.c: name, resourceVersion, uid of a
 * DELETED event), deletes' preconditions (uid, resourceVersion), kagent_route's pod ref
 * (namespace), created_at and the GC's ages (creationTimestamp), kobj_being_deleted. */
#define KEEP_METADATA_COMMON                                                                       \
        LEAF("name"), LEAF("namespace"), LEAF("uid"), LEAF("resourceVersion"),                     \
                LEAF("creationTimestamp"), LEAF("deletionTimestamp")

/* The labels read: the sandbox id (the pod cache's index, listings, the GC's sets), the pool
 * profile (kube_pool.c), the tenant and session (kobj_pvc_tenant, listings once the pod is
 * gone). */
static const char *const kept_labels[] = { LABEL_SANDBOX_ID, LABEL_POOL, LABEL_TENANT_ID,
                                           LABEL_SESSION_ID, NULL };
/* A pod's annotations read: whose it is (tenant checks, listings, the destroy record), a
 * warm pod's claim (created_at, max_runtime's offset, the usage baseline; the GC's age of an
 * abandoned claim: claimed-at, adopted-at). */
static const char *const pod_annotations[] = { ANN_TENANT_ID,
                                               ANN_SESSION_ID,
                                               ANN_CLAIMED_AT,
                                               ANN_CLAIM_OFFSET,
                                               ANN_USAGE_BASELINE,
                                               ANN_ADOPTED_AT,
                                               NULL };
/* A PVC's: the destroy record (kobj_pvc_destroyed, kobj_view_destroyed, the GC, the expired
 * metric) and whose it is. */
static const char *const pvc_annotations[] = { ANN_DELETE_AFTER,
                                               ANN_DESTROYED_AT,
                                               ANN_FINAL_USAGE,
                                               ANN_CREATED_AT,
                                               ANN_TENANT_ID,
                                               ANN_SESSION_ID,
                                               NULL };
static const char *const guard_annotations[] = { ANN_TENANT_ID, ANN_SESSION_ID, NULL };
static const char *const guard_data[] = { GUARD_KEY, NULL };
static const char *const sandbox_name[] = { SANDBOX_CONTAINER, NULL };
static const char *const workspace_name[] = { WORKSPACE_VOLUME, NULL };
/* The conditions read: Ready (pod_ready, node_lost), PodScheduled and DisruptionTarget
 * (kobj_pod_reason). */
static const char *const condition_types[] = { "Ready", "PodScheduled", "DisruptionTarget", NULL };

static const kobj_keep pod_metadata[] = {
        KEEP_METADATA_COMMON,
        MAP("labels", kept_labels),
        MAP("annotations", pod_annotations),
        KEEP_END,
};
static const kobj_keep pvc_metadata[] = {
        KEEP_METADATA_COMMON,
        MAP("labels", kept_labels),
        MAP("annotations", pvc_annotations),
        KEEP_END,
};
/* A guard's: whose it is (guard_id). */
static const kobj_keep guard_metadata[] = {
        KEEP_METADATA_COMMON,
        MAP("annotations", guard_annotations),
        KEEP_END,
};

/* The sandbox container's limits: the view's cpu and memory, the OOM reason's limit. */
static const kobj_keep limits[] = { LEAF("cpu"), LEAF("memory"), KEEP_END };
static const kobj_keep resources[] = { SUB("limits", limits), KEEP_END };
/* The workspace's mount: kobj_workspace_mount_path (routes, usage). */
static const kobj_keep mount[] = { LEAF("name"), LEAF("mountPath"), KEEP_END };
static const kobj_keep sandbox_container_keep[] = {
        LEAF("name"),
        SUB("resources", resources),
        SOME("volumeMounts", mount, "name", workspace_name),
        KEEP_END,
};
/* spec.nodeName: which agent serves it; activeDeadlineSeconds: max_runtime. */
static const kobj_keep pod_spec[] = {
        LEAF("nodeName"),
        LEAF("activeDeadlineSeconds"),
        SOME("containers", sandbox_container_keep, "name", sandbox_name),
        KEEP_END,
};
static const kobj_keep condition[] = { LEAF("type"), LEAF("status"), LEAF("reason"),
                                       LEAF("message"), KEEP_END };
/* Why a container is not running (kobj_pod_reason): its termination and its waiting. */
static const kobj_keep terminated[] = { LEAF("reason"), LEAF("exitCode"), KEEP_END };
static const kobj_keep waiting[] = { LEAF("reason"), LEAF("message"), KEEP_END };
static const kobj_keep container_state[] = {
        SUB("terminated", terminated),
        SUB("waiting", waiting),
        KEEP_END,
};
static const kobj_keep container_status[] = { LEAF("name"), SUB("state", container_state),
                                              KEEP_END };
/* The status mapping and the reasons (phase, reason, message, the conditions, the sandbox
 * container's state); startTime: a warm pod's age at its claim. */
static const kobj_keep pod_status[] = {
        LEAF("phase"),
        LEAF("reason"),
        LEAF("message"),
        LEAF("startTime"),
        SOME("conditions", condition, "type", condition_types),
        SOME("containerStatuses", container_status, "name", sandbox_name),
        KEEP_END,
};
static const kobj_keep sandbox_pod[] = {
        SUB("metadata", pod_metadata),
        SUB("spec", pod_spec),
        SUB("status", pod_status),
        KEEP_END,
};

/* A node agent pod (kube_agents.c): its node, whether it is up (phase, podIP, deletion), its
 * first container's gRPC port and image (by index: every container kept, in order). */
static const kobj_keep agent_metadata[] = { KEEP_METADATA_COMMON, KEEP_END };
static const kobj_keep port[] = { LEAF("name"), LEAF("containerPort"), KEEP_END };
static const kobj_keep agent_container[] = {
        LEAF("name"),
        LEAF("image"),
        SUB("ports", port),
        KEEP_END,
};
static const kobj_keep agent_spec[] = { LEAF("nodeName"), SUB("containers", agent_container),
                                        KEEP_END };
static const kobj_keep agent_status[] = { LEAF("phase"), LEAF("podIP"), KEEP_END };
static const kobj_keep agent_pod[] = {
        SUB("metadata", agent_metadata),
        SUB("spec", agent_spec),
        SUB("status", agent_status),
        KEEP_END,
};

/* A workspace PVC: its metadata only (no reader looks at its spec or status). */
static const kobj_keep workspace_pvc[] = { SUB("metadata", pvc_metadata), KEEP_END };

/* A session guard (a ConfigMap, read by the GC): its sandbox id. */
static const kobj_keep guard[] = {
        SUB("metadata", guard_metadata),
        MAP("data", guard_data),
        KEEP_END,
};

static json_t *trim_object(json_t *in, const kobj_keep *keep);

/* What a kept field's value becomes, or NULL to drop it. */
static json_t *trim_value(json_t *v, const kobj_keep *k)
{
        if (k->keys) {
                json_t *out;
                if (!json_is_object(v))
                        return NULL;
                out = json_object();
                for (const char *const *key = k->keys; *key; key++) {
                        json_t *s = json_object_get(v, *key);
                        if (json_is_string(s))
                                json_object_set(out, *key, s);
                }
                return out;
        }
        if (!k->sub)
                return json_is_string(v) || json_is_number(v) || json_is_boolean(v) ? json_incref(v)
                                                                                    : NULL;
        if (json_is_object(v))
                return trim_object(v, k->sub);
        if (json_is_array(v)) {
                json_t *out = json_array(), *e;
                size_t i;

                json_array_foreach(v, i, e)
                {
                        if (k->match) {
                                const char *m = json_string_value(json_object_get(e, k->match));
                                bool wanted = false;

                                for (const char *const *w = k->values; m && *w && !wanted; w++)
                                        wanted = strcmp(m, *w) == 0;
                                if (!wanted)
                                        continue;
                        }
                        json_array_append_new(out, json_is_object(e) ? trim_object(e, k->sub)
                                                                     : json_null());
                }
                return out;
        }
        return NULL;
}

static json_t *trim_object(json_t *in, const kobj_keep *keep)
{
        json_t *out = json_object();

        for (const kobj_keep *k = keep; k->key; k++) {
                json_t *v = json_object_get(in, k->key);
                json_t *t = v ? trim_value(v, k) : NULL;

                if (t)
                        json_object_set_new(out, k->key, t);
        }
        return out;
}

json_t *kobj_trim(json_t *obj, kobj_kind kind)
{
        static const kobj_keep *const by_kind[] = {
                [KOBJ_SANDBOX_POD] = sandbox_pod,
                [KOBJ_AGENT_POD] = agent_pod,
                [KOBJ_WORKSPACE_PVC] = workspace_pvc,
                [KOBJ_GUARD] = guard,
        };

        if (!json_is_object(obj) || (unsigned)kind >= ARRAY_SIZE(by_kind))
                return NULL;
        return trim_object(obj, by_kind[kind]);
}

json_t *kobj_trim_sandbox_pod(json_t *obj)
{
        return kobj_trim(obj, KOBJ_SANDBOX_POD);
}

json_t *kobj_trim_agent_pod(json_t *obj)
{
        return kobj_trim(obj, KOBJ_AGENT_POD);
}

json_t *kobj_trim_workspace_pvc(json_t *obj)
{
        return kobj_trim(obj, KOBJ_WORKSPACE_PVC);
}
