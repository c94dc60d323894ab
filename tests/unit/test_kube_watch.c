/* Unit tests for frontend/kube_framer.c: the watch stream's framing, fed byte strings split at
 * every offset, over-long lines, malformed lines and a callback that stops the stream. No
 * curl, no server. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube_framer.h"
#include "util.h"

/* What the callback saw: "TYPE <compact object>\n" per event, and when to stop. */
typedef struct seen {
        char log[8192];
        size_t len;
        int calls;
        int stop_at; /* the call (1-based) that returns stop_rc; 0: never */
        int stop_rc;
} seen;

static int on_event(const char *type, json_t *object, void *userdata)
{
        seen *s = userdata;
        char *o = json_dumps(object, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        int n;

        assert_non_null(o);
        n = snprintf(s->log + s->len, sizeof(s->log) - s->len, "%s %s\n", type, o);
        assert_true(n > 0 && (size_t)n < sizeof(s->log) - s->len);
        s->len += (size_t)n;
        free(o);
        s->calls++;
        return s->calls == s->stop_at ? s->stop_rc : 0;
}

/* A real stream's shapes: events, a bookmark, a blank keep-alive line, CRLF, trailing
 * blanks, an ERROR carrying a 410 Status, and a last line without '\n'. */
static const char stream[] =
        "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\","
        "\"resourceVersion\":\"10\"}}}\n"
        "\n"
        "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\","
        "\"resourceVersion\":\"11\"},\"status\":{\"phase\":\"Running\"}}}\r\n"
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{"
        "\"resourceVersion\":\"12\"}}}  \t\n"
        "{\"type\":\"DELETED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}}}\n"
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
        "\"Failure\",\"message\":\"too old resource version: 1 (12)\",\"reason\":\"Expired\","
        "\"code\":410}}";

static const char stream_log[] =
        "ADDED {\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"10\"}}\n"
        "MODIFIED {\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"11\"},"
        "\"status\":{\"phase\":\"Running\"}}\n"
        "BOOKMARK {\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"12\"}}\n"
        "DELETED {\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}}\n"
        "ERROR {\"apiVersion\":\"v1\",\"code\":410,\"kind\":\"Status\",\"message\":\"too old "
        "resource version: 1 (12)\",\"reason\":\"Expired\",\"status\":\"Failure\"}\n";

/* Feeds p[0..n) as the chunks [0,a) [a,b) [b,n), then finishes. The first non-zero return. */
static int feed3(kube_framer *f, const char *p, size_t n, size_t a, size_t b, cs_error **err)
{
        int r = kube_framer_feed(f, p, a, err);

        if (r == 0)
                r = kube_framer_feed(f, p + a, b - a, err);
        if (r == 0)
                r = kube_framer_feed(f, p + b, n - b, err);
        if (r == 0)
                r = kube_framer_finish(f, err);
        return r;
}

static void test_split_everywhere(void **state)
{
        size_t n = strlen(stream);

        (void)state;
        /* Every pair of cut points: a line split once, twice, or cut right at its '\n'. */
        for (size_t a = 0; a <= n; a++) {
                for (size_t b = a; b <= n; b += (a % 7 == 0 ? 1 : 13)) {
                        seen s = { 0 };
                        cs_error *err = NULL;
                        kube_framer f;

                        kube_framer_init(&f, "/w", 4096, on_event, &s);
                        assert_int_equal(feed3(&f, stream, n, a, b, &err), 0);
                        assert_null(err);
                        if (strcmp(s.log, stream_log))
                                fail_msg("cut at %zu and %zu:\n%s", a, b, s.log);
                        kube_framer_release(&f);
                }
        }
}

static void test_byte_by_byte(void **state)
{
        seen s = { 0 };
        cs_error *err = NULL;
        kube_framer f;

        (void)state;
        kube_framer_init(&f, "/w", 4096, on_event, &s);
        for (const char *p = stream; *p; p++)
                assert_int_equal(kube_framer_feed(&f, p, 1, &err), 0);
        /* The ERROR line has no '\n' yet: only the end of the stream delivers it. */
        assert_int_equal(s.calls, 4);
        assert_int_equal(kube_framer_finish(&f, &err), 0);
        assert_null(err);
        assert_string_equal(s.log, stream_log);
        /* A finished framer holds nothing: finishing again delivers nothing. */
        assert_int_equal(kube_framer_finish(&f, &err), 0);
        assert_int_equal(s.calls, 5);
        kube_framer_release(&f);
}

/* A line of exactly len bytes (then '\n'): {"type":"ADDED","object":"xxx..."}. */
static char *line_of(size_t len)
{
        static const char head[] = "{\"type\":\"ADDED\",\"object\":\"", tail[] = "\"}";
        char *l = cs_xmalloc(len + 2);

        assert_true(len >= sizeof(head) + sizeof(tail));
        memcpy(l, head, sizeof(head) - 1);
        memset(l + sizeof(head) - 1, 'x', len - (sizeof(head) - 1) - (sizeof(tail) - 1));
        memcpy(l + len - (sizeof(tail) - 1), tail, sizeof(tail) - 1);
        l[len] = '\n';
        l[len + 1] = '\0';
        return l;
}

static void test_line_cap(void **state)
{
        const size_t cap = 100;
        char *ok = line_of(cap), *big = line_of(cap + 1);

        (void)state;
        /* At the cap: accepted whole, and split at every offset. Over it: refused, whole or
         * split, before fn is called and whether or not its '\n' has arrived. */
        for (size_t cut = 0; cut <= cap + 1; cut++) {
                seen s = { 0 };
                cs_error *err = NULL;
                kube_framer f;

                kube_framer_init(&f, "/w", cap, on_event, &s);
                assert_int_equal(feed3(&f, ok, cap + 1, cut, cut, &err), 0);
                assert_int_equal(s.calls, 1);
                kube_framer_release(&f);

                kube_framer_init(&f, "/w", cap, on_event, &s);
                assert_int_equal(feed3(&f, big, cap + 2, cut, cut, &err), -1);
                assert_non_null(err);
                assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
                assert_string_equal(err->msg, "kube watch /w: event line larger than 100 bytes");
                assert_int_equal(s.calls, 1);
                cs_error_freep(&err);
                kube_framer_release(&f);
        }
        /* Without any '\n': refused as soon as the partial line passes the cap. */
        {
                seen s = { 0 };
                cs_error *err = NULL;
                kube_framer f;

                kube_framer_init(&f, "/w", cap, on_event, &s);
                assert_int_equal(kube_framer_feed(&f, big, cap, &err), 0);
                assert_int_equal(kube_framer_feed(&f, big + cap, 1, &err), -1);
                assert_non_null(err);
                cs_error_free(err);
                kube_framer_release(&f);
        }
        free(ok);
        free(big);
}

static void test_malformed_lines(void **state)
{
        static const struct {
                const char *line;
                const char *want;
        } cases[] = {
                { "not json\n", "malformed event line (" },
                { "{\"type\":\"ADDED\",\"object\":{}} trailing\n", "malformed event line (" },
                { "{\"type\":1,\"object\":{}}\n", "malformed event line (no type or object)" },
                { "{\"type\":\"ADDED\"}\n", "malformed event line (no type or object)" },
                { "[\"ADDED\",{}]\n", "malformed event line (no type or object)" },
                { "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\u0000\"}}\n",
                  "malformed event line (" },
        };
        static const char good[] = "{\"type\":\"ADDED\",\"object\":{\"n\":1}}\n";

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                char in[256];
                size_t n = sizeof(good) - 1, ln = strlen(cases[i].line);
                seen s = { 0 };
                cs_error *err = NULL;
                kube_framer f;

                memcpy(in, good, n);
                memcpy(in + n, cases[i].line, ln);
                memcpy(in + n + ln, good, sizeof(good) - 1);
                kube_framer_init(&f, "/api/v1/pods?watch=1", 4096, on_event, &s);
                /* The good event before it is delivered, the bad line stops the stream and
                 * nothing after it is handed on. */
                assert_int_equal(kube_framer_feed(&f, in, n + ln + sizeof(good) - 1, &err), -1);
                assert_int_equal(s.calls, 1);
                assert_non_null(err);
                assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
                if (!strstr(err->msg, cases[i].want) ||
                    strncmp(err->msg, "kube watch /api/v1/pods?watch=1: ", 33))
                        fail_msg("case %zu: %s", i, err->msg);
                cs_error_free(err);
                kube_framer_release(&f);
        }
}

static void test_nul_inside_line(void **state)
{
        static const char in[] = "{\"type\":\"ADD\0ED\",\"object\":{}}\n";
        seen s = { 0 };
        cs_error *err = NULL;
        kube_framer f;

        (void)state;
        kube_framer_init(&f, "/w", 4096, on_event, &s);
        assert_int_equal(kube_framer_feed(&f, in, sizeof(in) - 1, &err), -1);
        assert_int_equal(s.calls, 0);
        assert_non_null(err);
        cs_error_free(err);
        kube_framer_release(&f);
}

static void test_fn_stops(void **state)
{
        static const int rcs[] = { 7, -1 };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(rcs); i++) {
                seen s = { .stop_at = 2, .stop_rc = rcs[i] };
                cs_error *err = NULL;
                kube_framer f;

                kube_framer_init(&f, "/w", 4096, on_event, &s);
                /* fn's value comes back as it is, with no error: even -1. */
                assert_int_equal(kube_framer_feed(&f, stream, strlen(stream), &err), rcs[i]);
                assert_null(err);
                assert_int_equal(s.calls, 2);
                kube_framer_release(&f);
        }
}

static void test_blank_stream(void **state)
{
        static const char in[] = "\n\r\n \t\r\n\n";
        seen s = { 0 };
        cs_error *err = NULL;
        kube_framer f;

        (void)state;
        kube_framer_init(&f, "/w", 4096, on_event, &s);
        assert_int_equal(kube_framer_feed(&f, in, sizeof(in) - 1, &err), 0);
        assert_int_equal(kube_framer_feed(&f, "  ", 2, &err), 0);
        assert_int_equal(kube_framer_finish(&f, &err), 0);
        assert_null(err);
        assert_int_equal(s.calls, 0);
        kube_framer_release(&f);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_split_everywhere), cmocka_unit_test(test_byte_by_byte),
                cmocka_unit_test(test_line_cap),         cmocka_unit_test(test_malformed_lines),
                cmocka_unit_test(test_nul_inside_line),  cmocka_unit_test(test_fn_stops),
                cmocka_unit_test(test_blank_stream),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
