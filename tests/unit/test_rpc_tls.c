/* Unit tests of mutual TLS on the RPC layer (the internal link: frontend -> node agent) and of
 * the daemon's TLS options.
 *
 * Certificates are made at the start with the openssl CLI, by the same commands docs/rpc.md
 * gives, in a temp dir of our own: a CA, a second unrelated CA, an agent certificate for
 * DNS:compute-node-agent, a frontend client certificate, and the wrong ones the refusals need.
 * Real servers on 127.0.0.1 (port 0), real channels. No time is measured: call timeouts are
 * only hang guards. */
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "daemon.h"
#include "rpc.h"
#include "util.h"
#include "test/v1/echo.pb-c.h"

#define SERVER_NAME   "compute-node-agent"
#define HANG_GUARD_MS 20000
#define ECHO_UNARY    "/test.v1.Echo/Unary"

/* The certificates, as docs/rpc.md makes them ("mk NAME CA SUBJECT_EXTS" signs NAME.crt for
 * NAME.key with CA). */
static const char cert_script[] =
        "set -e\n"
        "ca() {\n"
        "  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \\\n"
        "    -subj \"/CN=$2\" -keyout $1.key -out $1.crt\n"
        "}\n"
        "mk() {\n"
        "  printf '%s\\n' \"basicConstraints=critical,CA:FALSE\" "
        "\"keyUsage=critical,digitalSignature\" \"$4\" > $1.ext\n"
        "  [ -z \"$5\" ] || printf '%s\\n' \"$5\" >> $1.ext\n"
        "  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \\\n"
        "    -subj \"/CN=$3\" -keyout $1.key -out $1.csr\n"
        "  openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -CAcreateserial -days 365 \\\n"
        "    -extfile $1.ext -out $1.crt\n"
        "}\n"
        "ca ca 'compute internal CA'\n"
        "ca other-ca 'some other CA'\n"
        "mk agent ca compute-node-agent extendedKeyUsage=serverAuth "
        "subjectAltName=DNS:compute-node-agent\n"
        "mk frontend ca compute-frontend extendedKeyUsage=clientAuth\n"
        "mk both ca compute-node-agent extendedKeyUsage=serverAuth,clientAuth "
        "subjectAltName=DNS:compute-node-agent\n"
        "mk wrongname ca some-other-name extendedKeyUsage=serverAuth "
        "subjectAltName=DNS:some-other-name\n"
        "mk loopback ca 127.0.0.1 extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1\n"
        "mk rogue-frontend other-ca compute-frontend extendedKeyUsage=clientAuth\n"
        "mk rogue-agent other-ca compute-node-agent extendedKeyUsage=serverAuth "
        "subjectAltName=DNS:compute-node-agent\n"
        "openssl pkey -in agent.key -aes256 -passout pass:secret -out encrypted.key\n"
        "echo 'this is not PEM' > garbage.pem\n"
        /* A certificate whose body is damaged: the markers are right, the base64 is not. */
        "sed '2s/^..../!!!!/' agent.crt > damaged.crt\n";

static char dir[64];

typedef struct pem_pair {
        char *crt, *key;
} pem_pair;

static char *ca_pem, *other_ca_pem;
static pem_pair agent, frontend, both, wrongname, loopback, rogue_frontend, rogue_agent;

static char *path_of(const char *name)
{
        return cs_xasprintf("%s/%s", dir, name);
}

static char *slurp(const char *name)
{
        _cleanup_free_ char *path = path_of(name);
        FILE *f = fopen(path, "r");
        char *buf = NULL;
        size_t len = 0;
        ssize_t n;

        assert_non_null(f);
        buf = cs_xmalloc(1024 * 1024);
        n = (ssize_t)fread(buf, 1, 1024 * 1024 - 1, f);
        fclose(f);
        assert_true(n > 0);
        len = (size_t)n;
        buf[len] = '\0';
        return buf;
}

