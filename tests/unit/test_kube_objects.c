/* Unit tests for frontend/kube_objects.c: the kube scheduler's objects as plain JSON, field
 * by field (docs/kube.md is the contract), with no API server: the session's pod name, the
 * spec's defaults and checks, the Pod and PVC a create POSTs, the record a destroy writes,
 * and the readings back (status, destroyed view, workspace mount). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kube_client.h"
#include "kube_objects.h"
#include "sandbox_limits.h"
#include "util.h"

#define ID "0b3c8f1e-6a3f-4c7e-9d2a-5e1f0a9b8c7d"

/* ---- helpers ---- */

static const char *str_at(json_t *obj, const char *dotted)
{
        return kube_get_str(obj, dotted);
}

/* The value at a dotted path of objects (kube_get_str reads strings only), or NULL. */
static json_t *at(json_t *obj, const char *dotted)
{
        char buf[256], *save = NULL;
        json_t *o = obj;

        snprintf(buf, sizeof(buf), "%s", dotted);
        for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
                o = json_object_get(o, k);
        return o;
}

static json_int_t int_at(json_t *obj, const char *dotted)
{
        json_t *o = at(obj, dotted);

        assert_non_null(o);
        assert_true(json_is_integer(o));
        return json_integer_value(o);
}

static kobj_spec full_spec(void)
{
        return (kobj_spec){ .tenant_id = "acme",
                            .session_id = "s-1",
                            .image = "busybox:stable",
                            .storage_class = "fast-ssd",
                            .size = "5Gi",
                            .mount_path = "/data",
                            .cpu_millis = 250,
                            .memory_bytes = 128ull << 20,
                            .max_runtime_ms = 1500 };
}

/* ---- names ---- */

static void test_pod_name(void **state)
{
        char a[KOBJ_POD_NAME_LEN + 1], b[KOBJ_POD_NAME_LEN + 1];

        (void)state;
        /* sha256("t\0s") = cc3c5442f312cf6085b867bc1097f673... */
        kobj_pod_name("t", "s", a);
        assert_string_equal(a, "sbx-cc3c5442f312cf6085b867bc1097f673");
        assert_int_equal(strlen(a), KOBJ_POD_NAME_LEN);
        /* The NUL between the ids keeps ("a/b", "c") and ("a", "b/c") apart. */
        kobj_pod_name("a/b", "c", a);
        kobj_pod_name("a", "b/c", b);
        assert_string_not_equal(a, b);
        kobj_pod_name("ab", "c", a);
        kobj_pod_name("a", "bc", b);
        assert_string_not_equal(a, b);
}

/* ---- the spec ---- */

static void test_spec_defaults(void **state)
{
        fe_spec in = { .tenant_id = "t", .session_id = "s", .image = "img" };
        cs_error *err = NULL;
        kobj_spec out;

        (void)state;
        assert_int_equal(kobj_spec_normalise("standard", "10Gi", &in, &out, &err), 0);
        assert_null(err);
        assert_string_equal(out.tenant_id, "t");
        assert_string_equal(out.session_id, "s");
        assert_string_equal(out.image, "img");
        assert_string_equal(out.storage_class, "standard");
        assert_string_equal(out.size, "10Gi");
        assert_string_equal(out.mount_path, CS_DEFAULT_MOUNT_PATH);
        assert_int_equal(out.cpu_millis, CS_DEFAULT_CPU_MILLIS);
        assert_int_equal(out.memory_bytes, CS_DEFAULT_MEMORY);
        assert_int_equal(out.max_runtime_ms, CS_DEFAULT_RUNTIME_MS);

        /* What the request names wins over the defaults; "" storage class means the
         * cluster's default. */
        in = (fe_spec){ .tenant_id = "t",
                        .session_id = "s",
                        .image = "img",
                        .storage_class = "gold",
                        .size = "1.5Ti",
                        .mount_path = "/w",
                        .cpu_millis = CS_MIN_CPU_MILLIS,
                        .memory_bytes = CS_MAX_MEMORY,
                        .max_runtime_ms = CS_MAX_RUNTIME_MS };
        assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), 0);
        assert_string_equal(out.storage_class, "gold");
        assert_string_equal(out.size, "1.5Ti");
        assert_string_equal(out.mount_path, "/w");
        assert_int_equal(out.cpu_millis, CS_MIN_CPU_MILLIS);
        assert_int_equal(out.memory_bytes, CS_MAX_MEMORY);
        assert_int_equal(out.max_runtime_ms, CS_MAX_RUNTIME_MS);
        in.storage_class = "";
        assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), 0);
        assert_string_equal(out.storage_class, "");
}

static void refused(fe_spec in, const char *msg)
{
        cs_error *err = NULL;
        kobj_spec out;

        assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), -1);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        if (msg)
                assert_string_equal(err->msg, msg);
        cs_error_free(err);
}

static void test_spec_checks(void **state)
{
        const fe_spec ok = { .tenant_id = "t", .session_id = "s", .image = "img" };
        fe_spec in;
        char long_image[1026];

        (void)state;
        in = ok;
        in.image = "";
        refused(in, "image is empty and the frontend has no default (--sandbox-image, "
                    "SANDBOX_IMAGE)");
        in.image = "my image";
        refused(in, "image must be 1..1024 printable characters without spaces");
        memset(long_image, 'x', 1025);
        long_image[1025] = '\0';
        in.image = long_image;
        refused(in, "image must be 1..1024 printable characters without spaces");
        in = ok;
        in.mount_path = "relative/path";
        refused(in, NULL); /* path.c's own message */
        in = ok;
        in.size = "10 Gi";
        refused(in, "workspace size '10 Gi' is not a quantity like 10Gi");
        in.size = "Gi";
        refused(in, "workspace size 'Gi' is not a quantity like 10Gi");
        in = ok;
        in.storage_class = "Fast_SSD";
        refused(in, "storage_class 'Fast_SSD' is not a valid StorageClass name");
        in = ok;
        in.cpu_millis = CS_MIN_CPU_MILLIS - 1;
        refused(in, "cpu_millis must be 50..64000");
        in.cpu_millis = CS_MAX_CPU_MILLIS + 1;
        refused(in, "cpu_millis must be 50..64000");
        in = ok;
        in.memory_bytes = CS_MIN_MEMORY - 1;
        refused(in, "memory_bytes must be 67108864..68719476736");
        in.memory_bytes = CS_MAX_MEMORY + 1;
        refused(in, "memory_bytes must be 67108864..68719476736");
        in = ok;
        in.max_runtime_ms = CS_MIN_RUNTIME_MS - 1;
        refused(in, "max_runtime must be 1 s..24 h");
        in.max_runtime_ms = CS_MAX_RUNTIME_MS + 1;
        refused(in, "max_runtime must be 1 s..24 h");
}

