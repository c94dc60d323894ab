/* Admission control (nodeagent/admission.c): limits against the node, alone and committed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "admission.h"

#define GIB (1024ULL * 1024 * 1024)

static const na_capacity node = { .memory_bytes = 23 * GIB,
                                  .cpu_millis = 2000,
                                  .memory_overcommit = 1.0,
                                  .cpu_overcommit = 1.0 };

static void expect_refused(const na_committed *used, uint32_t cpu, uint64_t mem, const char *msg)
{
        cs_error *err = NULL;

        assert_int_equal(na_admit(&node, used, cpu, mem, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        if (!strstr(err->msg, msg))
                fail_msg("\"%s\" does not say \"%s\"", err->msg, msg);
        cs_error_free(err);
}

static void test_above_the_node_refused(void **state)
{
        na_committed none = { 0 };

        (void)state;
        expect_refused(&none, 0, 64 * GIB, "memory: 64.0 GiB asked, 23.0 GiB on this node");
        expect_refused(&none, 64000, 0, "cpu: 64000m asked, 2000m on this node");
        assert_int_equal(na_admit(&node, &none, 2000, 23 * GIB, NULL), 0);
        assert_int_equal(na_admit(&node, &none, 0, 0, NULL), 0);
}

static void test_committed_counts(void **state)
{
        na_committed used = { .memory_bytes = 20 * GIB, .cpu_millis = 1900 };
        na_capacity over = node;

        (void)state;
        expect_refused(&used, 500, 0, "cpu committed 1900m of 2000m (overcommit 1.0), 500m asked");
        expect_refused(&used, 0, 4 * GIB, "memory committed 20.0 GiB of 23.0 GiB (overcommit 1.0)");
        assert_int_equal(na_admit(&node, &used, 100, 3 * GIB, NULL), 0);
        over.cpu_overcommit = 2.0;
        assert_int_equal(na_admit(&over, &used, 500, 0, NULL), 0);
}

static void test_capacity_read(void **state)
{
        char mi[] = "/tmp/test_admission_mi_XXXXXX", cm[] = "/tmp/test_admission_cm_XXXXXX";
        int fd1 = mkstemp(mi), fd2 = mkstemp(cm);
        na_capacity cap = { 0 };
        cs_error *err = NULL;

        (void)state;
        assert_true(fd1 >= 0 && fd2 >= 0);
        dprintf(fd1, "MemFree: 5 kB\nMemTotal:       24117248 kB\n");
        dprintf(fd2, "50000 100000\n");
        close(fd1);
        close(fd2);
        assert_int_equal(na_capacity_read(mi, cm, &cap, &err), 0);
        assert_int_equal(cap.memory_bytes, 24117248ULL * 1024);
        assert_int_equal(cap.cpu_millis, 500); /* the cgroup's half CPU caps the CPUs */
        assert_int_equal(na_capacity_read(mi, NULL, &cap, &err), 0);
        assert_true(cap.cpu_millis >= 1000);
        assert_int_equal(na_capacity_read(cm, NULL, &cap, &err), -1);
        cs_error_free(err);
        unlink(mi);
        unlink(cm);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_above_the_node_refused),
                cmocka_unit_test(test_committed_counts),
                cmocka_unit_test(test_capacity_read),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