static pem_pair load_pair(const char *name)
{
        _cleanup_free_ char *crt = cs_xasprintf("%s.crt", name);
        _cleanup_free_ char *key = cs_xasprintf("%s.key", name);

        return (pem_pair){ .crt = slurp(crt), .key = slurp(key) };
}

static void free_pair(pem_pair *p)
{
        free(p->crt);
        free(p->key);
}

static int run_script(const char *script, const char *cwd)
{
        _cleanup_free_ char *log = cs_xasprintf("%s/openssl.log", cwd);
        int status;
        pid_t pid = fork();

        if (pid < 0)
                return -1;
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (fd < 0 || chdir(cwd) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                        _exit(127);
                execl("/bin/sh", "sh", "-c", script, (char *)NULL);
                _exit(127);
        }
        if (waitpid(pid, &status, 0) != pid)
                return -1;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char cmd[256];
                snprintf(cmd, sizeof(cmd), "cat %s >&2", log);
                (void)!system(cmd);
                return -1;
        }
        return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

/* --- the service ------------------------------------------------------------------------- */

static int echo_unary(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                      void *userdata, cs_error **err)
{
        const Test__V1__EchoRequest *req = (const void *)req_msg;
        Test__V1__EchoResponse *resp = (void *)resp_msg;

        (void)call;
        (void)userdata;
        (void)err;
        resp->text = req->text;
        return 0;
}

static const rpc_method echo_method = { .path = ECHO_UNARY,
                                        .request = &test__v1__echo_request__descriptor,
                                        .response = &test__v1__echo_response__descriptor,
                                        .unary = echo_unary };

/* A server on 127.0.0.1:0 with the given certificate and client CA (NULL: plaintext). */
static rpc_server *server_start(const pem_pair *cert, const char *client_ca)
{
        rpc_server_options opts = { .listen = "127.0.0.1:0",
                                    .grace_ms = 5000,
                                    .tls_cert_pem = cert ? cert->crt : NULL,
                                    .tls_key_pem = cert ? cert->key : NULL,
                                    .tls_ca_pem = client_ca };
        rpc_server *srv = rpc_server_new(&opts);
        cs_error *err = NULL;

        assert_int_equal(rpc_server_add_method(srv, &echo_method, &err), 0);
        if (rpc_server_start(srv, &err) < 0)
                fail_msg("rpc_server_start: %s", err->msg);
        assert_int_equal(rpc_server_tls(srv), cert != NULL);
        return srv;
}

/* Sets the process-wide client TLS; NULL ca: plaintext. */
static void client_tls(const char *ca, const pem_pair *cert, const char *server_name)
{
        cs_error *err = NULL;

        if (rpc_client_tls_set(ca, cert ? cert->crt : NULL, cert ? cert->key : NULL, server_name,
                               &err) < 0)
                fail_msg("rpc_client_tls_set: %s", err->msg);
        assert_int_equal(rpc_client_tls_enabled(), ca != NULL);
}

/* One Echo call on a new channel to srv at host; returns its status (OK or the error's). */
static grpc_status_code call_at(rpc_server *srv, const char *host)
{
        char target[96];
        rpc_channel *ch;
        Test__V1__EchoRequest req = TEST__V1__ECHO_REQUEST__INIT;
        rpc_call_options opts = { .timeout_ms = HANG_GUARD_MS };
        ProtobufCMessage *resp = NULL;
        cs_error *err = NULL;
        grpc_status_code code = GRPC_STATUS_OK;

        snprintf(target, sizeof(target), "%s:%d", host, rpc_server_port(srv));
        ch = rpc_channel_new(target);
        req.text = "over tls";
        if (rpc_unary(ch, ECHO_UNARY, &req.base, &test__v1__echo_response__descriptor, &opts, &resp,
                      &err) < 0) {
                code = err->code;
                print_message("call to %s: %s: %s\n", target, cs_status_name(err->code), err->msg);
                cs_error_free(err);
        } else {
                assert_string_equal(((Test__V1__EchoResponse *)resp)->text, "over tls");
                protobuf_c_message_free_unpacked(resp, NULL);
        }
        rpc_channel_free(ch);
        return code;
}

