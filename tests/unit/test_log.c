/* Unit tests of the logger's structured fields (shared/log.c): JSON lines that parse whatever
 * the values hold, text key=value that reads back, the bounds, and the level filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "log.h"
#include "util.h"

#define TS "2026-12-04T10:00:00.000Z"

typedef struct rendered {
        char buf[CS_LOG_LINE_MAX + 1];
        size_t len;
} rendered;

static void render(rendered *r, bool json, const char *req, const char *sb, const cs_log_field *f,
                   size_t n, const char *msg)
{
        r->len = cs_log_render(r->buf, json, TS, CS_LOG_INFO, req, sb, f, n, msg);
        assert_true(r->len > 0 && r->len <= CS_LOG_LINE_MAX);
        r->buf[r->len] = '\0';
        /* One line: a newline at the end, none before it. */
        assert_int_equal(r->buf[r->len - 1], '\n');
        assert_null(memchr(r->buf, '\n', r->len - 1));
}

/* The line as a JSON object (the test fails when it does not parse, or has a key twice).
 * jansson refuses bad UTF-8, so a parse also proves the line is UTF-8. */
static json_t *parse_json(const rendered *r)
{
        json_error_t e;
        json_t *j = json_loadb(r->buf, r->len, JSON_REJECT_DUPLICATES, &e);

        if (!j)
                fail_msg("not JSON (%s): %s", e.text, r->buf);
        assert_true(json_is_object(j));
        return j;
}

static void test_json_fields(void **state)
{
        cs_log_field f[] = {
                CS_LOG_STR("method", "/compute.v1.ComputeService/ExecCommand"),
                CS_LOG_STR("code", "OK"),
                CS_LOG_INT("exit_code", -1),
                CS_LOG_UINT("cpu_ms", UINT64_C(1) << 62),
                CS_LOG_BOOL("cancelled", true),
                CS_LOG_STR("tenant", "a\"b\\c\nd\x01"),
                CS_LOG_STR("absent", NULL),
        };
        rendered r;
        json_t *j;

        (void)state;
        render(&r, true, "req-1", "sb-1", f, ARRAY_SIZE(f), "access");
        j = parse_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "ts")), TS);
        assert_string_equal(json_string_value(json_object_get(j, "level")), "info");
        assert_string_equal(json_string_value(json_object_get(j, "request_id")), "req-1");
        assert_string_equal(json_string_value(json_object_get(j, "sandbox_id")), "sb-1");
        assert_string_equal(json_string_value(json_object_get(j, "msg")), "access");
        assert_string_equal(json_string_value(json_object_get(j, "method")),
                            "/compute.v1.ComputeService/ExecCommand");
        assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), -1);
        /* Numbers are bare. */
        assert_true(json_is_number(json_object_get(j, "cpu_ms")));
        assert_non_null(strstr(r.buf, "\"cpu_ms\":4611686018427387904"));
        assert_true(json_is_true(json_object_get(j, "cancelled")));
        /* The client's quotes, backslash and controls come back as they were. */
        assert_string_equal(json_string_value(json_object_get(j, "tenant")), "a\"b\\c\nd\x01");
        assert_null(json_object_get(j, "absent"));
        assert_null(json_object_get(j, "cut"));
        json_decref(j);
}

static void test_text_fields(void **state)
{
        cs_log_field f[] = {
                CS_LOG_STR("method", "/x.S/M"),  CS_LOG_INT("duration_ms", 12),
                CS_LOG_STR("tenant", "a\"b\\c"), CS_LOG_STR("error", "not found: x=1"),
                CS_LOG_STR("empty", ""),         CS_LOG_BOOL("oom_killed", false),
                CS_LOG_STR("nl", "one\ntwo"),    CS_LOG_STR("utf8", "h\xc3\xa9"),
                CS_LOG_STR("bad", "x\xff"),
        };
        rendered r;

        (void)state;
        render(&r, false, "req-1", NULL, f, ARRAY_SIZE(f), "access");
        assert_string_equal(r.buf, TS " INFO  [req=req-1] access method=/x.S/M duration_ms=12 "
                                      "tenant=\"a\\\"b\\\\c\" error=\"not found: x=1\" empty=\"\" "
                                      "oom_killed=false nl=\"one\\ntwo\" utf8=h\xc3\xa9 "
                                      "bad=\"x\\xff\"\n");
}

