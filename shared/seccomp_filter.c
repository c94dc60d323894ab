/* The daemons' syscall allowlist: builds a libseccomp filter from a table of names, loads it
 * on every thread, and logs (from a SIGSYS handler) each syscall it refuses. */
#include "seccomp_filter.h"

#include <errno.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <ucontext.h>
#include <unistd.h>

/* Names of the syscall numbers, resolved before the filter is loaded: the handler may not
 * call libseccomp (it allocates). Numbers at or past the cap are logged as numbers only. */
#define SECCOMP_NAMES_MAX 512
#define SECCOMP_NAME_LEN  32
static char syscall_names[SECCOMP_NAMES_MAX][SECCOMP_NAME_LEN];
static const char *seccomp_program = "seccomp";

#if defined(__x86_64__)
#define SECCOMP_LOGS      1
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.gregs[REG_RAX] = (v))
#elif defined(__aarch64__)
#define SECCOMP_LOGS      1
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.regs[0] = (v))
#else
#define SECCOMP_LOGS 0
#endif

#if SECCOMP_LOGS
/* Appends s to buf at *n (bounded); async-signal-safe. */
static void buf_add(char *buf, size_t size, size_t *n, const char *s)
{
        while (*s && *n + 1 < size)
                buf[(*n)++] = *s++;
}

/* SIGSYS from the filter (SECCOMP_RET_TRAP): the refused call returns -EPERM, as with
 * SCMP_ACT_ERRNO, and one line goes to stderr. Only async-signal-safe calls. */
static void sigsys_handler(int sig, siginfo_t *si, void *ctx)
{
        ucontext_t *uc = ctx;
        int saved = errno, nr = si->si_syscall;
        char line[160], num[16];
        size_t n = 0, k = sizeof(num);
        unsigned v = nr < 0 ? 0 : (unsigned)nr;

        (void)sig;
        if (si->si_code != 1 /* SYS_SECCOMP */)
                return;
        num[--k] = '\0';
        do {
                num[--k] = (char)('0' + v % 10);
                v /= 10;
        } while (v && k > 0);
        buf_add(line, sizeof(line), &n, seccomp_program);
        buf_add(line, sizeof(line), &n, ": seccomp refused syscall ");
        buf_add(line, sizeof(line), &n, num + k);
        buf_add(line, sizeof(line), &n, " (");
        buf_add(line, sizeof(line), &n,
                nr >= 0 && nr < SECCOMP_NAMES_MAX && syscall_names[nr][0] ? syscall_names[nr]
                                                                          : "?");
        buf_add(line, sizeof(line), &n, "): EPERM\n");
        (void)!write(STDERR_FILENO, line, n);
        SET_RETURN(uc, -EPERM);
        errno = saved;
}

static int sigsys_setup(cs_error **err)
{
        struct sigaction sa = { .sa_sigaction = sigsys_handler, .sa_flags = SA_SIGINFO };
        sigset_t set;

        for (int nr = 0; nr < SECCOMP_NAMES_MAX; nr++) {
                char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
                if (name)
                        snprintf(syscall_names[nr], SECCOMP_NAME_LEN, "%s", name);
                free(name);
        }
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSYS, &sa, NULL) < 0)
                return cs_error_errno(err, errno, "seccomp: cannot handle SIGSYS");
        /* A thread that blocked SIGSYS would be killed by the trap instead. */
        sigemptyset(&set);
        sigaddset(&set, SIGSYS);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        return 0;
}
#define DEFAULT_ACTION SCMP_ACT_TRAP
#else
static int sigsys_setup(cs_error **err)
{
        (void)err;
        return 0;
}
#define DEFAULT_ACTION SCMP_ACT_ERRNO(EPERM)
#endif

static int seccomp_install(const char *program, const char *const *allow, uint32_t action,
                           cs_error **err)
{
        scmp_filter_ctx ctx;
        int rc;

        seccomp_program = program;
        if (action == DEFAULT_ACTION && sigsys_setup(err) < 0)
                return -1;
        ctx = seccomp_init(action);
        if (!ctx)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "seccomp: cannot make a filter");
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
        /* Every refusal also goes to the kernel log (audit type 1326, syscall=N): a child
         * that exec'd (runsc, mkfs.ext4) has no SIGSYS handler, and dies of the trap. */
        if (rc == 0)
                rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_LOG, 1);
        for (size_t i = 0; rc == 0 && allow[i]; i++) {
                int nr = seccomp_syscall_resolve_name(allow[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not a syscall of this architecture */
                rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
        }
        /* The handler's own return path. */
        if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(rt_sigreturn), 0);
        if (rc == 0)
                rc = seccomp_load(ctx);
        seccomp_release(ctx);
        if (rc < 0)
                return cs_error_errno(err, -rc, "seccomp: cannot load the filter");
        return 0;
}

int cs_seccomp_install(const char *program, const char *const *allow, cs_error **err)
{
        return seccomp_install(program, allow, DEFAULT_ACTION, err);
}

int cs_seccomp_install_logging(const char *program, const char *const *allow, cs_error **err)
{
        return seccomp_install(program, allow, SCMP_ACT_LOG, err);
}

int cs_seccomp_active(void)
{
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        int on = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "Seccomp:", 8) == 0) {
                        on = atoi(line + 8) == 2;
                        break;
                }
        }
        fclose(f);
        return on;
}
