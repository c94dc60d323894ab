/* The shepherd: one per exec, a child subreaper between the spawner and the command.
 *
 * Every process of the exec's tree has the shepherd as an ancestor, even one that called
 * setsid() or double-forked: orphans reparent to the nearest subreaper, which is the shepherd,
 * not pid 1. So the tree is "the shepherd's descendants" (found by parent links in /proc), and
 * the shepherd's RUSAGE_CHILDREN is the CPU of the command and of everything it reaped: the
 * exec's own usage, whatever else runs in the sandbox at the same time. */
#include "init.h"

#include "spawn_frame.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

typedef struct pid_list {
        pid_t *v;
        size_t n, cap;
} pid_list;

static int pid_list_add(pid_list *l, pid_t pid)
{
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 64;
                pid_t *v = realloc(l->v, cap * sizeof(*v));

                if (!v)
                        return -1;
                l->v = v;
                l->cap = cap;
        }
        l->v[l->n++] = pid;
        return 0;
}

/* Appends the children of every thread of `pid` (/proc/<pid>/task/<tid>/children, which
 * gVisor and Linux have) to l. A process that is gone has none. */
static int add_children(pid_list *l, pid_t pid)
{
        char path[64], buf[4096];
        struct dirent *de;
        DIR *d;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        d = opendir(path);
        if (!d)
                return 0;
        while ((de = readdir(d))) {
                size_t carry = 0;
                ssize_t n;
                int fd;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%.20s/children", de->d_name);
                fd = openat(dirfd(d), path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                /* "pid pid pid ": a number may straddle two reads. */
                while ((n = read(fd, buf + carry, sizeof(buf) - 1 - carry)) > 0) {
                        char *p = buf, *end = buf + carry + n;

                        *end = '\0';
                        for (;;) {
                                char *num_end;
                                long child;

                                while (p < end && *p == ' ')
                                        p++;
                                child = strtol(p, &num_end, 10);
                                if (num_end == p || num_end == end)
                                        break; /* none, or maybe cut: keep for the next read */
                                if (child > 0 && pid_list_add(l, (pid_t)child) < 0) {
                                        close(fd);
                                        closedir(d);
                                        return -1;
                                }
                                p = num_end;
                        }
                        carry = (size_t)(end - p);
                        memmove(buf, p, carry);
                }
                if (carry > 0) {
                        buf[carry] = '\0';
                        if (atoi(buf) > 0 && pid_list_add(l, (pid_t)atoi(buf)) < 0) {
                                close(fd);
                                closedir(d);
                                return -1;
                        }
                }
                close(fd);
        }
        closedir(d);
        return 0;
}

/* The pids of every descendant of this process, into *ret (malloc'd); their count, or -1.
 * Walked down from us by the children lists: every process of the exec's tree is below us
 * (orphans reparent to us, the subreaper), and the walk costs the tree's size, not the
 * sandbox's. */
static ssize_t descendants(pid_t **ret)
{
        pid_list l = { 0 };

        if (add_children(&l, getpid()) < 0)
                goto fail;
        for (size_t i = 0; i < l.n; i++)
                if (add_children(&l, l.v[i]) < 0)
                        goto fail;
        *ret = l.v;
        return (ssize_t)l.n;
fail:
        free(l.v);
        return -1;
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

/* One exec's state in the shepherd. Its usage is the sum of wait4's rusage of every process
 * the shepherd reaps (each one's own CPU and that of the descendants it waited for): the
 * whole tree's, and only this exec's even when the shepherd serves another one after it. */
typedef struct run {
        pid_t pid;
        int status;
        bool exited;
        uint64_t user_us, system_us, max_rss_kib;
} run;

static uint64_t tv_us(struct timeval tv)
{
        return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static void reap_nohang(run *r)
{
        struct rusage ru;
        int status;
        pid_t p;

        while ((p = wait4(-1, &status, WNOHANG, &ru)) > 0) {
                r->user_us += tv_us(ru.ru_utime);
                r->system_us += tv_us(ru.ru_stime);
                if ((uint64_t)ru.ru_maxrss > r->max_rss_kib)
                        r->max_rss_kib = (uint64_t)ru.ru_maxrss;
                if (p == r->pid) {
                        r->status = status;
                        r->exited = true;
                }
        }
}

/* SIGKILL to what is left of a stopped exec's tree until nothing is, every process reaped
 * into r's usage: a cancel or timeout leaves no survivor, also none forked after the SIGTERM's
 * walk (a shell that traps TERM may fork its background child just after it). */
static void kill_rest(run *r)
{
        for (;;) {
                pid_t *pids = NULL;
                ssize_t n = descendants(&pids);
                struct rusage ru;
                int status;
                pid_t p;

                for (ssize_t i = 0; i < n; i++)
                        kill(pids[i], SIGKILL);
                free(pids);
                p = wait4(-1, &status, 0, &ru);
                if (p > 0) {
                        r->user_us += tv_us(ru.ru_utime);
                        r->system_us += tv_us(ru.ru_stime);
                        if (p == r->pid) {
                                r->status = status;
                                r->exited = true;
                        }
                } else if (errno == ECHILD) {
                        if (n == 0)
                                return;
                        usleep(1000); /* descendants whose parents are ending: look again */
                }
        }
}

/* SIGKILL to the whole tree until nothing is left of it, every process reaped. */
static _Noreturn void kill_all_and_exit(void)
{
        for (;;) {
                pid_t *pids = NULL;
                ssize_t n = descendants(&pids);

                for (ssize_t i = 0; i < n; i++)
                        kill(pids[i], SIGKILL);
                free(pids);
                /* Wait for one to end and look again: a process forked between the walk and
                 * the kill is the child of a killed one, and it is ours (reparented) by the
                 * time its parent's end is reported. */
                if (waitpid(-1, NULL, 0) < 0 && errno == ECHILD) {
                        if (n == 0)
                                _exit(0);
                        /* Descendants that are not our children yet: their parents are
                         * ending. (Or the walk failed, memory short.) Look again shortly. */
                        usleep(1000);
                }
        }
}

typedef struct shep_cmd {
        char **argv, **env; /* NULL-terminated */
        const char *cwd;
        int out_fd, err_fd;
        int in_fd;            /* stdin (a pipe, or the terminal's slave), -1: /dev/null */
        bool tty;             /* in_fd is a terminal: it becomes the controlling one */
        volatile int err, at; /* written by the vfork child when it fails */
} shep_cmd;

/* The command's process, a vfork child sharing our memory until it execs: stdio, signals, cwd,
 * then execve. On failure it leaves errno and what failed in cmd and exits 127. */
static _Noreturn void command_child(shep_cmd *cmd)
{
        sigset_t none;
        int null_fd;

        cmd->at = SHEP_AT_SETUP;
        /* A session of its own: its `kill 0` or a process group signal reaches its own
         * processes, not the spawner, the shepherds and the other execs, which share init's. */
        if (setsid() < 0)
                goto fail;
        sigemptyset(&none);
        signal(SIGPIPE, SIG_DFL);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
                goto fail;
        null_fd = cmd->in_fd >= 0 ? cmd->in_fd : open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(cmd->out_fd, 1) < 0 ||
            dup2(cmd->err_fd, 2) < 0)
                goto fail;
        /* The terminal becomes the new session's controlling terminal: the line discipline
         * then sends ^C's SIGINT to its foreground process group. */
        if (cmd->tty && ioctl(0, TIOCSCTTY, 0) < 0)
                goto fail;
        if (chdir(cmd->cwd) < 0) {
                cmd->at = SHEP_AT_CWD;
                goto fail;
        }
        environ = cmd->env;
        cmd->at = SHEP_AT_EXEC;
        execvp(cmd->argv[0], cmd->argv);
fail:
        cmd->err = errno ? errno : EINVAL;
        _exit(127);
}

/* Keeps fd `keep` (>= 3) and closes every other descriptor from 3 up. */
static void close_all_but(int keep)
{
        if (keep > 3 && close_range(3, (unsigned)keep - 1, 0) < 0)
                for (int fd = 3; fd < keep; fd++)
                        close(fd);
        if (close_range((unsigned)keep + 1, ~0u, 0) < 0)
                init_close_fds_from(keep + 1);
}

static char **null_terminated(char **v, size_t n)
{
        char **out = calloc(n + 1, sizeof(*out));

        if (out)
                memcpy(out, v, n * sizeof(*out));
        return out;
}

/* The command's environment: env, plus TERM=xterm-256color for a terminal that env does not
 * name. */
static char **with_term(char **env, size_t n, bool tty)
{
        char **out = calloc(n + 2, sizeof(*out));

        if (!out)
                return NULL;
        memcpy(out, env, n * sizeof(*out));
        if (tty) {
                bool has = false;

                for (size_t i = 0; i < n && !has; i++)
                        has = strncmp(env[i], "TERM=", 5) == 0;
                if (!has)
                        out[n] = (char *)"TERM=xterm-256color";
        }
        return out;
}

/* Waits for SHEP_START and its 3 fds; reads and decodes the Start from the memfd. Exits when
 * the spawner closes ctl first (a pool shepherd no longer needed). */
static spawn_agent_frame *receive_start(int ctl, int *out_fd, int *err_fd, int *in_fd)
{
        char cbuf[CMSG_SPACE(4 * sizeof(int))];
        shep_msg m;
        struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
        struct msghdr mh = { .msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *c;
        spawn_agent_frame *f;
        const char *why;
        uint8_t *buf;
        struct stat st;
        int fds[4] = { -1, -1, -1, -1 };
        size_t n_fds;
        ssize_t n;

        do
                n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(m) || m.op != SHEP_START)
                _exit(0);
        c = CMSG_FIRSTHDR(&mh);
        if (!c || c->cmsg_type != SCM_RIGHTS ||
            (c->cmsg_len != CMSG_LEN(3 * sizeof(int)) && c->cmsg_len != CMSG_LEN(4 * sizeof(int))))
                _exit(1);
        n_fds = c->cmsg_len == CMSG_LEN(4 * sizeof(int)) ? 4 : 3;
        memcpy(fds, CMSG_DATA(c), n_fds * sizeof(int));
        if (fstat(fds[0], &st) < 0 || st.st_size <= 0 || st.st_size > SPAWN_MAX_AGENT_FRAME)
                _exit(1);
        buf = malloc((size_t)st.st_size);
        if (!buf || pread(fds[0], buf, (size_t)st.st_size, 0) != st.st_size)
                _exit(1);
        close(fds[0]);
        f = spawn_decode_agent(buf, (size_t)st.st_size, &why);
        free(buf);
        if (!f || f->kind_case != COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START)
                _exit(1);
        if ((f->start->stdin || f->start->tty) != (fds[3] >= 0))
                _exit(1);
        *out_fd = fds[1];
        *err_fd = fds[2];
        *in_fd = fds[3];
        return f;
}

/* vfork: no copy of our address space, which costs milliseconds in gVisor (measured: 4.5 ms
 * for vfork + exec of /bin/true against 13.6 ms with fork). On its own so that no variable of
 * the caller lives across it. */
static __attribute__((noinline)) pid_t spawn_command(shep_cmd *cmd)
{
        pid_t pid = vfork();

        if (pid == 0)
                command_child(cmd);
        return pid;
}

static void send_failed(int ctl, int err, int at)
{
        shep_msg m = { .op = SHEP_FAILED, .a = err, .b = at };

        send_msg(ctl, &m);
}

/* Runs one exec from its SHEP_START to SHEP_DONE. Returns true when the shepherd may serve
 * another (nothing of the tree is left); exits itself otherwise. */
static bool serve_one(int ctl, int sfd)
{
        spawn_agent_frame *f;
        shep_cmd cmd = { 0 };
        shep_msg m = { 0 };
        run r = { 0 };
        bool stopping = false; /* the agent sent SIGTERM or SIGKILL: no survivor at the end */
        ssize_t n;

        f = receive_start(ctl, &cmd.out_fd, &cmd.err_fd, &cmd.in_fd);
        cmd.tty = f->start->tty;
        cmd.argv = null_terminated(f->start->argv, f->start->n_argv);
        cmd.env = with_term(f->start->env, f->start->n_env, cmd.tty);
        cmd.cwd = f->start->cwd;
        if (!cmd.argv || !cmd.env) {
                send_failed(ctl, ENOMEM, SHEP_AT_SETUP);
                _exit(1);
        }
        r.pid = spawn_command(&cmd);
        /* The child set environ to the command's (shared memory until its exec). */
        environ = NULL;
        if (r.pid < 0) {
                send_failed(ctl, errno, SHEP_AT_SETUP);
                _exit(1);
        }
        close(cmd.out_fd);
        close(cmd.err_fd);
        if (cmd.in_fd >= 0)
                close(cmd.in_fd);
        free(cmd.argv);
        free(cmd.env);
        spawn_agent_frame_free(f);
        if (cmd.err) {
                waitpid(r.pid, NULL, 0);
                send_failed(ctl, cmd.err, cmd.at);
                return true;
        }
        m = (shep_msg){ .op = SHEP_STARTED, .a = r.pid };
        send_msg(ctl, &m);
        for (;;) {
                struct pollfd p[2] = { { .fd = ctl, .events = POLLIN },
                                       { .fd = sfd, .events = POLLIN } };
                bool was_exited = r.exited;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        kill_all_and_exit();
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;

                        while (read(sfd, &si, sizeof(si)) > 0)
                                ;
                        reap_nohang(&r);
                        if (r.exited && !was_exited) {
                                /* No child left means no descendant left (any would have
                                 * reparented to us): the usage is final, and we are idle. */
                                bool alone = waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD;

                                m = (shep_msg){ .op = SHEP_EXITED,
                                                .a = r.status,
                                                .b = alone,
                                                .user_us = r.user_us,
                                                .system_us = r.system_us,
                                                .max_rss_kib = r.max_rss_kib };
                                send_msg(ctl, &m);
                                if (alone)
                                        return true;
                        }
                }
                if (!p[0].revents)
                        continue;
                n = recv(ctl, &m, sizeof(m), 0);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n != (ssize_t)sizeof(m))
                        /* The spawner is gone (or the connection dropped): no exec outlives
                         * the stream that owns it. */
                        kill_all_and_exit();
                if (m.op == SHEP_SIGNAL && m.a >= 1 && m.a <= 64) {
                        stopping = stopping || m.a == SIGTERM || m.a == SIGKILL;
                        signal_tree(r.exited ? 0 : r.pid, m.a);
                } else if (m.op == SHEP_FINISH) {
                        bool alone;

                        reap_nohang(&r);
                        /* No child left means no descendant left: any would have reparented
                         * to us. */
                        alone = waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD;
                        if (!alone && stopping) {
                                kill_rest(&r);
                                alone = true;
                        }
                        m = (shep_msg){ .op = SHEP_DONE,
                                        .a = r.status,
                                        .b = alone,
                                        .user_us = r.user_us,
                                        .system_us = r.system_us,
                                        .max_rss_kib = r.max_rss_kib };
                        send_msg(ctl, &m);
                        if (alone)
                                return true;
                        /* What is left of the tree (background processes that outlive the
                         * command, as with `docker exec`) reparents to init. */
                        _exit(0);
                }
        }
}

_Noreturn void shepherd_main(int ctl)
{
        sigset_t chld;
        int sfd;

        close_all_but(ctl);
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                _exit(1);
        /* SIGCHLD is blocked (inherited from the spawner): it wakes the loop through sfd. */
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                _exit(1);
        /* One exec after another, as long as each leaves nothing behind: a fork costs
         * milliseconds in gVisor, so a shepherd is reused rather than made per exec. */
        while (serve_one(ctl, sfd))
                ;
        _exit(0);
}