static grpc_status_code call(rpc_server *srv)
{
        return call_at(srv, "127.0.0.1");
}

/* --- fixture ----------------------------------------------------------------------------- */

static int group_setup(void **state)
{
        (void)state;
        snprintf(dir, sizeof(dir), "/tmp/compute-test-tls-XXXXXX");
        if (!mkdtemp(dir))
                return -1;
        if (run_script(cert_script, dir) < 0)
                return -1;
        ca_pem = slurp("ca.crt");
        other_ca_pem = slurp("other-ca.crt");
        agent = load_pair("agent");
        frontend = load_pair("frontend");
        both = load_pair("both");
        wrongname = load_pair("wrongname");
        loopback = load_pair("loopback");
        rogue_frontend = load_pair("rogue-frontend");
        rogue_agent = load_pair("rogue-agent");
        rpc_global_init();
        return 0;
}

static int group_teardown(void **state)
{
        (void)state;
        rpc_global_shutdown();
        free(ca_pem);
        free(other_ca_pem);
        free_pair(&agent);
        free_pair(&frontend);
        free_pair(&both);
        free_pair(&wrongname);
        free_pair(&loopback);
        free_pair(&rogue_frontend);
        free_pair(&rogue_agent);
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        return 0;
}

/* Every test starts from plaintext. */
static int test_setup(void **state)
{
        (void)state;
        client_tls(NULL, NULL, NULL);
        return 0;
}

/* --- mTLS on the wire -------------------------------------------------------------------- */

static void test_mtls_unary(void **state)
{
        rpc_server *srv = server_start(&agent, ca_pem);

        (void)state;
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        rpc_server_free(srv);
}

/* One certificate with both usages on both sides (one Secret mounted in both pods). */
static void test_one_certificate_both_sides(void **state)
{
        rpc_server *srv = server_start(&both, ca_pem);

        (void)state;
        client_tls(ca_pem, &both, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        rpc_server_free(srv);
}

/* The client refusals below: the server must go on serving good clients afterwards. */
static void assert_refused_then_unharmed(rpc_server *srv)
{
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        assert_int_equal(rpc_server_active_calls(srv), 0);
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_OK);
}

static void test_client_without_certificate_refused(void **state)
{
        rpc_server *srv = server_start(&agent, ca_pem);

        (void)state;
        client_tls(ca_pem, NULL, SERVER_NAME); /* TLS, but no client certificate */
        assert_refused_then_unharmed(srv);
        rpc_server_free(srv);
}

static void test_client_certificate_from_other_ca_refused(void **state)
{
        rpc_server *srv = server_start(&agent, ca_pem);

        (void)state;
        client_tls(ca_pem, &rogue_frontend, SERVER_NAME);
        assert_refused_then_unharmed(srv);
        rpc_server_free(srv);
}

static void test_plaintext_client_refused(void **state)
{
        rpc_server *srv = server_start(&agent, ca_pem);

        (void)state;
        client_tls(NULL, NULL, NULL);
        assert_refused_then_unharmed(srv);
        rpc_server_free(srv);
}

/* The agent's certificate is checked against the fixed server name, not the address. */
static void test_server_name_checked(void **state)
{
        rpc_server *srv = server_start(&wrongname, ca_pem);

        (void)state;
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        /* The same server is fine for a client that expects its name: the name was the
         * only thing wrong. */
        client_tls(ca_pem, &frontend, "some-other-name");
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        rpc_server_free(srv);
}

/* An agent certificate from another CA, even for the right name, is refused by the client. */
static void test_server_certificate_from_other_ca_refused(void **state)
{
        rpc_server *srv = server_start(&rogue_agent, other_ca_pem);

        (void)state;
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        rpc_server_free(srv);
}

