/* Unit tests of shared/seccomp_filter.c with each program's table: in a forked child that installs
 * the filter, calls outside the list fail with EPERM and are logged on stderr, and calls in
 * the list still work. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "seccomp_filter.h"

/* A refused call and the name the log line must carry. */
typedef struct refused {
        long nr;
        const char *name;
} refused;

/* Exit codes of the child: which check failed. */
enum {
        CHILD_OK = 0,
        CHILD_INSTALL = 10,
        CHILD_NOT_ACTIVE,
        CHILD_ALLOWED_FAILED,
        CHILD_REFUSED = 20
};

/* In the child: installs `allow`, checks an allowed call and each refused one. Never returns. */
static void child_run(const char *const *allow, const refused *calls, size_t n, int log_fd)
{
        cs_error *err = NULL;

        if (dup2(log_fd, STDERR_FILENO) < 0 || cs_seccomp_install("test", allow, &err) < 0)
                _exit(CHILD_INSTALL);
        if (!cs_seccomp_active())
                _exit(CHILD_NOT_ACTIVE);
        if (getpid() <= 0 || write(STDERR_FILENO, "", 0) < 0)
                _exit(CHILD_ALLOWED_FAILED);
        for (size_t i = 0; i < n; i++) {
                /* Arguments that would fail anyway with another errno (EFAULT, EINVAL...), so
                 * only the filter can make it EPERM. */
                errno = 0;
                if (syscall(calls[i].nr, 0, 0, 0, 0, 0) != -1 || errno != EPERM)
                        _exit(CHILD_REFUSED + (int)i);
        }
        _exit(CHILD_OK);
}

static void check_table(const char *const *allow, const refused *calls, size_t n)
{
        char log[8192] = "";
        size_t len = 0;
        ssize_t r;
        int p[2], status;
        pid_t pid;

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(p[0]);
                child_run(allow, calls, n, p[1]);
        }
        close(p[1]);
        while ((r = read(p[0], log + len, sizeof(log) - 1 - len)) > 0)
                len += (size_t)r;
        log[len] = '\0';
        close(p[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != CHILD_OK)
                fail_msg("child status 0x%x (exit %d), log: %s", status, WEXITSTATUS(status), log);
        for (size_t i = 0; i < n; i++) {
                char want[96];
                snprintf(want, sizeof(want), "test: seccomp refused syscall %ld (%s): EPERM",
                         calls[i].nr, calls[i].name);
                if (!strstr(log, want))
                        fail_msg("no '%s' in the log: %s", want, log);
        }
}

#define CALL(name)                                                                                 \
        {                                                                                          \
                SYS_##name, #name                                                                  \
        }

static void test_frontend_refuses(void **state)
{
        static const refused calls[] = {
#if !defined(__SANITIZE_ADDRESS__) /* the ASan build allows it: LeakSanitizer uses it */
                CALL(ptrace),
#endif
                CALL(mount),
                CALL(kexec_load),
                CALL(bpf),
                CALL(init_module),
                CALL(unshare),
                CALL(setns),
                CALL(execve),
                CALL(process_vm_readv)
        };

        (void)state;
        check_table(frontend_seccomp_allow, calls, sizeof(calls) / sizeof(calls[0]));
}

static void test_agent_refuses(void **state)
{
        /* mount, ptrace, unshare, setns and execve are on the agent's list: runsc, which
         * inherits the filter, needs them (docs/security.md). */
        static const refused calls[] = { CALL(kexec_load),    CALL(bpf),
                                         CALL(init_module),   CALL(finit_module),
                                         CALL(delete_module), CALL(reboot),
                                         CALL(swapon),        CALL(open_by_handle_at) };

        (void)state;
        check_table(agent_seccomp_allow, calls, sizeof(calls) / sizeof(calls[0]));
}

/* A table with a name unknown to this architecture still loads (the name is skipped). */
static void test_unknown_names_skipped(void **state)
{
        static const refused calls[] = { CALL(kexec_load) };
        const char *allow[1024];
        size_t n = 0;

        (void)state;
        allow[n++] = "no_such_syscall";
        for (size_t i = 0; frontend_seccomp_allow[i] && n < 1022; i++)
                allow[n++] = frontend_seccomp_allow[i];
        allow[n] = NULL;
        check_table(allow, calls, 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_frontend_refuses),
                cmocka_unit_test(test_agent_refuses),
                cmocka_unit_test(test_unknown_names_skipped),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
