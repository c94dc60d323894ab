/* Unit tests of the runtime seam's common helpers (nodeagent/runtime.h) and of how the runsc
 * backend tells its failures apart (against a stand-in runsc script in a temporary
 * directory, which it owns and removes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* --- runsc's failures told apart without its stderr text ------------------------------- */

/* A stand-in for runsc: `state` and `delete` fail with wording no code may rely on; `list`
 * prints root/list.json (fails when there is none), as `runsc list --format=json` does. */
static const char fake_runsc[] = "#!/bin/sh\n"
                                 "root=$2; shift 2\n"
                                 "case \"$1\" in\n"
                                 "state) echo 'some wording of this release' >&2; exit 1 ;;\n"
                                 "delete) echo 'other wording' >&2; exit 1 ;;\n"
                                 "kill) exit 1 ;;\n"
                                 "list) exec cat \"$root/list.json\" ;;\n"
                                 "esac\n"
                                 "exit 2\n";

typedef struct runsc_fixture {
        char dir[64];
        runtime *rt;
} runsc_fixture;

static void put_text(const char *dir, const char *name, const char *text, mode_t mode)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
}

static int setup_runsc(void **state)
{
        runsc_fixture *f = cs_xcalloc(1, sizeof(*f));
        _cleanup_free_ char *bin = NULL;
        cs_error *err = NULL;
        runsc_config cfg = { .network = "none", .timeout_ms = 10000 };

        snprintf(f->dir, sizeof(f->dir), "/tmp/cs-test-runsc-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        put_text(f->dir, "runsc", fake_runsc, 0700);
        bin = cs_xasprintf("%s/runsc", f->dir);
        cfg.path = bin;
        cfg.root = f->dir;
        f->rt = runtime_runsc_new(&cfg, &err);
        if (!f->rt)
                fail_msg("runtime_runsc_new: %s", err->msg);
        *state = f;
        return 0;
}

static int teardown_runsc(void **state)
{
        runsc_fixture *f = *state;

        f->rt->ops->free(f->rt);
        cs_remove_tree(AT_FDCWD, f->dir);
        free(f);
        return 0;
}

static void test_runsc_absent_by_list(void **state)
{
        runsc_fixture *f = *state;
        rt_state st = RT_RUNNING;
        pid_t pid = 42;
        cs_error *err = NULL;

        /* No containers: a failed state is an absent container, a failed delete is done. */
        put_text(f->dir, "list.json", "null", 0600);
        assert_int_equal(f->rt->ops->state(f->rt, "c1", &st, &pid, &err), 0);
        assert_null(err);
        assert_int_equal(st, RT_ABSENT);
        assert_int_equal(pid, 0);
        assert_int_equal(f->rt->ops->destroy(f->rt, "c1", &err), 0);
        assert_null(err);

        /* Listed: the same failures are errors, with runsc's own message. */
        put_text(f->dir, "list.json",
                 "[{\"id\": \"c1\", \"status\": \"running\", \"pid\": 5, \"bundle\": "
                 "\"/b\"}]",
                 0600);
        assert_int_equal(f->rt->ops->state(f->rt, "c1", &st, NULL, &err), -1);
        assert_non_null(strstr(err->msg, "some wording of this release"));
        cs_error_freep(&err);
        assert_int_equal(f->rt->ops->destroy(f->rt, "c1", &err), -1);
        assert_non_null(strstr(err->msg, "other wording"));
        cs_error_freep(&err);
        /* Another container is absent all the same. */
        assert_int_equal(f->rt->ops->state(f->rt, "c2", &st, NULL, &err), 0);
        assert_int_equal(st, RT_ABSENT);

        /* list failing too: nothing is known, the state's error stands. */
        {
                _cleanup_free_ char *list = cs_xasprintf("%s/list.json", f->dir);
                assert_int_equal(unlink(list), 0);
        }
        assert_int_equal(f->rt->ops->state(f->rt, "c1", &st, NULL, &err), -1);
        assert_non_null(strstr(err->msg, "some wording of this release"));
        cs_error_freep(&err);
}

/* runsc exec's own failures on the process's stderr are taken out; the process's lines,
 * and a last line without a newline, stay. */
static void test_runsc_strips_own_errors(void **state)
{
        runsc_fixture *f = *state;
        char buf[] = "mine 1\n"
                     "waiting on pid 5: waiting on PID 5 in sandbox \"cs-x\": urpc method "
                     "\"containerManager.WaitPID\" failed: EOF\n"
                     "mine 2\n"
                     "executing processes for container: cannot execute in container \"cs-x\" "
                     "in state stopped\n"
                     "mine 3";
        rt_start_error start = { 0 };
        size_t n = f->rt->ops->strip_own_errors(f->rt, buf, strlen(buf), &start);

        assert_int_equal(n, strlen("mine 1\nmine 2\nmine 3"));
        assert_memory_equal(buf, "mine 1\nmine 2\nmine 3", n);
        assert_int_equal(start.exit_code, 0); /* a stopped container: not a start failure */
}

/* runsc exec's lines for a command that never started (as runsc 20240729 words them) are
 * told as the spawner tells them: 127/126 and a shell's message, no runsc internals. */
static void test_runsc_start_errors(void **state)
{
        static const struct {
                const char *why;
                int code;
                const char *msg;
        } cases[] = {
                { "error finding executable \"nope\" in PATH [/usr/bin /bin]: no such file or "
                  "directory",
                  127, "nope: command not found" },
                { "failed to load /no/such: no such file or directory", 127,
                  "/no/such: No such file or directory" },
                { "failed to load /etc/passwd: permission denied", 126,
                  "/etc/passwd: Permission denied" },
                { "failed to find initial working directory \"/nodir\": no such file or "
                  "directory",
                  127, "cannot enter working directory /nodir: No such file or directory" },
                { "something else: no such file or directory", 0, "" },
                { "failed to load /x: input/output error", 0, "" },
        };
        runsc_fixture *f = *state;

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_free_ char *buf = cs_xasprintf(
                        "executing processes for container: executing command \"x\" in "
                        "sandbox: %s\n",
                        cases[i].why);
                rt_start_error start = { 0 };
                size_t n = f->rt->ops->strip_own_errors(f->rt, buf, strlen(buf), &start);

                assert_int_equal(n, 0);
                assert_int_equal(start.exit_code, cases[i].code);
                assert_string_equal(start.msg, cases[i].msg);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_descendants),
                cmocka_unit_test(test_descendants_bad_table),
                cmocka_unit_test_setup_teardown(test_runsc_strips_own_errors, setup_runsc,
                                                teardown_runsc),
                cmocka_unit_test_setup_teardown(test_runsc_start_errors, setup_runsc,
                                                teardown_runsc),
                cmocka_unit_test_setup_teardown(test_runsc_absent_by_list, setup_runsc,
                                                teardown_runsc),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
