/* The agent's sandbox sources (nodeagent/source*.c) behind the seam, without gRPC, root or
 * runsc: the paging both sources share, each source's checks of a reference (exact statuses
 * and messages, and when the call gets named), the local source over a real registry whose
 * fake runtime "runs" what it creates (create again, list pages, acquire, describe, destroy,
 * counts), and the kube source end to end over a fake runtime that lists containers whose
 * bundles the test writes (find, wait for a created container, describe, list pages,
 * counts), with a real kube-mode registry behind it.
 *
 * Owns: its temporary directory (removed at the end). Touches nothing of the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_runtime.h"
#include "testfs.h"
#include "source.h"
#include "util.h"
#include "uuid.h"

#define SB_UUID "0b4c6f1e-2f4a-4c1d-9c0e-1a2b3c4d5e6f"

/* --- a call that records what the source told it ------------------------------------------ */

typedef struct named {
        char id[64];
        int times;
} named;

static void record_name(void *userdata, const char *sandbox_id)
{
        named *n = userdata;

        snprintf(n->id, sizeof(n->id), "%s", sandbox_id);
        n->times++;
}

static src_call call_of(named *n, int cancel_fd)
{
        *n = (named){ { 0 }, 0 };
        return (src_call){ .cancel_fd = cancel_fd, .set_sandbox_id = record_name, .userdata = n };
}

static src_ref pod_ref(const char *ns, const char *name)
{
        return (src_ref){ .sandbox_id = "",
                          .pod_namespace = ns,
                          .pod_name = name,
                          .pod_uid = "",
                          .container_name = "",
                          .mount_path = "" };
}

/* Asserts err holds code and msg, and frees it. */
static void expect_error(cs_error **err, grpc_status_code code, const char *msg)
{
        assert_non_null(*err);
        assert_int_equal((*err)->code, code);
        assert_string_equal((*err)->msg, msg);
        cs_error_freep(err);
}

/* --- cs_fd_readable ------------------------------------------------------------------------- */

static void test_fd_readable(void **state)
{
        int p[2];

        (void)state;
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_false(cs_fd_readable(-1));
        assert_false(cs_fd_readable(p[0]));
        assert_int_equal(write(p[1], "x", 1), 1);
        assert_true(cs_fd_readable(p[0]));
        close(p[1]);
        assert_true(cs_fd_readable(p[0])); /* data, then EOF: still readable */
        close(p[0]);
}

/* --- paging ------------------------------------------------------------------------------- */

static void test_page_count(void **state)
{
        (void)state;
        assert_int_equal(src_page_count(2000, 0, 0), SRC_PAGE_DEFAULT);
        assert_int_equal(src_page_count(2000, 0, 5000), SRC_PAGE_MAX);
        assert_int_equal(src_page_count(2000, 0, 999), 999);
        assert_int_equal(src_page_count(10, 8, 5), 2);
        assert_int_equal(src_page_count(10, 10, 5), 0);
        assert_int_equal(src_page_count(10, 11, 5), 0);
        assert_int_equal(src_page_count(0, 0, 0), 0);
}

static void test_offset_token(void **state)
{
        static const char *const bad[] = { "x", "12x", "1000001", "-1", " 1x" };
        cs_error *err = NULL;
        size_t off = 99;

        (void)state;
        assert_int_equal(src_offset_token_parse("", &off, &err), 0);
        assert_int_equal(off, 0);
        assert_int_equal(src_offset_token_parse("1000000", &off, &err), 0);
        assert_int_equal(off, 1000000);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                assert_int_equal(src_offset_token_parse(bad[i], &off, &err), -1);
                expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                             "page_token is not one this agent gave");
        }
}

