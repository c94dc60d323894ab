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

/* Asserts that the descendants of pid in procs are exactly want (each once, any order). */
static void check_descendants(const rt_proc *procs, size_t n, int pid, const int *want,
                              size_t n_want)
{
        _cleanup_free_ int *d = NULL;
        size_t got = rt_descendants(procs, n, pid, &d);

        assert_int_equal(got, n_want);
        qsort(d, got, sizeof(*d), int_cmp);
        for (size_t i = 0; i < n_want; i++)
                assert_int_equal(d[i], want[i]);
}

static void test_descendants_bad_table(void **state)
{
        /* Tables a racing `ps` can produce. A parent loop through pid itself: 2 is 3's child
         * and its parent; 4 is 3's child. */
        const rt_proc loop[] = { { 2, 3 }, { 3, 2 }, { 4, 3 } };
        /* A pid listed twice under two parents (3 moved under 4), a loop beside pid. */
        const rt_proc twice[] = { { 3, 2 }, { 4, 3 }, { 3, 4 }, { 5, 4 } };
        /* A loop that does not reach pid: nothing of it is a descendant. */
        const rt_proc apart[] = { { 2, 1 }, { 7, 8 }, { 8, 7 } };
        const int want_loop[] = { 3, 4 }, want_twice[] = { 3, 4, 5 };

        (void)state;
        check_descendants(loop, ARRAY_SIZE(loop), 2, want_loop, ARRAY_SIZE(want_loop));
        check_descendants(twice, ARRAY_SIZE(twice), 2, want_twice, ARRAY_SIZE(want_twice));
        check_descendants(apart, ARRAY_SIZE(apart), 2, NULL, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_descendants),
                cmocka_unit_test(test_descendants_bad_table),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
