#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdint.h>
#include <unistd.h>

#include "util.h"

/* What the child needs; it lives on the parent's stack, which the child shares (CLONE_VM)
 * while the parent is suspended (CLONE_VFORK). */
typedef struct child_args {
        char *const *argv;
        const proc_spawn_opts *opts;
        pid_t parent;
} child_args;

/* The child runs on a stack the sanitizers know nothing about, in the parent's address
 * space: instrumented frames would poison shadow memory the parent later trips over. So the
 * child is not instrumented (it only calls libc), and the parent unpoisons its stack. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CHILD_NO_SANITIZE          __attribute__((no_sanitize("address", "undefined")))
#define CHILD_STACK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CHILD_NO_SANITIZE
#define CHILD_STACK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* In the child: never returns. Only async-signal-safe calls, and no writes to memory but its
 * own stack: it shares the parent's address space until execvp. */
CHILD_NO_SANITIZE static int child_exec(void *arg)
{
        const child_args *a = arg;
        int fds[3] = { a->opts->stdin_fd, a->opts->stdout_fd, a->opts->stderr_fd };
        sigset_t none;
        int devnull = -1;

        if (a->opts->die_with_parent) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != a->parent)
                        _exit(127);
        }
        /* No stdin: an empty pipe (EOF at once), not /dev/null. runsc hands the stdio of
         * `run` and `exec` to the sandbox's user by fchown(2), which on the host's /dev/null
         * changes the node's device (measured: root:root -> nobody:nogroup). */
        if (fds[0] < 0) {
                int p[2];
                if (pipe2(p, 0) < 0)
                        _exit(127);
                close(p[1]);
                fds[0] = p[0];
        }
        for (int i = 1; i < 3; i++) {
                if (fds[i] < 0) {
                        if (devnull < 0)
                                devnull = open("/dev/null", O_WRONLY);
                        fds[i] = devnull;
                }
        }
        /* Move the fds out of 0..2 first, so one dup2 cannot clobber another's source. */
        for (int i = 0; i < 3; i++) {
                if (fds[i] >= 0 && fds[i] < 3)
                        fds[i] = fcntl(fds[i], F_DUPFD, 3);
        }
        for (int i = 0; i < 3; i++) {
                if (fds[i] < 0 || dup2(fds[i], i) < 0)
                        _exit(127);
        }
        syscall(SYS_close_range, 3, ~0U, 0);
        if (a->opts->mask_proc_sys_net &&
            (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
             mount("none", "/proc/sys/net", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                   "size=4k,mode=555") < 0))
                _exit(126);
        /* Without CLONE_SIGHAND the child has its own copy of the dispositions. */
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(a->argv[0], a->argv);
        _exit(127);
}

/* The child's stack while it sets up and execs: small and short-lived. */
#define CHILD_STACK_BYTES (64 * 1024)

int proc_spawn(char *const argv[], const proc_spawn_opts *opts, pid_t *ret_pid, cs_error **err)
{
        child_args a = { .argv = argv, .opts = opts, .parent = getpid() };
        void *stack;
        pid_t pid;

        /* clone(CLONE_VM | CLONE_VFORK) rather than fork(): no copy of the agent's page
         * tables and no copy-on-write faults afterwards (what posix_spawn does inside; it
         * cannot set the parent-death signal). The parent waits until the child execs. */
        stack = mmap(NULL, CHILD_STACK_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED)
                return cs_error_errno(err, errno, "cannot start %s", argv[0]);
        pid = clone(child_exec, (char *)stack + CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD,
                    &a);
        CHILD_STACK_UNPOISON(stack, CHILD_STACK_BYTES);
        munmap(stack, CHILD_STACK_BYTES);
        if (pid < 0)
                return cs_error_errno(err, errno, "cannot start %s", argv[0]);
        *ret_pid = pid;
        return 0;
}

int proc_wait(pid_t pid, int *ret_status, cs_error **err)
{
        while (waitpid(pid, ret_status, 0) < 0) {
                if (errno != EINTR)
                        return cs_error_errno(err, errno, "waitpid %d", (int)pid);
        }
        return 0;
}

const char *proc_status_str(int status, char *buf, size_t size)
{
        if (WIFEXITED(status))
                snprintf(buf, size, "exited %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
                snprintf(buf, size, "killed by %s",
                         sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status))
                                                        : "a signal");
        else
                snprintf(buf, size, "status 0x%x", status);
        return buf;
}

/* A bounded buffer that keeps the first `max` bytes of a stream and drops the rest. */
typedef struct sink {
        char *buf;
        size_t len, max;
} sink;

static void sink_read(sink *s, int fd, bool *open)
{
        char tmp[16384];
        ssize_t n = read(fd, tmp, sizeof(tmp));

        if (n <= 0) {
                if (n == 0 || (errno != EINTR && errno != EAGAIN))
                        *open = false;
                return;
        }
        if (s->len < s->max) {
                size_t keep = (size_t)n < s->max - s->len ? (size_t)n : s->max - s->len;
                memcpy(s->buf + s->len, tmp, keep);
                s->len += keep;
        }
}

/* Reads both pipes until they close or the deadline passes. Returns false on timeout. */
static bool collect(int out_fd, int err_fd, sink *out, sink *errs, int64_t deadline)
{
        bool out_open = true, err_open = true;

        while (out_open || err_open) {
                struct pollfd p[2] = { { .fd = out_open ? out_fd : -1, .events = POLLIN },
                                       { .fd = err_open ? err_fd : -1, .events = POLLIN } };
                int64_t left = deadline - cs_now_monotonic_ms();
                if (left <= 0)
                        return false;
                if (poll(p, 2, (int)(left > 60000 ? 60000 : left)) < 0 && errno != EINTR)
                        return false;
                if (p[0].revents)
                        sink_read(out, out_fd, &out_open);
                if (p[1].revents)
                        sink_read(errs, err_fd, &err_open);
        }
        return true;
}