/* Without a server name, the certificate must name the host of the target. */
static void test_empty_server_name_checks_target_host(void **state)
{
        rpc_server *srv = server_start(&agent, ca_pem);
        rpc_server *ip = server_start(&loopback, ca_pem);

        (void)state;
        client_tls(ca_pem, &frontend, "");
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE); /* DNS:compute-node-agent */
        assert_int_equal(call(ip), GRPC_STATUS_OK);           /* IP:127.0.0.1 */
        rpc_server_free(ip);
        rpc_server_free(srv);
}

/* The embedded default: plaintext on both sides still works, and a TLS client does not
 * talk to a plaintext server. */
static void test_plaintext_default_and_tls_client_on_plaintext_server(void **state)
{
        rpc_server *srv = server_start(NULL, NULL);

        (void)state;
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        rpc_server_free(srv);
}

/* --- refused configurations -------------------------------------------------------------- */

static void assert_error(int r, cs_error **err, grpc_status_code code, const char *needle)
{
        assert_int_equal(r, -1);
        assert_non_null(*err);
        print_message("expected error: %s\n", (*err)->msg);
        assert_int_equal((*err)->code, code);
        if (needle && !strstr((*err)->msg, needle))
                fail_msg("'%s' not in '%s'", needle, (*err)->msg);
        cs_error_free(*err);
        *err = NULL;
}

static void test_server_partial_or_bad_material_refused(void **state)
{
        struct {
                const char *cert, *key, *ca, *needle;
        } cases[] = {
                { agent.crt, agent.key, NULL, "missing: the CA" },
                { agent.crt, NULL, ca_pem, "missing: the key" },
                { NULL, agent.key, ca_pem, "missing: the certificate" },
                { agent.crt, frontend.key, ca_pem, "does not belong" },
                { agent.crt, agent.key, "not a certificate", "no PEM certificate" },
        };
        cs_error *err = NULL;

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                rpc_server_options opts = { .listen = "127.0.0.1:0",
                                            .tls_cert_pem = cases[i].cert,
                                            .tls_key_pem = cases[i].key,
                                            .tls_ca_pem = cases[i].ca };
                rpc_server *srv = rpc_server_new(&opts);

                assert_error(rpc_server_start(srv, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                             cases[i].needle);
                rpc_server_free(srv);
        }
}

