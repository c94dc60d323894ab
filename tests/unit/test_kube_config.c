/* Unit tests for frontend/kube_config.c on text buffers: the YAML reader (scalars, quoting,
 * aliases and their caps, keys, UTF-8), kubeconfig selection and path resolution, the base64
 * decoder, and reading the files a kubeconfig names. No curl, no server; files only in the
 * last test, in a temp dir. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube_config.h"
#include "util.h"

static json_t *yaml(const char *text, cs_error **err)
{
        return kube_yaml_parse("/k/config", text, strlen(text), err);
}

static void expect_json(const char *text, const char *want)
{
        cs_error *err = NULL;
        json_t *v = yaml(text, &err);
        char *got;

        if (!v)
                fail_msg("%s: %s", text, err ? err->msg : "?");
        got = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        if (strcmp(got, want))
                fail_msg("%s: got %s, want %s", text, got, want);
        free(got);
        json_decref(v);
}

static void expect_yaml_error(const char *text, size_t len, const char *want)
{
        cs_error *err = NULL;
        json_t *v = kube_yaml_parse("/k/config", text, len, &err);

        assert_null(v);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        if (!strstr(err->msg, want) || strncmp(err->msg, "kubeconfig /k/config: ", 22))
                fail_msg("%s: %s (want %s)", text, err->msg, want);
        cs_error_free(err);
}

static void test_yaml_scalars(void **state)
{
        (void)state;
        /* Plain true/false/null are JSON's; quoted, or any other spelling, a string. */
        expect_json("a: true\nb: False\nc: NULL\nd: ~\ne:\nf: 'true'\ng: \"null\"\nh: yes\n"
                    "i: 42\nj: 0x1F\n",
                    "{\"a\":true,\"b\":false,\"c\":null,\"d\":null,\"e\":null,\"f\":\"true\","
                    "\"g\":\"null\",\"h\":\"yes\",\"i\":\"42\",\"j\":\"0x1F\"}");
        expect_json("s: \"tab\\there \\u00e9\"\nt: 'it''s'\nu: |\n  two\n  lines\n",
                    "{\"s\":\"tab\\there \xc3\xa9\",\"t\":\"it's\",\"u\":\"two\\nlines\\n\"}");
        /* JSON is YAML; aliases expand; only the first document counts. */
        expect_json("{\"a\": [1, {\"b\": null}], \"c\": \"d\"}",
                    "{\"a\":[\"1\",{\"b\":null}],\"c\":\"d\"}");
        expect_json("x: &anchor {k: v}\ny: *anchor\n", "{\"x\":{\"k\":\"v\"},\"y\":{\"k\":\"v\"}}");
        expect_json("first: 1\n---\nsecond: 2\n", "{\"first\":\"1\"}");
        expect_json("- plain\n", "[\"plain\"]");
}

static void test_yaml_refused(void **state)
{
        char deep[2 * (KUBE_MAX_YAML_DEPTH + 2) + 1];
        size_t i;

        (void)state;
        expect_yaml_error("", 0, "empty file");
        expect_yaml_error("# only a comment\n", 17, "empty file");
        expect_yaml_error("{a: [1, 2}\n", 11, "line 1");
        expect_yaml_error("a: 1\n b: 2\n  - c\n", 17, "line ");
        expect_yaml_error("[a]: 1\n", 7, "mapping key is not a string");
        expect_yaml_error("a: \"\xff\xfe\"\n", 9, "line ");
        expect_yaml_error("a: *nowhere\n", 12, "line ");
        expect_yaml_error("a: &x [*x]\n", 11, "too deep or too large");
        /* Nesting: one level under the cap is read, at the cap + 1 refused. */
        for (i = 0; i < KUBE_MAX_YAML_DEPTH + 2; i++)
                deep[i] = '[';
        for (; i < 2 * (KUBE_MAX_YAML_DEPTH + 2); i++)
                deep[i] = ']';
        deep[i] = '\0';
        expect_yaml_error(deep, strlen(deep), "too deep or too large");
        {
                cs_error *err = NULL;
                json_t *v = kube_yaml_parse("/k/config", deep + 2, strlen(deep) - 4, &err);

                assert_non_null(v);
                assert_null(err);
                json_decref(v);
        }
        /* Bytes after a NUL: libyaml refuses a control character. */
        expect_yaml_error("a: b\0c: d\n", 10, "line ");
}

