/* The spawner: one connection to the agent, many execs multiplexed on it
 * (proto/spawner/v1/spawner.proto). Single-threaded, one poll loop.
 *
 * Bounds: at most SPAWNER_MAX_EXECS execs; the agent's frames through a spawn_reader (one
 * frame at most); outgoing frames in one queue: pipes are read only while it holds less than
 * QUEUE_SOFT bytes and within the exec's credit, and the socket is read only while it holds
 * less than QUEUE_HARD (so an agent that sends Pings and reads nothing cannot grow it). */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "spawn_frame.h"
#include "utf8.h"

#define SPAWNER_MAX_EXECS 1024
#define QUEUE_SOFT        (256 * 1024)
#define QUEUE_HARD        (1024 * 1024)
#define EXIT_GRACE_MS     200
#define KILL_DRAIN_MS     1000 /* see exec_maybe_finish */
/* After the grace, what is read from a pipe before giving up on it: what the command left in
 * it (a pipe holds 64 KiB, 1 MiB at most when resized), not a background writer's stream. */
#define LATE_MAX (1024 * 1024)
/* Idle shepherds: a fork costs about 3.5 ms in gVisor (measured), so a shepherd that ends an
 * exec with nothing left of its tree goes back to the pool (up to POOL_SIZE of them), and one
 * is forked ahead of need, off an exec's path, whenever none is idle. After POOL_IDLE_MS
 * without a Start, the pool shrinks back to POOL_AHEAD. Each idle shepherd costs the sandbox
 * about 1 MiB (measured: 30 more grew the sentry's RSS by 29 MiB), but a pool smaller than
 * the concurrency halves the throughput (measured at 32 execs at once: 57 to 60 execs/s with
 * 8, 130 with 32): completions come in batches, and every shepherd closed for want of room
 * is a fork on a later Start's path. */
#define POOL_SIZE    32
#define POOL_AHEAD   1
#define POOL_IDLE_MS 10000
/* Reconnecting: 10 ms doubling to 100 ms for the first BACKOFF_EAGER_MS of a disconnected
 * spell, then to 1 s. The agent may start listening only when a first call names the sandbox
 * (a kube pod: on the call that finds its container), and that call waits for the Hello: a
 * 1 s step there is up to a second on the user's first command. An idle spell past a minute
 * costs one connect attempt a second. */
#define BACKOFF_MIN_MS       10
#define BACKOFF_EAGER_MS     60000
#define BACKOFF_CAP_EAGER_MS 100
#define BACKOFF_MAX_MS       1000

typedef struct out_frame {
        struct out_frame *next;
        uint8_t *buf;
        size_t len, off;
} out_frame;

typedef struct idle_shepherd {
        pid_t pid;
        int ctl;
} idle_shepherd;

typedef struct exec {
        uint64_t id;
        pid_t shepherd;
        int ctl;    /* -1 once closed */
        int out[2]; /* stdout, stderr read ends; -1 at EOF */
        uint64_t credit;
        bool started;   /* Started sent: Output may follow */
        bool exited;    /* the shepherd said the command exited */
        bool finishing; /* FINISH sent, waiting for DONE */
        bool killed;    /* a SIGKILL for the whole tree came (killed_ms) */
        int64_t killed_ms;
        bool gone; /* to be freed at the end of this loop turn */
        int64_t exit_ms;
        int status;
        size_t late[2]; /* bytes read from each pipe after the grace */
        bool hup[2];    /* POLLHUP seen without credit, data left in the pipe */
        bool alone;     /* the tree ended with the command: usage holds its final figures */
        shep_msg usage;
        char *argv0, *cwd; /* for a start error's message, cut at its size */
        /* Interactive execs (Start.stdin/tty): the stdin pipe's write end (a terminal: a dup
         * of its master), -1 once closed; the bytes the agent sent and the command has not
         * read yet (at most SPAWN_STDIN_WINDOW), those written but not granted back yet. */
        int in_fd;
        bool has_stdin, in_closing, in_dead;
        uint8_t *in_buf;
        size_t in_off, in_len;
        uint32_t in_owed;
        int pty; /* the terminal's master (resize, foreground signals); -1 without one */
} exec;

static struct {
        const char *path;
        int conn, sfd;
        spawn_reader reader;
        out_frame *head, *tail;
        size_t queued;
        exec *execs[SPAWNER_MAX_EXECS];
        size_t n_execs;
        unsigned live_children; /* shepherds forked and not reaped yet */
        idle_shepherd pool[POOL_SIZE];
        size_t n_pool;
        int64_t pool_retry_ms; /* after a failed fork */
        int64_t last_start_ms;
        uint8_t chunk[SPAWN_MAX_DATA];
} S = { .conn = -1, .sfd = -1 };

/* --- outgoing queue -------------------------------------------------------------------- */

static void queue_clear(void)
{
        while (S.head) {
                out_frame *f = S.head;

                S.head = f->next;
                free(f->buf);
                free(f);
        }
        S.tail = NULL;
        S.queued = 0;
}