static void test_client_partial_or_bad_material_refused(void **state)
{
        _cleanup_free_ char *damaged = slurp("damaged.crt");
        _cleanup_free_ char *encrypted = slurp("encrypted.key");
        cs_error *err = NULL;

        (void)state;
        client_tls(ca_pem, &frontend, SERVER_NAME);
        assert_error(rpc_client_tls_set(NULL, frontend.crt, frontend.key, NULL, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "without a CA");
        assert_error(rpc_client_tls_set(NULL, NULL, NULL, SERVER_NAME, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "without a CA");
        assert_error(rpc_client_tls_set(ca_pem, frontend.crt, NULL, SERVER_NAME, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "only the certificate");
        assert_error(rpc_client_tls_set(ca_pem, NULL, frontend.key, SERVER_NAME, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "only the key");
        assert_error(rpc_client_tls_set(ca_pem, frontend.crt, agent.key, SERVER_NAME, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "does not belong");
        assert_error(rpc_client_tls_set(ca_pem, frontend.crt, encrypted, SERVER_NAME, &err), &err,
                     GRPC_STATUS_INVALID_ARGUMENT, "unencrypted");
        assert_error(rpc_client_tls_set(damaged, frontend.crt, frontend.key, SERVER_NAME, &err),
                     &err, GRPC_STATUS_INVALID_ARGUMENT, "does not decode");
        /* A refused setting changes nothing: the good one still holds. */
        assert_true(rpc_client_tls_enabled());
        {
                rpc_server *srv = server_start(&agent, ca_pem);
                assert_int_equal(call(srv), GRPC_STATUS_OK);
                rpc_server_free(srv);
        }
}

/* --- TLS without client certificates (the frontend's public port) ------------------------- */

static rpc_server *public_server_start(const pem_pair *cert)
{
        rpc_server_options opts = { .listen = "127.0.0.1:0",
                                    .grace_ms = 5000,
                                    .tls_cert_pem = cert->crt,
                                    .tls_key_pem = cert->key,
                                    .tls_client_ca_optional = true };
        rpc_server *srv = rpc_server_new(&opts);
        cs_error *err = NULL;

        assert_int_equal(rpc_server_add_method(srv, &echo_method, &err), 0);
        if (rpc_server_start(srv, &err) < 0)
                fail_msg("rpc_server_start: %s", err->msg);
        assert_true(rpc_server_tls(srv));
        assert_false(rpc_server_tls_mutual(srv));
        return srv;
}

static void test_server_tls_without_client_ca(void **state)
{
        rpc_server *srv = public_server_start(&agent);

        (void)state;
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE); /* plaintext: refused */
        client_tls(ca_pem, NULL, SERVER_NAME);                /* no client certificate */
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        client_tls(ca_pem, &frontend, SERVER_NAME); /* one it does not ask for: fine */
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        client_tls(other_ca_pem, NULL, SERVER_NAME); /* the server is not trusted */
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        rpc_server_free(srv);

        /* With the optional CA given, it is mutual TLS as on the internal link. */
        srv = server_start(&agent, ca_pem);
        assert_true(rpc_server_tls_mutual(srv));
        client_tls(ca_pem, NULL, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE);
        rpc_server_free(srv);
}

static void test_server_tls_without_client_ca_partial_refused(void **state)
{
        struct {
                const char *cert, *key, *ca, *needle;
        } cases[] = {
                { agent.crt, NULL, NULL, "missing: the key" },
                { NULL, agent.key, NULL, "missing: the certificate" },
                { NULL, NULL, ca_pem, "missing: the certificate" },
                { agent.crt, frontend.key, NULL, "does not belong" },
        };
        cs_error *err = NULL;

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                rpc_server_options opts = { .listen = "127.0.0.1:0",
                                            .tls_cert_pem = cases[i].cert,
                                            .tls_key_pem = cases[i].key,
                                            .tls_ca_pem = cases[i].ca,
                                            .tls_client_ca_optional = true };
                rpc_server *srv = rpc_server_new(&opts);

                assert_error(rpc_server_start(srv, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                             cases[i].needle);
                rpc_server_free(srv);
        }
}

/* --- the daemon's options ---------------------------------------------------------------- */

static cs_daemon_config dcfg;
static cs_agent_tls_config atls;
static const cs_option options[] = {
        CS_DAEMON_OPTIONS(dcfg, "TEST_H6_LISTEN", "127.0.0.1:0"),
        CS_SERVER_TLS_OPTIONS(dcfg),
        CS_AGENT_TLS_OPTIONS(atls),
};
static const cs_program program = { .name = "test",
                                    .options = options,
                                    .n_options = ARRAY_SIZE(options) };

static int parse(int argc, char **argv)
{
        cs_error *err = NULL;
        int r = cs_config_parse(&program, argc, argv, NULL, &err);

        if (r != 0)
                fail_msg("parse: %s", err ? err->msg : "help");
        return r;
}

static void test_options_in_help_and_defaults(void **state)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        const char *order[] = { "COMPUTE_TLS_CA",
                                "COMPUTE_TLS_CERT",
                                "COMPUTE_TLS_KEY",
                                "COMPUTE_AGENT_TLS_CA",
                                "COMPUTE_AGENT_TLS_CERT",
                                "COMPUTE_AGENT_TLS_KEY",
                                "COMPUTE_AGENT_TLS_SERVER_NAME" };
        const char *at;
        char *argv[] = { "test" };

        (void)state;
        cs_config_print_help(&program, f);
        fclose(f);
        at = buf;
        for (size_t i = 0; i < ARRAY_SIZE(order); i++) {
                at = strstr(at, order[i]);
                if (!at)
                        fail_msg("%s missing or out of order in:\n%s", order[i], buf);
        }
        free(buf);

        unsetenv("COMPUTE_TLS_CA");
        unsetenv("COMPUTE_AGENT_TLS_SERVER_NAME");
        parse(1, argv);
        assert_string_equal(dcfg.tls_ca, "");
        assert_string_equal(atls.server_name, SERVER_NAME);
        cs_config_free(&program);
}

static void test_daemon_server_tls_checks(void **state)
{
        _cleanup_free_ char *ca = path_of("ca.crt");
        _cleanup_free_ char *crt = path_of("agent.crt");
        _cleanup_free_ char *key = path_of("agent.key");
        _cleanup_free_ char *other_key = path_of("frontend.key");
        _cleanup_free_ char *missing = path_of("no-such.crt");
        _cleanup_free_ char *garbage = path_of("garbage.pem");
        cs_error *err = NULL;
        cs_daemon_config cfg = { 0 };

        (void)state;
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0); /* none: plaintext */
        cfg = (cs_daemon_config){ .tls_ca = "", .tls_cert = "", .tls_key = "" };
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0);

        cfg = (cs_daemon_config){ .tls_ca = ca, .tls_cert = crt, .tls_key = "" };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--tls-key is missing");
        cfg = (cs_daemon_config){ .tls_cert = crt };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--tls-ca is missing");
        cfg = (cs_daemon_config){ .tls_ca = missing, .tls_cert = crt, .tls_key = key };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_NOT_FOUND,
                     "no-such.crt: cannot open");
        cfg = (cs_daemon_config){ .tls_ca = ca, .tls_cert = garbage, .tls_key = key };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "garbage.pem");
        cfg = (cs_daemon_config){ .tls_ca = ca, .tls_cert = crt, .tls_key = other_key };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "does not belong");
        cfg = (cs_daemon_config){ .tls_ca = dir, .tls_cert = crt, .tls_key = key };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "cannot read"); /* a directory: EISDIR */
        cfg = (cs_daemon_config){ .tls_ca = ca, .tls_cert = crt, .tls_key = key };
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0);

        /* The server made from a partial set fails too (if main forgot the check). */
        cfg = (cs_daemon_config){ .listen = "127.0.0.1:0", .max_calls = 8, .tls_ca = ca };
        assert_null(cs_daemon_server_new(&cfg, (const char *const[]){ NULL }, &err));
        assert_error(-1, &err, GRPC_STATUS_INVALID_ARGUMENT, "--tls-cert is missing");
}