/* The pods have no network yet (deploy/networkpolicy.yaml): egress allowlist and open are
 * refused as not available; none and the default go through. */
static void test_spec_network(void **state)
{
        static const struct {
                cs_egress egress;
                const char *msg;
        } refusals[] = {
                { CS_EGRESS_ALLOWLIST, "egress allowlist is not available in kube mode yet: pods "
                                       "have no network (docs/api.md, Network)" },
                { CS_EGRESS_OPEN, "egress open is not available in kube mode yet: pods have no "
                                  "network (docs/api.md, Network)" },
        };
        fe_spec in = { .tenant_id = "t", .session_id = "s", .image = "img" };
        cs_error *err = NULL;
        kobj_spec out;

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(refusals); i++) {
                in.egress = refusals[i].egress;
                assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), -1);
                assert_int_equal(err->code, GRPC_STATUS_FAILED_PRECONDITION);
                assert_string_equal(err->msg, refusals[i].msg);
                cs_error_free(err);
                err = NULL;
        }
        in.egress = CS_EGRESS_NONE;
        assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), 0);
        in.egress = CS_EGRESS_UNSPECIFIED;
        assert_int_equal(kobj_spec_normalise("", "10Gi", &in, &out, &err), 0);
}

static void test_quantity_and_class_names(void **state)
{
        const char *good_q[] = { "1", "10Gi", "500M", "1.5Ti", "3Ki", "7E", "2k" };
        const char *bad_q[] = { "",     "Gi",   "1.",
                                ".5Gi", "10GB", "10gi",
                                "-1Gi", "1e3",  "123456789012345678901234567890123Gi" };
        const char *good_c[] = { "standard", "fast-ssd", "a.b-c", "x1" };
        const char *bad_c[] = { "", "Fast", "-a", "a-", "a_b", "a b" };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(good_q); i++)
                assert_true(kobj_quantity_ok(good_q[i]));
        for (size_t i = 0; i < ARRAY_SIZE(bad_q); i++)
                assert_false(kobj_quantity_ok(bad_q[i]));
        for (size_t i = 0; i < ARRAY_SIZE(good_c); i++)
                assert_true(kobj_dns_subdomain_ok(good_c[i]));
        for (size_t i = 0; i < ARRAY_SIZE(bad_c); i++)
                assert_false(kobj_dns_subdomain_ok(bad_c[i]));
}

/* ---- the pod ---- */

static void test_pod_fields(void **state)
{
        kobj_spec spec = full_spec();
        _cleanup_json_ json_t *pod = kobj_pod_build("sbx-ns", "gvisor", NULL, &spec, "sbx-abc", ID);
        json_t *spec_j, *c, *cmd, *res;

        (void)state;
        assert_non_null(pod);
        assert_string_equal(str_at(pod, "apiVersion"), "v1");
        assert_string_equal(str_at(pod, "kind"), "Pod");
        assert_string_equal(str_at(pod, "metadata.name"), "sbx-abc");
        assert_string_equal(str_at(pod, "metadata.namespace"), "sbx-ns");

        /* labels: exactly these five */
        assert_int_equal(json_object_size(at(pod, "metadata.labels")), 5);
        assert_string_equal(kobj_label(pod, LABEL_MANAGED_BY), "compute-frontend");
        assert_string_equal(kobj_label(pod, LABEL_APP_NAME), "compute-sandbox");
        assert_string_equal(kobj_label(pod, LABEL_SANDBOX_ID), ID);
        assert_string_equal(kobj_label(pod, LABEL_TENANT_ID), "acme");
        assert_string_equal(kobj_label(pod, LABEL_SESSION_ID), "s-1");
        /* annotations: exactly these four */
        assert_int_equal(json_object_size(at(pod, "metadata.annotations")), 4);
        assert_string_equal(kobj_annotation(pod, ANN_TENANT_ID), "acme");
        assert_string_equal(kobj_annotation(pod, ANN_SESSION_ID), "s-1");
        assert_string_equal(kobj_annotation(pod, ANN_SANDBOX_ID), ID);
        assert_string_equal(kobj_annotation(pod, ANN_MOUNT_PATH), "/data");

        spec_j = json_object_get(pod, "spec");
        assert_string_equal(str_at(spec_j, "runtimeClassName"), "gvisor");
        assert_string_equal(str_at(spec_j, "restartPolicy"), "Never");
        /* No API token and no service environment inside a sandbox. */
        assert_true(json_is_false(json_object_get(spec_j, "automountServiceAccountToken")));
        assert_true(json_is_false(json_object_get(spec_j, "enableServiceLinks")));
        /* max_runtime rounded up to whole seconds */
        assert_int_equal(int_at(spec_j, "activeDeadlineSeconds"), 2);
        assert_int_equal(int_at(spec_j, "terminationGracePeriodSeconds"), 5);

        assert_int_equal(json_array_size(json_object_get(spec_j, "containers")), 1);
        c = json_array_get(json_object_get(spec_j, "containers"), 0);
        assert_string_equal(str_at(c, "name"), SANDBOX_CONTAINER);
        assert_string_equal(str_at(c, "image"), "busybox:stable");
        cmd = json_object_get(c, "command");
        assert_int_equal(json_array_size(cmd), 3);
        assert_string_equal(json_string_value(json_array_get(cmd, 0)), "/bin/sh");
        assert_string_equal(json_string_value(json_array_get(cmd, 1)), "-c");
        assert_non_null(strstr(json_string_value(json_array_get(cmd, 2)), "trap 'exit 0' TERM"));
        /* requests = limits: Guaranteed QoS */
        res = json_object_get(c, "resources");
        assert_string_equal(str_at(res, "requests.cpu"), "250m");
        assert_string_equal(str_at(res, "requests.memory"), "134217728");
        assert_string_equal(str_at(res, "limits.cpu"), "250m");
        assert_string_equal(str_at(res, "limits.memory"), "134217728");
        /* the workspace: one mount of one volume, the PVC ws-<id> */
        assert_int_equal(json_array_size(json_object_get(c, "volumeMounts")), 1);
        assert_string_equal(str_at(json_array_get(json_object_get(c, "volumeMounts"), 0), "name"),
                            WORKSPACE_VOLUME);
        assert_string_equal(kobj_workspace_mount_path(pod), "/data");
        assert_int_equal(json_array_size(json_object_get(spec_j, "volumes")), 1);
        assert_string_equal(str_at(json_array_get(json_object_get(spec_j, "volumes"), 0), "name"),
                            WORKSPACE_VOLUME);
        assert_string_equal(str_at(json_array_get(json_object_get(spec_j, "volumes"), 0),
                                   "persistentVolumeClaim.claimName"),
                            "ws-" ID);
        /* Nothing of its own owns a sandbox pod: the API server's GC must not take it. */
        assert_null(at(pod, "metadata.ownerReferences"));
}