/* Queues a frame. Out of memory, the spawner ends (init starts it again; the agent sees the
 * connection drop and its execs end): a frame silently lost would leave an exec without its
 * Exited. */
static void send_frame(const spawn_spawner_frame *frame)
{
        out_frame *f;
        size_t len;
        uint8_t *buf = spawn_encode_spawner(frame, &len);

        f = buf ? calloc(1, sizeof(*f)) : NULL;
        if (!f) {
                init_log("cannot queue a frame: out of memory");
                exit(1);
        }
        f->buf = buf;
        f->len = len;
        if (S.tail)
                S.tail->next = f;
        else
                S.head = f;
        S.tail = f;
        S.queued += len;
}

/* Writes what the socket takes. -1 when the connection is broken. */
static int queue_flush(void)
{
        while (S.head) {
                out_frame *f = S.head;
                ssize_t n = send(S.conn, f->buf + f->off, f->len - f->off, MSG_NOSIGNAL);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return -1;
                }
                f->off += (size_t)n;
                S.queued -= (size_t)n;
                if (f->off < f->len)
                        continue;
                S.head = f->next;
                if (!S.head)
                        S.tail = NULL;
                free(f->buf);
                free(f);
        }
        return 0;
}

static void send_exited(uint64_t id, int status, const shep_msg *usage, const char *start_error,
                        int code)
{
        Compute__Spawner__V1__SpawnerFrame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__Exited e = COMPUTE__SPAWNER__V1__EXITED__INIT;

        f.exec_id = id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_EXITED;
        f.exited = &e;
        if (start_error) {
                e.exit_code = code;
                e.start_error = (char *)start_error;
        } else if (WIFSIGNALED(status)) {
                e.exit_code = -1;
                e.signal = WTERMSIG(status);
                e.core_dumped = WCOREDUMP(status);
        } else {
                e.exit_code = WEXITSTATUS(status);
        }
        if (usage) {
                e.user_us = usage->user_us;
                e.system_us = usage->system_us;
                e.max_rss_kib = usage->max_rss_kib;
        }
        send_frame(&f);
}

/* --- execs ----------------------------------------------------------------------------- */

static exec *find_exec(uint64_t id)
{
        for (size_t i = 0; i < S.n_execs; i++)
                if (S.execs[i]->id == id && !S.execs[i]->gone)
                        return S.execs[i];
        return NULL;
}

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

/* Ends our side of an exec: closing ctl before FINISH makes its shepherd kill the tree. */
static void exec_drop(exec *e)
{
        close_fd(&e->in_fd);
        close_fd(&e->pty);
        close_fd(&e->ctl);
        close_fd(&e->out[0]);
        close_fd(&e->out[1]);
        e->gone = true;
}

static void execs_sweep(void)
{
        size_t j = 0;

        for (size_t i = 0; i < S.n_execs; i++) {
                if (S.execs[i]->gone) {
                        free(S.execs[i]->in_buf);
                        free(S.execs[i]->argv0);
                        free(S.execs[i]->cwd);
                        free(S.execs[i]);
                } else
                        S.execs[j++] = S.execs[i];
        }
        S.n_execs = j;
}

/* A message safe for a client: the command's name and cwd as the sandbox knows them, cut at
 * 256 bytes on a character boundary. */
static void start_error(uint64_t id, const char *argv0, const char *cwd, int err, int at)
{
        char msg[SPAWN_MAX_START_ERROR + 1];
        int code = err == ENOENT ? 127 : 126;
        size_t n;

        if (at == SHEP_AT_CWD)
                snprintf(msg, sizeof(msg), "cannot enter working directory %s: %s", cwd,
                         strerror(err));
        else if (at == SHEP_AT_EXEC && err == ENOENT && !strchr(argv0, '/'))
                snprintf(msg, sizeof(msg), "%s: command not found", argv0);
        else if (at == SHEP_AT_EXEC)
                snprintf(msg, sizeof(msg), "%s: %s", argv0, strerror(err));
        else
                snprintf(msg, sizeof(msg), "cannot start the command: %s", strerror(err));
        n = strlen(msg);
        while (n > 0 && !cs_utf8_valid(msg, n))
                msg[--n] = '\0';
        send_exited(id, 0, NULL, msg, code);
}

/* --- the pool of idle shepherds -------------------------------------------------------- */

/* Forks one shepherd, idle until SHEP_START. 0, or -1 with errno. */
static int pool_fork(void)
{
        int ctl[2];
        pid_t pid;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
                return -1;
        pid = fork();
        if (pid < 0) {
                int e = errno;

                close(ctl[0]);
                close(ctl[1]);
                errno = e;
                return -1;
        }
        if (pid == 0)
                shepherd_main(ctl[1]);
        close(ctl[1]);
        S.live_children++;
        S.pool[S.n_pool++] = (idle_shepherd){ .pid = pid, .ctl = ctl[0] };
        return 0;
}

