/* The shepherd: one per exec, a child subreaper between the spawner and the command.
 *
 * Every process of the exec's tree has the shepherd as an ancestor, even one that called
 * setsid() or double-forked: orphans reparent to the nearest subreaper, which is the shepherd,
 * not pid 1. So the tree is "the shepherd's descendants" (found by parent links in /proc), and
 * the shepherd's RUSAGE_CHILDREN is the CPU of the command and of everything it reaped: the
 * exec's own usage, whatever else runs in the sandbox at the same time. */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void send_msg(int ctl, const shep_msg *m)
{
        ssize_t n;

        do
                n = send(ctl, m, sizeof(*m), MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        /* A send that fails means the spawner is gone: the next read of ctl says so. */
}

/* The ppid of `pid` from /proc/<pid>/stat, -1 when it is gone. */
static pid_t parent_of(int proc_fd, const char *pid)
{
        char path[64], buf[512];
        const char *p;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "%s/stat", pid);
        fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        do
                n = read(fd, buf, sizeof(buf) - 1);
        while (n < 0 && errno == EINTR);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        /* "pid (comm) state ppid ...": comm may hold anything, so parse after its last ')'. */
        p = strrchr(buf, ')');
        if (!p || strlen(p) < 4)
                return -1;
        return (pid_t)strtol(p + 4, NULL, 10);
}

typedef struct proc_link {
        pid_t pid, ppid;
} proc_link;

/* The pids of every descendant of this process, into *ret (malloc'd); their count, or -1. */
static ssize_t descendants(pid_t **ret)
{
        proc_link *all = NULL;
        size_t n_all = 0, cap = 0, n_out = 0;
        pid_t *out;
        struct dirent *de;
        DIR *d;
        bool grew;

        d = opendir("/proc");
        if (!d)
                return -1;
        while ((de = readdir(d))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                pid_t ppid;

                if (*end || pid <= 0)
                        continue;
                ppid = parent_of(dirfd(d), de->d_name);
                if (ppid < 0)
                        continue;
                if (n_all == cap) {
                        proc_link *more;

                        cap = cap ? cap * 2 : 256;
                        more = realloc(all, cap * sizeof(*all));
                        if (!more) {
                                free(all);
                                closedir(d);
                                return -1;
                        }
                        all = more;
                }
                all[n_all++] = (proc_link){ (pid_t)pid, ppid };
        }
        closedir(d);

        out = calloc(n_all + 1, sizeof(*out));
        if (!out) {
                free(all);
                return -1;
        }
        /* Closure of "parent is me or already in the set": a few passes over a small list. */
        out[n_out++] = getpid();
        do {
                grew = false;
                for (size_t i = 0; i < n_all; i++) {
                        bool parent_in = false, self_in = false;

                        for (size_t j = 0; j < n_out; j++) {
                                if (out[j] == all[i].ppid)
                                        parent_in = true;
                                if (out[j] == all[i].pid)
                                        self_in = true;
                        }
                        if (parent_in && !self_in) {
                                out[n_out++] = all[i].pid;
                                grew = true;
                        }
                }
        } while (grew);
        free(all);
        /* Drop ourselves (slot 0). */
        memmove(out, out + 1, (n_out - 1) * sizeof(*out));
        *ret = out;
        return (ssize_t)(n_out - 1);
}

static void signal_tree(pid_t cmd, int signo)
{
        pid_t *pids = NULL;
        ssize_t n = descendants(&pids);

        if (n < 0) {
                /* /proc unreadable (memory short): the command at least. */
                if (cmd > 0)
                        kill(cmd, signo);
                return;
        }
        for (ssize_t i = 0; i < n; i++)
                kill(pids[i], signo);
        free(pids);
}

static void reap_nohang(pid_t cmd, int *cmd_status, bool *cmd_exited)
{
        int status;
        pid_t p;

        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
                if (p == cmd) {
                        *cmd_status = status;
                        *cmd_exited = true;
                }
        }
}

/* SIGKILL to the whole tree until nothing is left of it, every process reaped. */
static _Noreturn void kill_all_and_exit(void)
{
        for (;;) {
                pid_t *pids = NULL;
                ssize_t n = descendants(&pids);
                int status;

                if (n > 0) {
                        for (ssize_t i = 0; i < n; i++)
                                kill(pids[i], SIGKILL);
                }
                free(pids);
                /* Wait for one to end (a killed child, or an orphan that reparented to us)
                 * and look again: a process forked between the scan and the kill is a child
                 * of a killed one, and reparents to us. */
                if (waitpid(-1, &status, 0) < 0 && errno == ECHILD) {
                        if (n == 0)
                                _exit(0);
                        /* Not children (yet): their parents are dying. */
                        usleep(1000);
                }
        }
}

/* The command's process, just after fork: stdio, signals, cwd, then execve. On failure it
 * writes {errno, where} to err_fd and exits 127. */