/* The resident exec path's pod: compute-init installed by an init container of the spawner
 * image into an emptyDir and run as the sandbox's init; both emptyDirs mounted read-only in
 * the sandbox container, the workspace still the first mount (kobj_workspace_mount_path). */
static void test_pod_with_spawner(void **state)
{
        kobj_spec spec = full_spec();
        _cleanup_json_ json_t *pod = kobj_pod_build(
                "ns", "gvisor", "registry.example/compute-agent:1", &spec, "sbx-x", ID);
        json_t *spec_j = json_object_get(pod, "spec"), *ic, *c, *mounts, *vols;

        (void)state;
        assert_int_equal(json_array_size(json_object_get(spec_j, "initContainers")), 1);
        ic = json_array_get(json_object_get(spec_j, "initContainers"), 0);
        assert_string_equal(str_at(ic, "name"), SPAWNER_INIT_CONTAINER);
        assert_string_equal(str_at(ic, "image"), "registry.example/compute-agent:1");
        assert_string_equal(json_string_value(json_array_get(json_object_get(ic, "command"), 0)),
                            SPAWNER_IMAGE_BIN);
        assert_string_equal(json_string_value(json_array_get(json_object_get(ic, "command"), 1)),
                            "--install");
        assert_string_equal(json_string_value(json_array_get(json_object_get(ic, "command"), 2)),
                            "/.compute/bin/compute-init");
        /* Its resources are the sandbox's: the pod's effective requests do not change. */
        assert_string_equal(str_at(ic, "resources.limits.cpu"), "250m");
        assert_string_equal(str_at(ic, "resources.requests.memory"), "134217728");

        c = json_array_get(json_object_get(spec_j, "containers"), 0);
        assert_string_equal(json_string_value(json_array_get(json_object_get(c, "command"), 0)),
                            "/.compute/bin/compute-init");
        assert_string_equal(json_string_value(json_array_get(json_object_get(c, "command"), 2)),
                            "/.compute/run/spawner.sock");
        mounts = json_object_get(c, "volumeMounts");
        assert_int_equal(json_array_size(mounts), 3);
        assert_string_equal(kobj_workspace_mount_path(pod), "/data");
        for (size_t i = 1; i < 3; i++)
                assert_true(json_is_true(json_object_get(json_array_get(mounts, i), "readOnly")));
        vols = json_object_get(spec_j, "volumes");
        assert_int_equal(json_array_size(vols), 3);
        assert_non_null(at(json_array_get(vols, 1), "emptyDir"));
        assert_non_null(at(json_array_get(vols, 2), "emptyDir"));
}

static void test_pod_without_runtime_class_and_odd_ids(void **state)
{
        kobj_spec spec = full_spec();
        char sixty_three[64], sixty_four[65];
        _cleanup_json_ json_t *pod = NULL, *pod2 = NULL;

        (void)state;
        spec.tenant_id = "org/team";  /* '/' is not a label value character */
        spec.session_id = "-session"; /* nor a leading '-' */
        pod = kobj_pod_build("ns", "", "", &spec, "sbx-x", ID);
        assert_null(at(pod, "spec.runtimeClassName"));
        assert_null(kobj_label(pod, LABEL_TENANT_ID));
        assert_null(kobj_label(pod, LABEL_SESSION_ID));
        assert_string_equal(kobj_label(pod, LABEL_SANDBOX_ID), ID);
        /* The annotations keep them as they are. */
        assert_string_equal(kobj_annotation(pod, ANN_TENANT_ID), "org/team");
        assert_string_equal(kobj_annotation(pod, ANN_SESSION_ID), "-session");

        memset(sixty_three, 'a', 63);
        sixty_three[63] = '\0';
        memset(sixty_four, 'b', 64);
        sixty_four[64] = '\0';
        spec.tenant_id = sixty_three;
        spec.session_id = sixty_four;
        pod2 = kobj_pod_build("ns", "", "", &spec, "sbx-x", ID);
        assert_string_equal(kobj_label(pod2, LABEL_TENANT_ID), sixty_three);
        assert_null(kobj_label(pod2, LABEL_SESSION_ID));
}

/* ---- the PVC ---- */

static void test_pvc_fields(void **state)
{
        kobj_spec spec = full_spec();
        _cleanup_json_ json_t *pvc = kobj_pvc_build("sbx-ns", &spec, ID, NULL);
        _cleanup_json_ json_t *ann = json_pack("{s:s}", ANN_DELETE_AFTER, "2030-01-01T00:00:00Z");
        _cleanup_json_ json_t *pvc2 = NULL;
        json_t *modes;

        (void)state;
        assert_string_equal(str_at(pvc, "apiVersion"), "v1");
        assert_string_equal(str_at(pvc, "kind"), "PersistentVolumeClaim");
        assert_string_equal(str_at(pvc, "metadata.name"), "ws-" ID);
        assert_string_equal(str_at(pvc, "metadata.namespace"), "sbx-ns");
        assert_int_equal(json_object_size(at(pvc, "metadata.labels")), 5);
        assert_string_equal(kobj_label(pvc, LABEL_MANAGED_BY), "compute-frontend");
        assert_string_equal(kobj_label(pvc, LABEL_SANDBOX_ID), ID);
        assert_string_equal(kobj_label(pvc, LABEL_TENANT_ID), "acme");
        assert_true(json_is_object(at(pvc, "metadata.annotations")));
        /* Whose it is, for ListSandboxes once the pod is gone. */
        assert_int_equal(json_object_size(at(pvc, "metadata.annotations")), 2);
        assert_string_equal(kobj_annotation(pvc, ANN_TENANT_ID), "acme");
        assert_string_equal(kobj_annotation(pvc, ANN_SESSION_ID), "s-1");
        assert_string_equal(kobj_pvc_tenant(pvc), "acme");
        modes = at(pvc, "spec.accessModes");
        assert_int_equal(json_array_size(modes), 1);
        assert_string_equal(json_string_value(json_array_get(modes, 0)), "ReadWriteOnce");
        assert_string_equal(str_at(pvc, "spec.resources.requests.storage"), "5Gi");
        assert_string_equal(str_at(pvc, "spec.storageClassName"), "fast-ssd");
        assert_false(kobj_pvc_destroyed(pvc));
        assert_null(at(pvc, "metadata.ownerReferences"));

        /* No class: the cluster's default (the field absent, not ""); annotations given. */
        spec.storage_class = "";
        pvc2 = kobj_pvc_build("sbx-ns", &spec, ID, ann);
        assert_null(at(pvc2, "spec.storageClassName"));
        assert_string_equal(kobj_annotation(pvc2, ANN_DELETE_AFTER), "2030-01-01T00:00:00Z");
        assert_true(kobj_pvc_destroyed(pvc2));
        assert_false(kobj_pvc_destroyed(NULL));
        /* The caller's annotations are borrowed, not taken. */
        assert_int_equal(ann->refcount, 2);
}

