/* Exec: see exec.h.
 *
 * Two threads per exec. The caller's thread moves output from the pipes to the sink and
 * watches for the end (the host process's pidfd), the cancel fd and the timeout. A terminator
 * thread, started only when the exec must be stopped, delivers SIGTERM, waits the grace
 * period and SIGKILLs what is left: it must not depend on the sink, which may be blocked on
 * a client that stopped reading. */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "proc.h"
#include "spawner_exec.h"
#include "util.h"

static const char *const base_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/root",
        "LANG=C.UTF-8",
};

int exec_validate(const exec_request *req, cs_error **err)
{
        size_t bytes = 0;

        if (!req->command || !req->command[0])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "command is empty");
        if (req->n_args + 1 > EXEC_MAX_ARGS)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "more than %d arguments",
                                    EXEC_MAX_ARGS - 1);
        if (req->n_env > EXEC_MAX_ENV)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "more than %d environment variables", EXEC_MAX_ENV);
        bytes += strlen(req->command) + 1;
        for (size_t i = 0; i < req->n_args; i++)
                bytes += strlen(req->args[i]) + 1;
        for (size_t i = 0; i < req->n_env; i++) {
                const char *k = req->env_keys[i];
                if (!k[0] || strchr(k, '='))
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "environment variable name '%.64s' is empty or "
                                            "contains '='",
                                            k);
                bytes += strlen(k) + strlen(req->env_values[i]) + 2;
        }
        if (bytes > EXEC_MAX_ARGV_BYTES)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "command, arguments and environment exceed %d bytes",
                                    EXEC_MAX_ARGV_BYTES);
        if (req->working_dir && req->working_dir[0] && req->working_dir[0] != '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "working_dir must be an absolute path");
        return 0;
}

/* argv and envp for the process; the strings are borrowed from req. */
static void build_vectors(const exec_request *req, char ***ret_argv, char ***ret_env)
{
        char **argv = cs_xcalloc(req->n_args + 2, sizeof(*argv));
        size_t n_base = ARRAY_SIZE(base_env);
        char **env = cs_xcalloc(n_base + req->n_env + 1, sizeof(*env));
        size_t n = 0;

        argv[0] = (char *)req->command;
        for (size_t i = 0; i < req->n_args; i++)
                argv[i + 1] = req->args[i];
        /* The request's variables override the base ones of the same name. */
        for (size_t i = 0; i < n_base; i++) {
                size_t klen = strcspn(base_env[i], "=");
                bool overridden = false;
                for (size_t j = 0; j < req->n_env && !overridden; j++)
                        overridden = strlen(req->env_keys[j]) == klen &&
                                     strncmp(req->env_keys[j], base_env[i], klen) == 0;
                if (!overridden)
                        env[n++] = cs_xstrdup(base_env[i]);
        }
        for (size_t i = 0; i < req->n_env; i++)
                env[n++] = cs_xasprintf("%s=%s", req->env_keys[i], req->env_values[i]);
        *ret_argv = argv;
        *ret_env = env;
}

static void free_env(char **env)
{
        for (char **e = env; e && *e; e++)
                free(*e);
        free(env);
}

/* --- stopping an exec ------------------------------------------------------------------ */

typedef enum stop_reason {
        STOP_NONE,
        STOP_CANCEL,
        STOP_TIMEOUT,
} stop_reason;

/* Runs beside the exec from its start, and owns its end: at the deadline, or when the output
 * loop asks (cancel), it stops the process. It never waits on the client, so the timeout
 * holds even while the output loop is blocked on a client that stopped reading. */
typedef struct terminator {
        runtime *rt;
        const char *container_id;
        const rt_exec *ex;
        int64_t deadline; /* monotonic ms */
        int64_t grace_ms; /* between SIGTERM and SIGKILL */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool exited;        /* the host process has ended */
        stop_reason reason; /* why it was stopped, STOP_NONE if it was not */
        int last_sig;       /* the last signal delivered */
        pthread_t thread;
        bool started;
} terminator;