static void test_base64(void **state)
{
        static const struct {
                const char *in;
                const char *out;
        } ok[] = {
                { "aGVsbG8=", "hello" }, { "aGVsbG8", "hello" }, { "aGVs\n bG8=\n", "hello" },
                { "-_8=", "\xfb\xff" },  { "+/8=", "\xfb\xff" }, { "YQ==", "a" },
        };
        static const char *const bad[] = { "", "a", "a===", "aGVs*bG8=", "YQ==YQ==", "====" };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
                kube_blob b = { 0 };

                assert_int_equal(kube_base64_decode(ok[i].in, &b), 0);
                assert_int_equal(b.len, strlen(ok[i].out));
                assert_memory_equal(b.data, ok[i].out, b.len);
                assert_int_equal(b.data[b.len], '\0');
                kube_blob_free(&b);
                assert_null(b.data);
        }
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                kube_blob b = { 0 };

                if (kube_base64_decode(bad[i], &b) != -1)
                        fail_msg("\"%s\" decoded", bad[i]);
                assert_null(b.data);
        }
}

static int parse(const char *source, const char *text, const char *context, kube_config *ret,
                 cs_error **err)
{
        memset(ret, 0, sizeof(*ret));
        return kube_config_parse(source, text, strlen(text), context, ret, err);
}

static const char full[] =
        "apiVersion: v1\n"
        "kind: Config\n"
        "current-context: files\n"
        "clusters:\n"
        "- name: files\n"
        "  cluster:\n"
        "    server: \"https://api.example.test:6443///\"\n"
        "    certificate-authority: pki/ca.crt\n"
        "- name: inline\n"
        "  cluster:\n"
        "    server: https://10.0.0.1\n"
        "    certificate-authority-data: aGVsbG8=\n"
        "    certificate-authority: ignored.crt\n"
        "    insecure-skip-tls-verify: 'false'\n"
        "- name: lab\n"
        "  cluster: {server: 'http://127.0.0.1:8080', insecure-skip-tls-verify: \"true\"}\n"
        "users:\n"
        "- name: certs\n"
        "  user:\n"
        "    client-certificate: /abs/client.crt\n"
        "    client-key: ../keys/client.key\n"
        "    token: fixed\n"
        "    tokenFile: tok\n"
        "- name: bearer\n"
        "  user: {token: 'abc.def'}\n"
        "contexts:\n"
        "- name: files\n"
        "  context: {cluster: files, user: certs, namespace: ''}\n"
        "- name: inline\n"
        "  context: {cluster: inline, user: bearer, namespace: team-a}\n"
        "- name: lab\n"
        "  context: {cluster: lab}\n";

static void test_kubeconfig_selection(void **state)
{
        cs_error *err = NULL;
        kube_config c;

        (void)state;
        /* current-context: paths resolved against the kubeconfig's directory, nothing read
         * yet; a tokenFile wins over a token; an empty namespace is "default". */
        assert_int_equal(parse("/etc/kube/config", full, NULL, &c, &err), 0);
        assert_string_equal(c.server, "https://api.example.test:6443");
        assert_string_equal(c.ns, "default");
        assert_false(c.insecure);
        assert_string_equal(c.ca.path, "/etc/kube/pki/ca.crt");
        assert_string_equal(c.ca.label, "cluster \"files\": certificate-authority");
        assert_int_equal(c.ca.pem.len, 0);
        assert_string_equal(c.cert.path, "/abs/client.crt");
        assert_string_equal(c.key.path, "/etc/kube/../keys/client.key");
        assert_string_equal(c.key.label, "user \"certs\": client-key");
        assert_null(c.token);
        assert_string_equal(c.token_path, "/etc/kube/tok");
        kube_config_clear(&c);

        /* -data wins over the file; a bare file name resolves against "." */
        assert_int_equal(parse("config", full, "inline", &c, &err), 0);
        assert_string_equal(c.server, "https://10.0.0.1");
        assert_string_equal(c.ns, "team-a");
        assert_null(c.ca.path);
        assert_int_equal(c.ca.pem.len, 5);
        assert_memory_equal(c.ca.pem.data, "hello", 5);
        assert_string_equal(c.token, "abc.def");
        assert_null(c.token_path);
        kube_config_clear(&c);

        /* No user: no credentials at all. */
        assert_int_equal(parse("config", full, "lab", &c, &err), 0);
        assert_true(c.insecure);
        assert_null(c.token);
        assert_null(c.token_path);
        assert_null(c.cert.path);
        kube_config_clear(&c);
        assert_null(err);
}

