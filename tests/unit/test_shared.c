/* Unit tests of the small shared modules: config, errors, UUIDs, log parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "config.h"
#include "error.h"
#include "log.h"
#include "path.h"
#include "usage_json.h"
#include "util.h"
#include "uuid.h"

static char *listen_addr;
static int64_t max_calls;
static bool verbose;

static const cs_option options[] = {
        { "listen", "TEST_LISTEN", CS_OPT_STRING, "127.0.0.1:1", "where", &listen_addr, 0, 0 },
        { "max-calls", "TEST_MAX_CALLS", CS_OPT_INT, "8", "how many", &max_calls, 1, 100 },
        { "verbose", "TEST_VERBOSE", CS_OPT_BOOL, "false", "chatty", &verbose, 0, 0 },
};
static const cs_program program = { "test", "A test program.", options, ARRAY_SIZE(options) };

static int parse(int argc, char **argv, cs_error **err)
{
        return cs_config_parse(&program, argc, argv, NULL, err);
}

static void test_config_precedence(void **state)
{
        char *argv[] = { "test", "--max-calls", "42", "--verbose" };
        cs_error *err = NULL;

        (void)state;
        unsetenv("TEST_LISTEN");
        unsetenv("TEST_MAX_CALLS");
        assert_int_equal(parse(1, argv, &err), 0);
        assert_string_equal(listen_addr, "127.0.0.1:1");
        assert_int_equal(max_calls, 8);
        assert_false(verbose);

        setenv("TEST_LISTEN", "127.0.0.1:2", 1);
        setenv("TEST_MAX_CALLS", "9", 1);
        assert_int_equal(parse(1, argv, &err), 0);
        assert_string_equal(listen_addr, "127.0.0.1:2"); /* env beats default */
        assert_int_equal(max_calls, 9);

        assert_int_equal(parse(4, argv, &err), 0);
        assert_int_equal(max_calls, 42); /* flag beats env */
        assert_true(verbose);
        unsetenv("TEST_LISTEN");
        unsetenv("TEST_MAX_CALLS");
        cs_config_free(&program);
        assert_null(listen_addr);
}

static void test_config_bad_input(void **state)
{
        char *range[] = { "test", "--max-calls=1000" };
        char *word[] = { "test", "--max-calls", "many" };
        char *unknown[] = { "test", "--nope" };
        char *missing[] = { "test", "--listen" };
        char *positional[] = { "test", "extra" };
        char **cases[] = { range, word, unknown, missing, positional };
        int argcs[] = { 2, 3, 2, 2, 2 };

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                cs_error *err = NULL;
                assert_int_equal(parse(argcs[i], cases[i], &err), -1);
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                assert_non_null(err->msg);
                cs_error_free(err);
        }
        setenv("TEST_VERBOSE", "maybe", 1);
        {
                cs_error *err = NULL;
                assert_int_equal(parse(1, range, &err), -1);
                assert_non_null(strstr(err->msg, "TEST_VERBOSE"));
                cs_error_free(err);
        }
        unsetenv("TEST_VERBOSE");
        cs_config_free(&program);
}