static void test_bad_keys_left_out(void **state)
{
        cs_log_field f[] = {
                CS_LOG_STR("msg", "forged"),
                CS_LOG_STR("level", "error"),
                CS_LOG_STR("Upper", "x"),
                CS_LOG_STR("a\"b", "x"),
                CS_LOG_STR("", "x"),
                CS_LOG_STR(NULL, "x"),
                CS_LOG_STR("cut", "x"),
                CS_LOG_STR("a234567890123456789012345678901234", "x"),
                CS_LOG_STR("good_key_1", "kept"),
        };
        rendered r;
        json_t *j;

        (void)state;
        assert_true(cs_log_key_valid("tenant"));
        assert_false(cs_log_key_valid("sandbox_id"));
        render(&r, true, NULL, NULL, f, ARRAY_SIZE(f), "m");
        j = parse_json(&r);
        assert_int_equal(json_object_size(j), 4); /* ts, level, msg, good_key_1 */
        assert_string_equal(json_string_value(json_object_get(j, "msg")), "m");
        assert_string_equal(json_string_value(json_object_get(j, "level")), "info");
        assert_string_equal(json_string_value(json_object_get(j, "good_key_1")), "kept");
        json_decref(j);
}

static void test_value_cap(void **state)
{
        char big[3000];
        cs_log_field f[] = { CS_LOG_STR("tenant", big), CS_LOG_STR("after", "kept") };
        rendered r;
        json_t *j;
        const char *v;

        (void)state;
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        render(&r, true, big, NULL, f, ARRAY_SIZE(f), "m");
        j = parse_json(&r);
        v = json_string_value(json_object_get(j, "tenant"));
        assert_int_equal(strlen(v), CS_LOG_VALUE_MAX + 3);
        assert_string_equal(v + CS_LOG_VALUE_MAX, "...");
        assert_int_equal(strlen(json_string_value(json_object_get(j, "request_id"))),
                         CS_LOG_VALUE_MAX + 3);
        assert_string_equal(json_string_value(json_object_get(j, "after")), "kept");
        assert_null(json_object_get(j, "cut"));
        json_decref(j);
}

/* Fields that cannot all fit: the first ones whole, none cut in the middle, the message
 * still there, and the line says it was cut. */
static void test_fields_over_the_line(void **state)
{
        char ctl[CS_LOG_VALUE_MAX + 1];
        static const char *const keys[] = { "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7" };
        cs_log_field f[8];
        rendered r;
        json_t *j;
        size_t kept = 0;

        (void)state;
        memset(ctl, '\x01', CS_LOG_VALUE_MAX); /* 6 bytes each once escaped */
        ctl[CS_LOG_VALUE_MAX] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(f); i++)
                f[i] = CS_LOG_STR(keys[i], ctl);
        render(&r, true, "req", "sb", f, ARRAY_SIZE(f), "the message");
        j = parse_json(&r);
        for (size_t i = 0; i < ARRAY_SIZE(f); i++) {
                char key[4];
                json_t *v;

                snprintf(key, sizeof(key), "f%zu", i);
                v = json_object_get(j, key);
                if (v) {
                        assert_int_equal(kept, i); /* in order, no gap */
                        assert_int_equal(strlen(json_string_value(v)), CS_LOG_VALUE_MAX);
                        kept++;
                }
        }
        assert_true(kept >= 1 && kept < ARRAY_SIZE(f));
        assert_string_equal(json_string_value(json_object_get(j, "msg")), "the message");
        assert_true(json_is_true(json_object_get(j, "cut")));
        json_decref(j);

        render(&r, false, "req", "sb", f, ARRAY_SIZE(f), "the message");
        assert_non_null(strstr(r.buf, "] the message f0=\""));
        assert_non_null(strstr(r.buf, "\" ...\n"));
}