static void test_kubeconfig_refused(void **state)
{
        static const struct {
                const char *text;
                const char *want;
        } cases[] = {
                { "[]\n", "kubeconfig /k/config: not a mapping" },
                { "current-context: [x]\n", "top level: current-context must be a string" },
                { "contexts: []\ncurrent-context: ''\n", "no current-context" },
                { "contexts:\n- {name: x, context: {cluster: c}}\ncurrent-context: x\n"
                  "clusters:\n- {name: c, cluster: {server: 'https://x', proxy-url: 'http://p'}}\n",
                  "cluster \"c\": proxy-url is not supported" },
                { "contexts:\n- {name: x, context: {cluster: c, user: u}}\ncurrent-context: x\n"
                  "clusters:\n- {name: c, cluster: {server: 'https://x'}}\n"
                  "users:\n- {name: u, user: {as: admin}}\n",
                  "user \"u\": impersonation is not supported" },
                { "contexts:\n- {name: x, context: {cluster: c, user: u}}\ncurrent-context: x\n"
                  "clusters:\n- {name: c, cluster: {server: 'https://x'}}\n"
                  "users:\n- {name: u, user: {client-key: k.pem}}\n",
                  "client-certificate and client-key must be given together" },
                { "contexts:\n- {name: x, context: {cluster: c}}\ncurrent-context: x\n"
                  "clusters:\n- {name: c, cluster: {server: ''}}\n",
                  "cluster \"c\": server is empty" },
                { "contexts:\n- {name: x, context: {cluster: c}}\ncurrent-context: x\n"
                  "clusters: {c: {server: 'https://x'}}\n",
                  "clusters must be a list" },
                { "contexts:\n- {name: x, context: {cluster: c, user: u}}\ncurrent-context: x\n"
                  "clusters:\n- {name: c, cluster: {server: 'https://x'}}\n"
                  "users:\n- {name: u, user: {token: \"a\\x7f\"}}\n",
                  "token holds control characters" },
        };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                cs_error *err = NULL;
                kube_config c;

                assert_int_equal(parse("/k/config", cases[i].text, NULL, &c, &err), -1);
                assert_non_null(err);
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                if (!strstr(err->msg, cases[i].want))
                        fail_msg("case %zu: %s (want %s)", i, err->msg, cases[i].want);
                /* A failed parse leaves nothing behind, even what it had filled. */
                assert_null(c.server);
                assert_null(c.ns);
                cs_error_free(err);
        }
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");

        assert_non_null(f);
        assert_true(fputs(text, f) >= 0);
        assert_int_equal(fclose(f), 0);
}

static void test_read_files(void **state)
{
        char dir[] = "/tmp/compute-test-kubeconfig-XXXXXX";
        _cleanup_free_ char *source = NULL, *text = NULL, *ca = NULL, *crt = NULL, *key = NULL;
        cs_error *err = NULL;
        kube_config c;

        (void)state;
        assert_non_null(mkdtemp(dir));
        source = cs_xasprintf("%s/config", dir);
        ca = cs_xasprintf("%s/ca.crt", dir);
        crt = cs_xasprintf("%s/c.crt", dir);
        key = cs_xasprintf("%s/c.key", dir);
        text = cs_xasprintf("current-context: x\ncontexts:\n- {name: x, context: {cluster: c, "
                            "user: u}}\nclusters:\n- {name: c, cluster: {server: 'https://x', "
                            "certificate-authority: ca.crt}}\nusers:\n- {name: u, user: "
                            "{client-certificate: c.crt, client-key: %s}}\n",
                            key);
        write_text(ca, "CA PEM\n");
        write_text(crt, "CERT PEM\n");
        assert_int_equal(parse(source, text, NULL, &c, &err), 0);

        /* The key is missing: NOT_FOUND naming the kubeconfig, the field and the path. */
        assert_int_equal(kube_config_read_files(&c, source, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        {
                _cleanup_free_ char *want = cs_xasprintf(
                        "kubeconfig %s: user \"u\": client-key %s: No such file or directory",
                        source, key);

                assert_string_equal(err->msg, want);
        }
        cs_error_freep(&err);

        /* Empty: refused. Then present: all three read. */
        write_text(key, "");
        assert_int_equal(kube_config_read_files(&c, source, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(err->msg, "client-key"));
        assert_non_null(strstr(err->msg, "is empty"));
        cs_error_freep(&err);
        write_text(key, "KEY PEM\n");
        assert_int_equal(kube_config_read_files(&c, source, &err), 0);
        assert_string_equal(c.ca.pem.data, "CA PEM\n");
        assert_string_equal(c.cert.pem.data, "CERT PEM\n");
        assert_int_equal(c.key.pem.len, 8);
        kube_config_clear(&c);
        assert_null(c.ca.path);

        unlink(ca);
        unlink(crt);
        unlink(key);
        assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_yaml_scalars),
                cmocka_unit_test(test_yaml_refused),
                cmocka_unit_test(test_base64),
                cmocka_unit_test(test_kubeconfig_selection),
                cmocka_unit_test(test_kubeconfig_refused),
                cmocka_unit_test(test_read_files),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