/* The frontend's --public-tls-*: certificate and key, the client CA optional. */
static void test_daemon_public_tls_checks(void **state)
{
        _cleanup_free_ char *ca = path_of("ca.crt");
        _cleanup_free_ char *crt = path_of("agent.crt");
        _cleanup_free_ char *key = path_of("agent.key");
        _cleanup_free_ char *other_key = path_of("frontend.key");
        _cleanup_free_ char *missing = path_of("no-such.crt");
        cs_error *err = NULL;
        cs_daemon_config cfg = { .public_tls = true };
        rpc_server *srv;

        (void)state;
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0); /* none: plaintext */
        cfg = (cs_daemon_config){ .public_tls = true, .tls_cert = crt, .tls_key = key };
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0);
        cfg.tls_ca = ca;
        assert_int_equal(cs_daemon_check_server_tls(&cfg, &err), 0);

        cfg = (cs_daemon_config){ .public_tls = true, .tls_cert = crt };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--public-tls-key is missing");
        cfg = (cs_daemon_config){ .public_tls = true, .tls_ca = ca };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--public-tls-cert is missing");
        cfg = (cs_daemon_config){ .public_tls = true, .tls_cert = crt, .tls_key = other_key };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--public-tls-key");
        cfg = (cs_daemon_config){
                .public_tls = true, .tls_cert = crt, .tls_key = key, .tls_ca = missing
        };
        assert_error(cs_daemon_check_server_tls(&cfg, &err), &err, GRPC_STATUS_NOT_FOUND,
                     "--public-tls-client-ca");

        /* The server: TLS without client certificates, then mutual TLS with the CA. */
        cfg = (cs_daemon_config){ .public_tls = true,
                                  .listen = "127.0.0.1:0",
                                  .max_calls = 8,
                                  .grace_ms = 1000,
                                  .tls_cert = crt,
                                  .tls_key = key };
        srv = cs_daemon_server_new(&cfg, (const char *const[]){ NULL }, &err);
        assert_non_null(srv);
        assert_int_equal(rpc_server_add_method(srv, &echo_method, &err), 0);
        assert_int_equal(rpc_server_start(srv, &err), 0);
        assert_false(rpc_server_tls_mutual(srv));
        client_tls(ca_pem, NULL, SERVER_NAME);
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        rpc_server_free(srv);
        cfg.tls_ca = ca;
        srv = cs_daemon_server_new(&cfg, (const char *const[]){ NULL }, &err);
        assert_non_null(srv);
        assert_int_equal(rpc_server_add_method(srv, &echo_method, &err), 0);
        assert_int_equal(rpc_server_start(srv, &err), 0);
        assert_true(rpc_server_tls_mutual(srv));
        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE); /* no client certificate */
        rpc_server_free(srv);
}

