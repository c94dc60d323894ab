/* shared/metrics.c (the text exposition: escaping, histograms, process metrics) and
 * shared/metrics_http.c (the /metrics endpoint, spoken to over a raw socket: methods, paths,
 * oversized headers, a client that never finishes its request). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"
#include "metrics_http.h"
#include "util.h"

static void test_escaping(void **state)
{
        cs_mpage p = { 0 };
        const char *labels[] = { "sandbox_id", "a\"b\\c\nd", "empty", NULL, NULL };

        (void)state;
        cs_mpage_family(&p, "compute_x_total", "counter", "Help with \\ and\nnewline.");
        cs_mpage_sample(&p, "compute_x_total", labels, 1.5);
        cs_mpage_sample_u64(&p, "compute_y", NULL, UINT64_MAX);
        assert_string_equal(p.text,
                            "# HELP compute_x_total Help with \\\\ and\\nnewline.\n"
                            "# TYPE compute_x_total counter\n"
                            "compute_x_total{sandbox_id=\"a\\\"b\\\\c\\nd\",empty=\"\"} 1.5\n"
                            "compute_y 18446744073709551615\n");
        cs_mpage_free(&p);
        assert_null(p.text);
}

static void test_histogram(void **state)
{
        static const double bounds[] = { 0.1, 1 };
        cs_histogram h;
        cs_mpage p = { 0 };
        const char *labels[] = { "m", "x", NULL };

        (void)state;
        cs_histogram_init(&h, bounds, ARRAY_SIZE(bounds));
        cs_histogram_observe(&h, 50 * 1000 * 1000);    /* 0.05 s */
        cs_histogram_observe(&h, 100 * 1000 * 1000);   /* 0.1 s: le is inclusive */
        cs_histogram_observe(&h, 500 * 1000 * 1000);   /* 0.5 s */
        cs_histogram_observe(&h, 3000 * 1000 * 1000L); /* 3 s */
        cs_histogram_observe(&h, -5);                  /* a clock step: counted as 0 */
        cs_mpage_histogram(&p, "d_seconds", labels, &h);
        assert_string_equal(p.text, "d_seconds_bucket{m=\"x\",le=\"0.1\"} 3\n"
                                    "d_seconds_bucket{m=\"x\",le=\"1\"} 4\n"
                                    "d_seconds_bucket{m=\"x\",le=\"+Inf\"} 5\n"
                                    "d_seconds_sum{m=\"x\"} 3.65\n"
                                    "d_seconds_count{m=\"x\"} 5\n");
        cs_mpage_free(&p);
}

static void test_process(void **state)
{
        cs_mpage p = { 0 };

        (void)state;
        cs_mpage_process(&p);
        for (const char *m = "process_cpu_seconds_total\0process_resident_memory_bytes\0"
                             "process_open_fds\0process_max_fds\0process_start_time_seconds\0";
             *m; m += strlen(m) + 1) {
                _cleanup_free_ char *type = cs_xasprintf("# TYPE %s ", m);
                _cleanup_free_ char *sample = cs_xasprintf("\n%s ", m);

                if (!strstr(p.text, type) || !strstr(p.text, sample))
                        fail_msg("no %s in:\n%s", m, p.text);
        }
        cs_mpage_free(&p);
}

static int collected;

static void collect(cs_mpage *p, void *userdata)
{
        (void)userdata;
        collected++;
        cs_mpage_family(p, "t_up", "gauge", "Up.");
        cs_mpage_sample(p, "t_up", NULL, 1);
}

static int dial(int port)
{
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        return fd;
}

/* Sends req on a new connection and returns everything the server sends until it closes
 * (Connection: close). */
static char *http(int port, const char *req, size_t req_len)
{
        int fd = dial(port);
        char *buf = cs_xmalloc(65536);
        size_t n = 0;
        ssize_t r;

        assert_int_equal(cs_write_all(fd, req, req_len), 0);
        while (n < 65535 && (r = read(fd, buf + n, 65535 - n)) > 0)
                n += (size_t)r;
        buf[n] = '\0';
        close(fd);
        return buf;
}

static char *http_s(int port, const char *req)
{
        return http(port, req, strlen(req));
}

