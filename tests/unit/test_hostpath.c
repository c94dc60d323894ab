/* cs_paths_hide: host directories out of client-facing messages (shared/hostpath.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hostpath.h"
#include "util.h"

static const char *const dirs[] = { "/var/lib/compute", "/tmp/cs-ab12/state/", "", "rel", NULL };

static void expect(const char *msg, const char *want)
{
        _cleanup_free_ char *got = cs_paths_hide(msg, dirs);

        if (!want) {
                if (got)
                        fail_msg("'%s': changed to '%s'", msg, got);
                return;
        }
        if (!got || strcmp(got, want) != 0)
                fail_msg("'%s': got '%s', want '%s'", msg, got ? got : "(unchanged)", want);
}

static void test_hidden(void **state)
{
        (void)state;
        expect("runsc run wrote no pid file /var/lib/compute/sandboxes/x/pid: No such file",
               "runsc run wrote no pid file <host path>: No such file");
        expect("/var/lib/compute", "<host path>");
        expect("cannot open '/var/lib/compute/w/x' (busy), or /var/lib/compute/y",
               "cannot open '<host path>' (busy), or <host path>");
        expect("spec=/tmp/cs-ab12/state/sandboxes/1/exec-2.json;", "spec=<host path>;");
        expect("a:/var/lib/compute/a,b", "a:<host path>,b");
}

static void test_left_alone(void **state)
{
        (void)state;
        expect("'/workspace/a.txt': no such file", NULL);
        expect("/var/lib/computer/x", NULL); /* another directory with the same start */
        expect("x/var/lib/compute/y", NULL); /* not a path of its own */
        expect("/tmp/cs-ab12/other", NULL);
        expect("", NULL);
        expect("rel/x and rel", NULL); /* relative entries are ignored */
}

static void test_no_dirs(void **state)
{
        (void)state;
        assert_null(cs_paths_hide("/var/lib/compute/x", NULL));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hidden),
                cmocka_unit_test(test_left_alone),
                cmocka_unit_test(test_no_dirs),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
