/* The frontend's syscall allowlist (serve with either scheduler, and --mode gc): what it was
 * seen to call (strace -f over the test suite, then --seccomp=log over it; docs/security.md,
 * "Seccomp", says how to extend it). Installed by cs_daemon_serve() once the server listens,
 * and by --mode gc before its pass. The frontend starts no process. */
#include "seccomp_filter.h"

#include <stddef.h>

/* One group a comment, as many names a line as fit. */
/* clang-format off */
const char *const frontend_seccomp_allow[] = {
        /* memory */
        "brk", "madvise", "mmap", "mprotect", "munmap",
        "mremap", /* glibc's realloc of a large block (a kube listing of thousands of pods) */
        /* threads and scheduling */
        "clock_nanosleep", "clone3", "exit", "exit_group", "futex", "rseq", "sched_getparam",
        "sched_getscheduler", "sched_yield", "set_robust_list", "set_tid_address", "tgkill",
        "gettid", /* gRPC's log line of a failed TLS handshake on the public port names it */
        /* signals */
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigtimedwait",
        "restart_syscall", /* a sleep resumed after SIGSTOP/SIGCONT (a debugger, a freezer) */
        /* files and directories */
        "access", "close", "fcntl", "lseek", "newfstatat", "openat", "pread64", "read",
        "getdents64", /* /metrics: process_open_fds lists /proc/self/fd */
        "readlinkat", "umask", "write",
        /* pipes, polling, events */
        "epoll_create1", "epoll_ctl", "epoll_wait", "eventfd2", "poll",
        /* sockets */
        "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
        "recvfrom", "recvmsg", "sendmsg", "sendto", "setsockopt", "shutdown", "socket",
        "socketpair",
        /* processes and identity */
        "arch_prctl", "geteuid", "getpid", "getrandom", "getresuid", "prctl", "prlimit64",
        "setgroups", "setresgid", "setresuid", "sysinfo", "uname",
#if defined(__SANITIZE_ADDRESS__)
        /* The ASan build only: AddressSanitizer's and LeakSanitizer's runtime. */
        "clone", /* LeakSanitizer's tracer thread */
        "sched_getaffinity",
        "kill", "sigaltstack",
        "clock_gettime",
        "getdents", "getdents64", "open", "readlink", "writev",
        "getppid",
        "wait4", /* LeakSanitizer's tracer */
        "ptrace", /* LeakSanitizer stops the threads to scan them */
#endif
        NULL,
};
/* clang-format on */