static void test_http(void **state)
{
        cs_error *err = NULL;
        cs_metrics_server *s = cs_metrics_server_start("127.0.0.1:0", NULL, collect, NULL, &err);
        int port, idle;
        char *r;

        (void)state;
        assert_non_null(s);
        port = cs_metrics_server_port(s);
        assert_true(port > 0);

        /* A client that connects and sends half a request holds its connection only. */
        idle = dial(port);
        assert_int_equal(cs_write_all(idle, "GET /met", 8), 0);

        r = http_s(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 200"));
        assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
        assert_non_null(strstr(r, "\r\n\r\n# HELP t_up Up.\n# TYPE t_up gauge\nt_up 1\n"));
        free(r);
        assert_int_equal(collected, 1);

        r = http_s(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 200"));
        assert_null(strstr(r, "t_up 1")); /* no body */
        free(r);

        r = http_s(port, "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 404"));
        free(r);
        r = http_s(port, "GET /metrics/../etc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 404"));
        free(r);

        r = http_s(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                         "Connection: close\r\n\r\nabc");
        assert_non_null(strstr(r, "HTTP/1.1 405"));
        assert_non_null(strstr(r, "Allow: GET, HEAD"));
        free(r);

        /* A header larger than a connection's memory: refused, not buffered. */
        {
                size_t big = 256 * 1024;
                char *req = cs_xmalloc(big + 128);
                int n = snprintf(req, 128, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");

                memset(req + n, 'a', big);
                memcpy(req + n + big, "\r\n\r\n", 4);
                r = http(port, req, (size_t)n + big + 4);
                /* libmicrohttpd answers 431 (or closes first when the client still writes). */
                assert_true(r[0] == '\0' || strstr(r, "HTTP/1.1 431") || strstr(r, "HTTP/1.1 413"));
                free(r);
                free(req);
        }
        assert_int_equal(collected, 2); /* GET and HEAD only */

        /* Still served after all that. */
        r = http_s(port, "GET /metrics HTTP/1.0\r\n\r\n");
        assert_non_null(strstr(r, "t_up 1"));
        free(r);
        close(idle);
        cs_metrics_server_stop(s);
}

/* With a token, nothing is answered without it: not the page, not even a 404 or 405. */
static void test_bearer_token(void **state)
{
        cs_error *err = NULL;
        cs_metrics_server *s =
                cs_metrics_server_start("127.0.0.1:0", "s3cret-token-0123", collect, NULL, &err);
        int port, before = collected;
        char *r;

        (void)state;
        assert_non_null(s);
        port = cs_metrics_server_port(s);
        for (const char *req =
                     "GET /metrics HTTP/1.0\r\n\r\n\0"
                     "GET /metrics HTTP/1.0\r\nAuthorization: Bearer wrong\r\n\r\n\0"
                     "GET /metrics HTTP/1.0\r\nAuthorization: Bearer s3cret-token-012\r\n"
                     "\r\n\0"
                     "GET /metrics HTTP/1.0\r\nAuthorization: Bearer s3cret-token-01234\r\n"
                     "\r\n\0"
                     "GET /x HTTP/1.0\r\n\r\n\0"
                     "POST /metrics HTTP/1.0\r\n\r\n\0";
             *req; req += strlen(req) + 1) {
                r = http_s(port, req);
                if (!strstr(r, "HTTP/1.1 401") || !strstr(r, "WWW-Authenticate: Bearer"))
                        fail_msg("not refused: %s\n%s", req, r);
                free(r);
        }
        assert_int_equal(collected, before);
        r = http_s(port,
                   "GET /metrics HTTP/1.0\r\nAuthorization: Bearer s3cret-token-0123\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 200"));
        assert_non_null(strstr(r, "t_up 1"));
        free(r);
        cs_metrics_server_stop(s);
}

static void test_bad_address(void **state)
{
        cs_error *err = NULL;

        (void)state;
        assert_null(cs_metrics_server_start("localhost", NULL, collect, NULL, &err));
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_free(err);
        err = NULL;
        assert_null(cs_metrics_server_start("nohost:9", NULL, collect, NULL, &err));
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        cs_error_free(err);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_escaping),     cmocka_unit_test(test_histogram),
                cmocka_unit_test(test_process),      cmocka_unit_test(test_http),
                cmocka_unit_test(test_bearer_token), cmocka_unit_test(test_bad_address),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