/* A message that fills the line is cut, inside its string; the fields stay whole. */
static void test_long_message(void **state)
{
        char *msg = malloc(3 * CS_LOG_LINE_MAX);
        cs_log_field f[] = { CS_LOG_STR("tenant", "t1"), CS_LOG_INT("exit_code", 3) };
        rendered r;
        json_t *j;

        (void)state;
        for (size_t i = 0; i < 3 * CS_LOG_LINE_MAX - 1; i++)
                msg[i] = (char)(i % 3 == 0 ? '"' : i % 3 == 1 ? '\n' : 'x');
        msg[3 * CS_LOG_LINE_MAX - 1] = '\0';
        render(&r, true, "req", "sb", f, ARRAY_SIZE(f), msg);
        j = parse_json(&r);
        assert_true(json_is_true(json_object_get(j, "cut")));
        assert_string_equal(json_string_value(json_object_get(j, "tenant")), "t1");
        assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 3);
        assert_true(strlen(json_string_value(json_object_get(j, "msg"))) > 1000);
        json_decref(j);

        render(&r, false, "req", "sb", f, ARRAY_SIZE(f), msg);
        assert_non_null(strstr(r.buf, "... tenant=t1 exit_code=3\n"));
        free(msg);
}

/* Random bytes everywhere (fixed seed): every JSON line parses, every line is one line. */
static void test_random_values(void **state)
{
        char vals[4][700], msg[5000];
        unsigned seed = 42;
        rendered r;

        (void)state;
        for (int round = 0; round < 300; round++) {
                cs_log_field f[] = { CS_LOG_STR("a", vals[0]), CS_LOG_STR("b", vals[1]),
                                     CS_LOG_INT("n", (int64_t)rand_r(&seed)),
                                     CS_LOG_STR("c", vals[2]) };
                size_t mlen = (size_t)rand_r(&seed) % sizeof(msg);

                for (int v = 0; v < 4; v++) {
                        size_t len = (size_t)rand_r(&seed) % sizeof(vals[v]);
                        for (size_t i = 0; i < len; i++)
                                vals[v][i] = (char)(1 + rand_r(&seed) % 255);
                        vals[v][len] = '\0';
                }
                for (size_t i = 0; i < mlen; i++)
                        msg[i] = (char)(1 + rand_r(&seed) % 255);
                msg[mlen] = '\0';
                render(&r, true, vals[3], round % 2 ? vals[0] : NULL, f, ARRAY_SIZE(f), msg);
                json_decref(parse_json(&r));
                render(&r, false, vals[3], vals[1], f, ARRAY_SIZE(f), msg);
        }
}

/* cs_log_fields writes one line to stderr, when its level is enabled. */
static void test_written_to_stderr(void **state)
{
        cs_log_field f[] = { CS_LOG_STR("tenant", "t1") };
        char buf[CS_LOG_LINE_MAX * 2];
        int fds[2], saved = dup(STDERR_FILENO);
        ssize_t n;

        (void)state;
        assert_int_equal(pipe(fds), 0);
        dup2(fds[1], STDERR_FILENO);
        cs_log_setup(CS_LOG_INFO, true);
        cs_log_fields(CS_LOG_DEBUG, NULL, NULL, f, 1, "hidden");
        cs_log_fields(CS_LOG_WARN, "r", NULL, f, 1, "shown %d", 7);
        cs_log_setup(CS_LOG_INFO, false);
        dup2(saved, STDERR_FILENO);
        close(saved);
        close(fds[1]);
        n = read(fds[0], buf, sizeof(buf) - 1);
        close(fds[0]);
        assert_true(n > 0);
        buf[n] = '\0';
        assert_null(strstr(buf, "hidden"));
        assert_non_null(strstr(buf, "\"level\":\"warn\",\"request_id\":\"r\",\"tenant\":\"t1\","
                                    "\"msg\":\"shown 7\"}\n"));
        assert_int_equal(strchr(buf, '\n') - buf, n - 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_json_fields),
                cmocka_unit_test(test_text_fields),
                cmocka_unit_test(test_bad_keys_left_out),
                cmocka_unit_test(test_value_cap),
                cmocka_unit_test(test_fields_over_the_line),
                cmocka_unit_test(test_long_message),
                cmocka_unit_test(test_random_values),
                cmocka_unit_test(test_written_to_stderr),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
