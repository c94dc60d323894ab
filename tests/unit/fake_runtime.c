/* The fake runtime of the unit tests: see fake_runtime.h. Owns its tables and the host
 * processes its exec starts; touches /proc (read only) and the exec pid files it writes. */
#include "fake_runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "util.h"

#define FAKE_MAX_CONTAINERS 16
#define FAKE_MAX_PROCS      64 /* roots of process trees per container */
#define FAKE_MAX_LOG        256
#define FAKE_MAX_KNOWN      256
#define FAKE_ID_MAX         80

typedef struct fake_container {
        char id[FAKE_ID_MAX];
        rt_state state;
        char bundle[256];            /* as list_details reports it; "" unless set */
        pid_t roots[FAKE_MAX_PROCS]; /* its execs' host processes */
        size_t n_roots;
        /* Every process ever listed as the container's: an orphan stays the container's
         * (in a sandbox it is reparented to its init, not to the host's). */
        pid_t known[FAKE_MAX_KNOWN];
        size_t n_known;
} fake_container;

typedef struct fake_event {
        char id[FAKE_ID_MAX];
        int sig; /* 0 for a destroy */
} fake_event;

struct fake_runtime {
        runtime rt; /* first: the ops get a runtime * */
        pthread_mutex_t lock;
        fake_container c[FAKE_MAX_CONTAINERS];
        size_t n;
        int exec_fail_code;
        char exec_fail_msg[128];
        bool fail_queries;
        bool fail_destroy;
        size_t state_queries;
        void (*on_exec)(void *userdata, const rt_exec_spec *spec, pid_t pid);
        void *on_exec_userdata;
        pid_t last_exec;
        size_t execs;
        bool hold_creates;                          /* creates wait while set */
        pthread_cond_t creates_cond;                /* hold_creates cleared */
        size_t creates, creating, creating_max;     /* creates asked, in flight, most at once */
        char creating_ids[FAKE_MAX_CONTAINERS][64]; /* those in flight ("" : a free slot) */
        fake_event log[FAKE_MAX_LOG];
        size_t n_log;
};

#define FAKE(r) ((fake_runtime *)(r))

/* Under the lock. */
static fake_container *find_locked(fake_runtime *f, const char *id)
{
        for (size_t i = 0; i < f->n; i++) {
                if (strcmp(f->c[i].id, id) == 0)
                        return &f->c[i];
        }
        return NULL;
}

static void log_locked(fake_runtime *f, const char *id, int sig)
{
        if (f->n_log < FAKE_MAX_LOG) {
                snprintf(f->log[f->n_log].id, FAKE_ID_MAX, "%s", id);
                f->log[f->n_log++].sig = sig;
        }
}

/* --- the host's process table -------------------------------------------------------- */

/* Every host process with its parent, from /proc. *ret is malloc'd. */
static int host_processes(rt_proc **ret, size_t *ret_n, cs_error **err)
{
        DIR *d = opendir("/proc");
        struct dirent *e;
        rt_proc *procs = NULL;
        size_t n = 0, cap = 0;

        if (!d)
                return cs_error_errno(err, errno, "fake: cannot read /proc");
        while ((e = readdir(d))) {
                char path[64], buf[512];
                int pid = atoi(e->d_name), fd, ppid;
                ssize_t len;
                char *close_paren;

                if (pid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/stat", pid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                len = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (len <= 0)
                        continue;
                buf[len] = '\0';
                /* "pid (comm) S ppid ...": comm may hold anything, the last ')' ends it. */
                close_paren = strrchr(buf, ')');
                if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
                        continue;
                procs = cs_xgrow(procs, n, &cap, sizeof(*procs));
                procs[n++] = (rt_proc){ .pid = pid, .ppid = ppid };
        }
        closedir(d);
        *ret = procs;
        *ret_n = n;
        return 0;
}

/* The container's processes: its roots that still exist and their descendants. */
static int container_processes(fake_runtime *f, const char *id, rt_proc **ret, size_t *ret_n,
                               cs_error **err)
{
        _cleanup_free_ rt_proc *all = NULL;
        rt_proc *mine;
        size_t n_all = 0, n = 0;
        pid_t roots[FAKE_MAX_PROCS];
        size_t n_roots;

        pthread_mutex_lock(&f->lock);
        {
                fake_container *c = find_locked(f, id);
                if (!c) {
                        pthread_mutex_unlock(&f->lock);
                        return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "fake: no container %s",
                                            id);
                }
                n_roots = c->n_roots;
                memcpy(roots, c->roots, n_roots * sizeof(*roots));
        }
        pthread_mutex_unlock(&f->lock);
        if (host_processes(&all, &n_all, err) < 0)
                return -1;
        mine = cs_xcalloc(n_all + 1, sizeof(*mine));
        for (size_t r = 0; r < n_roots; r++) {
                _cleanup_free_ int *desc = NULL;
                size_t nd = rt_descendants(all, n_all, roots[r], &desc);
                bool alive = false;

                for (size_t i = 0; i < n_all && !alive; i++) {
                        if (all[i].pid == roots[r]) {
                                mine[n++] = all[i];
                                alive = true;
                        }
                }
                for (size_t k = 0; k < nd; k++) {
                        for (size_t i = 0; i < n_all; i++) {
                                if (all[i].pid == desc[k] && n < n_all)
                                        mine[n++] = all[i];
                        }
                }
        }
        pthread_mutex_lock(&f->lock);
        {
                fake_container *c = find_locked(f, id);
                for (size_t i = 0; c && i < n; i++) {
                        bool seen = false;
                        for (size_t k = 0; k < c->n_known && !seen; k++)
                                seen = c->known[k] == mine[i].pid;
                        if (!seen && c->n_known < FAKE_MAX_KNOWN)
                                c->known[c->n_known++] = mine[i].pid;
                }
        }
        pthread_mutex_unlock(&f->lock);
        *ret = mine;
        *ret_n = n;
        return 0;
}