/* ---- destroy's record and the readings back ---- */

static void test_destroy_annotations_and_view(void **state)
{
        usage_metrics u = { .cpu_ms = 1234, .memory_peak_bytes = 5 << 20 };
        int64_t now = 1767225600000ll; /* 2026-01-01T00:00:00Z */
        _cleanup_json_ json_t *pod = json_pack(
                "{s:{s:s, s:{s:s, s:s}}}", "metadata", "creationTimestamp", "2025-12-31T23:00:00Z",
                "annotations", ANN_TENANT_ID, "acme", ANN_SESSION_ID, "s-1");
        _cleanup_json_ json_t *ann = kobj_destroy_annotations(3600, pod, NULL, &u, now);
        _cleanup_json_ json_t *ann2 = NULL, *usage = NULL, *pvc = NULL;
        fe_view v = { 0 };

        (void)state;
        assert_int_equal(json_object_size(ann), 6);
        assert_string_equal(json_string_value(json_object_get(ann, ANN_TENANT_ID)), "acme");
        assert_string_equal(json_string_value(json_object_get(ann, ANN_SESSION_ID)), "s-1");
        assert_string_equal(json_string_value(json_object_get(ann, ANN_DELETE_AFTER)),
                            "2026-01-01T01:00:00Z");
        assert_string_equal(json_string_value(json_object_get(ann, ANN_DESTROYED_AT)),
                            "2026-01-01T00:00:00Z");
        assert_string_equal(json_string_value(json_object_get(ann, ANN_CREATED_AT)),
                            "2025-12-31T23:00:00Z");
        usage = json_loads(json_string_value(json_object_get(ann, ANN_FINAL_USAGE)), 0, NULL);
        assert_non_null(usage);
        assert_int_equal(json_integer_value(json_object_get(usage, "cpu_ms")), 1234);
        assert_int_equal(json_integer_value(json_object_get(usage, "memory_peak_bytes")), 5 << 20);

        /* Read back as the PVC carries it. */
        pvc = json_pack("{s:{s:s, s:O}}", "metadata", "creationTimestamp", "2025-06-01T00:00:00Z",
                        "annotations", ann);
        kobj_view_destroyed(ID, pvc, &v);
        assert_string_equal(v.id, ID);
        assert_int_equal(v.status, FE_STATUS_DESTROYED);
        assert_int_equal(v.created_at_ms, now - 3600 * 1000);
        assert_int_equal(v.destroyed_at_ms, now);
        assert_int_equal(v.usage.cpu_ms, 1234);
        assert_int_equal(v.usage.memory_peak_bytes, 5 << 20);
        assert_string_equal(v.tenant_id, "acme");
        assert_string_equal(v.session_id, "s-1");
        assert_null(v.reason);
        fe_view_clear(&v);

        /* Without a pod: the PVC's creation time; without either: now. */
        ann2 = kobj_destroy_annotations(0, NULL, pvc, &u, now);
        assert_string_equal(json_string_value(json_object_get(ann2, ANN_CREATED_AT)),
                            "2025-06-01T00:00:00Z");
        /* The PVC's owner annotations are carried over when there is no pod. */
        assert_string_equal(json_string_value(json_object_get(ann2, ANN_TENANT_ID)), "acme");
        assert_string_equal(json_string_value(json_object_get(ann2, ANN_DELETE_AFTER)),
                            "2026-01-01T00:00:00Z");
        json_decref(ann2);
        ann2 = kobj_destroy_annotations(0, NULL, NULL, &u, now);
        assert_string_equal(json_string_value(json_object_get(ann2, ANN_CREATED_AT)),
                            "2026-01-01T00:00:00Z");
}

static json_t *pod_in(const char *phase, const char *ready, bool deleting)
{
        json_t *pod = json_pack("{s:{}, s:{s:s}}", "metadata", "status", "phase", phase);

        if (ready)
                json_object_set_new(json_object_get(pod, "status"), "conditions",
                                    json_pack("[{s:s, s:s}, {s:s, s:s}]", "type", "Initialized",
                                              "status", "True", "type", "Ready", "status", ready));
        if (deleting)
                json_object_set_new(json_object_get(pod, "metadata"), "deletionTimestamp",
                                    json_string("2026-01-01T00:00:00Z"));
        return pod;
}

static void test_pod_status(void **state)
{
        struct {
                const char *phase, *ready;
                bool deleting;
                fe_status want;
        } rows[] = {
                { "Pending", NULL, false, FE_STATUS_STARTING },
                { "Running", NULL, false, FE_STATUS_STARTING },
                { "Running", "False", false, FE_STATUS_STARTING },
                { "Running", "True", false, FE_STATUS_READY },
                { "Running", "True", true, FE_STATUS_FAILED },
                { "Failed", NULL, false, FE_STATUS_FAILED },
                { "Succeeded", NULL, false, FE_STATUS_FAILED },
                { "Unknown", NULL, false, FE_STATUS_STARTING },
        };
        _cleanup_json_ json_t *bare = json_object();

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
                _cleanup_json_ json_t *pod = pod_in(rows[i].phase, rows[i].ready, rows[i].deleting);
                assert_int_equal(kobj_pod_status(pod), rows[i].want);
                assert_int_equal(kobj_being_deleted(pod), rows[i].deleting);
        }
        assert_int_equal(kobj_pod_status(bare), FE_STATUS_STARTING);
}

/* ---- status_reason ---- */

/* The built pod (limits 250m, 128 MiB, activeDeadlineSeconds 2) with status (a JSON text). */
static json_t *built_pod_with_status(const char *status_json)
{
        kobj_spec spec = full_spec();
        json_t *pod = kobj_pod_build("ns", "gvisor", NULL, &spec, "sbx-x", ID);

        json_object_set_new(pod, "status", json_loads(status_json, 0, NULL));
        return pod;
}