/* The in-sandbox pid, waiting briefly for runsc to report it. 0 if it never does. */
static int wait_internal_pid(terminator *t)
{
        for (int i = 0; i < 200; i++) {
                int pid = rt_exec_internal_pid(t->ex);
                bool exited;

                if (pid > 0)
                        return pid;
                pthread_mutex_lock(&t->lock);
                exited = t->exited;
                pthread_mutex_unlock(&t->lock);
                if (exited)
                        return 0;
                usleep(10 * 1000);
        }
        return 0;
}

/* Waits until the host process exits or timeout_ms passes. Returns whether it exited. */
static bool wait_exited(terminator *t, int64_t timeout_ms)
{
        int64_t deadline = cs_now_monotonic_ms() + timeout_ms;
        bool exited;

        pthread_mutex_lock(&t->lock);
        while (!t->exited) {
                if (cs_cond_wait_until(&t->cond, &t->lock, deadline) == ETIMEDOUT)
                        break;
        }
        exited = t->exited;
        pthread_mutex_unlock(&t->lock);
        return exited;
}

/* Waits for the exec to end by itself (returns false) or to be due for stopping. */
static bool wait_stop(terminator *t)
{
        bool stop;

        pthread_mutex_lock(&t->lock);
        while (!t->exited && t->reason == STOP_NONE && cs_now_monotonic_ms() < t->deadline)
                cs_cond_wait_until(&t->cond, &t->lock, t->deadline);
        if (!t->exited && t->reason == STOP_NONE)
                t->reason = STOP_TIMEOUT;
        stop = !t->exited;
        pthread_mutex_unlock(&t->lock);
        return stop;
}

static void *terminator_main(void *arg)
{
        terminator *t = arg;
        rt_proc *procs = NULL;
        size_t n = 0;
        cs_error *err = NULL;
        int pid;

        if (!wait_stop(t))
                return NULL;
        pid = wait_internal_pid(t);
        if (pid <= 0)
                return NULL;
        /* Remember the tree before it is touched: children may outlive their parent. */
        if (t->rt->ops->processes(t->rt, t->container_id, &procs, &n, &err) < 0)
                cs_error_freep(&err);
        if (t->rt->ops->signal(t->rt, t->container_id, pid, SIGTERM, &err) < 0)
                cs_error_freep(&err);
        else
                __atomic_store_n(&t->last_sig, SIGTERM, __ATOMIC_SEQ_CST);

        if (!wait_exited(t, t->grace_ms)) {
                if (rt_kill_tree(t->rt, t->container_id, pid, SIGKILL, &err) < 0)
                        cs_error_freep(&err);
                __atomic_store_n(&t->last_sig, SIGKILL, __ATOMIC_SEQ_CST);
        }
        /* Whatever the exec started and is still there goes too: its descendants as they
         * were before the SIGTERM (orphans have been reparented since). */
        {
                _cleanup_free_ int *desc = NULL;
                size_t nd = rt_descendants(procs, n, pid, &desc);

                for (size_t i = 0; i < nd; i++) {
                        if (t->rt->ops->signal(t->rt, t->container_id, desc[i], SIGKILL, &err) < 0)
                                cs_error_freep(&err);
                }
        }
        free(procs);
        return NULL;
}

static void terminator_start(terminator *t)
{
        t->started = pthread_create(&t->thread, NULL, terminator_main, t) == 0;
}

/* The output loop's request to stop the exec (a cancel). */
static void terminator_request(terminator *t, stop_reason why)
{
        pthread_mutex_lock(&t->lock);
        if (t->reason == STOP_NONE)
                t->reason = why;
        pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&t->lock);
}

static void terminator_finish(terminator *t)
{
        pthread_mutex_lock(&t->lock);
        t->exited = true;
        pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&t->lock);
        if (t->started)
                pthread_join(t->thread, NULL);
}

/* --- moving output --------------------------------------------------------------------- */