/* --- the ops --------------------------------------------------------------------------- */

static int fake_create(runtime *rt, const rt_sandbox_spec *spec, pid_t *ret_pid, cs_error **err)
{
        fake_runtime *f = FAKE(rt);

        (void)err;
        pthread_mutex_lock(&f->lock);
        char *slot = NULL;

        f->creates++;
        if (++f->creating > f->creating_max)
                f->creating_max = f->creating;
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS && !slot; i++)
                if (!f->creating_ids[i][0])
                        slot = f->creating_ids[i];
        if (slot)
                snprintf(slot, sizeof(f->creating_ids[0]), "%s", spec->container_id);
        while (f->hold_creates)
                pthread_cond_wait(&f->creates_cond, &f->lock);
        if (slot)
                slot[0] = 0;
        f->creating--;
        pthread_mutex_unlock(&f->lock);
        fake_runtime_set(f, spec->container_id, RT_RUNNING);
        *ret_pid = 0; /* no host process of its own: the registry reads no network counters */
        return 0;
}

static int fake_state(runtime *rt, const char *id, rt_state *ret, pid_t *ret_pid, cs_error **err)
{
        fake_runtime *f = FAKE(rt);
        fake_container *c;

        pthread_mutex_lock(&f->lock);
        if (f->fail_queries) {
                pthread_mutex_unlock(&f->lock);
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "fake: the runtime is down");
        }
        f->state_queries++;
        c = find_locked(f, id);
        *ret = c ? c->state : RT_ABSENT;
        if (ret_pid)
                *ret_pid = 0;
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int fake_list_details(runtime *rt, rt_container **ret, size_t *ret_n, cs_error **err)
{
        fake_runtime *f = FAKE(rt);
        rt_container *cs;

        pthread_mutex_lock(&f->lock);
        if (f->fail_queries) {
                pthread_mutex_unlock(&f->lock);
                return cs_error_set(err, GRPC_STATUS_UNAVAILABLE, "fake: the runtime is down");
        }
        cs = cs_xcalloc(f->n + 1, sizeof(*cs));
        for (size_t i = 0; i < f->n; i++) {
                cs[i].id = cs_xstrdup(f->c[i].id);
                cs[i].state = f->c[i].state;
                cs[i].bundle = cs_xstrdup(f->c[i].bundle);
        }
        *ret = cs;
        *ret_n = f->n;
        pthread_mutex_unlock(&f->lock);
        return 0;
}

/* fork-then-exec at once (the test runner has threads): only dup2, a signal reset, execve. */
static int spawn(const rt_exec_spec *spec, pid_t *ret, cs_error **err)
{
        pid_t pid = fork();

        if (pid < 0)
                return cs_error_errno(err, errno, "fake: fork");
        if (pid == 0) {
                sigset_t none;
                int devnull = open("/dev/null", O_RDONLY);
                if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(spec->stdout_fd, 1) < 0 ||
                    dup2(spec->stderr_fd, 2) < 0)
                        _exit(127);
                for (int sig = 1; sig < NSIG; sig++)
                        signal(sig, SIG_DFL);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                execve(spec->argv[0], spec->argv, spec->env);
                _exit(127);
        }
        *ret = pid;
        return 0;
}

static int write_pid_file(const char *path, pid_t pid, cs_error **err)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        char buf[32];
        int len = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
        bool ok = fd >= 0 && write(fd, buf, (size_t)len) == len;

        if (fd >= 0)
                close(fd);
        return ok ? 0 : cs_error_errno(err, errno ? errno : EIO, "fake: cannot write %s", path);
}