static _Noreturn void command_child(const shep_cmd *cmd, int err_fd)
{
        int32_t why[2] = { 0, SHEP_AT_SETUP };
        sigset_t none;
        int null_fd;

        sigemptyset(&none);
        signal(SIGPIPE, SIG_DFL);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
                goto fail;
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(cmd->out_fd, 1) < 0 ||
            dup2(cmd->err_fd, 2) < 0)
                goto fail;
        if (chdir(cmd->cwd) < 0) {
                why[1] = SHEP_AT_CWD;
                goto fail;
        }
        environ = cmd->env;
        execvp(cmd->argv[0], cmd->argv);
        why[1] = SHEP_AT_EXEC;
fail:
        why[0] = errno;
        (void)!write(err_fd, why, sizeof(why));
        _exit(127);
}

/* Keeps fds a, b, c (all >= 3) and closes every other descriptor from 3 up. */
static void close_all_but(int a, int b, int c)
{
        int keep[3] = { a, b, c }, lo = 3;

        /* Sort the three. */
        for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++)
                        if (keep[j] < keep[i]) {
                                int t = keep[i];
                                keep[i] = keep[j];
                                keep[j] = t;
                        }
        for (int i = 0; i < 3; i++) {
                if (keep[i] > lo && close_range((unsigned)lo, (unsigned)keep[i] - 1, 0) < 0)
                        for (int fd = lo; fd < keep[i]; fd++)
                                close(fd);
                lo = keep[i] + 1;
        }
        if (close_range((unsigned)lo, ~0u, 0) < 0)
                init_close_fds_from(lo);
}

_Noreturn void shepherd_main(int ctl, const shep_cmd *cmd)
{
        int err_pipe[2], sfd, cmd_status = 0;
        bool cmd_exited = false;
        shep_msg m = { 0 };
        int32_t why[2];
        sigset_t chld;
        pid_t pid;
        ssize_t n;

        close_all_but(ctl, cmd->out_fd, cmd->err_fd);
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
                m = (shep_msg){ .op = SHEP_FAILED, .a = errno, .b = SHEP_AT_SETUP };
                send_msg(ctl, &m);
                _exit(1);
        }
        /* SIGCHLD is blocked (inherited from the spawner): it wakes the loop through sfd. */
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0 || pipe2(err_pipe, O_CLOEXEC) < 0) {
                m = (shep_msg){ .op = SHEP_FAILED, .a = errno, .b = SHEP_AT_SETUP };
                send_msg(ctl, &m);
                _exit(1);
        }

        pid = fork();
        if (pid < 0) {
                m = (shep_msg){ .op = SHEP_FAILED, .a = errno, .b = SHEP_AT_SETUP };
                send_msg(ctl, &m);
                _exit(1);
        }
        if (pid == 0) {
                close(ctl);
                close(sfd);
                close(err_pipe[0]);
                command_child(cmd, err_pipe[1]);
        }
        close(err_pipe[1]);
        close(cmd->out_fd);
        close(cmd->err_fd);
        do
                n = read(err_pipe[0], why, sizeof(why));
        while (n < 0 && errno == EINTR);
        close(err_pipe[0]);
        if (n == (ssize_t)sizeof(why)) {
                waitpid(pid, NULL, 0);
                m = (shep_msg){ .op = SHEP_FAILED, .a = why[0], .b = why[1] };
                send_msg(ctl, &m);
                _exit(0);
        }
        m = (shep_msg){ .op = SHEP_STARTED, .a = pid };
        send_msg(ctl, &m);

        for (;;) {
                struct pollfd p[2] = { { .fd = ctl, .events = POLLIN },
                                       { .fd = sfd, .events = POLLIN } };
                bool was_exited = cmd_exited;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        kill_all_and_exit();
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;

                        while (read(sfd, &si, sizeof(si)) > 0)
                                ;
                        reap_nohang(pid, &cmd_status, &cmd_exited);
                        if (cmd_exited && !was_exited) {
                                m = (shep_msg){ .op = SHEP_EXITED, .a = cmd_status };
                                send_msg(ctl, &m);
                        }
                }
                if (p[0].revents) {
                        n = recv(ctl, &m, sizeof(m), 0);
                        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                                continue;
                        if (n != (ssize_t)sizeof(m))
                                /* The spawner is gone (or the connection dropped): no exec
                                 * outlives the stream that owns it. */
                                kill_all_and_exit();
                        if (m.op == SHEP_SIGNAL && m.a >= 1 && m.a <= 64) {
                                signal_tree(cmd_exited ? 0 : pid, m.a);
                        } else if (m.op == SHEP_FINISH) {
                                struct rusage ru;

                                reap_nohang(pid, &cmd_status, &cmd_exited);
                                getrusage(RUSAGE_CHILDREN, &ru);
                                m = (shep_msg){
                                        .op = SHEP_DONE,
                                        .a = cmd_status,
                                        .user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000 +
                                                   (uint64_t)ru.ru_utime.tv_usec,
                                        .system_us = (uint64_t)ru.ru_stime.tv_sec * 1000000 +
                                                     (uint64_t)ru.ru_stime.tv_usec,
                                        .max_rss_kib = (uint64_t)ru.ru_maxrss,
                                };
                                send_msg(ctl, &m);
                                /* What is left of the tree (background processes that outlive
                                 * the command, as with `docker exec`) reparents to init. */
                                _exit(0);
                        }
                }
        }
}