static void assert_reason(const char *status_json, const char *want)
{
        _cleanup_json_ json_t *pod = built_pod_with_status(status_json);
        _cleanup_free_ char *raw = kobj_pod_reason(pod);
        fe_view v;

        if (!want) {
                assert_null(raw);
        } else {
                assert_non_null(raw);
                assert_string_equal(raw, want);
        }
        kobj_view_of_pod(ID, pod, &v);
        if (!want)
                assert_null(v.reason);
        else
                assert_non_null(v.reason);
        fe_view_clear(&v);
}

static void test_pod_reason(void **state)
{
        (void)state;
        assert_reason("{\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", "
                      "\"status\": \"True\"}]}",
                      NULL);
        assert_reason("{\"phase\": \"Pending\"}", NULL);
        assert_reason("{\"phase\": \"Pending\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                      "\"state\": {\"waiting\": {\"reason\": \"ContainerCreating\"}}}]}",
                      NULL);
        assert_reason("{\"phase\": \"Pending\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                      "\"state\": {\"waiting\": {\"reason\": \"ImagePullBackOff\", \"message\": "
                      "\"Back-off pulling image \\\"nope:1\\\"\"}}}]}",
                      "the image cannot be pulled: ImagePullBackOff: Back-off pulling image "
                      "\"nope:1\"");
        assert_reason("{\"phase\": \"Pending\", \"conditions\": [{\"type\": \"PodScheduled\", "
                      "\"status\": \"False\", \"reason\": \"Unschedulable\", \"message\": \"0/3 "
                      "nodes are available: 3 Insufficient memory.\"}]}",
                      "the sandbox cannot be scheduled: Unschedulable: 0/3 nodes are available: "
                      "3 Insufficient memory.");
        assert_reason("{\"phase\": \"Failed\", \"reason\": \"DeadlineExceeded\", \"message\": "
                      "\"Pod was active on the node longer than the specified deadline\"}",
                      "max_runtime of 2 s exceeded");
        assert_reason("{\"phase\": \"Failed\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                      "\"state\": {\"terminated\": {\"reason\": \"OOMKilled\", \"exitCode\": "
                      "137}}}]}",
                      "the sandbox ran out of memory (limit 128 MiB)");
        assert_reason("{\"phase\": \"Failed\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                      "\"state\": {\"terminated\": {\"reason\": \"Error\", \"exitCode\": 3}}}]}",
                      "the sandbox's container exited with code 3 (Error)");
        assert_reason("{\"phase\": \"Failed\", \"reason\": \"Evicted\", \"message\": \"The node "
                      "was low on resource: ephemeral-storage.\"}",
                      "the sandbox's pod failed: Evicted: The node was low on resource: "
                      "ephemeral-storage.");
        assert_reason("{\"phase\": \"Failed\"}", "the sandbox's pod failed");
        assert_reason("{\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", "
                      "\"status\": \"Unknown\", \"reason\": \"NodeLost\"}]}",
                      "the sandbox's node is not responding (node lost)");
        assert_reason("{\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", "
                      "\"status\": \"False\", \"reason\": \"NodeNotReady\"}]}",
                      "the sandbox's node is not responding (node lost)");
}

static void test_view_of_pod(void **state)
{
        _cleanup_json_ json_t *pod = built_pod_with_status(
                "{\"phase\": \"Pending\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                "\"state\": {\"waiting\": {\"reason\": \"ErrImagePull\", \"message\": \"open "
                "/var/lib/containerd/x: no such file\\n\\u0001\"}}}]}");
        fe_view v;

        (void)state;
        json_object_set_new(json_object_get(pod, "metadata"), "creationTimestamp",
                            json_string("2026-01-01T00:00:00Z"));
        kobj_view_of_pod(ID, pod, &v);
        assert_string_equal(v.id, ID);
        assert_int_equal(v.status, FE_STATUS_STARTING);
        assert_int_equal(v.created_at_ms, 1767225600000ll);
        assert_string_equal(v.tenant_id, "acme");
        assert_string_equal(v.session_id, "s-1");
        assert_int_equal(v.cpu_millis, 250);
        assert_int_equal(v.memory_bytes, 128ull << 20);
        assert_int_equal(v.max_runtime_ms, 2000);
        /* Cleaned: no host path, no control characters. */
        assert_string_equal(v.reason,
                            "the image cannot be pulled: ErrImagePull: open <path>: no such file");
        fe_view_clear(&v);
}

static void test_workspace_mount_path(void **state)
{
        _cleanup_json_ json_t *pod = json_pack(
                "{s:{s:[{s:s, s:[{s:s, s:s}]}, {s:s, s:[{s:s, s:s}, {s:s, s:s}]}]}}", "spec",
                "containers", "name", "sidecar", "volumeMounts", "name", WORKSPACE_VOLUME,
                "mountPath", "/not-this", "name", SANDBOX_CONTAINER, "volumeMounts", "name",
                "other", "mountPath", "/other", "name", WORKSPACE_VOLUME, "mountPath", "/ws");
        _cleanup_json_ json_t *none =
                json_pack("{s:{s:[{s:s}]}}", "spec", "containers", "name", SANDBOX_CONTAINER);

        (void)state;
        assert_string_equal(kobj_workspace_mount_path(pod), "/ws");
        assert_null(kobj_workspace_mount_path(none));
}

static void test_metadata_readers(void **state)
{
        (void)state;
        assert_int_equal(kobj_time_of("2026-01-01T00:00:00Z"), 1767225600000ll);
        assert_int_equal(kobj_time_of(NULL), 0);
        assert_int_equal(kobj_time_of("yesterday"), 0);
        assert_true(kobj_streq0("a", "a"));
        assert_false(kobj_streq0("a", "b"));
        assert_false(kobj_streq0(NULL, "a"));
        assert_false(kobj_streq0(NULL, NULL));
}

/* A claimed warm pool pod (kube_pool.c): created_at is the claim, max_runtime subtracts the
 * pod's age at the claim from its activeDeadlineSeconds, and the idle usage is subtracted. */