int proc_run(char *const argv[], int64_t timeout_ms, char **ret_out, cs_error **err)
{
        int out_pipe[2] = { -1, -1 }, err_pipe[2] = { -1, -1 };
        sink out = { .max = PROC_OUTPUT_MAX }, errs = { .max = 4096 };
        proc_spawn_opts opts = { .stdin_fd = -1 };
        bool done;
        pid_t pid;
        int status, r = -1;
        char what[64];

        if (pipe2(out_pipe, O_CLOEXEC) < 0 || pipe2(err_pipe, O_CLOEXEC) < 0) {
                cs_error_errno(err, errno, "pipe");
                goto out;
        }
        opts.stdout_fd = out_pipe[1];
        opts.stderr_fd = err_pipe[1];
        opts.die_with_parent = true;
        if (proc_spawn(argv, &opts, &pid, err) < 0)
                goto out;
        close(TAKE_FD(out_pipe[1]));
        close(TAKE_FD(err_pipe[1]));
        out.buf = cs_xmalloc(out.max + 1);
        errs.buf = cs_xmalloc(errs.max + 1);
        done = collect(out_pipe[0], err_pipe[0], &out, &errs, cs_now_monotonic_ms() + timeout_ms);
        if (!done)
                kill(pid, SIGKILL);
        if (proc_wait(pid, &status, err) < 0)
                goto out;
        out.buf[out.len] = '\0';
        errs.buf[errs.len] = '\0';
        if (!done) {
                cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                             "%s %s: no answer in %" PRId64 " ms", argv[0], argv[1] ? argv[1] : "",
                             timeout_ms);
                goto out;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                errs.buf[strcspn(errs.buf, "\n")] = '\0';
                cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: %s%s%s", argv[0],
                             proc_status_str(status, what, sizeof(what)), errs.len ? ": " : "",
                             errs.buf);
                goto out;
        }
        if (ret_out)
                *ret_out = TAKE_PTR(out.buf);
        r = 0;
out:
        for (int i = 0; i < 2; i++) {
                if (out_pipe[i] >= 0)
                        close(out_pipe[i]);
                if (err_pipe[i] >= 0)
                        close(err_pipe[i]);
        }
        free(out.buf);
        free(errs.buf);
        return r;
}

/* The last non-empty line of the file at path (at most size-1 bytes of it). */
static void last_line(const char *path, char *buf, size_t size)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        off_t off;
        ssize_t n;

        buf[0] = '\0';
        if (fd < 0)
                return;
        if (fstat(fd, &st) == 0) {
                off = st.st_size > (off_t)size - 1 ? st.st_size - ((off_t)size - 1) : 0;
                n = pread(fd, buf, size - 1, off);
                buf[n > 0 ? n : 0] = '\0';
                while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
                        buf[--n] = '\0';
                if (strrchr(buf, '\n'))
                        memmove(buf, strrchr(buf, '\n') + 1, strlen(strrchr(buf, '\n')));
        }
        close(fd);
}

/* Waits at most timeout_ms for pid to end, without reaping it. Returns whether it ended. A
 * pidfd when one can be had; without one (out of fds: EMFILE, ENFILE) the wait polls
 * waitid(WNOWAIT), so that running short of fds slows this down rather than failing it. */
static bool wait_end(pid_t pid, int64_t timeout_ms)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        int64_t deadline = cs_now_monotonic_ms() + timeout_ms;

        if (pidfd >= 0) {
                struct pollfd pf = { .fd = pidfd, .events = POLLIN };
                int r;
                do
                        r = poll(&pf, 1, timeout_ms > INT32_MAX ? INT32_MAX : (int)timeout_ms);
                while (r < 0 && errno == EINTR);
                return r != 0;
        }
        for (;;) {
                siginfo_t si = { 0 };
                if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                    si.si_pid == pid)
                        return true;
                if (cs_now_monotonic_ms() >= deadline)
                        return false;
                usleep(10 * 1000);
        }
}

int proc_run_detached(char *const argv[], int64_t timeout_ms, const char *log_path,
                      bool mask_proc_sys_net, cs_error **err)
{
        _cleanup_close_ int log_fd = -1;
        proc_spawn_opts opts = { .stdin_fd = -1, .mask_proc_sys_net = mask_proc_sys_net };
        bool ended;
        pid_t pid;
        int status;
        char what[64], line[512];

        log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (log_fd < 0)
                return cs_error_errno(err, errno, "cannot open %s", log_path);
        opts.stdout_fd = opts.stderr_fd = log_fd;
        if (proc_spawn(argv, &opts, &pid, err) < 0)
                return -1;
        ended = wait_end(pid, timeout_ms);
        if (!ended)
                kill(pid, SIGKILL);
        if (proc_wait(pid, &status, err) < 0)
                return -1;
        if (!ended)
                return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                    "%s: no answer in %" PRId64 " ms", argv[0], timeout_ms);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                last_line(log_path, line, sizeof(line));
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: %s%s%s", argv[0],
                                    proc_status_str(status, what, sizeof(what)),
                                    line[0] ? ": " : "", line);
        }
        return 0;
}
