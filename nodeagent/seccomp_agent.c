/* The node agent's syscall allowlist: what it, and what it starts (runsc and the gofer and
 * sandbox processes runsc starts, mkfs.ext4), were seen to call (strace -f over the test
 * suite, then --seccomp=log over it, since strace breaks runsc's sandbox). Its children
 * inherit the filter, so the list is the union (docs/security.md, "Seccomp", says why and how
 * to extend it). Installed by cs_daemon_serve() once the server listens. */
#include "seccomp_filter.h"

#include <stddef.h>

/* One group a comment, as many names a line as fit. */
/* clang-format off */
const char *const agent_seccomp_allow[] = {
        /* memory */
        "brk", "madvise",
        "membarrier", /* runsc (Go runtime) */
        "mmap", "mprotect", "munmap",
        /* threads and scheduling */
        "clock_nanosleep", "clone", "clone3", "exit", "exit_group", "futex", "getpriority",
        "gettid", "nanosleep", "rseq", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
        "sched_yield", "set_robust_list", "set_tid_address", "setpriority", "tgkill",
        /* signals */
        "kill", "restart_syscall", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
        "rt_sigtimedwait", "sigaltstack",
        /* time */
        "clock_gettime",
        /* files and directories */
        "access", "chdir", "chmod", "chown",
        "chroot", /* runsc (its minimal chroot) */
        "close", "close_range", "copy_file_range", "dup", "dup2", "dup3", "faccessat",
        "fallocate", /* runsc (the sentry's memory file) */
        "fchmod", "fchown", "fchownat", "fcntl",
        "fdatasync", /* workspace_io.c: a replacing WriteFile's data, before it is named */
        "getcwd", /* a shell in front of runsc (--runsc may be a wrapper script) */
        "fgetxattr", "flock", "fstat", "fstatfs", "fsync",
        "ftruncate", "getdents64", "linkat", "lseek",
        "memfd_create", /* runsc */
        "mkdir", "mkdirat", "newfstatat", "open", "openat", "openat2",
        "pivot_root", /* runsc (the sandbox's root) */
        "pread64", "pwrite64", "read", "readlink", "readlinkat", "rename", "renameat",
        "rmdir", /* volume.c (mkfs's lost+found), cgroup.c (libcgroup removes cgroups) */
        "statfs",
        "statx", "symlinkat", "umask", "unlink", "unlinkat", "utimensat", "write", "writev",
        /* pipes, polling, events */
        "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_wait", "eventfd2", "pipe2", "poll",
        "ppoll",
        "pselect6", /* libnftables waits for the kernel's answers with select(2) */
        /* sockets */
        "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
        "recvmsg", "sendmsg", "setsockopt", "shutdown", "socket", "socketpair",
        "recvfrom", "sendto", /* the /metrics endpoint (libmicrohttpd's recv and send) */
        "recvmmsg", "sendmmsg", /* runsc's netstack on a sandbox's veth (net.h) */
        /* processes and identity */
        "arch_prctl", "capget",
        "capset", /* runsc drops its capabilities */
        "execve", /* runsc, mkfs.ext4 (nodeagent/proc.c, volume.c) */
        "getegid", "geteuid", "getgid", "getpid", "getppid", "getrandom", "getrlimit", "getuid",
        "pidfd_open", /* exec.c: waits on a child */
        "pidfd_send_signal", "prctl", "prlimit64",
        "setgid", /* runsc (gofer, sandbox) */
        "setsid", /* runsc */
        "setuid", /* runsc (gofer, sandbox) */
        "sysinfo", /* glibc's qsort of more than 1 KiB asks sysconf(_SC_PHYS_PAGES): the
                    * listings of sandboxes, images and directories (CI's kernel log) */
        "uname", "wait4", "waitid",
        /* the rest */
        "ioctl", /* workspace volumes: the loop devices (LOOP_CTL_GET_FREE, LOOP_CONFIGURE,
                  * LOOP_CLR_FD in volume.c) and mkfs.ext4 (BLKGETSIZE64, BLKSSZGET, TCGETS) */
        "mount", /* runsc (the sandbox's chroot); the agent: workspace volumes (volume.c) */
        "preadv2",
        "ptrace", /* runsc, systrap platform (attaches its stub processes) */
        "seccomp", /* runsc installs its own filters */
        "setns", /* net.c: a sandbox's network namespace; runsc joins it */
        "unshare", /* net.c makes the namespace; proc.c: runsc's own mount namespace */
        "umount2", /* runsc */
#if defined(__SANITIZE_ADDRESS__)
        /* The ASan build only: LeakSanitizer's tracer lists the threads with it. */
        "getdents",
#endif
        NULL,
};
/* clang-format on */
