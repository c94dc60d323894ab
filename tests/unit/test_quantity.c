/* Unit tests of shared/quantity.c: every suffix, fractions rounded up, the largest value,
 * overflow, and garbage refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "quantity.h"

static void assert_parses(const char *s, uint64_t want)
{
        uint64_t got = 0;

        if (cs_quantity_parse(s, &got) < 0)
                fail_msg("\"%s\" refused", s);
        if (got != want)
                fail_msg("\"%s\": %llu, want %llu", s, (unsigned long long)got,
                         (unsigned long long)want);
}

static void assert_refused(const char *s)
{
        uint64_t got = 42;

        if (cs_quantity_parse(s, &got) == 0)
                fail_msg("\"%s\" accepted as %llu", s, (unsigned long long)got);
        assert_int_equal(got, 42);
}

static void test_suffixes(void **state)
{
        (void)state;
        assert_parses("0", 0);
        assert_parses("1", 1);
        assert_parses("007", 7);
        assert_parses("3Ki", 3072);
        assert_parses("100Mi", 100ull << 20);
        assert_parses("10Gi", 10ull << 30);
        assert_parses("2Ti", 2ull << 40);
        assert_parses("1Pi", 1ull << 50);
        assert_parses("15Ei", 15ull << 60);
        assert_parses("2k", 2000);
        assert_parses("500M", 500000000ull);
        assert_parses("1G", 1000000000ull);
        assert_parses("1T", 1000000000000ull);
        assert_parses("1P", 1000000000000000ull);
        assert_parses("7E", 7000000000000000000ull);
        assert_parses("18446744073709551615", UINT64_MAX);
}

static void test_fractions(void **state)
{
        (void)state;
        assert_parses("1.5Ti", 3ull << 39);
        assert_parses("0.5Ki", 512);
        assert_parses("1.5", 2); /* a fraction of a byte rounds up */
        assert_parses("0.001k", 1);
        assert_parses("0.0001k", 1);
        assert_parses("2.25Gi", 9ull << 28);
        assert_parses("1.000000000000000001E", 1000000000000000001ull);
        assert_parses("0.000000000000000001Ei", 2);           /* 1.15 bytes */
        assert_parses("15.999999999999999999Ei", UINT64_MAX); /* rounds up to 2^64 - 1 */
}

static void test_overflow(void **state)
{
        (void)state;
        assert_refused("18446744073709551616");
        assert_refused("16Ei");
        assert_refused("19E");
        assert_refused("99999999999999999999999999999999"); /* 32 digits */
        assert_refused("16384Pi");
        assert_refused("123456789012345678901234567890123Gi"); /* too long */
}

static void test_garbage(void **state)
{
        const char
                *bad[] = { "",       "garbage", "Gi",
                           "1.",     ".5Gi",    "10GB",
                           "10gi",   "-1Gi",    "+1Gi",
                           "1e3",    "1E3",     "10m",
                           " 10Gi",  "10Gi ",   "10 Gi",
                           "1..5Gi", "1.5.5",   "0x10",
                           "10Kii",  "10K",     "1.0000000000000000001" /* 19 fraction digits */ };

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_refused(bad[i]);
        assert_refused(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_suffixes),
                cmocka_unit_test(test_fractions),
                cmocka_unit_test(test_overflow),
                cmocka_unit_test(test_garbage),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