static int fake_exec(runtime *rt, const rt_exec_spec *spec, rt_exec *ret, cs_error **err)
{
        fake_runtime *f = FAKE(rt);
        static unsigned serial;
        _cleanup_free_ char *pid_file = NULL;
        void (*hook)(void *, const rt_exec_spec *, pid_t);
        void *hook_data;
        fake_container *c;
        pid_t pid = 0;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, spec->container_id);
        if (f->exec_fail_code || !c || c->state != RT_RUNNING || c->n_roots == FAKE_MAX_PROCS) {
                int code = f->exec_fail_code ? f->exec_fail_code : GRPC_STATUS_FAILED_PRECONDITION;
                pthread_mutex_unlock(&f->lock);
                return cs_error_set(err, code, "%s",
                                    f->exec_fail_code ? f->exec_fail_msg
                                                      : "fake: the container is not running");
        }
        pid_file =
                cs_xasprintf("%s/" RT_EXEC_PID_PREFIX "fake-%u" RT_EXEC_PID_SUFFIX,
                             spec->scratch_dir, __atomic_fetch_add(&serial, 1, __ATOMIC_SEQ_CST));
        /* Under the lock, so that a concurrent destroy sees the process. */
        if (spawn(spec, &pid, err) < 0) {
                pthread_mutex_unlock(&f->lock);
                return -1;
        }
        c->roots[c->n_roots++] = pid;
        f->last_exec = pid;
        f->execs++;
        hook = f->on_exec;
        hook_data = f->on_exec_userdata;
        pthread_mutex_unlock(&f->lock);
        ret->host_pid = pid;
        /* The pid reaches the file a little after the start, as runsc's does. */
        if (write_pid_file(pid_file, pid, err) < 0) {
                cs_error *ignored = NULL;
                int status;
                kill(pid, SIGKILL);
                if (proc_wait(pid, &status, &ignored) < 0)
                        cs_error_free(ignored);
                return -1;
        }
        ret->pid_file = TAKE_PTR(pid_file);
        if (hook)
                hook(hook_data, spec, pid);
        return 0;
}

/* Whether pid is (or was) one of the container's processes. */
static bool is_member(fake_runtime *f, const char *id, int pid)
{
        _cleanup_free_ rt_proc *procs = NULL;
        size_t n = 0;
        cs_error *ignored = NULL;
        bool found = false;
        fake_container *c;

        if (container_processes(f, id, &procs, &n, &ignored) < 0) {
                cs_error_free(ignored);
                return false;
        }
        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id);
        for (size_t k = 0; c && k < c->n_known && !found; k++)
                found = c->known[k] == pid;
        pthread_mutex_unlock(&f->lock);
        return found;
}

static int fake_signal(runtime *rt, const char *id, int pid, int sig, cs_error **err)
{
        fake_runtime *f = FAKE(rt);

        if (!is_member(f, id, pid))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                                    "fake: pid %d is not a process of %s", pid, id);
        if (kill(pid, sig) < 0)
                return cs_error_errno(err, errno, "fake: kill %d", pid);
        pthread_mutex_lock(&f->lock);
        log_locked(f, id, sig);
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int fake_processes(runtime *rt, const char *id, rt_proc **ret, size_t *ret_n, cs_error **err)
{
        return container_processes(FAKE(rt), id, ret, ret_n, err);
}

/* Like runsc: the container's processes die with it, and it is gone. */
static int fake_destroy(runtime *rt, const char *id, cs_error **err)
{
        fake_runtime *f = FAKE(rt);
        _cleanup_free_ rt_proc *procs = NULL;
        size_t n = 0;
        cs_error *ignored = NULL;

        pthread_mutex_lock(&f->lock);
        if (f->fail_destroy) {
                log_locked(f, id, 0);
                pthread_mutex_unlock(&f->lock);
                /* What runsc said when a max_runtime stop failed (the attack pass). */
                return cs_error_set(err, GRPC_STATUS_DEADLINE_EXCEEDED,
                                    "fake: context deadline exceeded");
        }
        pthread_mutex_unlock(&f->lock);
        if (container_processes(f, id, &procs, &n, &ignored) < 0)
                cs_error_free(ignored); /* absent: nothing to kill */
        for (size_t i = 0; i < n; i++)
                kill(procs[i].pid, SIGKILL);
        pthread_mutex_lock(&f->lock);
        log_locked(f, id, 0);
        pthread_mutex_unlock(&f->lock);
        fake_runtime_set(f, id, RT_ABSENT);
        return 0;
}

static void fake_free_op(runtime *rt)
{
        fake_runtime_free(FAKE(rt));
}

static const runtime_ops fake_ops = {
        .name = "fake",
        .create = fake_create,
        .state = fake_state,
        .list_details = fake_list_details,
        .exec = fake_exec,
        .signal = fake_signal,
        .processes = fake_processes,
        .destroy = fake_destroy,
        .free = fake_free_op,
};