/* Back to POOL_AHEAD idle shepherds: closing ctl ends an idle one. */
static void pool_trim(void)
{
        while (S.n_pool > POOL_AHEAD)
                close(S.pool[--S.n_pool].ctl);
}

/* Hands the Start (its frame's bytes, in a memfd) and the pipes' write ends to an idle
 * shepherd, forked now if the pool is empty. Its pid and ctl in *ret; -1 with errno. */
static int pool_start(const uint8_t *frame, size_t len, int out_fd, int err_fd, int in_fd,
                      idle_shepherd *ret)
{
        shep_msg m = { .op = SHEP_START };
        char cbuf[CMSG_SPACE(4 * sizeof(int))] = { 0 };
        struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
        struct msghdr mh = { .msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        int fds[4] = { -1, out_fd, err_fd, in_fd }, e;
        size_t n_fds = in_fd >= 0 ? 4 : 3, done = 0;

        fds[0] = memfd_create("start", MFD_CLOEXEC);
        if (fds[0] < 0)
                return -1;
        while (done < len) {
                ssize_t n = write(fds[0], frame + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        close(fds[0]);
                        return -1;
                }
                done += (size_t)n;
        }
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
        mh.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n_fds * sizeof(int));
        /* A few tries: an idle one may have died (killed from inside the sandbox); a failure
         * that is not about the shepherd must not fork one after another. */
        for (int tries = 0; tries < 3; tries++) {
                ssize_t n;

                if (S.n_pool == 0 && pool_fork() < 0)
                        break;
                *ret = S.pool[--S.n_pool];
                do
                        n = sendmsg(ret->ctl, &mh, MSG_NOSIGNAL);
                while (n < 0 && errno == EINTR);
                if (n == (ssize_t)sizeof(m)) {
                        close(fds[0]);
                        return 0;
                }
                e = n < 0 ? errno : EPIPE;
                close(ret->ctl);
                errno = e;
        }
        e = errno;
        close(fds[0]);
        errno = e;
        return -1;
}

/* A new pseudo-terminal: *master (non-blocking) and its slave, both close-on-exec, sized
 * rows x cols when given. The ioctls posix_openpt/unlockpt/ptsname use, without libutil. */
static int open_pty(uint32_t rows, uint32_t cols, int *master, int *slave)
{
        char name[32];
        unsigned n = 0;
        int unlock = 0, e;

        *slave = -1;
        *master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
        if (*master < 0)
                return -1;
        if (ioctl(*master, TIOCSPTLCK, &unlock) < 0 || ioctl(*master, TIOCGPTN, &n) < 0)
                goto fail;
        snprintf(name, sizeof(name), "/dev/pts/%u", n);
        *slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (*slave < 0)
                goto fail;
        if (rows && cols) {
                struct winsize ws = { .ws_row = (unsigned short)rows,
                                      .ws_col = (unsigned short)cols };
                if (ioctl(*master, TIOCSWINSZ, &ws) < 0)
                        goto fail;
        }
        return 0;
fail:
        e = errno;
        close_fd(master);
        close_fd(slave);
        errno = e;
        return -1;
}

/* The stdin side of an interactive exec: a pipe (its read end in *in_rd for the command), or
 * the terminal (out/err/in of the command all its slave, kept in out[1]). */
static int exec_open_input(exec *e, const Compute__Spawner__V1__Start *s, int out[2], int err[2],
                           int *in_rd)
{
        int p[2];

        e->has_stdin = true;
        if (s->tty) {
                int master, slave;

                if (open_pty(s->rows, s->cols, &master, &slave) < 0)
                        return -1;
                e->pty = master;
                out[0] = fcntl(master, F_DUPFD_CLOEXEC, 3);
                e->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
                out[1] = slave;
                err[1] = fcntl(slave, F_DUPFD_CLOEXEC, 3);
                *in_rd = fcntl(slave, F_DUPFD_CLOEXEC, 3);
                return out[0] < 0 || e->in_fd < 0 || err[1] < 0 || *in_rd < 0 ? -1 : 0;
        }
        if (pipe2(p, O_CLOEXEC) < 0)
                return -1;
        *in_rd = p[0];
        e->in_fd = p[1];
        fcntl(e->in_fd, F_SETFL, O_NONBLOCK);
        return 0;
}

