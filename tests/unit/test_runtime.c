/* Unit tests of the runtime seam's common helpers (nodeagent/runtime.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "runtime.h"
#include "util.h"

static int int_cmp(const void *a, const void *b)
{
        return *(const int *)a - *(const int *)b;
}

static void test_descendants(void **state)
{
        /* 1 init; 5 sh (the exec) -> 6 sleep, 7 sh -> 9 sleep; 8 another exec; 10 orphan of
         * 1. */
        const rt_proc procs[] = { { 1, 0 }, { 5, 1 }, { 6, 5 }, { 7, 5 },
                                  { 8, 1 }, { 9, 7 }, { 10, 1 } };
        _cleanup_free_ int *d = NULL;
        size_t n;

        (void)state;
        n = rt_descendants(procs, ARRAY_SIZE(procs), 5, &d);
        assert_int_equal(n, 3);
        qsort(d, n, sizeof(*d), int_cmp);
        assert_int_equal(d[0], 6);
        assert_int_equal(d[1], 7);
        assert_int_equal(d[2], 9);
        free(d);
        d = NULL;

        /* A leaf, an unknown pid, an empty table. */
        assert_int_equal(rt_descendants(procs, ARRAY_SIZE(procs), 9, &d), 0);
        free(d);
        d = NULL;
        assert_int_equal(rt_descendants(procs, ARRAY_SIZE(procs), 42, &d), 0);
        free(d);
        d = NULL;
        assert_int_equal(rt_descendants(procs, 0, 5, &d), 0);
}

static void test_descendants_bad_table(void **state)
{
        /* A table with a parent loop (not a real process table) ends, within bounds. */
        const rt_proc loop[] = { { 2, 3 }, { 3, 2 }, { 4, 3 } };
        _cleanup_free_ int *d = NULL;
        size_t n;

        (void)state;
        n = rt_descendants(loop, ARRAY_SIZE(loop), 2, &d);
        assert_true(n <= ARRAY_SIZE(loop));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_descendants),
                cmocka_unit_test(test_descendants_bad_table),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