/* --- scripting ----------------------------------------------------------------------- */

fake_runtime *fake_runtime_new(void)
{
        fake_runtime *f = cs_xcalloc(1, sizeof(*f));

        f->rt.ops = &fake_ops;
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->creates_cond, NULL);
        return f;
}

void fake_runtime_hold_creates(fake_runtime *f, bool hold)
{
        pthread_mutex_lock(&f->lock);
        f->hold_creates = hold;
        pthread_cond_broadcast(&f->creates_cond);
        pthread_mutex_unlock(&f->lock);
}

bool fake_runtime_creating(fake_runtime *f, const char *id)
{
        bool found = false;

        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS && !found; i++)
                found = strcmp(f->creating_ids[i], id) == 0;
        pthread_mutex_unlock(&f->lock);
        return found;
}

void fake_runtime_creates(fake_runtime *f, size_t *ret_asked, size_t *ret_in_flight,
                          size_t *ret_max)
{
        pthread_mutex_lock(&f->lock);
        *ret_asked = f->creates;
        *ret_in_flight = f->creating;
        *ret_max = f->creating_max;
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_free(fake_runtime *f)
{
        if (!f)
                return;
        pthread_mutex_destroy(&f->lock);
        pthread_cond_destroy(&f->creates_cond);
        free(f);
}

runtime *fake_runtime_rt(fake_runtime *f)
{
        return &f->rt;
}

void fake_runtime_set(fake_runtime *f, const char *id, rt_state state)
{
        fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id);
        if (state == RT_ABSENT) {
                if (c)
                        *c = f->c[--f->n];
        } else if (c) {
                c->state = state;
        } else if (f->n < FAKE_MAX_CONTAINERS) {
                c = &f->c[f->n++];
                *c = (fake_container){ .state = state };
                snprintf(c->id, FAKE_ID_MAX, "%s", id);
        }
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_set_bundle(fake_runtime *f, const char *id, const char *bundle)
{
        fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id);
        if (c)
                snprintf(c->bundle, sizeof(c->bundle), "%s", bundle);
        pthread_mutex_unlock(&f->lock);
}

size_t fake_runtime_state_queries(fake_runtime *f)
{
        size_t n;

        pthread_mutex_lock(&f->lock);
        n = f->state_queries;
        pthread_mutex_unlock(&f->lock);
        return n;
}

void fake_runtime_add_process(fake_runtime *f, const char *id, pid_t pid)
{
        fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id);
        if (c && c->n_roots < FAKE_MAX_PROCS)
                c->roots[c->n_roots++] = pid;
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_fail_exec(fake_runtime *f, int code, const char *msg)
{
        pthread_mutex_lock(&f->lock);
        f->exec_fail_code = code;
        snprintf(f->exec_fail_msg, sizeof(f->exec_fail_msg), "%s", msg ? msg : "");
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_fail_destroy(fake_runtime *f, bool fail)
{
        pthread_mutex_lock(&f->lock);
        f->fail_destroy = fail;
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_fail_queries(fake_runtime *f, bool fail)
{
        pthread_mutex_lock(&f->lock);
        f->fail_queries = fail;
        pthread_mutex_unlock(&f->lock);
}

void fake_runtime_on_exec(fake_runtime *f,
                          void (*fn)(void *userdata, const rt_exec_spec *spec, pid_t pid),
                          void *userdata)
{
        pthread_mutex_lock(&f->lock);
        f->on_exec = fn;
        f->on_exec_userdata = userdata;
        pthread_mutex_unlock(&f->lock);
}

pid_t fake_runtime_last_exec_pid(fake_runtime *f)
{
        pid_t pid = 0;

        pthread_mutex_lock(&f->lock);
        pid = f->last_exec;
        pthread_mutex_unlock(&f->lock);
        return pid;
}

size_t fake_runtime_execs(fake_runtime *f)
{
        size_t n;

        pthread_mutex_lock(&f->lock);
        n = f->execs;
        pthread_mutex_unlock(&f->lock);
        return n;
}

static size_t count_log(fake_runtime *f, const char *id, bool destroys, int sig)
{
        size_t n = 0;

        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_log; i++) {
                if (strcmp(f->log[i].id, id) != 0)
                        continue;
                if (destroys ? f->log[i].sig == 0
                             : (f->log[i].sig && (!sig || f->log[i].sig == sig)))
                        n++;
        }
        pthread_mutex_unlock(&f->lock);
        return n;
}

size_t fake_runtime_signals(fake_runtime *f, const char *id, int sig)
{
        return count_log(f, id, false, sig);
}

size_t fake_runtime_destroys(fake_runtime *f, const char *id)
{
        return count_log(f, id, true, 0);
}