typedef struct pump {
        runtime *rt;
        const exec_sink *sink;
        bool sink_ok;         /* false once the client is gone: output is drained and dropped */
        rt_start_error start; /* the backend said the command never started */
        uint8_t buf[EXEC_CHUNK];
} pump;

/* Reads one chunk from fd and hands it to the sink. Returns false at EOF. */
static bool pump_once(pump *p, int fd, int stream)
{
        ssize_t n = read(fd, p->buf, sizeof(p->buf));
        cs_error *err = NULL;

        if (n < 0)
                return errno == EINTR || errno == EAGAIN;
        if (n == 0)
                return false;
        if (stream == EXEC_STDERR && p->rt->ops->strip_own_errors)
                n = (ssize_t)p->rt->ops->strip_own_errors(p->rt, (char *)p->buf, (size_t)n,
                                                          &p->start);
        if (n && p->sink_ok &&
            p->sink->write(p->sink->userdata, stream, p->buf, (size_t)n, &err) < 0) {
                p->sink_ok = false;
                cs_error_free(err);
        }
        return true;
}

/* After the host process is gone, what is left in the pipes is read for a short while; a
 * background process that keeps them open does not hold the exec. */
#define EXEC_DRAIN_MS 200

/* The poll loop. Returns when the host process has exited. */
static void pump_all(pump *p, int out_fd, int err_fd, int pidfd, int64_t deadline, terminator *t)
{
        int fds[2] = { out_fd, err_fd };
        bool open[2] = { true, true }, exited = false;
        int64_t drain_until = 0;
        stop_reason why = STOP_NONE;

        while (open[0] || open[1]) {
                struct pollfd pf[4] = {
                        { .fd = open[0] ? fds[0] : -1, .events = POLLIN },
                        { .fd = open[1] ? fds[1] : -1, .events = POLLIN },
                        { .fd = exited ? -1 : pidfd, .events = POLLIN },
                        { .fd = why == STOP_NONE ? p->sink->cancel_fd : -1, .events = POLLIN },
                };
                int64_t now = cs_now_monotonic_ms();
                int64_t until = exited ? drain_until : (why == STOP_NONE ? deadline : INT64_MAX);
                int timeout = until == INT64_MAX ? -1 : (int)(until > now ? until - now : 0);

                if (exited && now >= drain_until)
                        break;
                if (!exited && why == STOP_NONE && now >= deadline) {
                        why = STOP_TIMEOUT; /* the terminator sees it too; stop polling for it */
                        continue;
                }
                if (poll(pf, 4, timeout) < 0 && errno != EINTR)
                        break;
                for (int i = 0; i < 2; i++) {
                        if (pf[i].revents && !pump_once(p, fds[i], i + 1))
                                open[i] = false;
                }
                if (pf[2].revents) {
                        exited = true;
                        drain_until = cs_now_monotonic_ms() + EXEC_DRAIN_MS;
                }
                if ((pf[3].revents || !p->sink_ok) && why == STOP_NONE) {
                        why = STOP_CANCEL;
                        terminator_request(t, STOP_CANCEL);
                }
        }
        if (!exited) {
                struct pollfd pf = { .fd = pidfd, .events = POLLIN };
                while (poll(&pf, 1, -1) < 0 && errno == EINTR)
                        ;
        }
}

/* --- exit ------------------------------------------------------------------------------ */

static void classify_exit(int status, stop_reason why, int last_sig, bool oom, exec_result *r)
{
        /* The host process itself killed by signal n (runsc exec killed, e.g. by the host's
         * OOM killer or a dying sandbox; or a backend whose host process is the command)
         * reads as runsc would report it: 128+n. */
        int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : -1;

        r->cancelled = why == STOP_CANCEL;
        r->timed_out = why == STOP_TIMEOUT;
        r->oom_killed = oom;
        /* runsc exec exits 128+n for a process killed by signal n. */
        if (code > 128 && code <= 128 + 64)
                r->signal = code - 128;
        if (why != STOP_NONE) {
                r->exit_code = -1;
                if (!r->signal && last_sig)
                        r->signal = last_sig;
        } else {
                r->exit_code = code;
        }
        if (oom) {
                /* The kernel's OOM killer sends SIGKILL; runsc may fail to report any status
                 * when it took the whole sandbox down. */
                r->signal = SIGKILL;
                if (why == STOP_NONE)
                        r->exit_code = 128 + SIGKILL;
        }
}

