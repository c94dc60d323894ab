/* Unit tests for frontend/kube_client.c.
 *
 * Configuration: kubeconfig files (YAML and JSON) and in-cluster service account directories
 * written to a temp dir. Requests and watches: a small HTTP/1.1 server in a thread of this
 * process (keep-alive, chunked watch streams, slow and oversized answers), so the transport
 * paths are tested without a cluster. TLS against tests/kube/apiserver.py is tested below it
 * when that server is present (KUBE_SOURCE_DIR). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube_client.h"
#include "util.h"

/* ---- temp dirs and files ---- */

static char tmpdir[256];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static int setup_tmp(void **state)
{
        (void)state;
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/compute-test-kubeconfig-XXXXXX");
        assert_non_null(mkdtemp(tmpdir));
        return 0;
}

static int teardown_tmp(void **state)
{
        (void)state;
        nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return 0;
}

static char *tmp_path(const char *name)
{
        return cs_xasprintf("%s/%s", tmpdir, name);
}

static void write_file(const char *name, const char *content)
{
        char *path = tmp_path(name);
        char *tmp = cs_xasprintf("%s.tmp", path);
        FILE *f = fopen(tmp, "w");

        assert_non_null(f);
        assert_int_equal(fputs(content, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
        /* rename: a new inode, as a projected token rotation does */
        assert_int_equal(rename(tmp, path), 0);
        free(tmp);
        free(path);
}

static kube_client *new_from(const char *name, const char *context, cs_error **err)
{
        char *path = tmp_path(name);
        kube_client_config cfg = { .kubeconfig = path, .context = context, .timeout_ms = 5000 };
        kube_client *kc = kube_client_new(&cfg, err);

        free(path);
        return kc;
}

static kube_client *new_yaml(const char *yaml, const char *context, cs_error **err)
{
        write_file("config", yaml);
        return new_from("config", context, err);
}

/* Expects kube_client_new to fail with code and a message containing want. */
static void expect_fail(const char *yaml, grpc_status_code code, const char *want)
{
        cs_error *err = NULL;
        kube_client *kc = new_yaml(yaml, NULL, &err);

        if (kc || !err || err->code != code || !strstr(err->msg, want))
                print_error("config:\n%s\ngot %s: %s (want %s containing '%s')\n", yaml,
                            err ? cs_status_name(err->code) : "success", err ? err->msg : "",
                            cs_status_name(code), want);
        assert_null(kc);
        assert_non_null(err);
        assert_int_equal(err->code, code);
        assert_non_null(strstr(err->msg, want));
        cs_error_free(err);
}

/* base64 of "-----BEGIN CERTIFICATE-----\nfake\n" (not parsed until a TLS connection). */
#define FAKE_PEM_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2UK"

/* The Status body's "reason" ("NotFound", ...), or "": what a caller reads to tell a 409
 * AlreadyExists from a 409 Conflict. */
static const char *status_reason(const kube_response *r)
{
        const char *s = kube_get_str(r->body, "reason");

        return s ? s : "";
}

/* ---- kubeconfig ---- */

static void test_kubeconfig_data_and_token(void **state)
{
        cs_error *err = NULL;
        kube_client *kc;

        (void)state;
        kc = new_yaml("apiVersion: v1\n"
                      "kind: Config\n"
                      "clusters:\n"
                      "- name: c1\n"
                      "  cluster:\n"
                      "    server: https://10.1.2.3:6443/\n"
                      "    certificate-authority-data: " FAKE_PEM_B64 "\n"
                      "users:\n"
                      "- name: u1\n"
                      "  user:\n"
                      "    token: abc.def\n"
                      "    client-certificate-data: " FAKE_PEM_B64 "\n"
                      "    client-key-data: " FAKE_PEM_B64 "\n"
                      "contexts:\n"
                      "- name: ctx1\n"
                      "  context: {cluster: c1, user: u1, namespace: team-a}\n"
                      "current-context: ctx1\n",
                      NULL, &err);
        assert_null(err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://10.1.2.3:6443");
        assert_string_equal(kube_client_namespace(kc), "team-a");
        kube_client_free(kc);
}

static void test_kubeconfig_paths(void **state)
{
        cs_error *err = NULL;
        kube_client *kc;

        (void)state;
        assert_int_equal(mkdir(strcat(strcpy((char[300]){ 0 }, tmpdir), "/pki"), 0700), 0);
        write_file("pki/ca.crt", "-----BEGIN CERTIFICATE-----\nfake\n");
        write_file("pki/client.crt", "-----BEGIN CERTIFICATE-----\nfake\n");
        write_file("pki/client.key", "-----BEGIN PRIVATE KEY-----\nfake\n");
        write_file("token", "from-file\n");
        kc = new_yaml("clusters:\n"
                      "- name: c\n"
                      "  cluster:\n"
                      "    server: https://example.test\n"
                      "    certificate-authority: pki/ca.crt\n"
                      "users:\n"
                      "- name: u\n"
                      "  user:\n"
                      "    tokenFile: token\n"
                      "    client-certificate: pki/client.crt\n"
                      "    client-key: pki/client.key\n"
                      "contexts:\n"
                      "- name: x\n"
                      "  context:\n"
                      "    cluster: c\n"
                      "    user: u\n"
                      "current-context: x\n",
                      NULL, &err);
        assert_null(err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://example.test");
        assert_string_equal(kube_client_namespace(kc), "default");
        kube_client_free(kc);

        /* A path that is not there: NOT_FOUND naming the field and the resolved path. */
        expect_fail("clusters:\n"
                    "- name: c\n"
                    "  cluster: {server: 'https://e.test', certificate-authority: nope.crt}\n"
                    "contexts:\n"
                    "- {name: x, context: {cluster: c}}\n"
                    "current-context: x\n",
                    GRPC_STATUS_NOT_FOUND, "certificate-authority");
        expect_fail("clusters:\n"
                    "- name: c\n"
                    "  cluster: {server: 'https://e.test'}\n"
                    "users:\n"
                    "- {name: u, user: {tokenFile: /nonexistent/token}}\n"
                    "contexts:\n"
                    "- {name: x, context: {cluster: c, user: u}}\n"
                    "current-context: x\n",
                    GRPC_STATUS_NOT_FOUND, "/nonexistent/token");
}

static const char two_contexts[] = "clusters:\n"
                                   "- name: prod\n"
                                   "  cluster: {server: 'https://prod.test:443'}\n"
                                   "- name: dev\n"
                                   "  cluster:\n"
                                   "    server: http://127.0.0.1:8080\n"
                                   "    insecure-skip-tls-verify: true\n"
                                   "users:\n"
                                   "- {name: admin, user: {token: t}}\n"
                                   "contexts:\n"
                                   "- {name: p, context: {cluster: prod, user: admin, "
                                   "namespace: prod-ns}}\n"
                                   "- {name: d, context: {cluster: dev, user: admin}}\n"
                                   "current-context: p\n";

static void test_kubeconfig_context_selection(void **state)
{
        cs_error *err = NULL;
        kube_client *kc;

        (void)state;
        kc = new_yaml(two_contexts, NULL, &err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://prod.test:443");
        assert_string_equal(kube_client_namespace(kc), "prod-ns");
        kube_client_free(kc);

        kc = new_from("config", "d", &err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "http://127.0.0.1:8080");
        assert_string_equal(kube_client_namespace(kc), "default");
        kube_client_free(kc);

        kc = new_from("config", "nope", &err);
        assert_null(kc);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(err->msg, "context \"nope\" not found"));
        cs_error_free(err);
}

static void test_kubeconfig_json(void **state)
{
        cs_error *err = NULL;
        kube_client *kc;

        (void)state;
        kc = new_yaml("{\"apiVersion\":\"v1\",\"kind\":\"Config\",\"clusters\":[{\"name\":\"c\","
                      "\"cluster\":{\"server\":\"https://[fd00::1]:6443\","
                      "\"insecure-skip-tls-verify\":true}}],"
                      "\"users\":[{\"name\":\"u\",\"user\":{\"token\":\"x\"}}],"
                      "\"contexts\":[{\"name\":\"k\",\"context\":{\"cluster\":\"c\","
                      "\"user\":\"u\",\"namespace\":\"js\"}}],\"current-context\":\"k\"}",
                      NULL, &err);
        assert_null(err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://[fd00::1]:6443");
        assert_string_equal(kube_client_namespace(kc), "js");
        kube_client_free(kc);
}

#define CTX_C_U   "contexts:\n- {name: x, context: {cluster: c, user: u}}\ncurrent-context: x\n"
#define CLUSTER_C "clusters:\n- {name: c, cluster: {server: 'https://e.test'}}\n"

static void test_kubeconfig_errors(void **state)
{
        static const struct {
                const char *yaml;
                grpc_status_code code;
                const char *want;
        } cases[] = {
                { "clusters: [\n  - {name: c\n", GRPC_STATUS_INVALID_ARGUMENT, "line " },
                { "", GRPC_STATUS_INVALID_ARGUMENT, "empty file" },
                { "- a\n- b\n", GRPC_STATUS_INVALID_ARGUMENT, "not a mapping" },
                { CLUSTER_C, GRPC_STATUS_INVALID_ARGUMENT, "no current-context" },
                { "current-context: x\n", GRPC_STATUS_INVALID_ARGUMENT, "context \"x\" not found" },
                { "contexts: {x: 1}\ncurrent-context: x\n", GRPC_STATUS_INVALID_ARGUMENT,
                  "contexts must be a list" },
                { "contexts:\n- {name: x}\ncurrent-context: x\n", GRPC_STATUS_INVALID_ARGUMENT,
                  "context \"x\" has no context mapping" },
                { "contexts:\n- {name: x, context: {user: u}}\ncurrent-context: x\n",
                  GRPC_STATUS_INVALID_ARGUMENT, "context \"x\": cluster is missing" },
                { CTX_C_U, GRPC_STATUS_INVALID_ARGUMENT, "cluster \"c\" not found" },
                { "clusters:\n- {name: c, cluster: {certificate-authority-data: eA==}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "cluster \"c\": server is missing" },
                { "clusters:\n- {name: c, cluster: {server: [1]}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "server must be a string" },
                { "clusters:\n- {name: c, cluster: {server: 'ftp://x'}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "is not an http(s) URL" },
                { "clusters:\n- {name: c, cluster: {server: 'https://x', "
                  "certificate-authority-data: '!!notbase64'}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "certificate-authority-data is not valid base64" },
                { "clusters:\n- {name: c, cluster: {server: 'https://x', "
                  "insecure-skip-tls-verify: maybe}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "insecure-skip-tls-verify must be a boolean" },
                { "clusters:\n- {name: c, cluster: {server: 'https://x', "
                  "tls-server-name: y}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "tls-server-name is not supported" },
                { CLUSTER_C CTX_C_U, GRPC_STATUS_INVALID_ARGUMENT, "user \"u\" not found" },
                { CLUSTER_C "users:\n- name: u\n  user:\n    exec:\n      command: aws\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT,
                  "user \"u\": exec credential plugins are not "
                  "supported" },
                { CLUSTER_C "users:\n- {name: u, user: {auth-provider: {name: gcp}}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "auth-provider plugins are not supported" },
                { CLUSTER_C "users:\n- {name: u, user: {username: a, password: b}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "basic authentication is not supported" },
                { CLUSTER_C "users:\n- {name: u, user: {client-certificate-data: " FAKE_PEM_B64
                            "}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT,
                  "client-certificate and client-key must be given together" },
                { CLUSTER_C "users:\n- {name: u, user: {token: {a: b}}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "user \"u\": token must be a string" },
                { CLUSTER_C "users:\n- {name: u, user: {token: \"a\\r\\nX-Evil: 1\"}}\n" CTX_C_U,
                  GRPC_STATUS_INVALID_ARGUMENT, "user \"u\": token holds control characters" },
                /* a self-referencing alias, and a billion laughs */
                { "a: &x [*x]\n", GRPC_STATUS_INVALID_ARGUMENT, "too deep or too large" },
                { "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                  "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                  "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
                  GRPC_STATUS_INVALID_ARGUMENT, "too deep or too large" },
                { "{a: [1, 2}\n", GRPC_STATUS_INVALID_ARGUMENT, "line 1" },
        };
        cs_error *err = NULL;
        kube_client_config cfg = { .kubeconfig = "/nonexistent/kubeconfig" };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
                expect_fail(cases[i].yaml, cases[i].code, cases[i].want);
        assert_null(kube_client_new(&cfg, &err));
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        assert_string_equal(err->msg,
                            "kubeconfig /nonexistent/kubeconfig: No such file or directory");
        cs_error_free(err);
}

/* ---- in-cluster ---- */

static void write_sa(bool with_ns)
{
        char *sa = tmp_path("sa");

        mkdir(sa, 0700);
        free(sa);
        write_file("sa/token", "sa-token\n");
        write_file("sa/ca.crt", "-----BEGIN CERTIFICATE-----\nfake\n");
        if (with_ns)
                write_file("sa/namespace", "agents\n");
}

static kube_client *new_incluster(cs_error **err)
{
        char *sa = tmp_path("sa");
        kube_client_config cfg = { .sa_dir = sa };
        kube_client *kc = kube_client_new(&cfg, err);

        free(sa);
        return kc;
}

static void test_incluster(void **state)
{
        cs_error *err = NULL;
        kube_client *kc;
        char *p;

        (void)state;
        write_sa(true);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
        assert_null(new_incluster(&err));
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(err->msg, "KUBERNETES_SERVICE_HOST"));
        cs_error_freep(&err);

        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        kc = new_incluster(&err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://10.96.0.1:443");
        assert_string_equal(kube_client_namespace(kc), "agents");
        kube_client_free(kc);

        setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
        kc = new_incluster(&err);
        assert_non_null(kc);
        assert_string_equal(kube_client_server(kc), "https://[fd00:10:96::1]:443");
        kube_client_free(kc);

        setenv("KUBERNETES_SERVICE_PORT", "https", 1);
        assert_null(new_incluster(&err));
        assert_non_null(strstr(err->msg, "is not a port"));
        cs_error_freep(&err);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);

        /* No namespace file: "default". No token: NOT_FOUND naming the file. */
        p = tmp_path("sa/namespace");
        unlink(p);
        free(p);
        kc = new_incluster(&err);
        assert_non_null(kc);
        assert_string_equal(kube_client_namespace(kc), "default");
        kube_client_free(kc);
        p = tmp_path("sa/token");
        unlink(p);
        assert_null(new_incluster(&err));
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        assert_non_null(strstr(err->msg, p));
        free(p);
        cs_error_freep(&err);
        write_file("sa/token", " \n");
        assert_null(new_incluster(&err));
        assert_non_null(strstr(err->msg, "is empty"));
        cs_error_freep(&err);
        p = tmp_path("sa/ca.crt");
        unlink(p);
        free(p);
        write_file("sa/token", "t\n");
        assert_null(new_incluster(&err));
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        assert_non_null(strstr(err->msg, "ca.crt"));
        cs_error_freep(&err);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
}

/* ---- helpers ---- */

static void test_time(void **state)
{
        char buf[32];

        (void)state;
        assert_int_equal(kube_time_parse("1970-01-01T00:00:00Z"), 0);
        assert_int_equal(kube_time_parse("2026-12-02T11:00:00Z"), 1796209200000LL);
        assert_int_equal(kube_time_parse("2026-12-02T11:00:00.5Z"), 1796209200500LL);
        assert_int_equal(kube_time_parse("2026-12-02T11:00:00.123456789Z"), 1796209200123LL);
        assert_int_equal(kube_time_parse("2026-12-02T12:30:00+01:30"), 1796209200000LL);
        assert_int_equal(kube_time_parse("2026-12-02T06:00:00-05:00"), 1796209200000LL);
        assert_int_equal(kube_time_parse("2024-02-29T00:00:00Z"), 1709164800000LL);
        assert_int_equal(kube_time_parse("2026-12-02t11:00:00z"), 1796209200000LL);
        static const char *bad[] = {
                "",
                "2026-12-02",
                "2026-12-02T11:00:00",
                "2026-12-02 11:00:00Z",
                "2026-13-02T11:00:00Z",
                "2026-02-29T11:00:00Z",
                "2026-12-02T24:00:00Z",
                "2026-12-02T11:60:00Z",
                "2026-12-02T11:00:00.Z",
                "2026-12-02T11:00:00Zjunk",
                "2026-12-02T11:00:00+0100",
                "26-12-02T11:00:00Z",
                "1969-12-31T23:59:59Z",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_int_equal(kube_time_parse(bad[i]), -1);
        assert_int_equal(kube_time_parse(NULL), -1);
        assert_string_equal(kube_time_format(1796209200999LL, buf), "2026-12-02T11:00:00Z");
        assert_string_equal(kube_time_format(0, buf), "1970-01-01T00:00:00Z");
        assert_int_equal(kube_time_parse(kube_time_format(1709164800000LL, buf)), 1709164800000LL);
}

static void test_escape_and_get(void **state)
{
        char *e;
        json_t *obj;

        (void)state;
        e = kube_escape("app.kubernetes.io/name=compute-node-agent,tier!=x y~_");
        assert_string_equal(e, "app.kubernetes.io%2Fname%3Dcompute-node-agent%2Ctier%21%3Dx%20y~_");
        free(e);
        e = kube_escape("");
        assert_string_equal(e, "");
        free(e);
        e = kube_escape("\xc3\xa9");
        assert_string_equal(e, "%C3%A9");
        free(e);

        obj = json_pack("{s:{s:s, s:{s:s}}, s:{s:s, s:[i]}}", "metadata", "name", "sbx-1",
                        "annotations", "compute.paper-board.io/delete-after",
                        "2026-12-02T11:00:00Z", "status", "phase", "Running", "list", 1);
        assert_non_null(obj);
        assert_string_equal(kube_get_str(obj, "metadata.name"), "sbx-1");
        assert_string_equal(kube_get_str(obj, "status.phase"), "Running");
        assert_null(kube_get_str(obj, "status.list"));
        assert_null(kube_get_str(obj, "status.phase.x"));
        assert_null(kube_get_str(obj, "metadata.nope"));
        assert_null(kube_get_str(obj, "metadata"));
        assert_null(kube_get_str(NULL, "metadata.name"));
        assert_null(kube_get_str(obj, "metadata.annotations.compute.paper-board.io/delete-after"));
        assert_string_equal(
                json_string_value(kube_get_key(obj, "metadata", "annotations",
                                               "compute.paper-board.io/delete-after", NULL)),
                "2026-12-02T11:00:00Z");
        assert_ptr_equal(kube_get_key(obj, NULL), obj);
        assert_null(kube_get_key(obj, "status", "list", "x", NULL));
        assert_null(kube_get_key(obj, "nope", "x", NULL));
        assert_null(kube_get_key(NULL, "x", NULL));
        json_decref(obj);
}

/* ---- an HTTP/1.1 server in this process ---- */

#define MAX_CONNS 256

typedef struct mini {
        int lfd, port;
        int stop_fd;   /* eventfd: set when the server stops */
        int signal_fd; /* eventfd: the watch test's callback tells the server to go on */
        pthread_t acceptor;
        pthread_mutex_t lock;
        pthread_t threads[MAX_CONNS];
        int fds[MAX_CONNS];
        int n;
        atomic_int accepted;
        atomic_bool signalled; /* the server saw signal_fd before its timeout */
} mini;

static mini srv;

typedef struct req {
        char method[16];
        char path[512];
        char auth[512];
        char ctype[128];
        char ua[128];
        char *body;
        size_t body_len;
} req;

static bool wait_fd(int fd, int ms)
{
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
                               { .fd = srv.stop_fd, .events = POLLIN } };

        return poll(p, 2, ms) > 0 && (p[0].revents & POLLIN);
}

static int send_all(int fd, const void *p, size_t n)
{
        const char *c = p;

        while (n > 0) {
                ssize_t w = send(fd, c, n, MSG_NOSIGNAL);

                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -1;
                c += w;
                n -= (size_t)w;
        }
        return 0;
}

static void send_resp(int fd, int status, const char *ctype, const char *body)
{
        char *r = cs_xasprintf("HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n%s",
                               status, ctype, strlen(body), body);

        send_all(fd, r, strlen(r));
        free(r);
}

static void send_chunk(int fd, const char *s)
{
        char *c = cs_xasprintf("%zx\r\n%s\r\n", strlen(s), s);

        send_all(fd, c, strlen(c));
        free(c);
}

static void send_stream_head(int fd)
{
        static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n";
        send_all(fd, h, sizeof(h) - 1);
}

static void header_value(const char *head, const char *name, char *out, size_t size)
{
        const char *p = head;
        size_t nl = strlen(name);

        out[0] = '\0';
        while ((p = strstr(p, "\r\n"))) {
                p += 2;
                if (!strncasecmp(p, name, nl) && p[nl] == ':') {
                        const char *v = p + nl + 1, *e = strstr(v, "\r\n");

                        while (*v == ' ')
                                v++;
                        snprintf(out, size, "%.*s", (int)(e - v), v);
                        return;
                }
        }
}

/* Reads one request (headers and Content-Length body). -1 on EOF or error. */
static int read_req(int fd, req *r)
{
        char head[16384], cl[32];
        size_t len = 0;
        char *end = NULL;

        memset(r, 0, sizeof(*r));
        while (!end) {
                ssize_t n = recv(fd, head + len, sizeof(head) - 1 - len, 0);

                if (n <= 0)
                        return -1;
                len += (size_t)n;
                head[len] = '\0';
                end = strstr(head, "\r\n\r\n");
                if (!end && len == sizeof(head) - 1)
                        return -1;
        }
        end[2] = '\0';
        sscanf(head, "%15s %511s", r->method, r->path);
        header_value(head, "Authorization", r->auth, sizeof(r->auth));
        header_value(head, "Content-Type", r->ctype, sizeof(r->ctype));
        header_value(head, "User-Agent", r->ua, sizeof(r->ua));
        header_value(head, "Content-Length", cl, sizeof(cl));
        r->body_len = (size_t)atol(cl);
        r->body = cs_xmalloc(r->body_len + 1);
        {
                size_t have = len - (size_t)(end + 4 - head);

                memcpy(r->body, end + 4, have);
                while (have < r->body_len) {
                        ssize_t n = recv(fd, r->body + have, r->body_len - have, 0);

                        if (n <= 0) {
                                free(r->body);
                                return -1;
                        }
                        have += (size_t)n;
                }
        }
        r->body[r->body_len] = '\0';
        return 0;
}

static void serve_echo(int fd, const req *r)
{
        json_t *j =
                json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "method", r->method, "path", r->path,
                          "auth", r->auth, "ctype", r->ctype, "ua", r->ua, "body", r->body);
        char *s = json_dumps(j, JSON_COMPACT);

        send_resp(fd, 200, "application/json", s);
        free(s);
        json_decref(j);
}

static void serve_big(int fd)
{
        char *h = cs_xasprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Content-Length: %llu\r\n\r\n",
                               (unsigned long long)KUBE_MAX_BODY + 10);
        char *zeros = cs_xcalloc(1, 1 << 20);

        send_all(fd, h, strlen(h));
        for (unsigned i = 0; i <= (KUBE_MAX_BODY >> 20); i++)
                if (send_all(fd, zeros, 1 << 20) < 0)
                        break;
        free(zeros);
        free(h);
}

static void serve_watch_stream(int fd)
{
        send_stream_head(fd);
        send_chunk(fd, "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n");
        /* The next events only come once the client has seen the first one. */
        atomic_store(&srv.signalled, wait_fd(srv.signal_fd, 5000));
        send_chunk(fd, "{\"type\":\"MODIFIED\",\"obj");
        send_chunk(fd, "ect\":{\"metadata\":{\"name\":\"a\"}}}\n\n{\"type\":\"DELETED\","
                       "\"object\":{\"metadata\":{\"name\":\"a\"}}}\r\n{\"type\":\"BOOKMARK\","
                       "\"object\":{\"metadata\":{\"resourceVersion\":\"42\"}}}");
        send_chunk(fd, "");
}

static void serve_watch_many(int fd)
{
        send_stream_head(fd);
        send_chunk(fd, "{\"type\":\"ADDED\",\"object\":{}}\n"
                       "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"
                       "{\"type\":\"MODIFIED\",\"object\":{}}\n");
        wait_fd(srv.stop_fd, 10000);
}

/* Serves one request. false: close the connection. */
static bool serve(int fd, const req *r)
{
        const char *p = r->path;

        if (!strncmp(p, "/echo", 5)) {
                serve_echo(fd, r);
        } else if (!strcmp(p, "/status404")) {
                send_resp(fd, 404, "application/json",
                          "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                          "\"message\":\"pods \\\"x\\\" not found\",\"reason\":\"NotFound\","
                          "\"code\":404}");
        } else if (!strcmp(p, "/text404")) {
                send_resp(fd, 404, "text/plain", "nope\n");
        } else if (!strcmp(p, "/text200")) {
                send_resp(fd, 200, "text/plain", "hello");
        } else if (!strcmp(p, "/empty")) {
                send_resp(fd, 200, "application/json", "");
        } else if (!strcmp(p, "/slow")) {
                if (!wait_fd(srv.stop_fd, 3000))
                        send_resp(fd, 200, "application/json", "{}");
        } else if (!strcmp(p, "/big")) {
                serve_big(fd);
                return false;
        } else if (!strcmp(p, "/watch/stream")) {
                serve_watch_stream(fd);
        } else if (!strcmp(p, "/watch/many") || !strcmp(p, "/watch/idle")) {
                serve_watch_many(fd);
                return false;
        } else if (!strcmp(p, "/watch/hang")) {
                send_stream_head(fd);
                wait_fd(srv.stop_fd, 10000);
                return false;
        } else if (!strcmp(p, "/watch/gone")) {
                send_resp(fd, 410, "application/json",
                          "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\","
                          "\"message\":\"too old resource version\"}");
        } else if (!strcmp(p, "/watch/bad")) {
                send_stream_head(fd);
                send_chunk(fd, "{\"type\":\"ADDED\",\"object\":{}}\nnot json\n");
                send_chunk(fd, "");
        } else {
                send_resp(fd, 500, "text/plain", "unknown path\n");
        }
        return true;
}

static void *conn_main(void *arg)
{
        int fd = (int)(intptr_t)arg;
        req r;

        while (read_req(fd, &r) == 0) {
                bool keep = serve(fd, &r);

                free(r.body);
                if (!keep)
                        break;
        }
        shutdown(fd, SHUT_RDWR);
        return NULL;
}

static void *acceptor_main(void *arg)
{
        (void)arg;
        for (;;) {
                struct pollfd p[2] = { { .fd = srv.lfd, .events = POLLIN },
                                       { .fd = srv.stop_fd, .events = POLLIN } };
                int fd;

                if (poll(p, 2, -1) < 0 || (p[1].revents & POLLIN))
                        return NULL;
                fd = accept4(srv.lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                pthread_mutex_lock(&srv.lock);
                if (srv.n == MAX_CONNS) {
                        close(fd);
                } else {
                        srv.fds[srv.n] = fd;
                        atomic_fetch_add(&srv.accepted, 1);
                        if (pthread_create(&srv.threads[srv.n], NULL, conn_main,
                                           (void *)(intptr_t)fd) == 0)
                                srv.n++;
                        else
                                close(fd);
                }
                pthread_mutex_unlock(&srv.lock);
        }
}

static int setup_server(void **state)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof(a);

        setup_tmp(state);
        memset(&srv, 0, sizeof(srv));
        pthread_mutex_init(&srv.lock, NULL);
        srv.stop_fd = eventfd(0, EFD_CLOEXEC);
        srv.signal_fd = eventfd(0, EFD_CLOEXEC);
        srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(srv.lfd, 64), 0);
        assert_int_equal(getsockname(srv.lfd, (struct sockaddr *)&a, &alen), 0);
        srv.port = ntohs(a.sin_port);
        assert_int_equal(pthread_create(&srv.acceptor, NULL, acceptor_main, NULL), 0);
        return 0;
}

static int teardown_server(void **state)
{
        uint64_t one = 1;

        assert_int_equal(write(srv.stop_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
        pthread_join(srv.acceptor, NULL);
        for (int i = 0; i < srv.n; i++) {
                shutdown(srv.fds[i], SHUT_RDWR);
                pthread_join(srv.threads[i], NULL);
                close(srv.fds[i]);
        }
        close(srv.lfd);
        close(srv.stop_fd);
        close(srv.signal_fd);
        pthread_mutex_destroy(&srv.lock);
        return teardown_tmp(state);
}

/* A client of the mini server: a kubeconfig with an inline token, or a tokenFile. */
static kube_client *mini_client(const char *user, int64_t timeout_ms)
{
        char *yaml =
                cs_xasprintf("clusters:\n- {name: c, cluster: {server: 'http://127.0.0.1:%d'}}\n"
                             "users:\n- {name: u, user: %s}\n"
                             "contexts:\n- {name: x, context: {cluster: c, user: u}}\n"
                             "current-context: x\n",
                             srv.port, user);
        char *path;
        kube_client_config cfg = { .timeout_ms = timeout_ms };
        cs_error *err = NULL;
        kube_client *kc;

        write_file("mini-config", yaml);
        path = tmp_path("mini-config");
        cfg.kubeconfig = path;
        kc = kube_client_new(&cfg, &err);
        if (!kc)
                print_error("kube_client_new: %s\n", err->msg);
        assert_non_null(kc);
        free(path);
        free(yaml);
        return kc;
}

static json_t *echo(kube_client *kc, const char *method, const char *path, json_t *body)
{
        kube_response r;
        cs_error *err = NULL;

        if (kube_request_ex(kc, method, path, body, 0, -1, &r, &err) < 0)
                print_error("%s %s: %s\n", method, path, err->msg);
        assert_null(err);
        assert_int_equal(r.status, 200);
        assert_non_null(r.body);
        return r.body;
}

static void test_request_methods(void **state)
{
        kube_client *kc = mini_client("{token: tok-1}", 5000);
        json_t *b, *in = json_pack("{s:s}", "a", "b");

        (void)state;
        b = echo(kc, "GET", "/echo/get?labelSelector=a%3Db", NULL);
        assert_string_equal(kube_get_str(b, "method"), "GET");
        assert_string_equal(kube_get_str(b, "path"), "/echo/get?labelSelector=a%3Db");
        assert_string_equal(kube_get_str(b, "auth"), "Bearer tok-1");
        assert_string_equal(kube_get_str(b, "ua"), "compute-frontend");
        assert_string_equal(kube_get_str(b, "body"), "");
        json_decref(b);
        b = echo(kc, "POST", "/echo/post", in);
        assert_string_equal(kube_get_str(b, "method"), "POST");
        assert_string_equal(kube_get_str(b, "ctype"), "application/json");
        assert_string_equal(kube_get_str(b, "body"), "{\"a\":\"b\"}");
        json_decref(b);
        b = echo(kc, "PATCH", "/echo/patch", in);
        assert_string_equal(kube_get_str(b, "method"), "PATCH");
        assert_string_equal(kube_get_str(b, "ctype"), "application/merge-patch+json");
        assert_string_equal(kube_get_str(b, "body"), "{\"a\":\"b\"}");
        json_decref(b);
        b = echo(kc, "PUT", "/echo/put", in);
        assert_string_equal(kube_get_str(b, "method"), "PUT");
        json_decref(b);
        b = echo(kc, "DELETE", "/echo/delete", NULL);
        assert_string_equal(kube_get_str(b, "method"), "DELETE");
        assert_string_equal(kube_get_str(b, "body"), "");
        json_decref(b);
        b = echo(kc, "DELETE", "/echo/delete", in);
        assert_string_equal(kube_get_str(b, "body"), "{\"a\":\"b\"}");
        json_decref(b);
        b = echo(kc, "POST", "/echo/empty-post", NULL);
        assert_string_equal(kube_get_str(b, "method"), "POST");
        json_decref(b);
        /* one connection for all of it: the pooled handle keeps it alive */
        assert_int_equal(atomic_load(&srv.accepted), 1);
        {
                kube_response r;
                cs_error *err = NULL;

                assert_int_equal(kube_request_ex(kc, "HEAD", "/echo", NULL, 0, -1, &r, &err), -1);
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                cs_error_freep(&err);
                assert_int_equal(kube_request_ex(kc, "GET", "/echo", in, 0, -1, &r, &err), -1);
                cs_error_freep(&err);
                assert_int_equal(kube_request_ex(kc, "GET", "echo", NULL, 0, -1, &r, &err), -1);
                cs_error_freep(&err);
        }
        json_decref(in);
        kube_client_free(kc);
}

static void test_request_statuses(void **state)
{
        kube_client *kc = mini_client("{token: t}", 5000);
        kube_response r;
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(kube_request_ex(kc, "GET", "/status404", NULL, 0, -1, &r, &err), 0);
        assert_int_equal(r.status, 404);
        assert_string_equal(status_reason(&r), "NotFound");
        assert_string_equal(kube_response_message(&r), "pods \"x\" not found");
        kube_response_clear(&r);

        assert_int_equal(kube_request_ex(kc, "GET", "/text404", NULL, 0, -1, &r, &err), 0);
        assert_int_equal(r.status, 404);
        assert_null(r.body);
        assert_string_equal(status_reason(&r), "");
        assert_string_equal(kube_response_message(&r), "Not Found");
        kube_response_clear(&r);

        assert_int_equal(kube_request_ex(kc, "GET", "/empty", NULL, 0, -1, &r, &err), 0);
        assert_int_equal(r.status, 200);
        assert_null(r.body);

        assert_int_equal(kube_request_ex(kc, "GET", "/text200", NULL, 0, -1, &r, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        assert_string_equal(err->msg, "kube GET /text200: HTTP 200 with a body that is not JSON");
        assert_null(r.body);
        cs_error_freep(&err);

        assert_int_equal(kube_request_ex(kc, "GET", "/big", NULL, 0, -1, &r, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        assert_non_null(strstr(err->msg, "kube GET /big: response body larger than"));
        cs_error_freep(&err);
        kube_client_free(kc);

        kc = mini_client("{token: t}", 300);
        {
                int64_t t0 = cs_now_monotonic_ms();

                assert_int_equal(kube_request_ex(kc, "GET", "/slow", NULL, 0, -1, &r, &err), -1);
                assert_true(cs_now_monotonic_ms() - t0 < 2000);
        }
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, "kube GET /slow: timed out"));
        cs_error_freep(&err);
        kube_client_free(kc);
}

static void test_request_refused(void **state)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof(a);
        kube_client *kc;
        kube_response r;
        cs_error *err = NULL;
        char *yaml;
        bool cancelled;
        long status;

        (void)state;
        /* a port bound but not listening: connections are refused */
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        yaml = cs_xasprintf("clusters:\n- {name: c, cluster: {server: 'http://127.0.0.1:%d'}}\n"
                            "contexts:\n- {name: x, context: {cluster: c}}\ncurrent-context: x\n",
                            ntohs(a.sin_port));
        kc = new_yaml(yaml, NULL, &err);
        assert_non_null(kc);
        assert_int_equal(kube_request_ex(kc, "GET", "/api/v1/pods", NULL, 0, -1, &r, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, "kube GET /api/v1/pods: "));
        assert_non_null(strstr(err->msg, "onnect"));
        cs_error_freep(&err);
        assert_int_equal(kube_watch(kc, "/api/v1/pods?watch=1", NULL, NULL, -1, 5000, &status, NULL,
                                    &cancelled, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, "kube watch /api/v1/pods?watch=1: "));
        cs_error_freep(&err);
        kube_client_free(kc);
        free(yaml);
        close(fd);
}

static void test_token_rotation(void **state)
{
        kube_client *kc;
        json_t *b;

        (void)state;
        write_file("tok", "first\n");
        kc = mini_client("{tokenFile: tok, token: ignored}", 5000);
        b = echo(kc, "GET", "/echo", NULL);
        assert_string_equal(kube_get_str(b, "auth"), "Bearer first");
        json_decref(b);
        write_file("tok", "second\n");
        usleep(1100 * 1000);
        b = echo(kc, "GET", "/echo", NULL);
        assert_string_equal(kube_get_str(b, "auth"), "Bearer second");
        json_decref(b);
        /* checked at most once a second: a change right after a check waits for the next */
        write_file("tok", "third\n");
        b = echo(kc, "GET", "/echo", NULL);
        assert_string_equal(kube_get_str(b, "auth"), "Bearer second");
        json_decref(b);
        /* a token file that vanished mid-rotation: the last good token stays */
        {
                char *p = tmp_path("tok");

                unlink(p);
                free(p);
        }
        usleep(1100 * 1000);
        b = echo(kc, "GET", "/echo", NULL);
        assert_string_equal(kube_get_str(b, "auth"), "Bearer second");
        json_decref(b);
        write_file("tok", "fourth");
        usleep(1100 * 1000);
        b = echo(kc, "GET", "/echo", NULL);
        assert_string_equal(kube_get_str(b, "auth"), "Bearer fourth");
        json_decref(b);
        kube_client_free(kc);
}

#define N_THREADS  8
#define N_REQUESTS 25

static void *hammer(void *arg)
{
        kube_client *kc = arg;
        long ok = 0;

        for (int i = 0; i < N_REQUESTS; i++) {
                char path[64];
                kube_response r;
                cs_error *err = NULL;

                snprintf(path, sizeof(path), "/echo/%d", i);
                if (kube_request_ex(kc, "GET", path, NULL, 0, -1, &r, &err) == 0 &&
                    r.status == 200 && !strcmp(kube_get_str(r.body, "path"), path))
                        ok++;
                kube_response_clear(&r);
                cs_error_free(err);
        }
        return (void *)ok;
}

static void test_concurrent_requests(void **state)
{
        kube_client *kc = mini_client("{token: t}", 5000);
        pthread_t t[N_THREADS];
        long total = 0;

        (void)state;
        for (int i = 0; i < N_THREADS; i++)
                assert_int_equal(pthread_create(&t[i], NULL, hammer, kc), 0);
        for (int i = 0; i < N_THREADS; i++) {
                void *ok;

                pthread_join(t[i], &ok);
                total += (long)ok;
        }
        assert_int_equal(total, N_THREADS * N_REQUESTS);
        /* connections are reused: at most one per handle (pool of 8 plus overflow) */
        assert_true(atomic_load(&srv.accepted) <= N_THREADS);
        kube_client_free(kc);
}

typedef struct events {
        char types[16][16];
        char names[16][32];
        int n;
        int stop_at; /* return 7 at this event (1-based), 0: never */
        int64_t rv_code;
} events;

static int on_event(const char *type, json_t *object, void *userdata)
{
        events *ev = userdata;
        const char *name = kube_get_str(object, "metadata.name");

        assert_true(ev->n < 16);
        snprintf(ev->types[ev->n], sizeof(ev->types[0]), "%s", type);
        snprintf(ev->names[ev->n], sizeof(ev->names[0]), "%s", name ? name : "");
        ev->n++;
        if (!strcmp(type, "ADDED") && ev->n == 1) {
                uint64_t one = 1;

                /* tell the server it may send the rest: we saw this before the stream ended */
                assert_int_equal(write(srv.signal_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
        }
        if (!strcmp(type, "ERROR"))
                ev->rv_code = json_integer_value(json_object_get(object, "code"));
        return ev->n == ev->stop_at ? 7 : 0;
}

static void test_watch_stream(void **state)
{
        kube_client *kc = mini_client("{token: t}", 5000);
        events ev = { 0 };
        cs_error *err = NULL;
        bool cancelled = true;
        long status = 0;
        json_t *body = (json_t *)1;

        (void)state;
        assert_int_equal(kube_watch(kc, "/watch/stream", on_event, &ev, -1, 10000, &status, &body,
                                    &cancelled, &err),
                         0);
        assert_null(err);
        assert_false(cancelled);
        assert_int_equal(status, 200);
        assert_null(body);
        assert_true(atomic_load(&srv.signalled));
        assert_int_equal(ev.n, 4);
        assert_string_equal(ev.types[0], "ADDED");
        assert_string_equal(ev.types[1], "MODIFIED");
        assert_string_equal(ev.types[2], "DELETED");
        assert_string_equal(ev.types[3], "BOOKMARK");
        assert_string_equal(ev.names[1], "a");
        assert_string_equal(ev.names[2], "a");

        /* fn's non-zero value ends the watch and is returned */
        memset(&ev, 0, sizeof(ev));
        ev.stop_at = 2;
        assert_int_equal(kube_watch(kc, "/watch/many", on_event, &ev, -1, 10000, &status, NULL,
                                    &cancelled, &err),
                         7);
        assert_int_equal(status, 200);
        assert_int_equal(ev.n, 2);
        assert_string_equal(ev.types[1], "ERROR");
        assert_int_equal(ev.rv_code, 410);

        /* a non-2xx answer: its status and Status body */
        assert_int_equal(kube_watch(kc, "/watch/gone", on_event, &ev, -1, 10000, &status, &body,
                                    &cancelled, &err),
                         0);
        assert_int_equal(status, 410);
        assert_non_null(body);
        assert_string_equal(kube_get_str(body, "reason"), "Expired");
        json_decref(body);

        /* a line that is not JSON */
        memset(&ev, 0, sizeof(ev));
        assert_int_equal(kube_watch(kc, "/watch/bad", on_event, &ev, -1, 10000, &status, NULL,
                                    &cancelled, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        assert_non_null(strstr(err->msg, "kube watch /watch/bad: malformed event line"));
        assert_int_equal(ev.n, 1);
        cs_error_freep(&err);
        kube_client_free(kc);
}

typedef struct canceller {
        int fd;
        int delay_ms;
        int64_t fired_ms;
} canceller;

static void *cancel_later(void *arg)
{
        canceller *c = arg;
        char b = 'x';

        usleep((useconds_t)c->delay_ms * 1000);
        c->fired_ms = cs_now_monotonic_ms();
        assert_int_equal(write(c->fd, &b, 1), 1);
        return NULL;
}

static void test_watch_cancel_and_idle(void **state)
{
        kube_client *kc = mini_client("{token: t}", 5000);
        events ev = { 0 };
        cs_error *err = NULL;
        bool cancelled = false;
        long status = 0;
        int p[2];
        pthread_t t;
        canceller c;
        int64_t t0;

        (void)state;
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        c = (canceller){ .fd = p[1], .delay_ms = 300 };
        assert_int_equal(pthread_create(&t, NULL, cancel_later, &c), 0);
        assert_int_equal(kube_watch(kc, "/watch/hang", on_event, &ev, p[0], 60000, &status, NULL,
                                    &cancelled, &err),
                         0);
        t0 = cs_now_monotonic_ms();
        pthread_join(t, NULL);
        assert_true(cancelled);
        assert_int_equal(status, 200);
        assert_true(t0 - c.fired_ms < 200);

        /* already readable: returns at once, the fd is not read */
        t0 = cs_now_monotonic_ms();
        assert_int_equal(kube_watch(kc, "/watch/hang", on_event, &ev, p[0], 60000, &status, NULL,
                                    &cancelled, &err),
                         0);
        assert_true(cancelled);
        assert_true(cs_now_monotonic_ms() - t0 < 200);
        close(p[0]);
        close(p[1]);

        /* a hung-up pipe counts as cancelled too */
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        close(p[1]);
        assert_int_equal(kube_watch(kc, "/watch/hang", on_event, &ev, p[0], 60000, &status, NULL,
                                    &cancelled, &err),
                         0);
        assert_true(cancelled);
        close(p[0]);

        /* idle: headers and events, then nothing */
        memset(&ev, 0, sizeof(ev));
        t0 = cs_now_monotonic_ms();
        assert_int_equal(kube_watch(kc, "/watch/idle", on_event, &ev, -1, 400, &status, NULL,
                                    &cancelled, &err),
                         -1);
        assert_true(cs_now_monotonic_ms() - t0 < 1500);
        assert_false(cancelled);
        assert_int_equal(ev.n, 3);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_string_equal(err->msg, "kube watch /watch/idle: watch idle for 400 ms");
        cs_error_freep(&err);
        kube_client_free(kc);
}

/* ---- against tests/kube/apiserver.py (HTTPS, its own CA, bearer token) ---- */

#define APISERVER KUBE_SOURCE_DIR "/tests/kube/apiserver.py"

static struct {
        pid_t pid;
        char dir[256];
        char *url;
        char *token;
        bool up;
} api;

/* A CA that signed nothing the test server uses. */
static const char unrelated_ca[] =
        "-----BEGIN CERTIFICATE-----\n"
        "MIIBnzCCAUWgAwIBAgIUQiOWqWqggSAP8vs+gNlUuSdEHhkwCgYIKoZIzj0EAwIw\n"
        "JDEiMCAGA1UEAwwZY29tcHV0ZS10ZXN0LXVucmVsYXRlZC1jYTAgFw0yNjEyMDIx\n"
        "MTI3MDhaGA8yMTI2MTEwODExMjcwOFowJDEiMCAGA1UEAwwZY29tcHV0ZS10ZXN0\n"
        "LXVucmVsYXRlZC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABJ0MROTjP2Kv\n"
        "A0SBx55MNKv/nB2DgLxb6pMDiY8XLZIFZK97FJz2vRoe/SSEIYQkWCwm/sy7Ik6X\n"
        "obK/MdTfZHWjUzBRMB0GA1UdDgQWBBTAuNWrNzg3MaDHN/ssU1ygZtrTZTAfBgNV\n"
        "HSMEGDAWgBTAuNWrNzg3MaDHN/ssU1ygZtrTZTAPBgNVHRMBAf8EBTADAQH/MAoG\n"
        "CCqGSM49BAMCA0gAMEUCICiBuANmD6M9CQnaMuWWlpby9BX7CRxQsm+Ccm3hbitS\n"
        "AiEAp0S6wM+4qEHPLeA0JE81Pm7jkyWFjGwdL09Ba49w86Y=\n"
        "-----END CERTIFICATE-----\n";

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        char *buf = cs_xcalloc(1, 65536);
        size_t n;

        if (!f) {
                free(buf);
                return NULL;
        }
        n = fread(buf, 1, 65535, f);
        buf[n] = '\0';
        fclose(f);
        while (n > 0 && buf[n - 1] == '\n')
                buf[--n] = '\0';
        return buf;
}

static char *api_file(const char *name)
{
        return cs_xasprintf("%s/%s", api.dir, name);
}

static char *b64(const char *s)
{
        static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = strlen(s);
        char *out = cs_xmalloc(n / 3 * 4 + 5), *o = out;
        const unsigned char *p = (const unsigned char *)s;

        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                             (i + 2 < n ? p[i + 2] : 0);

                *o++ = t[v >> 18 & 63];
                *o++ = t[v >> 12 & 63];
                *o++ = i + 1 < n ? t[v >> 6 & 63] : '=';
                *o++ = i + 2 < n ? t[v & 63] : '=';
        }
        *o = '\0';
        return out;
}

static int api_group_setup(void **state)
{
        char *argv[] = { "/usr/bin/python3", APISERVER, "--state-dir", api.dir, NULL };
        posix_spawn_file_actions_t fa;
        char *log, *kcfg, *urlf, *tokf;
        int status;

        (void)state;
        if (access(APISERVER, R_OK) != 0)
                return 0; /* the tests below skip */
        snprintf(api.dir, sizeof(api.dir), "/tmp/compute-test-apiserver-XXXXXX");
        assert_non_null(mkdtemp(api.dir));
        log = api_file("server.log");
        kcfg = api_file("kubeconfig");
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC,
                                         0600);
        posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
        assert_int_equal(posix_spawn(&api.pid, argv[0], &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        for (int i = 0; i < 300 && access(kcfg, R_OK) != 0; i++) {
                if (waitpid(api.pid, &status, WNOHANG) == api.pid) {
                        api.pid = 0;
                        fail_msg("apiserver.py exited; see %s", log);
                }
                usleep(100 * 1000);
        }
        assert_int_equal(access(kcfg, R_OK), 0);
        urlf = api_file("url");
        tokf = api_file("token");
        api.url = slurp(urlf);
        api.token = slurp(tokf);
        assert_non_null(api.url);
        assert_non_null(api.token);
        api.up = true;
        free(urlf);
        free(tokf);
        free(kcfg);
        free(log);
        return 0;
}

static int api_group_teardown(void **state)
{
        (void)state;
        if (api.pid > 0) {
                kill(api.pid, SIGTERM);
                waitpid(api.pid, NULL, 0);
        }
        if (api.dir[0]) {
                snprintf(tmpdir, sizeof(tmpdir), "%s", api.dir);
                nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        }
        free(api.url);
        free(api.token);
        return 0;
}

static int api_setup(void **state)
{
        if (!api.up) /* a skip would count as a pass: the test API server is in the tree */
                fail_msg("the test API server (tests/kube/apiserver.py) did not start");
        return setup_tmp(state);
}

/* The server's own kubeconfig, as it wrote it. */
static kube_client *api_client(void)
{
        char *path = api_file("kubeconfig");
        kube_client_config cfg = { .kubeconfig = path, .timeout_ms = 10000 };
        cs_error *err = NULL;
        kube_client *kc = kube_client_new(&cfg, &err);

        if (!kc)
                fail_msg("%s: %s", path, err->msg);
        free(path);
        return kc;
}

/* A kubeconfig for the test server with these cluster lines and this user (a flow mapping). */
static kube_client *api_client_with(const char *cluster_lines, const char *user, cs_error **err)
{
        char *yaml = cs_xasprintf("clusters:\n- name: c\n  cluster:\n    server: %s\n%s"
                                  "users:\n- {name: u, user: %s}\n"
                                  "contexts:\n- {name: x, context: {cluster: c, user: u}}\n"
                                  "current-context: x\n",
                                  api.url, cluster_lines, user);
        kube_client *kc = new_yaml(yaml, NULL, err);

        free(yaml);
        return kc;
}

static long api_status(kube_client *kc, const char *method, const char *path, json_t *body,
                       char *reason, size_t reason_size)
{
        kube_response r;
        cs_error *err = NULL;
        long status;

        if (kube_request_ex(kc, method, path, body, 0, -1, &r, &err) < 0)
                fail_msg("%s %s: %s", method, path, err->msg);
        status = r.status;
        if (reason)
                snprintf(reason, reason_size, "%s", status_reason(&r));
        kube_response_clear(&r);
        return status;
}

static json_t *pod_json(const char *name)
{
        return json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1", "kind",
                         "Pod", "metadata", "name", name, "spec", "containers", "name", "c",
                         "image", "busybox");
}

static void test_api_get_post(void **state)
{
        kube_client *kc = api_client();
        json_t *pod = pod_json("p1");
        char reason[64];
        kube_response r;
        cs_error *err = NULL;

        (void)state;
        assert_string_equal(kube_client_server(kc), api.url);
        assert_int_equal(api_status(kc, "GET", "/api/v1/namespaces/test-a/pods/nope", NULL, reason,
                                    sizeof(reason)),
                         404);
        assert_string_equal(reason, "NotFound");
        assert_int_equal(api_status(kc, "POST", "/api/v1/namespaces/test-a/pods", pod, reason,
                                    sizeof(reason)),
                         201);
        assert_int_equal(api_status(kc, "POST", "/api/v1/namespaces/test-a/pods", pod, reason,
                                    sizeof(reason)),
                         409);
        assert_string_equal(reason, "AlreadyExists");
        json_decref(pod);

        assert_int_equal(kube_request_ex(kc, "GET", "/api/v1/namespaces/test-a/pods/p1", NULL, 0,
                                         -1, &r, &err),
                         0);
        assert_int_equal(r.status, 200);
        assert_string_equal(kube_get_str(r.body, "metadata.name"), "p1");
        assert_string_equal(kube_get_str(r.body, "metadata.namespace"), "test-a");
        kube_response_clear(&r);

        pod = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "compute.paper-board.io/x",
                        "1");
        assert_int_equal(kube_request_ex(kc, "PATCH", "/api/v1/namespaces/test-a/pods/p1", pod, 0,
                                         -1, &r, &err),
                         0);
        assert_int_equal(r.status, 200);
        assert_string_equal(json_string_value(kube_get_key(r.body, "metadata", "annotations",
                                                           "compute.paper-board.io/x", NULL)),
                            "1");
        kube_response_clear(&r);
        json_decref(pod);
        assert_int_equal(
                api_status(kc, "DELETE", "/api/v1/namespaces/test-a/pods/p1", NULL, NULL, 0), 200);
        kube_client_free(kc);
}

typedef struct creator {
        kube_client *kc;
        int64_t created_ms[3];
} creator;

static void *create_pods(void *arg)
{
        creator *c = arg;

        usleep(300 * 1000);
        for (int i = 0; i < 3; i++) {
                char name[16];
                json_t *pod;

                snprintf(name, sizeof(name), "w%d", i + 1);
                pod = pod_json(name);
                if (api_status(c->kc, "POST", "/api/v1/namespaces/test-w/pods", pod, NULL, 0) !=
                    201)
                        fail_msg("POST %s failed", name);
                c->created_ms[i] = cs_now_monotonic_ms();
                json_decref(pod);
                usleep(200 * 1000);
        }
        return NULL;
}

typedef struct added {
        char names[8][16];
        int64_t at_ms[8];
        int n;
} added;

static int on_added(const char *type, json_t *object, void *userdata)
{
        added *a = userdata;

        if (strcmp(type, "ADDED"))
                return 0;
        snprintf(a->names[a->n], sizeof(a->names[0]), "%s", kube_get_str(object, "metadata.name"));
        a->at_ms[a->n++] = cs_now_monotonic_ms();
        return a->n == 3 ? 1 : 0;
}

static void test_api_watch(void **state)
{
        kube_client *kc = api_client();
        creator c = { .kc = kc };
        added a = { 0 };
        kube_response r;
        cs_error *err = NULL;
        pthread_t t;
        char *path;
        long status;
        bool cancelled;

        (void)state;
        assert_int_equal(
                kube_request_ex(kc, "GET", "/api/v1/namespaces/test-w/pods", NULL, 0, -1, &r, &err),
                0);
        assert_int_equal(r.status, 200);
        path = cs_xasprintf("/api/v1/namespaces/test-w/pods?watch=1&allowWatchBookmarks=true&"
                            "timeoutSeconds=30&resourceVersion=%s",
                            kube_get_str(r.body, "metadata.resourceVersion"));
        kube_response_clear(&r);
        assert_int_equal(pthread_create(&t, NULL, create_pods, &c), 0);
        assert_int_equal(
                kube_watch(kc, path, on_added, &a, -1, 10000, &status, NULL, &cancelled, &err), 1);
        pthread_join(t, NULL);
        assert_int_equal(status, 200);
        assert_int_equal(a.n, 3);
        assert_string_equal(a.names[0], "w1");
        assert_string_equal(a.names[1], "w2");
        assert_string_equal(a.names[2], "w3");
        /* each event came as it happened, not when the stream ended */
        assert_true(a.at_ms[0] < c.created_ms[2]);
        assert_true(a.at_ms[1] < c.created_ms[2]);
        free(path);
        kube_client_free(kc);
}

static void test_api_watch_cancel(void **state)
{
        kube_client *kc = api_client();
        added a = { 0 };
        cs_error *err = NULL;
        canceller c;
        pthread_t t;
        int p[2];
        long status;
        bool cancelled = false;
        int64_t end;

        (void)state;
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        c = (canceller){ .fd = p[1], .delay_ms = 500 };
        assert_int_equal(pthread_create(&t, NULL, cancel_later, &c), 0);
        assert_int_equal(kube_watch(kc, "/api/v1/namespaces/test-c/pods?watch=1&timeoutSeconds=60",
                                    on_added, &a, p[0], 30000, &status, NULL, &cancelled, &err),
                         0);
        end = cs_now_monotonic_ms();
        pthread_join(t, NULL);
        assert_null(err);
        assert_true(cancelled);
        assert_int_equal(status, 200);
        assert_true(end - c.fired_ms < 200);
        close(p[0]);
        close(p[1]);
        kube_client_free(kc);
}

static void expect_tls_failure(kube_client *kc)
{
        kube_response r;
        cs_error *err = NULL;
        long status;
        bool cancelled;

        assert_int_equal(kube_request_ex(kc, "GET", "/api/v1/namespaces/test-t/pods/x", NULL, 0, -1,
                                         &r, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(strstr(err->msg, "kube GET /api/v1/namespaces/test-t/pods/x: TLS: "));
        if (!strstr(err->msg, "certificate"))
                fail_msg("no 'certificate' in: %s", err->msg);
        cs_error_freep(&err);
        assert_int_equal(kube_watch(kc, "/api/v1/namespaces/test-t/pods?watch=1", on_added, NULL,
                                    -1, 5000, &status, NULL, &cancelled, &err),
                         -1);
        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
        assert_non_null(
                strstr(err->msg, "kube watch /api/v1/namespaces/test-t/pods?watch=1: TLS: "));
        if (!strstr(err->msg, "certificate"))
                fail_msg("no 'certificate' in: %s", err->msg);
        cs_error_freep(&err);
}

static void test_api_tls(void **state)
{
        char *ca = api_file("ca.crt"), *crt = api_file("server.crt"), *key = api_file("server.key");
        char *cakey = api_file("ca.key"), *key_pem = slurp(key), *key_b64 = b64(key_pem);
        char *lines;
        cs_error *err = NULL;
        kube_client *kc;

        (void)state;
        /* a CA that did not sign the server's certificate, and none (the system bundle) */
        write_file("wrong-ca.crt", unrelated_ca);
        kc = api_client_with("    certificate-authority: wrong-ca.crt\n", "{token: x}", &err);
        assert_non_null(kc);
        expect_tls_failure(kc);
        kube_client_free(kc);
        kc = api_client_with("", "{token: x}", &err);
        assert_non_null(kc);
        expect_tls_failure(kc);
        kube_client_free(kc);

        /* insecure-skip-tls-verify: no verification at all */
        kc = api_client_with("    insecure-skip-tls-verify: true\n", "{token: x}", &err);
        assert_non_null(kc);
        assert_int_equal(api_status(kc, "GET", "/api/v1/namespaces/test-t/pods/x", NULL, NULL, 0),
                         401);
        kube_client_free(kc);

        /* a client certificate (path) and key (data) are loaded and offered; a key that does not
         * match the certificate fails the connection */
        lines = cs_xasprintf("    certificate-authority: %s\n", ca);
        {
                char *user = cs_xasprintf("{token: %s, client-certificate: %s, "
                                          "client-key-data: %s}",
                                          api.token, crt, key_b64);

                kc = api_client_with(lines, user, &err);
                assert_non_null(kc);
                assert_int_equal(
                        api_status(kc, "GET", "/api/v1/namespaces/test-t/pods/x", NULL, NULL, 0),
                        404);
                kube_client_free(kc);
                free(user);
                user = cs_xasprintf("{token: %s, client-certificate: %s, client-key: %s}",
                                    api.token, crt, cakey);
                kc = api_client_with(lines, user, &err);
                assert_non_null(kc);
                {
                        kube_response r;

                        assert_int_equal(kube_request_ex(kc, "GET",
                                                         "/api/v1/namespaces/test-t/pods/x", NULL,
                                                         0, -1, &r, &err),
                                         -1);
                        assert_int_equal(err->code, GRPC_STATUS_UNAVAILABLE);
                        cs_error_freep(&err);
                }
                kube_client_free(kc);
                free(user);
        }
        free(lines);
        free(ca);
        free(crt);
        free(key);
        free(cakey);
        free(key_pem);
        free(key_b64);
}

static void test_api_auth(void **state)
{
        char *ca = api_file("ca.crt"), *tok = api_file("token");
        char *lines = cs_xasprintf("    certificate-authority: %s\n", ca);
        char *user = cs_xasprintf("{tokenFile: %s}", tok);
        char reason[64];
        cs_error *err = NULL;
        kube_client *kc;
        char *port;

        (void)state;
        kc = api_client_with(lines, "{token: wrong}", &err);
        assert_non_null(kc);
        assert_int_equal(api_status(kc, "GET", "/api/v1/namespaces/test-t/pods/x", NULL, reason,
                                    sizeof(reason)),
                         401);
        assert_string_equal(reason, "Unauthorized");
        kube_client_free(kc);
        kc = api_client_with(lines, user, &err);
        assert_non_null(kc);
        assert_int_equal(api_status(kc, "GET", "/api/v1/namespaces/test-t/pods/x", NULL, NULL, 0),
                         404);
        kube_client_free(kc);

        /* in-cluster: the service account files and the service env vars */
        write_sa(true);
        write_file("sa/token", api.token);
        {
                char *pem = slurp(ca);
                char *with_nl = cs_xasprintf("%s\n", pem);

                write_file("sa/ca.crt", with_nl);
                free(with_nl);
                free(pem);
        }
        port = strrchr(api.url, ':') + 1;
        setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", port, 1);
        kc = new_incluster(&err);
        assert_non_null(kc);
        assert_string_equal(kube_client_namespace(kc), "agents");
        assert_int_equal(api_status(kc, "GET", "/api/v1/namespaces/agents/pods/x", NULL, NULL, 0),
                         404);
        kube_client_free(kc);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
        free(lines);
        free(user);
        free(ca);
        free(tok);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_kubeconfig_data_and_token, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_kubeconfig_paths, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_kubeconfig_context_selection, setup_tmp,
                                                teardown_tmp),
                cmocka_unit_test_setup_teardown(test_kubeconfig_json, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_kubeconfig_errors, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_incluster, setup_tmp, teardown_tmp),
                cmocka_unit_test(test_time),
                cmocka_unit_test(test_escape_and_get),
                cmocka_unit_test_setup_teardown(test_request_methods, setup_server,
                                                teardown_server),
                cmocka_unit_test_setup_teardown(test_request_statuses, setup_server,
                                                teardown_server),
                cmocka_unit_test_setup_teardown(test_request_refused, setup_tmp, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_token_rotation, setup_server, teardown_server),
                cmocka_unit_test_setup_teardown(test_concurrent_requests, setup_server,
                                                teardown_server),
                cmocka_unit_test_setup_teardown(test_watch_stream, setup_server, teardown_server),
                cmocka_unit_test_setup_teardown(test_watch_cancel_and_idle, setup_server,
                                                teardown_server),
        };

        const struct CMUnitTest api_tests[] = {
                cmocka_unit_test_setup_teardown(test_api_get_post, api_setup, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_api_watch, api_setup, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_api_watch_cancel, api_setup, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_api_tls, api_setup, teardown_tmp),
                cmocka_unit_test_setup_teardown(test_api_auth, api_setup, teardown_tmp),
        };
        int failed;

        signal(SIGPIPE, SIG_IGN);
        failed = cmocka_run_group_tests_name("kube_client", tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("kube_client_apiserver", api_tests, api_group_setup,
                                              api_group_teardown);
        return failed;
}