static void test_claimed_pool_pod(void **state)
{
        kobj_spec spec = full_spec();
        _cleanup_json_ json_t *pod = kobj_pod_build("ns", "gvisor", NULL, &spec, "sbx-x", ID);
        json_t *md = json_object_get(pod, "metadata");
        json_t *ann = json_object_get(md, "annotations");
        usage_metrics u = { .cpu_ms = 500, .memory_peak_bytes = 77, .disk_write_bytes = 10 };
        fe_view v;

        (void)state;
        spec.max_runtime_ms = 600000;
        json_object_set_new(md, "creationTimestamp", json_string("2026-01-01T00:00:00Z"));
        assert_int_equal(kobj_pod_created_at(pod), kobj_time_of("2026-01-01T00:00:00Z"));
        kobj_usage_subtract_baseline(pod, &u); /* no baseline: unchanged */
        assert_int_equal(u.cpu_ms, 500);
        json_object_set_new(ann, ANN_CLAIMED_AT, json_string("2026-01-01T00:01:40Z"));
        json_object_set_new(ann, ANN_CLAIM_OFFSET, json_string("100"));
        json_object_set_new(ann, ANN_USAGE_BASELINE,
                            json_string("{\"cpu_ms\": 120, \"memory_peak_bytes\": 50, "
                                        "\"disk_write_bytes\": 99}"));
        json_object_set_new(json_object_get(pod, "spec"), "activeDeadlineSeconds",
                            json_integer(100 + 600));
        assert_int_equal(kobj_pod_created_at(pod), kobj_time_of("2026-01-01T00:01:40Z"));
        kobj_view_of_pod(ID, pod, &v);
        assert_int_equal(v.created_at_ms, kobj_time_of("2026-01-01T00:01:40Z"));
        assert_int_equal(v.max_runtime_ms, 600000);
        fe_view_clear(&v);
        /* Its deadline passed: the reason names max_runtime, not the pod's whole deadline. */
        json_object_set_new(
                pod, "status",
                json_pack("{s:s, s:s}", "phase", "Failed", "reason", "DeadlineExceeded"));
        {
                _cleanup_free_ char *why = kobj_pod_reason(pod);
                assert_string_equal(why, "max_runtime of 600 s exceeded");
        }
        kobj_usage_subtract_baseline(pod, &u);
        assert_int_equal(u.cpu_ms, 380);
        assert_int_equal(u.memory_peak_bytes, 77); /* the cgroup's own: left as read */
        assert_int_equal(u.disk_write_bytes, 0);   /* never below 0 */
}

/* ---- what the caches keep (kobj_trim) ---- */

static void assert_same_str(const char *a, const char *b)
{
        if (!a || !b)
                assert_true(a == b);
        else
                assert_string_equal(a, b);
}

static void assert_same_view(const fe_view *a, const fe_view *b)
{
        assert_same_str(a->id, b->id);
        assert_int_equal(a->status, b->status);
        assert_int_equal(a->created_at_ms, b->created_at_ms);
        assert_int_equal(a->destroyed_at_ms, b->destroyed_at_ms);
        assert_same_str(a->tenant_id, b->tenant_id);
        assert_same_str(a->session_id, b->session_id);
        assert_int_equal(a->cpu_millis, b->cpu_millis);
        assert_int_equal(a->memory_bytes, b->memory_bytes);
        assert_int_equal(a->max_runtime_ms, b->max_runtime_ms);
        assert_same_str(a->reason, b->reason);
        assert_memory_equal(&a->usage, &b->usage, sizeof(a->usage));
}

static const char *const all_labels[] = { LABEL_SANDBOX_ID, LABEL_POOL, LABEL_TENANT_ID,
                                          LABEL_SESSION_ID };
static const char *const all_annotations[] = {
        ANN_TENANT_ID,    ANN_SESSION_ID,   ANN_CLAIMED_AT,  ANN_CLAIM_OFFSET, ANN_USAGE_BASELINE,
        ANN_DELETE_AFTER, ANN_DESTROYED_AT, ANN_FINAL_USAGE, ANN_CREATED_AT,   ANN_ADOPTED_AT,
};
static const char *const pod_paths[] = {
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.resourceVersion",
        "metadata.creationTimestamp",
        "metadata.deletionTimestamp",
        "spec.nodeName",
        "status.phase",
        "status.reason",
        "status.message",
        "status.startTime",
};

/* Every reading of a sandbox pod (this file's, and the paths the scheduler reads) answers the
 * same of the trimmed pod as of the whole one. */
static void assert_pod_reads_same(json_t *whole)
{
        _cleanup_json_ json_t *t = kobj_trim(whole, KOBJ_SANDBOX_POD);
        _cleanup_free_ char *r1 = kobj_pod_reason(whole), *r2 = kobj_pod_reason(t);
        _cleanup_json_ json_t *d1 = NULL, *d2 = NULL;
        usage_metrics u1 = { .cpu_ms = 500, .disk_read_bytes = 7 }, u2 = u1;
        fe_view v1, v2;

        assert_non_null(t);
        assert_int_equal(kobj_pod_status(whole), kobj_pod_status(t));
        assert_same_str(r1, r2);
        assert_int_equal(kobj_pod_created_at(whole), kobj_pod_created_at(t));
        assert_int_equal(kobj_being_deleted(whole), kobj_being_deleted(t));
        assert_same_str(kobj_workspace_mount_path(whole), kobj_workspace_mount_path(t));
        for (size_t i = 0; i < ARRAY_SIZE(all_labels); i++)
                assert_same_str(kobj_label(whole, all_labels[i]), kobj_label(t, all_labels[i]));
        for (size_t i = 0; i < ARRAY_SIZE(all_annotations); i++)
                assert_same_str(kobj_annotation(whole, all_annotations[i]),
                                kobj_annotation(t, all_annotations[i]));
        for (size_t i = 0; i < ARRAY_SIZE(pod_paths); i++)
                assert_same_str(str_at(whole, pod_paths[i]), str_at(t, pod_paths[i]));
        kobj_view_of_pod(ID, whole, &v1);
        kobj_view_of_pod(ID, t, &v2);
        assert_same_view(&v1, &v2);
        fe_view_clear(&v1);
        fe_view_clear(&v2);
        kobj_usage_subtract_baseline(whole, &u1);
        kobj_usage_subtract_baseline(t, &u2);
        assert_memory_equal(&u1, &u2, sizeof(u1));
        d1 = kobj_destroy_annotations(60, whole, NULL, &u1, 1767225600000ll);
        d2 = kobj_destroy_annotations(60, t, NULL, &u1, 1767225600000ll);
        assert_true(json_equal(d1, d2));
}

/* A pod as a real API server answers it: the built pod (with the resident exec path's init
 * container, mounts and volumes), managedFields, others' labels and annotations, a node, a
 * claim, and a status. */