static int make_pipe(int fds[2], cs_error **err)
{
        if (pipe2(fds, O_CLOEXEC) < 0)
                return cs_error_errno(err, errno, "pipe");
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        /* A pipe holds 64 KiB by default, which caps every read, and so every event, at that:
         * a larger one moves bulk output in fewer messages. Best effort (the system limit
         * is /proc/sys/fs/pipe-max-size). */
        fcntl(fds[0], F_SETPIPE_SZ, EXEC_CHUNK);
        return 0;
}

/* The host process could not be watched (no pidfd): stop what it started in the sandbox,
 * then the host process itself, and reap it. The child is ours and not reaped yet, so its pid
 * cannot have been reused. Returns false when the in-sandbox process may still run: its pid
 * could not be read (the same lack of fds can keep the pid file from opening). */
static bool exec_abandon(runtime *rt, const char *container_id, const rt_exec *ex)
{
        cs_error *ignored = NULL;
        int status, pid = 0;

        /* runsc reports the in-sandbox pid shortly after it starts; SIGKILL to runsc exec
         * alone would leave the process running in the sandbox. */
        for (int i = 0; i < 100 && pid <= 0; i++) {
                pid = rt_exec_internal_pid(ex);
                if (pid <= 0 && waitpid(ex->host_pid, &status, WNOHANG) == ex->host_pid)
                        return true; /* it ended (and is reaped): nothing left to stop */
                if (pid <= 0)
                        usleep(10 * 1000);
        }
        if (pid > 0 && rt_kill_tree(rt, container_id, pid, SIGKILL, &ignored) < 0)
                cs_error_freep(&ignored);
        kill(ex->host_pid, SIGKILL);
        if (proc_wait(ex->host_pid, &status, &ignored) < 0)
                cs_error_free(ignored);
        return pid > 0;
}

/* A pidfd for the exec's host process. On failure (out of fds, mostly: EMFILE, ENFILE) the
 * process is stopped and reaped and *err says why: RESOURCE_EXHAUSTED for a lack of fds or
 * memory, UNAVAILABLE otherwise (kernels before 5.3 have no pidfd_open). If the process in
 * the sandbox could not be stopped, its pid file is kept (ex->pid_file dropped, not removed):
 * the next start of the agent kills what such files name. */
static int exec_pidfd(runtime *rt, const char *container_id, rt_exec *ex, cs_error **err)
{
        int fd = (int)syscall(SYS_pidfd_open, ex->host_pid, 0);
        int e = errno;

        if (fd >= 0)
                return fd;
        if (!exec_abandon(rt, container_id, ex))
                free(TAKE_PTR(ex->pid_file));
        if (e == EMFILE || e == ENFILE || e == ENOMEM)
                return cs_error_errno(err, e, "cannot watch the exec's process (stopped it)");
        return cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                            "cannot watch the exec's process (stopped it): pidfd_open: %s",
                            strerror(e));
}

static void terminator_init(terminator *t)
{

        pthread_mutex_init(&t->lock, NULL);
        cs_cond_init_monotonic(&t->cond);
}

static void terminator_destroy(terminator *t)
{
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->lock);
}

/* How long after an OOM kill the sandbox is watched for dying, and how often. */
#define EXEC_OOM_SETTLE_MS 3000
#define EXEC_OOM_POLL_MS   50

/* After an OOM kill: on gVisor the OOM killer takes the sandbox itself (its Sentry holds the
 * application's memory; measured in docs/security.md), and runsc reports it stopped a moment
 * after the exec ended: wait for that and say so now, rather than let the next command meet a
 * stopped container as READY. */