static void exec_start(uint64_t id, const Compute__Spawner__V1__Start *s, const uint8_t *frame,
                       size_t len)
{
        int out[2] = { -1, -1 }, err[2] = { -1, -1 }, in_rd = -1;
        idle_shepherd sh;
        exec *e = NULL;

        if (S.n_execs >= SPAWNER_MAX_EXECS) {
                send_exited(id, 0, NULL, "too many commands running", 126);
                return;
        }
        S.last_start_ms = init_now_ms();
        e = calloc(1, sizeof(*e));
        if (e) {
                e->argv0 = strndup(s->argv[0], SPAWN_MAX_START_ERROR);
                e->cwd = strndup(s->cwd, SPAWN_MAX_START_ERROR);
        }
        if (!e || !e->argv0 || !e->cwd) {
                errno = ENOMEM;
                goto fail;
        }
        e->in_fd = e->pty = -1;
        if (s->stdin || s->tty) {
                if (exec_open_input(e, s, out, err, &in_rd) < 0)
                        goto fail;
        }
        if ((!s->tty && (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)) ||
            pool_start(frame, len, out[1], err[1], in_rd, &sh) < 0)
                goto fail;
        close_fd(&out[1]);
        close_fd(&err[1]);
        close_fd(&in_rd);
        fcntl(out[0], F_SETFL, O_NONBLOCK);
        if (err[0] >= 0)
                fcntl(err[0], F_SETFL, O_NONBLOCK);
        e->id = id;
        e->shepherd = sh.pid;
        e->ctl = sh.ctl;
        e->out[0] = out[0];
        e->out[1] = err[0];
        e->credit = s->credit;
        S.execs[S.n_execs++] = e;
        return;
fail:
        start_error(id, s->argv[0], s->cwd, errno, SHEP_AT_SETUP);
        for (int i = 0; i < 2; i++) {
                close_fd(&out[i]);
                close_fd(&err[i]);
        }
        close_fd(&in_rd);
        if (e) {
                close_fd(&e->in_fd);
                close_fd(&e->pty);
                free(e->argv0);
                free(e->cwd);
                free(e);
        }
}

/* The character the terminal's line discipline turns into signo for its foreground process
 * group (ISIG on), or -1. */
static int tty_signal_char(int pty, int signo)
{
        struct termios t;
        int idx = signo == SIGINT    ? VINTR
                  : signo == SIGQUIT ? VQUIT
                  : signo == SIGTSTP ? VSUSP
                                     : -1;
        const uint8_t defaults[] = { [VINTR] = 3, [VQUIT] = 0x1c, [VSUSP] = 0x1a };

        if (idx < 0)
                return -1;
        if (tcgetattr(pty, &t) < 0)
                return defaults[idx]; /* the line discipline's defaults */
        if (!(t.c_lflag & ISIG) || t.c_cc[idx] == _POSIX_VDISABLE)
                return -1;
        return t.c_cc[idx];
}

static void exec_signal(exec *e, int signo, bool foreground)
{
        shep_msg m = { .op = SHEP_SIGNAL, .a = signo };
        pid_t pgrp = 0;
        int c;

        if (signo == SIGKILL && !foreground && !e->killed) {
                e->killed = true;
                e->killed_ms = init_now_ms();
        }

        /* A terminal's foreground process group, as a key typed there would: only a process
         * of the exec's own session can have made it the terminal's foreground. gVisor has
         * no TIOCGPGRP on a master (ENOTTY) and no tpgid in /proc: there, SIGINT, SIGQUIT and
         * SIGTSTP go as their keys through the line discipline, and other signals (or those
         * with ISIG off) to the whole tree. */
        if (foreground && e->pty >= 0) {
                if (ioctl(e->pty, TIOCGPGRP, &pgrp) == 0 && pgrp > 1) {
                        kill(-pgrp, signo);
                        return;
                }
                c = tty_signal_char(e->pty, signo);
                if (c >= 0) {
                        uint8_t b = (uint8_t)c;
                        (void)!write(e->pty, &b, 1);
                        return;
                }
        }
        /* Nothing left to signal once the tree ended (the shepherd is idle then). */
        if (e->ctl >= 0 && !e->finishing && !e->alone)
                (void)!send(e->ctl, &m, sizeof(m), MSG_NOSIGNAL);
}

/* --- stdin ------------------------------------------------------------------------------ */

static void send_stdin_credit(exec *e)
{
        Compute__Spawner__V1__SpawnerFrame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__StdinCredit c = COMPUTE__SPAWNER__V1__STDIN_CREDIT__INIT;

        if (!e->in_owed)
                return;
        c.bytes = e->in_owed;
        e->in_owed = 0;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STDIN_CREDIT;
        f.stdin_credit = &c;
        send_frame(&f);
}

/* Closes the input: a pipe's write end (the command reads EOF), or for a terminal its EOF
 * character, the terminal staying for the output. */
static void exec_input_close(exec *e)
{
        if (e->pty >= 0 && e->in_fd >= 0 && !e->in_dead) {
                struct termios t;
                uint8_t eof = 4; /* ^D */

                if (tcgetattr(e->pty, &t) == 0 && t.c_cc[VEOF])
                        eof = t.c_cc[VEOF];
                (void)!write(e->in_fd, &eof, 1);
        }
        close_fd(&e->in_fd);
}

/* The command stopped reading for good (its stdin closed, or it ended): what is buffered and
 * what comes later is dropped and granted back at once, so the agent never waits on it. */
static void exec_input_dead(exec *e)
{
        e->in_dead = true;
        e->in_owed += (uint32_t)(e->in_len - e->in_off);
        e->in_off = e->in_len = 0;
        close_fd(&e->in_fd);
        send_stdin_credit(e);
}