static json_t *whole_pod(const char *status_json)
{
        kobj_spec spec = full_spec();
        json_t *pod = kobj_pod_build("ns", "gvisor", "agent:1", &spec, "sbx-x", ID);
        json_t *md = json_object_get(pod, "metadata");

        json_object_set_new(md, "uid", json_string("u-1"));
        json_object_set_new(md, "resourceVersion", json_string("123"));
        json_object_set_new(md, "creationTimestamp", json_string("2026-01-01T00:00:00Z"));
        json_object_set_new(md, "managedFields",
                            json_pack("[{s:s, s:{s:{}}}]", "manager", "compute-frontend",
                                      "fieldsV1", "f:metadata"));
        json_object_set_new(json_object_get(md, "labels"), LABEL_POOL, json_string("default"));
        json_object_set_new(json_object_get(md, "labels"), "team", json_string("x"));
        json_object_set_new(json_object_get(md, "annotations"),
                            "kubectl.kubernetes.io/last-applied-configuration",
                            json_string("{\"a very\": \"long text\"}"));
        json_object_set_new(json_object_get(md, "annotations"), ANN_CLAIMED_AT,
                            json_string("2026-01-01T00:01:40Z"));
        json_object_set_new(json_object_get(md, "annotations"), ANN_CLAIM_OFFSET,
                            json_string("100"));
        json_object_set_new(json_object_get(md, "annotations"), ANN_ADOPTED_AT,
                            json_string("2026-01-01T00:02:00Z"));
        json_object_set_new(json_object_get(md, "annotations"), ANN_USAGE_BASELINE,
                            json_string("{\"cpu_ms\": 120, \"disk_read_bytes\": 9}"));
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string("node-7"));
        json_object_set_new(pod, "status", json_loads(status_json, 0, NULL));
        return pod;
}

static void test_trimmed_pod_reads_the_same(void **state)
{
        static const char *const statuses[] = {
                "{}",
                "{\"phase\": \"Pending\", \"conditions\": [{\"type\": \"PodScheduled\", "
                "\"status\": \"False\", \"reason\": \"Unschedulable\", \"message\": \"0/3\", "
                "\"lastTransitionTime\": \"2026-01-01T00:00:00Z\"}]}",
                "{\"phase\": \"Pending\", \"containerStatuses\": [{\"name\": \"compute-init\", "
                "\"state\": {\"waiting\": {\"reason\": \"ErrImagePull\"}}}, {\"name\": "
                "\"sandbox\", \"image\": \"x\", \"state\": {\"waiting\": {\"reason\": "
                "\"ImagePullBackOff\", \"message\": \"Back-off\"}}}]}",
                "{\"phase\": \"Running\", \"podIP\": \"10.0.0.1\", \"startTime\": "
                "\"2026-01-01T00:00:01Z\", \"conditions\": [{\"type\": \"Initialized\", "
                "\"status\": \"True\"}, {\"type\": \"Ready\", \"status\": \"True\"}, {\"type\": "
                "\"Ready\", \"status\": \"False\"}], \"containerStatuses\": [{\"name\": "
                "\"sandbox\", \"ready\": true, \"restartCount\": 0, \"state\": {\"running\": "
                "{\"startedAt\": \"2026-01-01T00:00:02Z\"}}}]}",
                "{\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", \"status\": "
                "\"Unknown\", \"reason\": \"NodeLost\"}]}",
                "{\"phase\": \"Running\", \"reason\": \"NodeLost\"}",
                "{\"phase\": \"Failed\", \"reason\": \"DeadlineExceeded\"}",
                "{\"phase\": \"Failed\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                "\"state\": {\"terminated\": {\"reason\": \"OOMKilled\", \"exitCode\": 137, "
                "\"startedAt\": \"x\"}}}]}",
                "{\"phase\": \"Failed\", \"containerStatuses\": [{\"name\": \"sandbox\", "
                "\"state\": {\"terminated\": {}}}]}",
                "{\"phase\": \"Failed\", \"reason\": \"Evicted\", \"message\": \"low\"}",
                "{\"phase\": \"Succeeded\"}",
        };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(statuses); i++) {
                for (int deleting = 0; deleting < 2; deleting++) {
                        _cleanup_json_ json_t *pod = whole_pod(statuses[i]);
                        if (deleting) {
                                json_object_set_new(json_object_get(pod, "metadata"),
                                                    "deletionTimestamp",
                                                    json_string("2026-01-01T00:05:00Z"));
                                json_t *st = json_object_get(pod, "status");
                                if (!json_object_get(st, "conditions"))
                                        json_object_set_new(st, "conditions", json_array());
                                json_array_append_new(
                                        json_object_get(st, "conditions"),
                                        json_pack("{s:s, s:s, s:s, s:s}", "type",
                                                  "DisruptionTarget", "status", "True", "reason",
                                                  "EvictionByEvictionAPI", "message", "evicted"));
                        }
                        assert_pod_reads_same(pod);
                }
        }
}

static void test_trimmed_pod_keeps_little(void **state)
{
        _cleanup_json_ json_t *pod = whole_pod("{\"phase\": \"Running\"}");
        _cleanup_json_ json_t *t = kobj_trim(pod, KOBJ_SANDBOX_POD);
        _cleanup_free_ char *a = json_dumps(pod, JSON_COMPACT), *b = json_dumps(t, JSON_COMPACT);

        (void)state;
        /* Nothing the readers do not read: others' labels and annotations, managedFields, the
         * command, the image, the init container, the other mounts, the volumes. */
        assert_null(kobj_label(t, "team"));
        assert_null(kobj_annotation(t, "kubectl.kubernetes.io/last-applied-configuration"));
        assert_null(at(t, "metadata.managedFields"));
        assert_null(at(t, "spec.initContainers"));
        assert_null(at(t, "spec.volumes"));
        assert_int_equal(json_array_size(at(t, "spec.containers")), 1);
        assert_null(json_object_get(json_array_get(at(t, "spec.containers"), 0), "image"));
        assert_int_equal(json_array_size(json_object_get(
                                 json_array_get(at(t, "spec.containers"), 0), "volumeMounts")),
                         1);
        assert_true(strlen(b) * 2 < strlen(a));
}