static void check_sandbox_after_oom(sb_registry *reg, runtime *rt, sandbox *sb)
{
        int64_t until = cs_now_monotonic_ms() + EXEC_OOM_SETTLE_MS;

        for (;;) {
                rt_state st = RT_RUNNING;
                cs_error *ignored = NULL;

                if (rt->ops->state(rt, sb_container_id(sb), &st, NULL, &ignored) < 0) {
                        cs_error_free(ignored);
                        return;
                }
                if (st != RT_RUNNING) {
                        sb_mark_out_of_memory(reg, sb);
                        return;
                }
                if (cs_now_monotonic_ms() >= until)
                        return;
                usleep(EXEC_OOM_POLL_MS * 1000);
        }
}

/* A command that never started, on its stderr as a shell would say it ("x: command not
 * found"; the exit code is 127 or 126): the same from both paths (docs/api.md). */
static void report_start_error(const exec_sink *sink, const char *msg)
{
        cs_error *ignored_err = NULL;
        _cleanup_free_ char *line = cs_xasprintf("%s\n", msg);

        if (sink->write(sink->userdata, EXEC_STDERR, (const uint8_t *)line, strlen(line),
                        &ignored_err) < 0)
                cs_error_free(ignored_err);
}

/* Moves output until the process ends, stopping it at the deadline or on a cancel, and
 * fills *ret. Owns nothing it is given. */
static void exec_follow(sb_registry *reg, runtime *rt, sandbox *sb, const exec_sink *sink,
                        int out_fd, int err_fd, int pidfd, terminator *t, int64_t start,
                        sb_window *w, exec_result *ret)
{
        /* Not calloc: zeroing would touch all EXEC_CHUNK bytes of the buffer (memory that a
         * thread's arena hands out again is cleared by hand), while most commands write a
         * few bytes: read(2) touches only what it fills. */
        _cleanup_free_ pump *p = cs_xmalloc(sizeof(*p));
        cs_error *wait_err = NULL;
        int status = 0;
        bool oom = false;

        p->rt = rt;
        p->sink = sink;
        p->sink_ok = true;
        p->start.exit_code = 0;
        terminator_start(t);
        pump_all(p, out_fd, err_fd, pidfd, t->deadline, t);
        /* A wait failure leaves status 0: nothing more to say (the process was ours). */
        if (proc_wait(t->ex->host_pid, &status, &wait_err) < 0)
                cs_error_free(wait_err);
        ret->wall_ms = cs_now_monotonic_ms() - start;
        terminator_finish(t);

        sb_window_end(reg, sb, w, &ret->usage, &oom);
        classify_exit(status, t->reason, __atomic_load_n(&t->last_sig, __ATOMIC_SEQ_CST), oom, ret);
        /* runsc exec exits 128 when the command never started: told as the spawner tells it. */
        if (p->start.exit_code && WIFEXITED(status) && WEXITSTATUS(status) == 128 &&
            t->reason == STOP_NONE && !oom) {
                ret->exit_code = p->start.exit_code;
                if (p->sink_ok)
                        report_start_error(sink, p->start.msg);
        }
        if (oom)
                check_sandbox_after_oom(reg, rt, sb);
}

/* --- the spawner's path ---------------------------------------------------------------- */

/* The exit the spawner reported as a wait status, for classify_exit. */
static int spawner_status(const spawn_exited *x)
{
        if (x->exit_code >= 0)
                return (x->exit_code & 0xff) << 8;
        return x->signal & 0x7f;
}

/* Runs req through the sandbox's spawner. 1: it ran (*ret filled); 0: nothing was sent
 * (ret->fallback says why: the caller uses the runtime); -1: the connection broke after the
 * start (*err). */