static void test_pod_key(void **state)
{
        static const char *const bad[] = { "a", "a/b", "a/b/c/d", "/", "//" };
        char *long_token = cs_xasprintf("%0300d/%0300d/%0301d", 1, 2, 3);
        cs_error *err = NULL;
        src_pod_key key;

        (void)state;
        assert_int_equal(src_pod_key_parse("", &key, &err), 0);
        assert_null(key.buf);
        assert_int_equal(src_pod_key_parse("ns/pod-1/c1", &key, &err), 0);
        assert_string_equal(key.pod_namespace, "ns");
        assert_string_equal(key.pod_name, "pod-1");
        assert_string_equal(key.container_id, "c1");
        free(key.buf);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                assert_int_equal(src_pod_key_parse(bad[i], &key, &err), -1);
                assert_null(key.buf);
                expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                             "page_token is not one this agent gave");
        }
        assert_int_equal(src_pod_key_parse(long_token, &key, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "page_token is not one this agent gave");
        free(long_token);
}

static void set_pod(kube_pod *p, const char *ns, const char *name, const char *id)
{
        p->c.pod_namespace = cs_xstrdup(ns);
        p->c.pod_name = cs_xstrdup(name);
        p->container_id = cs_xstrdup(id);
}

static void test_pod_key_start(void **state)
{
        kube_pod *pods = cs_xcalloc(4, sizeof(*pods));
        src_pod_key none = { 0 }, key;
        cs_error *err = NULL;

        (void)state;
        set_pod(&pods[0], "a", "p1", "c1");
        set_pod(&pods[1], "a", "p2", "c1");
        set_pod(&pods[2], "a", "p2", "c2");
        set_pod(&pods[3], "b", "p0", "c9");
        assert_int_equal(src_pod_key_start(pods, 4, &none), 0);
        assert_int_equal(src_pod_key_parse("a/p2/c1", &key, &err), 0);
        assert_int_equal(src_pod_key_start(pods, 4, &key), 2);
        free(key.buf);
        /* A key that is no longer listed (its pod gone) resumes after where it sorted. */
        assert_int_equal(src_pod_key_parse("a/p1/zz", &key, &err), 0);
        assert_int_equal(src_pod_key_start(pods, 4, &key), 1);
        free(key.buf);
        assert_int_equal(src_pod_key_parse("b/p0/c9", &key, &err), 0);
        assert_int_equal(src_pod_key_start(pods, 4, &key), 4);
        free(key.buf);
        kube_pods_free(pods, 4);
}

/* --- the local source's checks (they come before any registry access) --------------------- */