/* A PVC, an agent pod, a guard: what their readers read is kept. */
static void test_trimmed_other_kinds(void **state)
{
        kobj_spec spec = full_spec();
        usage_metrics u = { .cpu_ms = 5 };
        _cleanup_json_ json_t *ann = kobj_destroy_annotations(60, NULL, NULL, &u, 1767225600000ll);
        _cleanup_json_ json_t *pvc = kobj_pvc_build("ns", &spec, ID, ann);
        _cleanup_json_ json_t *t = NULL, *agent = NULL, *ta = NULL, *guard = NULL, *tg = NULL;
        fe_view v1, v2;

        (void)state;
        json_object_set_new(json_object_get(pvc, "metadata"), "creationTimestamp",
                            json_string("2026-01-01T00:00:00Z"));
        json_object_set_new(pvc, "status", json_pack("{s:s}", "phase", "Bound"));
        t = kobj_trim(pvc, KOBJ_WORKSPACE_PVC);
        assert_int_equal(kobj_pvc_destroyed(pvc), kobj_pvc_destroyed(t));
        assert_true(kobj_pvc_destroyed(t));
        assert_same_str(kobj_pvc_tenant(pvc), kobj_pvc_tenant(t));
        for (size_t i = 0; i < ARRAY_SIZE(all_labels); i++)
                assert_same_str(kobj_label(pvc, all_labels[i]), kobj_label(t, all_labels[i]));
        for (size_t i = 0; i < ARRAY_SIZE(all_annotations); i++)
                assert_same_str(kobj_annotation(pvc, all_annotations[i]),
                                kobj_annotation(t, all_annotations[i]));
        kobj_view_destroyed(ID, pvc, &v1);
        kobj_view_destroyed(ID, t, &v2);
        assert_same_view(&v1, &v2);
        fe_view_clear(&v1);
        fe_view_clear(&v2);
        assert_null(at(t, "spec"));

        agent = json_pack("{s:{s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:s, s:[{s:s, s:i}, {s:s, s:i}], "
                          "s:[s]}, {s:s, s:s}]}, s:{s:s, s:s, s:s}}",
                          "metadata", "name", "agent-1", "labels", "app", "agent", "spec",
                          "nodeName", "node-7", "containers", "name", "agent", "image", "agent:1",
                          "ports", "name", "metrics", "containerPort", 9100, "name", "grpc",
                          "containerPort", 7443, "args", "--x", "name", "side", "image", "s:1",
                          "status", "phase", "Running", "podIP", "10.0.0.9", "hostIP", "10.1.1.1");
        ta = kobj_trim(agent, KOBJ_AGENT_POD);
        assert_string_equal(str_at(ta, "spec.nodeName"), "node-7");
        assert_string_equal(str_at(ta, "status.phase"), "Running");
        assert_string_equal(str_at(ta, "status.podIP"), "10.0.0.9");
        assert_string_equal(str_at(json_array_get(at(ta, "spec.containers"), 0), "image"),
                            "agent:1");
        assert_true(json_equal(
                json_object_get(json_array_get(at(agent, "spec.containers"), 0), "ports"),
                json_object_get(json_array_get(at(ta, "spec.containers"), 0), "ports")));
        assert_int_equal(json_array_size(at(ta, "spec.containers")), 2);

        guard = json_pack("{s:{s:s, s:s, s:s, s:{s:s, s:s}}, s:{s:s, s:s}}", "metadata", "name",
                          "sbx-x", "uid", "u", "resourceVersion", "9", "annotations", ANN_TENANT_ID,
                          "acme", ANN_SESSION_ID, "s-1", "data", GUARD_KEY, ID, "other", "x");
        tg = kobj_trim(guard, KOBJ_GUARD);
        assert_string_equal(str_at(tg, "data." GUARD_KEY), ID);
        assert_null(str_at(tg, "data.other"));
        assert_string_equal(kobj_annotation(tg, ANN_SESSION_ID), "s-1");
        assert_string_equal(str_at(tg, "metadata.resourceVersion"), "9");
}

/* Odd or hostile JSON (labels and annotations anyone with access can set): no crash, and
 * what is not of the expected type is dropped, not kept whole. */
static void test_trim_odd_json(void **state)
{
        static const char *const odd[] = {
                "{\"metadata\": [], \"spec\": 3, \"status\": \"x\"}",
                "{\"metadata\": {\"name\": {\"big\": [1, 2, 3]}, \"labels\": [\"a\"], "
                "\"annotations\": {\"" ANN_TENANT_ID "\": {\"x\": 1}, \"" ANN_SESSION_ID "\": 5}}}",
                "{\"spec\": {\"containers\": {\"name\": \"sandbox\"}, \"nodeName\": [\"n\"]}}",
                "{\"spec\": {\"containers\": [1, null, \"s\", {\"name\": 3}, {\"name\": "
                "\"sandbox\", \"volumeMounts\": [{\"name\": \"workspace\", \"mountPath\": "
                "[]}]}]}}",
                "{\"status\": {\"conditions\": [{\"type\": [\"Ready\"]}, 7], "
                "\"containerStatuses\": [{\"name\": \"sandbox\", \"state\": []}]}}",
        };

        (void)state;
        assert_null(kobj_trim(NULL, KOBJ_SANDBOX_POD));
        {
                _cleanup_json_ json_t *a = json_array();
                assert_null(kobj_trim(a, KOBJ_SANDBOX_POD));
        }
        for (size_t i = 0; i < ARRAY_SIZE(odd); i++) {
                json_error_t e;
                _cleanup_json_ json_t *o = json_loads(odd[i], 0, &e);
                _cleanup_json_ json_t *t = NULL;

                assert_non_null(o);
                for (int kind = KOBJ_SANDBOX_POD; kind <= KOBJ_GUARD; kind++) {
                        json_decref(t);
                        t = kobj_trim(o, kind);
                        assert_non_null(t);
                }
                json_decref(t);
                t = kobj_trim(o, KOBJ_SANDBOX_POD);
                assert_pod_reads_same(o);
                assert_null(at(t, "metadata.name"));
                assert_null(kobj_annotation(t, ANN_TENANT_ID));
                assert_null(at(t, "metadata.annotations." ANN_TENANT_ID));
                assert_null(at(t, "spec.nodeName"));
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pod_name),
                cmocka_unit_test(test_spec_defaults),
                cmocka_unit_test(test_spec_checks),
                cmocka_unit_test(test_spec_network),
                cmocka_unit_test(test_quantity_and_class_names),
                cmocka_unit_test(test_pod_fields),
                cmocka_unit_test(test_pod_with_spawner),
                cmocka_unit_test(test_pod_without_runtime_class_and_odd_ids),
                cmocka_unit_test(test_pvc_fields),
                cmocka_unit_test(test_destroy_annotations_and_view),
                cmocka_unit_test(test_pod_status),
                cmocka_unit_test(test_pod_reason),
                cmocka_unit_test(test_view_of_pod),
                cmocka_unit_test(test_workspace_mount_path),
                cmocka_unit_test(test_metadata_readers),
                cmocka_unit_test(test_claimed_pool_pod),
                cmocka_unit_test(test_trimmed_pod_reads_the_same),
                cmocka_unit_test(test_trimmed_pod_keeps_little),
                cmocka_unit_test(test_trimmed_other_kinds),
                cmocka_unit_test(test_trim_odd_json),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