/* computectl's --tls-*: the CA required, the client certificate optional. */
static void test_client_tls_setup(void **state)
{
        _cleanup_free_ char *ca = path_of("ca.crt");
        _cleanup_free_ char *crt = path_of("frontend.crt");
        _cleanup_free_ char *key = path_of("frontend.key");
        _cleanup_free_ char *other_key = path_of("agent.key");
        _cleanup_free_ char *garbage = path_of("garbage.pem");
        cs_client_tls_config t = { .cert = crt, .key = key };
        cs_error *err = NULL;

        (void)state;
        assert_error(cs_client_tls_setup(&t, &err), &err, GRPC_STATUS_INVALID_ARGUMENT, "--tls-ca");
        t = (cs_client_tls_config){ .ca = ca, .cert = crt };
        assert_error(cs_client_tls_setup(&t, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--tls-key is missing");
        t = (cs_client_tls_config){ .ca = ca, .cert = crt, .key = other_key };
        assert_error(cs_client_tls_setup(&t, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "does not belong");
        t = (cs_client_tls_config){ .ca = garbage };
        assert_error(cs_client_tls_setup(&t, &err), &err, GRPC_STATUS_INVALID_ARGUMENT, "--tls-ca");
        assert_false(rpc_client_tls_enabled());

        t = (cs_client_tls_config){ .ca = ca, .server_name = SERVER_NAME };
        assert_int_equal(cs_client_tls_setup(&t, &err), 0);
        assert_true(rpc_client_tls_enabled());
        {
                rpc_server *srv = public_server_start(&agent);
                assert_int_equal(call(srv), GRPC_STATUS_OK);
                rpc_server_free(srv);
        }
        t = (cs_client_tls_config){ .ca = ca, .cert = crt, .key = key, .server_name = SERVER_NAME };
        assert_int_equal(cs_client_tls_setup(&t, &err), 0);
        {
                rpc_server *srv = server_start(&agent, ca_pem);
                assert_int_equal(call(srv), GRPC_STATUS_OK);
                rpc_server_free(srv);
        }
}

static void test_daemon_agent_tls_partial_refused(void **state)
{
        _cleanup_free_ char *ca = path_of("ca.crt");
        _cleanup_free_ char *crt = path_of("frontend.crt");
        cs_agent_tls_config t = { .ca = ca, .cert = crt, .key = "", .server_name = SERVER_NAME };
        cs_error *err = NULL;

        (void)state;
        assert_error(cs_daemon_setup_agent_tls(&t, &err), &err, GRPC_STATUS_INVALID_ARGUMENT,
                     "--agent-tls-key is missing");
        assert_false(rpc_client_tls_enabled());
        t = (cs_agent_tls_config){ .server_name = SERVER_NAME };
        assert_int_equal(cs_daemon_setup_agent_tls(&t, &err), 0);
        assert_false(rpc_client_tls_enabled());
}

/* Both daemon halves from files, as the node agent and the frontend use them. */
static void test_daemon_end_to_end(void **state)
{
        _cleanup_free_ char *ca = path_of("ca.crt");
        _cleanup_free_ char *agent_crt = path_of("agent.crt");
        _cleanup_free_ char *agent_key = path_of("agent.key");
        _cleanup_free_ char *fe_crt = path_of("frontend.crt");
        _cleanup_free_ char *fe_key = path_of("frontend.key");
        cs_daemon_config cfg = { .listen = "127.0.0.1:0",
                                 .max_calls = 8,
                                 .grace_ms = 1000,
                                 .tls_ca = ca,
                                 .tls_cert = agent_crt,
                                 .tls_key = agent_key };
        cs_agent_tls_config t = {
                .ca = ca, .cert = fe_crt, .key = fe_key, .server_name = SERVER_NAME
        };
        static const char *const services[] = { "test.v1.Echo", NULL };
        cs_error *err = NULL;
        rpc_server *srv;

        (void)state;
        srv = cs_daemon_server_new(&cfg, services, &err);
        assert_non_null(srv);
        assert_true(rpc_server_tls(srv));
        assert_int_equal(rpc_server_add_method(srv, &echo_method, &err), 0);
        assert_int_equal(rpc_server_start(srv, &err), 0);

        assert_int_equal(call(srv), GRPC_STATUS_UNAVAILABLE); /* plaintext: refused */
        assert_int_equal(cs_daemon_setup_agent_tls(&t, &err), 0);
        assert_true(rpc_client_tls_enabled());
        assert_int_equal(call(srv), GRPC_STATUS_OK);
        rpc_server_free(srv);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_mtls_unary, test_setup),
                cmocka_unit_test_setup(test_one_certificate_both_sides, test_setup),
                cmocka_unit_test_setup(test_client_without_certificate_refused, test_setup),
                cmocka_unit_test_setup(test_client_certificate_from_other_ca_refused, test_setup),
                cmocka_unit_test_setup(test_plaintext_client_refused, test_setup),
                cmocka_unit_test_setup(test_server_name_checked, test_setup),
                cmocka_unit_test_setup(test_server_certificate_from_other_ca_refused, test_setup),
                cmocka_unit_test_setup(test_empty_server_name_checks_target_host, test_setup),
                cmocka_unit_test_setup(test_plaintext_default_and_tls_client_on_plaintext_server,
                                       test_setup),
                cmocka_unit_test_setup(test_server_partial_or_bad_material_refused, test_setup),
                cmocka_unit_test_setup(test_client_partial_or_bad_material_refused, test_setup),
                cmocka_unit_test_setup(test_options_in_help_and_defaults, test_setup),
                cmocka_unit_test_setup(test_daemon_server_tls_checks, test_setup),
                cmocka_unit_test_setup(test_server_tls_without_client_ca, test_setup),
                cmocka_unit_test_setup(test_server_tls_without_client_ca_partial_refused,
                                       test_setup),
                cmocka_unit_test_setup(test_daemon_public_tls_checks, test_setup),
                cmocka_unit_test_setup(test_client_tls_setup, test_setup),
                cmocka_unit_test_setup(test_daemon_agent_tls_partial_refused, test_setup),
                cmocka_unit_test_setup(test_daemon_end_to_end, test_setup),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
