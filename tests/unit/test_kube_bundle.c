/* Kube mode's pure rules (nodeagent/kube_bundle.c): reading containerd's bundle config,
 * matching a pod reference, finding the workspace mount, and the pod cgroup from a
 * cgroupsPath in both cgroup driver styles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kube_bundle.h"
#include "util.h"

/* What containerd writes for an app container (trimmed to what matters). */
static const char app_config[] =
        "{\"ociVersion\":\"1.0.2-dev\","
        " \"process\":{\"args\":[\"/bin/sh\"]},"
        " \"mounts\":["
        "  {\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},"
        "  {\"destination\":\"/etc/hosts\",\"type\":\"bind\",\"source\":\"/var/lib/containerd/"
        "hosts\",\"options\":[\"rbind\",\"rprivate\",\"rw\"]},"
        "  {\"destination\":\"/workspace\",\"type\":\"bind\",\"source\":\"/var/lib/kubelet/pods/"
        "u1/volumes/kubernetes.io~csi/pvc-1/mount\",\"options\":[\"rbind\",\"rprivate\",\"rw\"]},"
        "  {\"destination\":\"/data/\",\"source\":\"/srv/data\",\"options\":[\"bind\"]},"
        "  {\"destination\":\"/tmpfs\",\"type\":\"tmpfs\",\"source\":\"tmpfs\"}"
        " ],"
        " \"annotations\":{"
        "  \"io.kubernetes.cri.container-type\":\"container\","
        "  \"io.kubernetes.cri.sandbox-id\":\"pause1\","
        "  \"io.kubernetes.cri.sandbox-namespace\":\"compute-sandboxes\","
        "  \"io.kubernetes.cri.sandbox-name\":\"sbx-abc\","
        "  \"io.kubernetes.cri.sandbox-uid\":\"u1\","
        "  \"io.kubernetes.cri.container-name\":\"sandbox\","
        "  \"io.kubernetes.cri.image-name\":\"debian:bookworm\"},"
        " \"linux\":{\"cgroupsPath\":\"/kubepods/burstable/podu1/app1\","
        "  \"resources\":{\"cpu\":{\"shares\":512,\"quota\":50000,\"period\":100000},"
        "   \"memory\":{\"limit\":268435456}}}}";

static void test_parse_app_container(void **state)
{
        kb_container c, copy;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(kb_parse_config(app_config, strlen(app_config), &c, &err), 0);
        assert_string_equal(c.type, "container");
        assert_string_equal(c.sandbox_id, "pause1");
        assert_string_equal(c.pod_namespace, "compute-sandboxes");
        assert_string_equal(c.pod_name, "sbx-abc");
        assert_string_equal(c.pod_uid, "u1");
        assert_string_equal(c.container_name, "sandbox");
        assert_string_equal(c.image, "debian:bookworm");
        assert_string_equal(c.cgroups_path, "/kubepods/burstable/podu1/app1");
        assert_int_equal(c.cpu_millis, 500);
        assert_int_equal(c.memory_bytes, 268435456);
        /* Bind mounts only: /etc/hosts, /workspace, /data (by its "bind" option). */
        assert_int_equal(c.n_mounts, 3);
        kb_container_copy(&c, &copy);
        kb_container_clear(&c);
        assert_string_equal(copy.pod_name, "sbx-abc");
        assert_int_equal(copy.n_mounts, 3);
        assert_string_equal(copy.mounts[1].destination, "/workspace");
        kb_container_clear(&copy);
}