static int exec_spawner(sb_registry *reg, runtime *rt, sandbox *sb, spawn_link *l,
                        const exec_request *req, const exec_sink *sink, int64_t timeout,
                        int64_t grace_ms, exec_result *ret, cs_error **err)
{
        _cleanup_free_ char **argv = NULL;
        char **env = NULL;
        spawn_run_result sr;
        cs_error *why = NULL;
        usage_metrics ignored;
        int64_t start;
        sb_window *w;
        bool oom, shared;
        int r;

        build_vectors(req, &argv, &env);
        w = sb_window_begin(reg, sb);
        start = cs_now_monotonic_ms();
        {
                spawn_run_spec spec = {
                        .argv = argv,
                        .env = env,
                        .cwd = req->working_dir && req->working_dir[0] ? req->working_dir
                                                                       : sb_mount_path(sb),
                        .deadline = start + timeout,
                        .grace_ms = grace_ms,
                        .input = req->input,
                };
                r = spawn_run(l, &spec, sink, &sr, &why);
        }
        ret->input_err = TAKE_PTR(sr.input_err);
        ret->idle = sr.idle;
        if (r < 0 && ret->input_err) /* the link's failure says more */
                cs_error_free(TAKE_PTR(ret->input_err));
        free_env(env);
        if (r == 0) {
                sb_window_end(reg, sb, w, &ignored, &oom);
                snprintf(ret->fallback, sizeof(ret->fallback), "%s", why->msg);
                cs_error_free(why);
                return 0;
        }
        ret->path = "spawner";
        ret->wall_ms = cs_now_monotonic_ms() - start;
        shared = sb_window_shared(reg, w);
        sb_window_end(reg, sb, w, &ret->usage, &oom);
        if (r < 0 && oom) {
                /* The kernel's OOM killer took the sentry, and the spawner with it: the
                 * command was killed by it (as runsc exec reports it: SIGKILL). */
                cs_error_free(why);
                classify_exit(SIGKILL, STOP_NONE, 0, true, ret);
                check_sandbox_after_oom(reg, rt, sb);
                return 1;
        }
        if (r < 0) {
                *err = why;
                return -1;
        }
        if (sr.exited.start_error[0])
                report_start_error(sink, sr.exited.start_error);
        /* Alone in its sandbox, the exec's CPU time is the sandbox's over its window (as
         * through runsc exec: gVisor's own work for the command included). Alongside another
         * exec, that figure holds the other's too: the command tree's own CPU time (its
         * rusage) is taken instead, capped by the window's, since the spawner is the
         * sandbox's and its figure is the sandbox's word. */
        if (shared) {
                uint64_t own = (sr.exited.user_us + sr.exited.system_us) / 1000;
                if (own < ret->usage.cpu_ms)
                        ret->usage.cpu_ms = own;
        }
        classify_exit(spawner_status(&sr.exited),
                      sr.stop == SPAWN_STOP_CANCEL    ? STOP_CANCEL
                      : sr.stop == SPAWN_STOP_TIMEOUT ? STOP_TIMEOUT
                                                      : STOP_NONE,
                      sr.last_sig, oom, ret);
        if (oom)
                check_sandbox_after_oom(reg, rt, sb);
        return 1;
}

/* Whether the sandbox's spawner can take the exec: its link, referenced, or NULL with the
 * reason in ret->fallback (nothing when the spawner is off). */
static spawn_link *exec_spawner_link(sb_registry *reg, sandbox *sb, exec_result *ret)
{
        struct spawn_mgr *m = sb_registry_spawner(reg);
        bool listening, connected;
        spawn_link *l;

        if (!m)
                return NULL;
        l = spawn_mgr_link_wait(m, sb_container_id(sb), SPAWN_FIRST_CONNECT_MS);
        if (l)
                return l;
        spawn_mgr_status(m, sb_container_id(sb), &listening, &connected);
        snprintf(ret->fallback, sizeof(ret->fallback), "%s",
                 listening ? "the sandbox's spawner is not connected"
                           : "the sandbox has no spawner");
        return NULL;
}