static void test_error_first_wins(void **state)
{
        cs_error *err = NULL;

        (void)state;
        assert_int_equal(cs_error_set(&err, GRPC_STATUS_NOT_FOUND, "no %s", "such"), -1);
        cs_error_set(&err, GRPC_STATUS_INTERNAL, "later");
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        assert_string_equal(err->msg, "no such");
        cs_error_prefix(&err, "sandbox %d", 7);
        assert_string_equal(err->msg, "sandbox 7: no such");
        cs_error_free(err);
        err = NULL;
        cs_error_errno(&err, ENOENT, "open %s", "x");
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        assert_string_equal(err->msg, "open x: No such file or directory");
        cs_error_free(err);
        assert_int_equal(cs_errno_to_status(EACCES), GRPC_STATUS_PERMISSION_DENIED);
        assert_int_equal(cs_errno_to_status(ENOSPC), GRPC_STATUS_RESOURCE_EXHAUSTED);
        assert_int_equal(cs_errno_to_status(EIO), GRPC_STATUS_INTERNAL);
        assert_string_equal(cs_status_name(GRPC_STATUS_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
        assert_string_equal(cs_status_name((grpc_status_code)99), "UNKNOWN");
        cs_error_set(NULL, GRPC_STATUS_INTERNAL, "no destination is fine");
}

static void test_uuid(void **state)
{
        char a[CS_UUID_STRLEN + 1], b[CS_UUID_STRLEN + 1];

        (void)state;
        cs_uuid_generate(a);
        cs_uuid_generate(b);
        assert_true(cs_uuid_valid(a));
        assert_string_not_equal(a, b);
        assert_int_equal(a[14], '4');
        assert_true(cs_uuid_valid("123E4567-e89b-12d3-a456-426614174000"));
        assert_false(cs_uuid_valid(NULL));
        assert_false(cs_uuid_valid(""));
        assert_false(cs_uuid_valid("123e4567e89b12d3a456426614174000"));
        assert_false(cs_uuid_valid("123e4567-e89b-12d3-a456-42661417400g"));
        assert_false(cs_uuid_valid("123e4567-e89b-12d3-a456-4266141740000"));
        assert_false(cs_uuid_valid("../../../../etc/passwd-0000-0000-000"));
}

static void test_mount_path(void **state)
{
        static const char *const good[] = { "/workspace", "/a/b-c_d.e", "/procx", "/home/.x" };
        static const char *const bad[] = { "",      "/",      "workspace", "/w/",  "//w",
                                           "/a//b", "/a/./b", "/a/../b",   "/a/.", "/a/..",
                                           "/proc", "/dev/x", "/sys/fs",   "/a b", "/a:b",
                                           "/a\tb", "/a\x7f" };
        char long_path[CS_MOUNT_PATH_MAX + 2];

        (void)state;
        for (size_t i = 0; i < ARRAY_SIZE(good); i++)
                assert_int_equal(cs_mount_path_check(good[i], NULL), 0);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                cs_error *err = NULL;
                assert_int_equal(cs_mount_path_check(bad[i], &err), -1);
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                cs_error_free(err);
        }
        long_path[0] = '/';
        memset(long_path + 1, 'x', CS_MOUNT_PATH_MAX);
        long_path[CS_MOUNT_PATH_MAX + 1] = '\0';
        assert_int_equal(cs_mount_path_check(long_path, NULL), -1);
        long_path[CS_MOUNT_PATH_MAX] = '\0';
        assert_int_equal(cs_mount_path_check(long_path, NULL), 0);
}

static void test_usage_json(void **state)
{
        usage_metrics u = { 1, 2, 3, 4, 5, 6, UINT64_C(1) << 40 }, back;
        json_t *j = usage_to_json(&u);
        char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

        (void)state;
        assert_string_equal(text, "{\"cpu_ms\":1,\"disk_read_bytes\":4,\"disk_write_bytes\":5,"
                                  "\"memory_avg_bytes\":3,\"memory_peak_bytes\":2,"
                                  "\"network_egress_bytes\":6,"
                                  "\"network_ingress_bytes\":1099511627776}");
        usage_from_json(j, &back);
        assert_memory_equal(&u, &back, sizeof(u));
        /* Missing, negative or non-integer fields, and no object at all, read as 0. */
        json_object_set_new(j, "cpu_ms", json_integer(-5));
        json_object_del(j, "disk_read_bytes");
        json_object_set_new(j, "disk_write_bytes", json_string("5"));
        usage_from_json(j, &back);
        assert_int_equal(back.cpu_ms, 0);
        assert_int_equal(back.disk_read_bytes, 0);
        assert_int_equal(back.disk_write_bytes, 0);
        assert_int_equal(back.memory_peak_bytes, 2);
        usage_from_json(NULL, &back);
        assert_int_equal(back.memory_peak_bytes, 0);
        free(text);
        json_decref(j);
}

static void test_mkdir_parents(void **state)
{
        char tmpl[] = "/tmp/cs-mkdir-XXXXXX";
        char *top = mkdtemp(tmpl);
        _cleanup_free_ char *deep = NULL, *file = NULL, *under_file = NULL;
        struct stat st;
        FILE *f;

        (void)state;
        assert_non_null(top);
        deep = cs_xasprintf("%s/a/b/c", top);
        assert_int_equal(cs_mkdir_parents(deep, 0700), 0);
        assert_int_equal(stat(deep, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0700);
        assert_int_equal(cs_mkdir_parents(deep, 0700), 0); /* existing: fine */
        file = cs_xasprintf("%s/file", top);
        f = fopen(file, "w");
        assert_non_null(f);
        fclose(f);
        under_file = cs_xasprintf("%s/file/x", top);
        assert_int_equal(cs_mkdir_parents(under_file, 0700), -1);
        assert_int_equal(errno, ENOTDIR);
        assert_int_equal(cs_remove_tree(AT_FDCWD, top), 0);
        assert_int_not_equal(stat(top, &st), 0);
}

static void test_log_names(void **state)
{
        cs_log_level l;
        bool json;

        (void)state;
        assert_int_equal(cs_log_level_parse("warn", &l), 0);
        assert_int_equal(l, CS_LOG_WARN);
        assert_int_equal(cs_log_level_parse("loud", &l), -1);
        assert_int_equal(cs_log_format_parse("json", &json), 0);
        assert_true(json);
        assert_int_equal(cs_log_format_parse("xml", &json), -1);
        cs_log_setup(CS_LOG_WARN, false);
        assert_false(cs_log_enabled(CS_LOG_INFO));
        assert_true(cs_log_enabled(CS_LOG_ERROR));
        cs_log_setup(CS_LOG_INFO, false);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_config_precedence), cmocka_unit_test(test_config_bad_input),
                cmocka_unit_test(test_error_first_wins),  cmocka_unit_test(test_uuid),
                cmocka_unit_test(test_log_names),         cmocka_unit_test(test_mount_path),
                cmocka_unit_test(test_usage_json),        cmocka_unit_test(test_mkdir_parents),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