static void test_parse_rejects_and_tolerates(void **state)
{
        kb_container c;
        cs_error *err = NULL;
        const char *empty = "{}";

        (void)state;
        assert_int_equal(kb_parse_config("[1]", 3, &c, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_freep(&err);
        assert_int_equal(kb_parse_config("{not json", 9, &c, &err), -1);
        cs_error_freep(&err);
        /* Not a CRI container: parsed, everything empty. */
        assert_int_equal(kb_parse_config(empty, strlen(empty), &c, &err), 0);
        assert_string_equal(c.type, "");
        assert_string_equal(c.cgroups_path, "");
        assert_int_equal(c.n_mounts, 0);
        assert_int_equal(c.cpu_millis, 0);
        kb_container_clear(&c);
}

static void test_matching(void **state)
{
        kb_container c;
        cs_error *err = NULL;
        kb_ref ref = { "compute-sandboxes", "sbx-abc", "", "sandbox" };

        (void)state;
        assert_int_equal(kb_parse_config(app_config, strlen(app_config), &c, &err), 0);
        assert_true(kb_matches(&c, &ref));
        ref.pod_uid = "u1";
        assert_true(kb_matches(&c, &ref));
        ref.pod_uid = NULL;
        assert_true(kb_matches(&c, &ref));
        ref.pod_uid = "u2";
        assert_false(kb_matches(&c, &ref));
        ref.pod_uid = "";
        ref.container_name = "other";
        assert_false(kb_matches(&c, &ref));
        ref.container_name = "sandbox";
        ref.pod_namespace = "default";
        assert_false(kb_matches(&c, &ref));
        ref.pod_namespace = "compute-sandboxes";
        ref.pod_name = "sbx-ab";
        assert_false(kb_matches(&c, &ref));
        ref.pod_name = "sbx-abc";
        /* The pause container never matches. */
        free(c.type);
        c.type = cs_xstrdup("sandbox");
        assert_false(kb_matches(&c, &ref));
        kb_container_clear(&c);
}

static void test_inherit_from_pause(void **state)
{
        kb_container app = { 0 }, pause = { 0 };
        static const char a[] = "{\"annotations\":{\"io.kubernetes.cri.container-type\":"
                                "\"container\",\"io.kubernetes.cri.sandbox-id\":\"p\","
                                "\"io.kubernetes.cri.container-name\":\"sandbox\"}}";
        static const char p[] = "{\"annotations\":{\"io.kubernetes.cri.container-type\":"
                                "\"sandbox\",\"io.kubernetes.cri.sandbox-namespace\":\"ns\","
                                "\"io.kubernetes.cri.sandbox-name\":\"n\","
                                "\"io.kubernetes.cri.sandbox-uid\":\"u\"}}";
        kb_ref ref = { "ns", "n", "u", "sandbox" };
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(kb_parse_config(a, strlen(a), &app, &err), 0);
        assert_int_equal(kb_parse_config(p, strlen(p), &pause, &err), 0);
        assert_false(kb_matches(&app, &ref));
        kb_inherit_pod(&app, &pause);
        assert_true(kb_matches(&app, &ref));
        kb_container_clear(&app);
        kb_container_clear(&pause);
}

static void test_mount_lookup(void **state)
{
        kb_container c;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(kb_parse_config(app_config, strlen(app_config), &c, &err), 0);
        assert_string_equal(kb_mount_source(&c, "/workspace"),
                            "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount");
        assert_string_equal(kb_mount_source(&c, "/workspace/"),
                            "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount");
        assert_string_equal(kb_mount_source(&c, "/data"), "/srv/data");
        assert_null(kb_mount_source(&c, "/work"));
        assert_null(kb_mount_source(&c, "/workspace2"));
        assert_null(kb_mount_source(&c, "/tmpfs")); /* not a bind mount */
        assert_null(kb_mount_source(&c, "/proc"));
        kb_container_clear(&c);
}

static void expect_cgroup(const char *in, const char *want)
{
        char *got = NULL;
        cs_error *err = NULL;

        if (kb_pod_cgroup(in, &got, &err) < 0)
                fail_msg("%s: %s", in, err->msg);
        assert_string_equal(got, want);
        free(got);
}

static void expect_bad_cgroup(const char *in)
{
        char *got = NULL;
        cs_error *err = NULL;

        assert_int_equal(kb_pod_cgroup(in, &got, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_null(got);
        cs_error_free(err);
}

static void test_pod_cgroup(void **state)
{
        (void)state;
        /* cgroupfs driver */
        expect_cgroup("/kubepods/burstable/pod1234/abcd", "/kubepods/burstable/pod1234");
        expect_cgroup("/kubepods/pod1234/abcd", "/kubepods/pod1234");
        expect_cgroup("kubepods/besteffort/pod1/c", "/kubepods/besteffort/pod1");
        expect_cgroup("/kubepods/burstable/pod1234/abcd/", "/kubepods/burstable/pod1234");
        expect_cgroup("/solo", "/solo");
        /* systemd driver */
        expect_cgroup("kubepods-burstable-pod1234_5678.slice:cri-containerd:abcd",
                      "/kubepods.slice/kubepods-burstable.slice/"
                      "kubepods-burstable-pod1234_5678.slice");
        expect_cgroup("kubepods-pod12.slice:cri-containerd:abcd",
                      "/kubepods.slice/kubepods-pod12.slice");
        expect_cgroup("kubepods-besteffort-pod9.slice:cri-containerd:x",
                      "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice");
        expect_cgroup("system.slice:docker:abc", "/system.slice");
        expect_cgroup("-.slice:x:y", "/");
        /* malformed */
        expect_bad_cgroup("");
        expect_bad_cgroup(NULL);
        expect_bad_cgroup("/");
        expect_bad_cgroup("/kubepods/../etc/x");
        expect_bad_cgroup("/kubepods/./x");
        expect_bad_cgroup("kubepods.slice:cri-containerd");
        expect_bad_cgroup("kubepods.slice:a:b:c");
        expect_bad_cgroup("kubepods:cri-containerd:abcd");
        expect_bad_cgroup("kubepods--x.slice:p:n");
        expect_bad_cgroup("-kubepods.slice:p:n");
        expect_bad_cgroup("kubepods-.slice:p:n");
        expect_bad_cgroup("/abs.slice:p:n");
        expect_bad_cgroup(":p:n");
        expect_bad_cgroup("a.slice:p:");
}

/* Found by fuzz_kube_bundle: quota * 1000 overflowed 64 bits, and the result was cut to 32. */
static void test_parse_huge_quota(void **state)
{
        static const char *const docs[] = {
                "{\"linux\":{\"resources\":{\"cpu\":{\"quota\":9223372036854775807,"
                "\"period\":1}}}}",
                "{\"linux\":{\"resources\":{\"cpu\":{\"quota\":5000000000,\"period\":1}}}}",
        };
        kb_container c;
        cs_error *err = NULL;

        (void)state;
        for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
                assert_int_equal(kb_parse_config(docs[i], strlen(docs[i]), &c, &err), 0);
                assert_int_equal(c.cpu_millis, UINT32_MAX);
                kb_container_clear(&c);
        }
}

/* Found by fuzz_kube_bundle: a long slice name asked for memory quadratic in its length. */
static void test_pod_cgroup_long_slice(void **state)
{
        size_t n = 50000;
        char *path = cs_xcalloc(1, n + 64), *cg = NULL;
        cs_error *err = NULL;

        (void)state;
        memset(path, 'a', n);
        strcpy(path + n, ".slice:cri-containerd:x");
        assert_int_equal(kb_pod_cgroup(path, &cg, &err), 0);
        assert_int_equal(strlen(cg), 1 + n + 6);
        free(cg);
        free(path);
}

static void test_host_path(void **state)
{
        char *p;

        (void)state;
        p = kb_host_path("", "/var/lib/x");
        assert_string_equal(p, "/var/lib/x");
        free(p);
        p = kb_host_path(NULL, "/var/lib/x");
        assert_string_equal(p, "/var/lib/x");
        free(p);
        p = kb_host_path("/host", "/var/lib/x");
        assert_string_equal(p, "/host/var/lib/x");
        free(p);
        p = kb_host_path("/host/", "/var/lib/x");
        assert_string_equal(p, "/host/var/lib/x");
        free(p);
        p = kb_host_path("/", "/var/lib/x");
        assert_string_equal(p, "/var/lib/x");
        free(p);
        assert_null(kb_host_path("/host", "relative"));
        assert_null(kb_host_path("/host", NULL));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_app_container),
                cmocka_unit_test(test_parse_rejects_and_tolerates),
                cmocka_unit_test(test_matching),
                cmocka_unit_test(test_inherit_from_pause),
                cmocka_unit_test(test_mount_lookup),
                cmocka_unit_test(test_pod_cgroup),
                cmocka_unit_test(test_host_path),
                cmocka_unit_test(test_parse_huge_quota),
                cmocka_unit_test(test_pod_cgroup_long_slice),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
