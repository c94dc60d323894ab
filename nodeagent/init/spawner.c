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
#include <unistd.h>

#include "spawn_frame.h"
#include "utf8.h"

#define SPAWNER_MAX_EXECS 1024
#define QUEUE_SOFT        (256 * 1024)
#define QUEUE_HARD        (1024 * 1024)
#define EXIT_GRACE_MS     200
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
        bool gone;      /* to be freed at the end of this loop turn */
        int64_t exit_ms;
        int status;
        size_t late[2]; /* bytes read from each pipe after the grace */
        bool hup[2];    /* POLLHUP seen without credit, data left in the pipe */
        bool alone;     /* the tree ended with the command: usage holds its final figures */
        shep_msg usage;
        char *argv0, *cwd; /* for a start error's message, cut at its size */
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
static int pool_start(const uint8_t *frame, size_t len, int out_fd, int err_fd, idle_shepherd *ret)
{
        shep_msg m = { .op = SHEP_START };
        char cbuf[CMSG_SPACE(3 * sizeof(int))] = { 0 };
        struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
        struct msghdr mh = { .msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        int fds[3] = { -1, out_fd, err_fd }, e;
        size_t done = 0;

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
        c->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(c), fds, sizeof(fds));
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

static void exec_start(uint64_t id, const Compute__Spawner__V1__Start *s, const uint8_t *frame,
                       size_t len)
{
        int out[2] = { -1, -1 }, err[2] = { -1, -1 };
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
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
            pool_start(frame, len, out[1], err[1], &sh) < 0)
                goto fail;
        close(out[1]);
        close(err[1]);
        fcntl(out[0], F_SETFL, O_NONBLOCK);
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
        if (e) {
                free(e->argv0);
                free(e->cwd);
                free(e);
        }
}

static void exec_signal(exec *e, int signo)
{
        shep_msg m = { .op = SHEP_SIGNAL, .a = signo };

        /* Nothing left to signal once the tree ended (the shepherd is idle then). */
        if (e->ctl >= 0 && !e->finishing && !e->alone)
                (void)!send(e->ctl, &m, sizeof(m), MSG_NOSIGNAL);
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
                        exec_signal(e, f->signal->signo);
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
                if (e->out[s] < 0)
                        continue;
                if (!past_grace(e, now) || e->credit == 0 || S.queued >= QUEUE_SOFT)
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
        static struct pollfd p[SLOT_FIXED + 3 * SPAWNER_MAX_EXECS];
        static exec *owner[SLOT_FIXED + 3 * SPAWNER_MAX_EXECS];
        static int what[SLOT_FIXED + 3 * SPAWNER_MAX_EXECS];

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
                                /* Past the grace and blocked, credit or the socket wakes us. */
                                if (!(left == 0 && blocked) && (timeout < 0 || left < timeout))
                                        timeout = left;
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