int exec_run(sb_registry *reg, runtime *rt, sandbox *sb, const exec_request *req,
             const exec_sink *sink, exec_result *ret, cs_error **err)
{
        int out[2] = { -1, -1 }, errp[2] = { -1, -1 };
        _cleanup_close_ int pidfd = -1;
        _cleanup_free_ char **argv = NULL;
        char **env = NULL;
        int64_t timeout = req->timeout_ms > 0 && req->timeout_ms < EXEC_MAX_TIMEOUT_MS
                                  ? req->timeout_ms
                                  : EXEC_MAX_TIMEOUT_MS;
        int64_t start;
        rt_exec ex = { 0 };
        terminator t = { .rt = rt,
                         .container_id = sb_container_id(sb),
                         .ex = &ex,
                         .grace_ms =
                                 req->kill_grace_ms > 0 ? req->kill_grace_ms : EXEC_KILL_GRACE_MS };
        sb_window *w;
        usage_metrics ignored;
        spawn_link *l;
        int r = -1;
        bool oom;

        l = exec_spawner_link(reg, sb, ret);
        if (l) {
                r = exec_spawner(reg, rt, sb, l, req, sink, timeout, t.grace_ms, ret, err);
                spawn_link_unref(l);
                if (r != 0)
                        return r < 0 ? -1 : 0;
                r = -1;
        }
        if (req->input) {
                /* ExecSession: runsc exec here has neither a stdin the agent feeds nor a
                 * terminal (that needs its console socket): the spawner only. */
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "interactive sessions need the sandbox's spawner (%s)",
                                    ret->fallback[0] ? ret->fallback
                                                     : "the agent runs with --spawner=off");
        }
        ret->path = "runsc exec";
        if (make_pipe(out, err) < 0 || make_pipe(errp, err) < 0)
                goto out;
        build_vectors(req, &argv, &env);
        {
                rt_exec_spec spec = {
                        .container_id = sb_container_id(sb),
                        .argv = argv,
                        .env = env,
                        .cwd = req->working_dir && req->working_dir[0] ? req->working_dir
                                                                       : sb_mount_path(sb),
                        .scratch_dir = sb_dir(sb),
                        .stdout_fd = out[1],
                        .stderr_fd = errp[1],
                };
                w = sb_window_begin(reg, sb);
                start = cs_now_monotonic_ms();
                if (rt->ops->exec(rt, &spec, &ex, err) < 0) {
                        sb_window_end(reg, sb, w, &ignored, &oom);
                        goto out;
                }
        }
        close(TAKE_FD(out[1]));
        close(TAKE_FD(errp[1]));
        pidfd = exec_pidfd(rt, sb_container_id(sb), &ex, err);
        if (pidfd < 0) {
                sb_window_end(reg, sb, w, &ignored, &oom);
                goto out;
        }
        terminator_init(&t);
        t.deadline = start + timeout;
        exec_follow(reg, rt, sb, sink, out[0], errp[0], pidfd, &t, start, w, ret);
        terminator_destroy(&t);
        r = 0;
out:
        rt_exec_free(&ex);
        free_env(env);
        for (int i = 0; i < 2; i++) {
                if (out[i] >= 0)
                        close(out[i]);
                if (errp[i] >= 0)
                        close(errp[i]);
        }
        return r;
}

/* --- a warm sandbox's warm-up ---------------------------------------------------------- */

static int discard_output(void *userdata, int stream, const uint8_t *data, size_t len,
                          cs_error **err)
{
        (void)userdata;
        (void)stream;
        (void)data;
        (void)len;
        (void)err;
        return 0;
}

void exec_warm_up(sb_registry *reg, sandbox *sb, void *rt)
{
        exec_request req = { .command = "true", .timeout_ms = EXEC_WARM_UP_TIMEOUT_MS };
        exec_sink sink = { .write = discard_output, .cancel_fd = -1 };
        exec_result res = { 0 };
        cs_error *err = NULL;

        if (exec_run(reg, rt, sb, &req, &sink, &res, &err) < 0) {
                log_warn("sandbox %s: warm-up: %s", sb_container_id(sb), err->msg);
                cs_error_free(err);
                return;
        }
        cs_error_free(res.input_err);
        log_debug("sandbox %s: warm-up `true` (%s): exit code %d, %" PRId64 " ms",
                  sb_container_id(sb), res.path ? res.path : "?", res.exit_code, res.wall_ms);
}