/* Writes what the stdin pipe takes, grants it back. */
static void exec_input_write(exec *e)
{
        while (e->in_fd >= 0 && e->in_off < e->in_len) {
                ssize_t n = write(e->in_fd, e->in_buf + e->in_off, e->in_len - e->in_off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) { /* EPIPE, EIO: nobody reads the input any more */
                        exec_input_dead(e);
                        return;
                }
                e->in_off += (size_t)n;
                e->in_owed += (uint32_t)n;
        }
        if (e->in_off == e->in_len)
                e->in_off = e->in_len = 0;
        /* Granted back in batches, or at once when the window is drained. */
        if (e->in_owed >= SPAWN_STDIN_WINDOW / 4 || (e->in_len == 0 && e->in_owed))
                send_stdin_credit(e);
        if (e->in_len == 0 && e->in_closing)
                exec_input_close(e);
}

/* Stdin, CloseStdin, Resize for e. -1 with *why on a protocol error. */
static int exec_input_frame(exec *e, const spawn_agent_frame *f, const char **why)
{
        if (!e->has_stdin) {
                *why = "stdin, close_stdin or resize for an exec started without them";
                return -1;
        }
        switch (f->kind_case) {
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_STDIN: {
                size_t n = f->stdin->data.len;

                if (e->in_closing) {
                        *why = "stdin after close_stdin";
                        return -1;
                }
                if (e->in_dead) {
                        e->in_owed += (uint32_t)n;
                        send_stdin_credit(e);
                        return 0;
                }
                if (e->in_len - e->in_off + n > SPAWN_STDIN_WINDOW) {
                        *why = "stdin beyond the exec's window";
                        return -1;
                }
                if (!e->in_buf && !(e->in_buf = malloc(SPAWN_STDIN_WINDOW))) {
                        exec_input_dead(e); /* memory short: as if the command had gone */
                        return 0;
                }
                if (e->in_off && e->in_len + n > SPAWN_STDIN_WINDOW) {
                        memmove(e->in_buf, e->in_buf + e->in_off, e->in_len - e->in_off);
                        e->in_len -= e->in_off;
                        e->in_off = 0;
                }
                memcpy(e->in_buf + e->in_len, f->stdin->data.data, n);
                e->in_len += n;
                exec_input_write(e);
                return 0;
        }
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CLOSE_STDIN:
                e->in_closing = true;
                if (e->in_len == 0)
                        exec_input_close(e);
                return 0;
        default: { /* resize */
                struct winsize ws = { .ws_row = (unsigned short)f->resize->rows,
                                      .ws_col = (unsigned short)f->resize->cols };
                struct winsize was;
                pid_t pgrp;
                bool changed;

                if (e->pty < 0) {
                        *why = "resize for an exec without a terminal";
                        return -1;
                }
                changed = ioctl(e->pty, TIOCGWINSZ, &was) < 0 || was.ws_row != ws.ws_row ||
                          was.ws_col != ws.ws_col;
                if (ioctl(e->pty, TIOCSWINSZ, &ws) < 0 || !changed)
                        return 0;
                /* Linux's tty layer sends SIGWINCH to the foreground process group itself.
                 * gVisor does not (and has no TIOCGPGRP on a master to find that group):
                 * there the tree gets it, so that a full-screen program redraws; the signal's
                 * default action is to ignore it. */
                if (ioctl(e->pty, TIOCGPGRP, &pgrp) < 0)
                        exec_signal(e, SIGWINCH, false);
                return 0;
        }
        }
}

/* --- the agent's frames ---------------------------------------------------------------- */

/* 0, or -1 on a protocol error (*why says which). */
static int handle_frame(const uint8_t *p, size_t n, const char **why)
{
        spawn_agent_frame *f = spawn_decode_agent(p, n, why);
        Compute__Spawner__V1__SpawnerFrame out = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__Pong pong = COMPUTE__SPAWNER__V1__PONG__INIT;
        exec *e;

        if (!f)
                return -1;
        switch (f->kind_case) {
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_START:
                if (find_exec(f->exec_id)) {
                        *why = "start with the exec_id of a running exec";
                        spawn_agent_frame_free(f);
                        return -1;
                }
                exec_start(f->exec_id, f->start, p, n);
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_SIGNAL:
                e = find_exec(f->exec_id);
                if (e)
                        exec_signal(e, f->signal->signo, f->signal->foreground);
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_STDIN:
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CLOSE_STDIN:
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_RESIZE:
                e = find_exec(f->exec_id);
                if (e && exec_input_frame(e, f, why) < 0) {
                        spawn_agent_frame_free(f);
                        return -1;
                }
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_CREDIT:
                e = find_exec(f->exec_id);
                /* Capped so that no sum of grants overflows. */
                if (e && e->credit < (1ull << 40))
                        e->credit += f->credit->bytes;
                break;
        case COMPUTE__SPAWNER__V1__AGENT_FRAME__KIND_PING:
                pong.nonce = f->ping->nonce;
                out.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_PONG;
                out.pong = &pong;
                send_frame(&out);
                break;
        default:
                break;
        }
        spawn_agent_frame_free(f);
        return 0;
}

