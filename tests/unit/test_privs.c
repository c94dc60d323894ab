/* Unit tests of shared/privs.c's names: parsing (with or without "cap_", any case, "all",
 * unknown names refused) and formatting back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "privs.h"

static void test_parse_and_format(void **state)
{
        uint64_t mask = 0;
        cs_error *err = NULL;
        char *s;

        (void)state;
        assert_int_equal(cs_caps_parse("chown,CAP_DAC_OVERRIDE,sys_admin,setfcap", &mask, &err), 0);
        assert_int_equal(mask, (1ull << 0) | (1ull << 1) | (1ull << 21) | (1ull << 31));
        s = cs_caps_format(mask);
        assert_string_equal(s, "chown,dac_override,sys_admin,setfcap");
        free(s);
        assert_int_equal(cs_caps_parse("", &mask, &err), 0);
        assert_int_equal(mask, 0);
        s = cs_caps_format(0);
        assert_string_equal(s, "");
        free(s);
        assert_int_equal(cs_caps_parse("all", &mask, &err), 0);
        assert_int_equal(mask, cs_caps_all());
        assert_true(mask & (1ull << 40)); /* checkpoint_restore: kernel 5.9+ */
        s = cs_caps_format(1ull << 40);
        assert_string_equal(s, "checkpoint_restore");
        free(s);
}

static void test_unknown_refused(void **state)
{
        const char *bad[] = { "chown,nope", "cap_", ",", "chown,", "sys_admi", "all,chown" };
        uint64_t mask = 42;

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                cs_error *err = NULL;

                if (cs_caps_parse(bad[i], &mask, &err) == 0)
                        fail_msg("\"%s\" accepted", bad[i]);
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                cs_error_free(err);
                assert_int_equal(mask, 42);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_and_format),
                cmocka_unit_test(test_unknown_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