static void test_local_ref_checks(void **state)
{
        source *s = source_local_new(NULL, 8);
        src_ref by_pod = pod_ref("", "p"), bad_id = pod_ref("", "");
        src_page page = { .token = "nope", .size = 0 };
        int64_t grace = -5;
        sb_spec spec = { .id = SB_UUID, .max_runtime_ms = -1 };
        cs_error *err = NULL;
        sandbox *sb = NULL;
        src_entry e;
        sb_info info;
        bool created;
        src_entry *entries = NULL;
        size_t n = 0;
        char *next = NULL;
        named nm;
        src_call c = call_of(&nm, -1);

        (void)state;
        assert_int_equal(s->ops->kind, SRC_LOCAL);
        assert_int_equal(s->ops->acquire(s, &c, NULL, false, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "ref is missing");
        assert_int_equal(s->ops->describe(s, &c, &by_pod, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "this agent runs in local mode: name the sandbox by sandbox_id, not by pod");
        by_pod = pod_ref("ns", "");
        by_pod.sandbox_id = SB_UUID;
        assert_int_equal(s->ops->acquire(s, &c, &by_pod, true, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "this agent runs in local mode: name the sandbox by sandbox_id, not by pod");
        bad_id.sandbox_id = "not-a-uuid";
        assert_int_equal(s->ops->destroy(s, &c, &bad_id, NULL, &info, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
        assert_int_equal(nm.times, 0); /* never named after an id it refused */
        /* A valid id names the call before the grace is looked at. */
        bad_id.sandbox_id = SB_UUID;
        assert_int_equal(s->ops->destroy(s, &c, &bad_id, &grace, &info, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "grace is negative");
        assert_int_equal(nm.times, 1);
        assert_string_equal(nm.id, SB_UUID);
        /* CreateSandbox names the call with the request's id whatever it is, then checks. */
        c = call_of(&nm, -1);
        assert_int_equal(s->ops->create(s, &c, &spec, &info, &created, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "max_runtime is negative");
        assert_int_equal(nm.times, 1);
        assert_int_equal(s->ops->list(s, &page, &entries, &n, &next, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "page_token is not one this agent gave");
        source_free(s);
}

typedef struct kube_fixture {
        char dir[64];
        fake_runtime *rt;
        cgroup_fs cg;
        sb_registry *reg;
        source *src;
} kube_fixture;

/* A pod's app container "sandbox" with a workspace at /workspace, 0.5 CPU, 256 MiB. */
static void add_pod(kube_fixture *f, const char *id, const char *ns, const char *name,
                    const char *uid, rt_state st)
{
        _cleanup_free_ char *bundle = cs_xasprintf("%s/bundles/%s", f->dir, id);
        _cleanup_free_ char *cfg = NULL, *path = NULL;

        fake_runtime_set(f->rt, id, st);
        fake_runtime_set_bundle(f->rt, id, bundle);
        assert_int_equal(mkdir(bundle, 0700), 0);
        cfg = cs_xasprintf(
                "{\"ociVersion\":\"1.0.2\",\"mounts\":[{\"destination\":\"/workspace\","
                "\"type\":\"bind\",\"source\":\"%s/volumes/%s\",\"options\":[\"rbind\",\"rw\"]}],"
                "\"annotations\":{\"io.kubernetes.cri.container-type\":\"container\","
                "\"io.kubernetes.cri.sandbox-id\":\"pause-%s\","
                "\"io.kubernetes.cri.sandbox-namespace\":\"%s\","
                "\"io.kubernetes.cri.sandbox-name\":\"%s\","
                "\"io.kubernetes.cri.sandbox-uid\":\"%s\","
                "\"io.kubernetes.cri.container-name\":\"sandbox\","
                "\"io.kubernetes.cri.image-name\":\"img-%s\"},"
                "\"linux\":{\"resources\":{\"cpu\":{\"quota\":50000,\"period\":100000},"
                "\"memory\":{\"limit\":268435456}}}}",
                f->dir, id, id, ns, name, uid, id);
        path = cs_xasprintf("%s/config.json", bundle);
        testfs_put(path, cfg);
}

static int kube_setup(void **state)
{
        kube_fixture *f = cs_xcalloc(1, sizeof(*f));
        _cleanup_free_ char *bundles = NULL, *sd = NULL;
        cs_error *err = NULL;
        sb_config sc = { .grace_ms = 1000, .sample_interval_ms = 60000, .kube = true };
        kube_config kc = { .default_container = "sandbox", .namespaces = "ns-a,ns-b" };

        snprintf(f->dir, sizeof(f->dir), "/tmp/test_source.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        bundles = cs_xasprintf("%s/bundles", f->dir);
        sd = cs_xasprintf("%s/state", f->dir);
        assert_int_equal(mkdir(bundles, 0700), 0);
        assert_int_equal(mkdir(sd, 0700), 0);
        f->rt = fake_runtime_new();
        f->cg = (cgroup_fs){ .root = f->dir, .version = CS_CGROUP_V2 };
        sc.state_dir = sd;
        sc.images_dir = sd;
        sc.cgroup_parent = "/compute";
        if (sb_registry_open(&sc, fake_runtime_rt(f->rt), &f->cg, NULL, &f->reg, &err) < 0)
                fail_msg("registry: %s", err->msg);
        kc.rt = fake_runtime_rt(f->rt);
        kc.volume_root = f->dir;
        f->src = source_kube_new(kube_finder_new(&kc), f->reg, fake_runtime_rt(f->rt));
        /* Listed out of order on purpose: the source sorts by namespace, name, id. */
        add_pod(f, "c3", "ns-b", "pod-a", "u3", RT_RUNNING);
        add_pod(f, "c1", "ns-a", "pod-b", "u1", RT_RUNNING);
        add_pod(f, "c2", "ns-a", "pod-a", "u2", RT_CREATED);
        add_pod(f, "c4", "ns-b", "pod-b", "u4", RT_STOPPED);
        add_pod(f, "c5", "ns-c", "pod-a", "u5", RT_RUNNING); /* a namespace not served */
        *state = f;
        return 0;
}

static int kube_teardown(void **state)
{
        kube_fixture *f = *state;
        source_free(f->src);
        sb_registry_free(f->reg);
        fake_runtime_free(f->rt);
        assert_int_equal(cs_remove_tree(AT_FDCWD, f->dir), 0);
        free(f);
        return 0;
}

/* --- the kube source ------------------------------------------------------------------------ */

static void test_kube_ref_checks(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        char *long_name = cs_xasprintf("%0254d", 7);
        src_ref r = pod_ref("ns-a", "");
        cs_error *err = NULL;
        sandbox *sb = NULL;
        src_entry e;
        named nm;
        src_call c = call_of(&nm, -1);
        static const char bad_names[] =
                "pod_namespace, pod_name, pod_uid and container_name must be Kubernetes names "
                "of at most 253 characters";

        assert_int_equal(s->ops->kind, SRC_KUBE);
        assert_int_equal(s->ops->acquire(s, &c, NULL, false, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "this agent runs in kube mode: ref.pod with pod_namespace and pod_name is "
                     "required");
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT,
                     "this agent runs in kube mode: ref.pod with pod_namespace and pod_name is "
                     "required");
        r = pod_ref("ns-a", "pod/a");
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, bad_names);
        r = pod_ref("ns-a", long_name);
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, bad_names);
        r = pod_ref("ns-a", "pod-a");
        r.container_name = "a b";
        assert_int_equal(s->ops->acquire(s, &c, &r, false, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, bad_names);
        r = pod_ref("ns-a", "pod-a");
        r.sandbox_id = "nope";
        assert_int_equal(s->ops->acquire(s, &c, &r, false, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
        assert_int_equal(nm.times, 0);
        /* A valid id names the call even when the namespace is then refused. */
        r = pod_ref("ns-c", "pod-a");
        r.sandbox_id = SB_UUID;
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_NOT_FOUND,
                     "pods of namespace ns-c are not served by this agent (--pod-namespaces)");
        assert_int_equal(nm.times, 1);
        assert_string_equal(nm.id, SB_UUID);
        r = pod_ref("ns-a", "pod-a");
        r.mount_path = "/proc";
        assert_int_equal(s->ops->acquire(s, &c, &r, false, 0, &sb, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(err->msg, "mount_path must be"));
        cs_error_freep(&err);
        /* None of that asked the runtime anything. */
        assert_int_equal(fake_runtime_state_queries(f->rt), 0);
        free(long_name);
}

static void test_kube_create_destroy_unimplemented(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        src_ref r = pod_ref("ns-a", "pod-b");
        sb_spec spec = { .id = SB_UUID };
        cs_error *err = NULL;
        sb_info info;
        bool created;
        named nm;
        src_call c = call_of(&nm, -1);

        assert_int_equal(s->ops->create(s, &c, &spec, &info, &created, &err), -1);
        expect_error(&err, GRPC_STATUS_UNIMPLEMENTED,
                     "CreateSandbox is not available in kube mode: the frontend creates the pod "
                     "through the Kubernetes API server");
        assert_int_equal(s->ops->destroy(s, &c, &r, NULL, &info, &err), -1);
        expect_error(&err, GRPC_STATUS_UNIMPLEMENTED,
                     "DestroySandbox is not available in kube mode: the frontend deletes the pod "
                     "(read the final usage with GetUsage first)");
        assert_int_equal(nm.times, 0);
}

static void test_kube_describe(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        src_ref r = pod_ref("ns-a", "pod-b");
        cs_error *err = NULL;
        src_entry e;
        named nm;
        src_call c = call_of(&nm, -1);

        r.sandbox_id = SB_UUID;
        if (s->ops->describe(s, &c, &r, &e, &err) < 0)
                fail_msg("describe: %s", err->msg);
        assert_string_equal(e.info.id, SB_UUID);
        assert_int_equal(e.info.status, SB_READY);
        assert_string_equal(e.info.image, "img-c1");
        assert_string_equal(e.info.mount_path, "/workspace");
        assert_int_equal(e.info.cpu_millis, 500);
        assert_int_equal(e.info.memory_bytes, 268435456);
        assert_string_equal(e.pod.pod_namespace, "ns-a");
        assert_string_equal(e.pod.pod_name, "pod-b");
        assert_string_equal(e.pod.pod_uid, "u1");
        assert_string_equal(e.pod.container_name, "sandbox");
        assert_string_equal(e.pod.mount_path, "/workspace");
        src_entry_clear(&e);
        /* A stopped container is described (FAILED), not refused. */
        r = pod_ref("ns-b", "pod-b");
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), 0);
        assert_int_equal(e.info.status, SB_FAILED);
        assert_string_equal(e.info.status_message, "the container has exited");
        assert_string_equal(e.info.id, "");
        src_entry_clear(&e);
        /* A uid that is not the pod's. */
        r = pod_ref("ns-a", "pod-b");
        r.pod_uid = "u9";
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_NOT_FOUND,
                     "no container 'sandbox' of pod ns-a/pod-b with uid u9 on this node");
        /* A mount path the container does not have. */
        r = pod_ref("ns-a", "pod-b");
        r.mount_path = "/data";
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        expect_error(&err, GRPC_STATUS_FAILED_PRECONDITION,
                     "the container has no volume mounted at /data: no workspace to reach");
}

static void test_kube_acquire(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        src_ref r = pod_ref("ns-a", "pod-b");
        _cleanup_free_ char *ws = cs_xasprintf("%s/volumes/c1", f->dir);
        cs_error *err = NULL;
        sandbox *sb = NULL;
        int64_t t0;
        int p[2];
        named nm;
        src_call c = call_of(&nm, -1);

        if (s->ops->acquire(s, &c, &r, true, 0, &sb, &err) < 0)
                fail_msg("acquire: %s", err->msg);
        assert_string_equal(sb_container_id(sb), "c1");
        assert_string_equal(sb_workspace_dir(sb), ws);
        sb_release(f->reg, sb);
        /* need_ready: a created container past its wait, a stopped one. */
        r = pod_ref("ns-a", "pod-a");
        assert_int_equal(s->ops->acquire(s, &c, &r, true, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_DEADLINE_EXCEEDED,
                     "pod ns-a/pod-a: container c2 is still starting");
        r = pod_ref("ns-b", "pod-b");
        assert_int_equal(s->ops->acquire(s, &c, &r, true, 0, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_FAILED_PRECONDITION,
                     "pod ns-b/pod-b: container c4 is not running (exited)");
        /* Without need_ready both are reachable (file I/O on a stopped pod's workspace). */
        assert_int_equal(s->ops->acquire(s, &c, &r, false, 0, &sb, &err), 0);
        sb_release(f->reg, sb);
        /* A cancelled call stops the wait at once. */
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(write(p[1], "x", 1), 1);
        c = call_of(&nm, p[0]);
        r = pod_ref("ns-a", "pod-a");
        t0 = cs_now_monotonic_ms();
        assert_int_equal(s->ops->acquire(s, &c, &r, true, 60000, &sb, &err), -1);
        expect_error(&err, GRPC_STATUS_CANCELLED, "cancelled while waiting");
        assert_true(cs_now_monotonic_ms() - t0 < 5000);
        close(p[0]);
        close(p[1]);
}

/* A created container that starts running while an exec waits for it. */
static void *start_later(void *arg)
{
        kube_fixture *f = arg;

        usleep(300 * 1000);
        fake_runtime_set(f->rt, "c2", RT_RUNNING);
        return NULL;
}

static void test_kube_acquire_waits(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        src_ref r = pod_ref("ns-a", "pod-a");
        cs_error *err = NULL;
        sandbox *sb = NULL;
        pthread_t t;
        named nm;
        src_call c = call_of(&nm, -1);

        fake_runtime_set(f->rt, "c2", RT_CREATED);
        assert_int_equal(pthread_create(&t, NULL, start_later, f), 0);
        if (s->ops->acquire(s, &c, &r, true, 10000, &sb, &err) < 0)
                fail_msg("acquire: %s", err->msg);
        pthread_join(t, NULL);
        assert_string_equal(sb_container_id(sb), "c2");
        sb_release(f->reg, sb);
        fake_runtime_set(f->rt, "c2", RT_CREATED);
}

static void test_kube_list_pages(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        static const char *const order[] = { "c2", "c1", "c3", "c4" }; /* ns, name, id */
        src_page page = { .token = "", .size = 3 };
        char *next = NULL;
        src_entry *e = NULL;
        size_t n = 0;
        cs_error *err = NULL;

        if (s->ops->list(s, &page, &e, &n, &next, &err) < 0)
                fail_msg("list: %s", err->msg);
        assert_int_equal(n, 3);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *img = cs_xasprintf("img-%s", order[i]);
                assert_string_equal(e[i].info.image, img);
                assert_string_equal(e[i].info.id, "");
                assert_string_equal(e[i].pod.mount_path, "/workspace");
        }
        assert_string_equal(e[0].pod.pod_name, "pod-a");
        assert_int_equal(e[0].info.status, SB_STARTING);
        assert_int_equal(e[1].info.status, SB_READY);
        assert_string_equal(next, "ns-b/pod-a/c3");
        src_entries_free(e, n);
        page.token = next;
        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), 0);
        free((char *)page.token);
        assert_int_equal(n, 1);
        assert_string_equal(e[0].info.image, "img-c4");
        assert_null(next);
        src_entries_free(e, n);
        /* Past the end: empty, no token. A bad token: refused. */
        page.token = "ns-z/x/y";
        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), 0);
        assert_int_equal(n, 0);
        assert_null(next);
        src_entries_free(e, n);
        page.token = "ns-a/pod-a";
        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), -1);
        expect_error(&err, GRPC_STATUS_INVALID_ARGUMENT, "page_token is not one this agent gave");
}

static void test_kube_counts(void **state)
{
        kube_fixture *f = *state;
        source *s = f->src;
        src_counts n;
        cs_error *err = NULL;

        assert_int_equal(s->ops->counts(s, &n, &err), 0);
        assert_null(n.partial);
        assert_int_equal(n.max_sandboxes, 0);
        assert_int_equal(n.live, 4);
        assert_int_equal(n.ready, 2);
        assert_int_equal(n.destroyed, 0);
        assert_int_equal(n.cpu_millis_allocated, 4 * 500);
        assert_int_equal(n.memory_bytes_allocated, 4 * 268435456ull);
        /* A runtime that cannot list: counts of 0, reported as partial, the call answers. */
        fake_runtime_fail_queries(f->rt, true);
        assert_int_equal(s->ops->counts(s, &n, &err), 0);
        assert_null(err);
        assert_non_null(n.partial);
        assert_string_equal(n.partial->msg, "cannot list the pods: fake: the runtime is down");
        cs_error_free(n.partial);
        assert_int_equal(n.live, 0);
        assert_int_equal(n.cpu_millis_allocated, 0);
        fake_runtime_fail_queries(f->rt, false);
}

/* --- the local source over a real registry ----------------------------------------------- */

typedef struct local_fixture {
        char dir[64];
        fake_runtime *rt;
        cgroup_fs cg;
        sb_registry *reg;
        source *src;
        char ids[3][CS_UUID_STRLEN + 1];
} local_fixture;

static int local_setup(void **state)
{
        local_fixture *f = cs_xcalloc(1, sizeof(*f));
        _cleanup_free_ char *images = NULL, *image = NULL;
        sb_config sc = { .grace_ms = 60000, .sample_interval_ms = 60000, .max_sandboxes = 8 };
        cs_error *err = NULL;

        snprintf(f->dir, sizeof(f->dir), "/tmp/test_source.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        images = cs_xasprintf("%s/images", f->dir);
        image = cs_xasprintf("%s/" SB_DEFAULT_IMAGE, images);
        assert_int_equal(mkdir(images, 0700), 0);
        assert_int_equal(mkdir(image, 0700), 0);
        f->rt = fake_runtime_new();
        f->cg = (cgroup_fs){ .root = f->dir, .version = CS_CGROUP_V2 };
        sc.state_dir = f->dir;
        sc.images_dir = images;
        sc.cgroup_parent = "/compute";
        if (sb_registry_open(&sc, fake_runtime_rt(f->rt), &f->cg, NULL, &f->reg, &err) < 0)
                fail_msg("registry: %s", err->msg);
        f->src = source_local_new(f->reg, 8);
        for (int i = 0; i < 3; i++) {
                _cleanup_free_ char *session = cs_xasprintf("session-%d", i);
                sb_spec spec = { .id = f->ids[i], .tenant_id = "t", .session_id = session };
                sb_info info = { 0 };
                bool created = false;
                named nm;
                src_call c = call_of(&nm, -1);

                cs_uuid_generate(f->ids[i]);
                if (f->src->ops->create(f->src, &c, &spec, &info, &created, &err) < 0)
                        fail_msg("create: %s", err->msg);
                assert_true(created);
                assert_string_equal(info.id, f->ids[i]);
                assert_string_equal(nm.id, f->ids[i]);
                sb_info_clear(&info);
        }
        *state = f;
        return 0;
}

static int local_teardown(void **state)
{
        local_fixture *f = *state;

        source_free(f->src);
        sb_registry_free(f->reg);
        fake_runtime_free(f->rt);
        assert_int_equal(cs_remove_tree(AT_FDCWD, f->dir), 0);
        free(f);
        return 0;
}

static src_ref id_ref(const char *id)
{
        src_ref r = pod_ref("", "");

        r.sandbox_id = id;
        return r;
}

/* Which of the fixture's sandboxes id is, -1 if none. */
static int which(const local_fixture *f, const char *id)
{
        for (int i = 0; i < 3; i++) {
                if (strcmp(f->ids[i], id) == 0)
                        return i;
        }
        return -1;
}

static void test_local_create_again(void **state)
{
        local_fixture *f = *state;
        source *s = f->src;
        sb_spec spec = { .id = "", .tenant_id = "t", .session_id = "session-1" };
        char other[CS_UUID_STRLEN + 1];
        sb_info info = { 0 };
        bool created = true;
        cs_error *err = NULL;
        named nm;
        src_call c = call_of(&nm, -1);

        /* The same session while its sandbox lives: that sandbox, not a new one. */
        cs_uuid_generate(other);
        spec.id = other;
        assert_int_equal(s->ops->create(s, &c, &spec, &info, &created, &err), 0);
        assert_false(created);
        assert_string_equal(info.id, f->ids[1]);
        sb_info_clear(&info);
}

static void test_local_list_pages(void **state)
{
        local_fixture *f = *state;
        source *s = f->src;
        src_page page = { .token = "", .size = 2 };
        int seen[3] = { 0, 0, 0 };
        src_entry *e = NULL;
        char *next = NULL;
        size_t n = 0;
        cs_error *err = NULL;

        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), 0);
        assert_int_equal(n, 2);
        assert_string_equal(next, "2");
        for (size_t i = 0; i < n; i++) {
                assert_null(e[i].pod.pod_namespace);
                assert_string_equal(e[i].info.tenant_id, "t");
                assert_true(which(f, e[i].info.id) >= 0);
                seen[which(f, e[i].info.id)]++;
        }
        src_entries_free(e, n);
        page.token = next;
        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), 0);
        free((char *)page.token);
        assert_int_equal(n, 1);
        assert_null(next);
        assert_true(which(f, e[0].info.id) >= 0);
        seen[which(f, e[0].info.id)]++;
        src_entries_free(e, n);
        /* Every sandbox once over the pages. */
        assert_int_equal(seen[0] + seen[1] * 10 + seen[2] * 100, 111);
        page.token = "3";
        assert_int_equal(s->ops->list(s, &page, &e, &n, &next, &err), 0);
        assert_int_equal(n, 0);
        assert_null(next);
        src_entries_free(e, n);
}