/* Reads and handles what the socket has. -1 when the connection must end. */
static int conn_read(void)
{
        const uint8_t *p;
        const char *why = NULL;
        size_t n;
        ssize_t got;
        int r;

        got = spawn_reader_fill(&S.reader, S.conn);
        if (got == 0)
                return -1;
        if (got < 0 && errno != EAGAIN) {
                init_log("reading the agent's socket: %s", strerror(errno));
                return -1;
        }
        while ((r = spawn_reader_next(&S.reader, &p, &n, &why)) == 1) {
                if (handle_frame(p, n, &why) < 0) {
                        init_log("protocol error from the agent: %s", why);
                        return -1;
                }
        }
        if (r < 0) {
                init_log("protocol error from the agent: %s", why);
                return -1;
        }
        return 0;
}

/* --- shepherds and pipes --------------------------------------------------------------- */

/* An exec's shepherd, idle again, back to the pool (which saves the next exec a fork), or
 * ended by closing its ctl when the pool is full. */
static void pool_return(exec *e)
{
        if (e->ctl >= 0 && S.n_pool < POOL_SIZE) {
                S.pool[S.n_pool++] = (idle_shepherd){ .pid = e->shepherd, .ctl = e->ctl };
                e->ctl = -1;
        }
}

static bool past_grace(const exec *e, int64_t now)
{
        return e->exited && now >= e->exit_ms + EXIT_GRACE_MS;
}

/* One read from a pipe into one Output frame, within the credit. Returns the bytes read, 0 at
 * EOF (the pipe is closed), -1 when it is empty. */
static ssize_t exec_read_pipe(exec *e, int stream, int64_t now)
{
        Compute__Spawner__V1__SpawnerFrame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__Output o = COMPUTE__SPAWNER__V1__OUTPUT__INIT;
        size_t want = e->credit < SPAWN_MAX_DATA ? (size_t)e->credit : SPAWN_MAX_DATA;
        ssize_t n;

        if (want == 0)
                return -1;
        do
                n = read(e->out[stream], S.chunk, want);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return -1;
        if (n <= 0) {
                close_fd(&e->out[stream]);
                return 0;
        }
        e->credit -= (uint64_t)n;
        f.exec_id = e->id;
        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_OUTPUT;
        f.output = &o;
        o.stream = (uint32_t)stream + 1;
        o.data.data = S.chunk;
        o.data.len = (size_t)n;
        send_frame(&f);
        if (past_grace(e, now)) {
                e->late[stream] += (size_t)n;
                if (e->late[stream] >= LATE_MAX)
                        close_fd(&e->out[stream]);
        }
        return n;
}

/* A pipe without credit reported POLLHUP: every writer is gone. With nothing left in it that
 * is its EOF (an output that used its credit exactly ends here); with data left, it waits
 * for credit, unpolled (POLLHUP would repeat). */
static void exec_pipe_hup(exec *e, int stream)
{
        int avail = 0;

        if (ioctl(e->out[stream], FIONREAD, &avail) == 0 && avail == 0)
                close_fd(&e->out[stream]);
        else
                e->hup[stream] = true;
}

/* Once the command exited: FINISH when both pipes reached EOF, or once the grace is over and
 * the pipes are empty (a background process keeps them open). While the agent grants no
 * credit, the output left in the pipes is the client's: keep waiting for it. */
static void exec_maybe_finish(exec *e, int64_t now)
{
        shep_msg m = { .op = SHEP_FINISH };

        if (!e->exited || e->finishing || (e->ctl < 0 && !e->alone))
                return;
        for (int s = 0; s < 2; s++) {
                bool blocked = e->credit == 0 || S.queued >= QUEUE_SOFT;

                if (e->out[s] < 0)
                        continue;
                /* After a SIGKILL of the tree (the agent's, at the end of a timeout's or a
                 * cancel's grace), output that finds no taker for KILL_DRAIN_MS is dropped:
                 * a client that stopped reading must not hold the exec's end back for ever
                 * (the agent gives up on the spawner 5 s after its SIGKILL). */
                if (e->killed && blocked && now >= e->killed_ms + KILL_DRAIN_MS) {
                        close_fd(&e->out[s]);
                        continue;
                }
                if (!past_grace(e, now) || blocked)
                        return;
                if (exec_read_pipe(e, s, now) < 0)
                        close_fd(&e->out[s]);
        }
        if (e->out[0] >= 0 || e->out[1] >= 0)
                return;
        if (e->alone) {
                /* Nothing to FINISH: the shepherd is idle already. */
                send_exited(e->id, e->status, &e->usage, NULL, 0);
                pool_return(e);
                exec_drop(e);
                return;
        }
        e->finishing = true;
        if (send(e->ctl, &m, sizeof(m), MSG_NOSIGNAL) < 0)
                exec_drop(e);
}

