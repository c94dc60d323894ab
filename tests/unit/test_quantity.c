/* shared/quantity.c: Kubernetes quantities as bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "quantity.h"

static void expect_bytes(const char *s, uint64_t want)
{
        uint64_t got = 0;

        if (cs_quantity_bytes(s, &got) != 0)
                fail_msg("'%s' refused", s);
        if (got != want)
                fail_msg("'%s': %llu, want %llu", s, (unsigned long long)got,
                         (unsigned long long)want);
}

static void expect_refused(const char *s)
{
        uint64_t got = 42;

        if (cs_quantity_bytes(s, &got) == 0)
                fail_msg("'%s' accepted as %llu", s, (unsigned long long)got);
        assert_int_equal(got, 42);
}

static void test_suffixes(void **state)
{
        (void)state;
        expect_bytes("0", 0);
        expect_bytes("1048576", 1048576);
        expect_bytes("1Ki", 1024);
        expect_bytes("100Mi", 100ull << 20);
        expect_bytes("10Gi", 10ull << 30);
        expect_bytes("2Ti", 2ull << 40);
        expect_bytes("1Pi", 1ull << 50);
        expect_bytes("1Ei", 1ull << 60);
        expect_bytes("1k", 1000);
        expect_bytes("500M", 500000000ull);
        expect_bytes("3G", 3000000000ull);
        expect_bytes("1T", 1000000000000ull);
        expect_bytes("1P", 1000000000000000ull);
        expect_bytes("1E", 1000000000000000000ull);
}

/* A fraction rounds up to a whole byte, as Kubernetes does. */
static void test_fractions(void **state)
{
        (void)state;
        expect_bytes("1.5Gi", 3ull << 29);
        expect_bytes("0.5Ki", 512);
        expect_bytes("1.5", 2);
        expect_bytes("0.001k", 1);
        expect_bytes("0.1", 1);
        expect_bytes("1.000000001Gi", (1ull << 30) + 2);
}

static void test_garbage_and_overflow(void **state)
{
        (void)state;
        expect_refused("");
        expect_refused("garbage");
        expect_refused("-1Gi");
        expect_refused("+1Gi");
        expect_refused(" 1Gi");
        expect_refused("1Gi ");
        expect_refused("1gi");
        expect_refused("1K");
        expect_refused("1e3");
        expect_refused("1.");
        expect_refused(".5Gi");
        expect_refused("1..5");
        expect_refused("1.0000000001"); /* more fraction digits than kept */
        expect_refused("16Ei");         /* 2^64 */
        expect_refused("18446744073709551616");
        expect_refused("000000000000000000000000000000001"); /* longer than CS_QUANTITY_MAX */
        expect_bytes("18446744073709551615", UINT64_MAX);
        expect_bytes("15Ei", 15ull << 60);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_suffixes),
                cmocka_unit_test(test_fractions),
                cmocka_unit_test(test_garbage_and_overflow),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