static void test_local_lifecycle(void **state)
{
        local_fixture *f = *state;
        source *s = f->src;
        src_ref r = id_ref(f->ids[0]);
        src_page page = { .token = "", .size = 0 };
        src_entry e, *list = NULL;
        sb_info info = { 0 };
        src_counts counts;
        sandbox *sb = NULL;
        char *next = NULL;
        char unknown[CS_UUID_STRLEN + 1];
        size_t n = 0;
        int fd;
        cs_error *err = NULL;
        named nm;
        src_call c = call_of(&nm, -1);

        /* Exec's acquire waits for READY (the starter thread runs the fake create). */
        if (s->ops->acquire(s, &c, &r, true, 10000, &sb, &err) < 0)
                fail_msg("acquire: %s", err->msg);
        assert_string_equal(nm.id, f->ids[0]);
        fd = s->ops->open_workspace(s, sb_workspace_dir(sb), &err);
        assert_true(fd >= 0);
        close(fd);
        sb_release(f->reg, sb);
        assert_int_equal(s->ops->open_workspace(s, "/nonexistent/workspace", &err), -1);
        expect_error(&err, GRPC_STATUS_NOT_FOUND,
                     "cannot open the workspace: No such file or directory");
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), 0);
        assert_string_equal(e.info.id, f->ids[0]);
        assert_int_equal(e.info.status, SB_READY);
        assert_null(e.pod.pod_namespace);
        src_entry_clear(&e);
        cs_uuid_generate(unknown);
        r = id_ref(unknown);
        assert_int_equal(s->ops->describe(s, &c, &r, &e, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        cs_error_freep(&err);
        /* Destroyed: kept in the list only when asked for, counted apart. */
        r = id_ref(f->ids[0]);
        assert_int_equal(s->ops->destroy(s, &c, &r, NULL, &info, &err), 0);
        assert_int_equal(info.status, SB_DESTROYED);
        sb_info_clear(&info);
        assert_int_equal(s->ops->list(s, &page, &list, &n, &next, &err), 0);
        assert_int_equal(n, 2);
        assert_null(next);
        src_entries_free(list, n);
        page.include_destroyed = true;
        assert_int_equal(s->ops->list(s, &page, &list, &n, &next, &err), 0);
        assert_int_equal(n, 3);
        src_entries_free(list, n);
        assert_int_equal(s->ops->counts(s, &counts, &err), 0);
        assert_null(counts.partial);
        assert_int_equal(counts.max_sandboxes, 8);
        assert_int_equal(counts.live, 2);
        assert_int_equal(counts.destroyed, 1);
        assert_int_equal(counts.cpu_millis_allocated, 2 * CS_DEFAULT_CPU_MILLIS);
        assert_int_equal(counts.memory_bytes_allocated, 2 * CS_DEFAULT_MEMORY);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fd_readable),
                cmocka_unit_test(test_page_count),
                cmocka_unit_test(test_offset_token),
                cmocka_unit_test(test_pod_key),
                cmocka_unit_test(test_pod_key_start),
                cmocka_unit_test(test_local_ref_checks),
                cmocka_unit_test_setup_teardown(test_local_create_again, local_setup,
                                                local_teardown),
                cmocka_unit_test_setup_teardown(test_local_list_pages, local_setup, local_teardown),
                cmocka_unit_test_setup_teardown(test_local_lifecycle, local_setup, local_teardown),
                cmocka_unit_test_setup_teardown(test_kube_ref_checks, kube_setup, kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_create_destroy_unimplemented, kube_setup,
                                                kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_describe, kube_setup, kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_acquire, kube_setup, kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_acquire_waits, kube_setup, kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_list_pages, kube_setup, kube_teardown),
                cmocka_unit_test_setup_teardown(test_kube_counts, kube_setup, kube_teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