static void exec_ctl(exec *e, int64_t now)
{
        Compute__Spawner__V1__SpawnerFrame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__Started st = COMPUTE__SPAWNER__V1__STARTED__INIT;
        shep_msg m;
        ssize_t n;

        do
                n = recv(e->ctl, &m, sizeof(m), MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return;
        if (n != (ssize_t)sizeof(m) && e->alone) {
                /* An idle shepherd went away (killed): the exec's end is known already. */
                close_fd(&e->ctl);
                return;
        }
        if (n != (ssize_t)sizeof(m)) {
                /* The shepherd died without a word (killed from inside the sandbox). */
                init_log("exec %llu: its shepherd went away", (unsigned long long)e->id);
                send_exited(e->id, e->exited ? e->status : SIGKILL, NULL, NULL, 0);
                exec_drop(e);
                return;
        }
        switch (m.op) {
        case SHEP_STARTED:
                f.exec_id = e->id;
                f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_STARTED;
                f.started = &st;
                st.pid = m.a;
                send_frame(&f);
                e->started = true;
                break;
        case SHEP_FAILED:
                /* Output first: there is none, the command never ran. The shepherd is idle
                 * again after a failed execve (the command's process is reaped). */
                start_error(e->id, e->argv0, e->cwd, m.a, m.b);
                if (m.b != SHEP_AT_SETUP)
                        pool_return(e);
                exec_drop(e);
                break;
        case SHEP_EXITED:
                e->exited = true;
                e->exit_ms = now;
                e->status = m.a;
                /* The common case: the tree ended with the command, its usage is final and the
                 * shepherd idle; no FINISH round trip. */
                e->alone = m.b == 1;
                e->usage = m;
                break;
        case SHEP_DONE:
                send_exited(e->id, m.a, &m, NULL, 0);
                if (m.b == 1)
                        pool_return(e);
                exec_drop(e);
                break;
        default:
                break;
        }
}

/* Reaps shepherds (and only them: the spawner's children are shepherds). */
static void reap_children(void)
{
        struct signalfd_siginfo si;
        pid_t p;

        while (read(S.sfd, &si, sizeof(si)) > 0)
                ;
        while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
                if (S.live_children > 0)
                        S.live_children--;
}

/* --- connection ------------------------------------------------------------------------ */

static void conn_drop(void)
{
        for (size_t i = 0; i < S.n_execs; i++)
                exec_drop(S.execs[i]);
        execs_sweep();
        queue_clear();
        spawn_reader_free(&S.reader);
        close_fd(&S.conn);
}

static int conn_open(void)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(S.path) >= sizeof(sa.sun_path)) {
                errno = ENAMETOOLONG;
                return -1;
        }
        strcpy(sa.sun_path, S.path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;

                close(fd);
                errno = e;
                return -1;
        }
        return fd;
}

static void send_hello(void)
{
        Compute__Spawner__V1__SpawnerFrame f = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__INIT;
        Compute__Spawner__V1__Hello h = COMPUTE__SPAWNER__V1__HELLO__INIT;

        f.kind_case = COMPUTE__SPAWNER__V1__SPAWNER_FRAME__KIND_HELLO;
        f.hello = &h;
        h.protocol = SPAWN_PROTOCOL;
        h.version = (char *)INIT_VERSION;
        h.pid = getpid();
        h.running = S.live_children - (unsigned)S.n_pool;
        send_frame(&f);
}

/* Connects, with a backoff (BACKOFF_*) while the agent is away; reaps meanwhile. */
static void connect_loop(void)
{
        int backoff = BACKOFF_MIN_MS, last_errno = 0;
        int64_t since = init_now_ms();

        for (;;) {
                struct pollfd p = { .fd = S.sfd, .events = POLLIN };
                int cap = init_now_ms() - since < BACKOFF_EAGER_MS ? BACKOFF_CAP_EAGER_MS
                                                                   : BACKOFF_MAX_MS;

                S.conn = conn_open();
                if (S.conn >= 0)
                        break;
                if (errno != last_errno)
                        init_log("cannot connect to %s: %s (retrying)", S.path, strerror(errno));
                last_errno = errno;
                if (poll(&p, 1, backoff) > 0)
                        reap_children();
                backoff = backoff * 2 > cap ? cap : backoff * 2;
        }
        spawn_reader_init(&S.reader, SPAWN_MAX_AGENT_FRAME);
        send_hello();
}

/* --- the loop -------------------------------------------------------------------------- */

enum {
        SLOT_CONN,
        SLOT_SFD,
        SLOT_FIXED
};

static void serve(void)
{
        static struct pollfd p[SLOT_FIXED + 4 * SPAWNER_MAX_EXECS];
        static exec *owner[SLOT_FIXED + 4 * SPAWNER_MAX_EXECS];
        static int what[SLOT_FIXED + 4 * SPAWNER_MAX_EXECS];

        for (;;) {
                int64_t now = init_now_ms(), timeout = -1;
                size_t n = SLOT_FIXED;
                bool drop = false;

                p[SLOT_CONN] = (struct pollfd){ .fd = S.conn,
                                                .events = (S.queued < QUEUE_HARD ? POLLIN : 0) |
                                                          (S.head ? POLLOUT : 0) };
                p[SLOT_SFD] = (struct pollfd){ .fd = S.sfd, .events = POLLIN };
                for (size_t i = 0; i < S.n_execs; i++) {
                        exec *e = S.execs[i];

                        if (e->ctl >= 0) {
                                p[n] = (struct pollfd){ .fd = e->ctl, .events = POLLIN };
                                owner[n] = e;
                                what[n++] = -1;
                        }
                        if (e->in_fd >= 0 && e->in_len > e->in_off) {
                                p[n] = (struct pollfd){ .fd = e->in_fd, .events = POLLOUT };
                                owner[n] = e;
                                what[n++] = 2;
                        }
                        for (int s = 0; s < 2; s++) {
                                short ev;

                                if (!e->started || e->out[s] < 0)
                                        continue;
                                if (e->credit > 0 && S.queued < QUEUE_SOFT)
                                        ev = POLLIN;
                                else if (e->credit == 0 && !e->hup[s])
                                        ev = 0; /* POLLHUP only: the output may have ended */
                                else
                                        continue;
                                p[n] = (struct pollfd){ .fd = e->out[s], .events = ev };
                                owner[n] = e;
                                what[n++] = s;
                        }
                        if (e->exited && !e->finishing) {
                                int64_t left = e->exit_ms + EXIT_GRACE_MS - now;
                                bool blocked = e->credit == 0 || S.queued >= QUEUE_SOFT;

                                if (left < 0)
                                        left = 0;
                                /* Past the grace and blocked, credit or the socket wakes us;
                                 * or, after a SIGKILL, the end of KILL_DRAIN_MS. */
                                if (!(left == 0 && blocked) && (timeout < 0 || left < timeout))
                                        timeout = left;
                                if (e->killed && blocked) {
                                        int64_t drain = e->killed_ms + KILL_DRAIN_MS - now;

                                        if (drain < 0)
                                                drain = 0;
                                        if (timeout < 0 || drain < timeout)
                                                timeout = drain;
                                }
                        }
                }
                if (S.n_pool > POOL_AHEAD) {
                        int64_t left = S.last_start_ms + POOL_IDLE_MS - now;

                        if (left <= 0)
                                pool_trim();
                        else if (timeout < 0 || left < timeout)
                                timeout = left;
                }
                if (S.n_pool < POOL_AHEAD && now >= S.pool_retry_ms)
                        timeout = 0;
                else if (S.n_pool < POOL_AHEAD && (timeout < 0 || S.pool_retry_ms - now < timeout))
                        timeout = S.pool_retry_ms - now;
                if (poll(p, n, (int)timeout) < 0) {
                        if (errno == EINTR)
                                continue;
                        init_log("poll: %s", strerror(errno));
                        exit(1);
                }
                now = init_now_ms();
                if (p[SLOT_SFD].revents)
                        reap_children();
                if (p[SLOT_CONN].revents & (POLLIN | POLLHUP | POLLERR))
                        drop = conn_read() < 0;
                for (size_t i = SLOT_FIXED; i < n && !drop; i++) {
                        exec *e = owner[i];

                        if (!p[i].revents || e->gone)
                                continue;
                        if (what[i] < 0)
                                exec_ctl(e, now);
                        else if (what[i] == 2 && e->in_fd == p[i].fd)
                                exec_input_write(e);
                        else if (e->out[what[i]] == p[i].fd && e->credit == 0)
                                exec_pipe_hup(e, what[i]);
                        else if (e->out[what[i]] == p[i].fd)
                                exec_read_pipe(e, what[i], now);
                }
                for (size_t i = 0; i < S.n_execs && !drop; i++)
                        if (!S.execs[i]->gone)
                                exec_maybe_finish(S.execs[i], now);
                execs_sweep();
                if (!drop && S.head && queue_flush() < 0)
                        drop = true;
                /* After the frames went out: the fork is off the exec's path. */
                if (!drop && S.n_pool < POOL_AHEAD && now >= S.pool_retry_ms && pool_fork() < 0) {
                        init_log("cannot fork a shepherd: %s", strerror(errno));
                        S.pool_retry_ms = now + 1000;
                }
                if (drop) {
                        init_log("connection to the agent ended; %zu exec(s) killed", S.n_execs);
                        return;
                }
        }
}

_Noreturn void spawner_main(const char *path)
{
        sigset_t chld, all;

        S.path = path;
        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigfillset(&all);
        /* Every signal blocked (and so in the shepherds, which inherit the mask; commands get
         * an empty one): a command's `kill -TERM -1` ends neither; only SIGKILL does, and init
         * restarts the spawner then. SIGCHLD is read from a signalfd. */
        if (sigprocmask(SIG_SETMASK, &all, NULL) < 0 ||
            (S.sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
                init_log("signalfd: %s", strerror(errno));
                exit(1);
        }
        for (;;) {
                connect_loop();
                serve();
                conn_drop();
        }
}
