/* Unit tests of exec.c behind the fake runtime (fake_runtime.h): real host processes, real
 * pipes and signals, a real registry (local mode) on a temporary state directory and a fake
 * cgroup tree. Owns its temporary directory and the processes its execs start; touches
 * nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"
#include "fake_runtime.h"
#include "testfs.h"
#include "sandbox.h"
#include "util.h"

#define SB_UUID "0b7d3c7e-1f2a-4b5c-8d9e-0123456789ab"

typedef struct fixture {
        char dir[64];
        char *state_dir, *images_dir, *cg_dir;
        cgroup_fs cg;
        fake_runtime *fake;
        sb_registry *reg;
        sandbox *sb;
        char container_id[64];
} fixture;

static int setup(void **state)
{
        fixture *f = cs_xcalloc(1, sizeof(*f));
        cs_error *err = NULL;
        _cleanup_free_ char *img = NULL, *cgc = NULL, *cgp = NULL, *cgs = NULL;
        sb_config cfg;
        sb_spec spec = { .id = SB_UUID, .tenant_id = "t", .session_id = "s", .image = "test" };
        sb_info info = { 0 };
        bool created;

        snprintf(f->dir, sizeof(f->dir), "/tmp/cs-test-exec-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        f->state_dir = cs_xasprintf("%s/state", f->dir);
        f->images_dir = cs_xasprintf("%s/images", f->dir);
        f->cg_dir = cs_xasprintf("%s/cg", f->dir);
        img = cs_xasprintf("%s/test", f->images_dir);
        cgc = cs_xasprintf("%s/cgroup.controllers", f->cg_dir);
        cgp = cs_xasprintf("%s/compute", f->cg_dir);
        cgs = cs_xasprintf("%s/compute/%s", f->cg_dir, SB_UUID);
        testfs_mkdir(f->state_dir);
        testfs_mkdir(f->images_dir);
        testfs_mkdir(img);
        testfs_mkdir(f->cg_dir);
        testfs_put(cgc, "cpu io memory pids\n");
        testfs_mkdir(cgp);
        testfs_mkdir(cgs);
        if (cgroup_fs_detect(f->cg_dir, &f->cg, &err) < 0)
                fail_msg("cgroup_fs_detect: %s", err->msg);
        f->fake = fake_runtime_new();
        cfg = (sb_config){ .state_dir = f->state_dir,
                           .images_dir = f->images_dir,
                           .cgroup_parent = "/compute",
                           .grace_ms = 3600 * 1000,
                           .sample_interval_ms = 3600 * 1000, /* no housekeeping meanwhile */
                           .start_timeout_ms = 10000,
                           .max_sandboxes = 4 };
        if (sb_registry_open(&cfg, fake_runtime_rt(f->fake), &f->cg, NULL, &f->reg, &err) < 0)
                fail_msg("sb_registry_open: %s", err->msg);
        if (sb_create(f->reg, &spec, &info, &created, &err) < 0)
                fail_msg("sb_create: %s", err->msg);
        sb_info_clear(&info);
        if (sb_acquire(f->reg, SB_UUID, true, 5000, -1, &f->sb, &err) < 0)
                fail_msg("sb_acquire: %s", err->msg);
        snprintf(f->container_id, sizeof(f->container_id), "%s", sb_container_id(f->sb));
        *state = f;
        return 0;
}

/* Kills and reaps whatever the test's processes left: this runner is their subreaper, so an
 * orphan (a child forked just as its parent was stopped) ends here, not in the host's init. */
static void reap_leftovers(void)
{
        int status;

        for (int round = 0; round < 100; round++) {
                _cleanup_free_ char *path = cs_xasprintf("/proc/self/task/%d/children", getpid());
                _cleanup_free_ char *text = NULL;
                char *cursor, *tok, *save = NULL;
                bool any = false;

                if (cs_read_file(path, 4096, &text, NULL, NULL) < 0)
                        break;
                for (cursor = text; (tok = strtok_r(cursor, " \n", &save)); cursor = NULL) {
                        kill((pid_t)atoi(tok), SIGKILL);
                        any = true;
                }
                while (waitpid(-1, &status, WNOHANG) > 0)
                        any = true;
                if (!any)
                        break;
                usleep(10 * 1000);
        }
}

static int teardown(void **state)
{
        fixture *f = *state;

        reap_leftovers();

        sb_release(f->reg, f->sb);
        sb_registry_free(f->reg);
        fake_runtime_free(f->fake);
        cgroup_fs_free(&f->cg);
        cs_remove_tree(AT_FDCWD, f->dir);
        free(f->state_dir);
        free(f->images_dir);
        free(f->cg_dir);
        free(f);
        return 0;
}

/* --- a sink that records, fails or blocks ---------------------------------------------- */

typedef struct collector {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char *data[3]; /* by stream: [EXEC_STDOUT], [EXEC_STDERR] */
        size_t len[3];
        size_t calls, max_chunk;
        int64_t start_ms, first_ms; /* monotonic; first_ms: when the first chunk came */
        int fail_at;                /* the call (1-based) that fails; 0: none */
        bool block;                 /* writes wait while set */
        bool entered;               /* a write has started */
        int cancel_on_output;       /* write a byte here at the first chunk; -1: no */
} collector;

static void collector_init(collector *c)
{
        *c = (collector){ .cancel_on_output = -1 };
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->cond, NULL);
        c->start_ms = cs_now_monotonic_ms();
}

static void collector_clear(collector *c)
{
        free(c->data[EXEC_STDOUT]);
        free(c->data[EXEC_STDERR]);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
}

static int collector_write(void *userdata, int stream, const uint8_t *data, size_t len,
                           cs_error **err)
{
        collector *c = userdata;
        int r = 0;

        pthread_mutex_lock(&c->lock);
        c->calls++;
        c->entered = true;
        pthread_cond_broadcast(&c->cond);
        while (c->block)
                pthread_cond_wait(&c->cond, &c->lock);
        if (!c->first_ms)
                c->first_ms = cs_now_monotonic_ms();
        if (len > c->max_chunk)
                c->max_chunk = len;
        if (c->fail_at && (int)c->calls >= c->fail_at) {
                r = cs_error_set(err, GRPC_STATUS_CANCELLED, "the client went away");
        } else {
                c->data[stream] = realloc(c->data[stream], c->len[stream] + len + 1);
                assert_non_null(c->data[stream]);
                memcpy(c->data[stream] + c->len[stream], data, len);
                c->len[stream] += len;
                c->data[stream][c->len[stream]] = '\0';
        }
        if (c->cancel_on_output >= 0) {
                assert_int_equal(write(c->cancel_on_output, "x", 1), 1);
                c->cancel_on_output = -1;
        }
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* --- running a script ------------------------------------------------------------------ */

typedef struct run {
        const char *script;
        int64_t timeout_ms, grace_ms;
        char *const *env_keys, *const *env_values;
        size_t n_env;
        int cancel_fd;
        collector *out;
        exec_result res;
        cs_error *err;
        int r;
        fixture *f;
} run;

static void run_exec(run *x)
{
        char *args[] = { "-c", (char *)x->script };
        exec_request req = { .command = "/bin/sh",
                             .args = args,
                             .n_args = 2,
                             .env_keys = x->env_keys,
                             .env_values = x->env_values,
                             .n_env = x->n_env,
                             .timeout_ms = x->timeout_ms,
                             .kill_grace_ms = x->grace_ms };
        exec_sink sink = { .write = collector_write,
                           .userdata = x->out,
                           .cancel_fd = x->cancel_fd };

        assert_int_equal(exec_validate(&req, &x->err), 0);
        x->r = exec_run(x->f->reg, fake_runtime_rt(x->f->fake), x->f->sb, &req, &sink, &x->res,
                        &x->err);
}

static void *run_thread(void *arg)
{
        run_exec(arg);
        return NULL;
}

/* The fds this process holds that an exec could leak: pipes, pidfds and sockets. Files by
 * path are left out: the registry's own threads open records, cgroup and /proc files for a
 * moment at any time (the starter persists after READY, housekeeping samples), and an exec's
 * files are checked apart (exec_files). */
static int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        assert_non_null(d);
        while ((e = readdir(d))) {
                char path[300], target[256];
                ssize_t len;

                if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
                        continue;
                snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
                len = readlink(path, target, sizeof(target) - 1);
                if (len <= 0)
                        continue; /* closed since readdir: a registry thread's file */
                target[len] = '\0';
                if (target[0] != '/')
                        n++;
        }
        closedir(d);
        return n;
}

/* Files an exec leaves in the sandbox's scratch directory (pid files, specs). */
static int exec_files(fixture *f)
{
        DIR *d = opendir(sb_dir(f->sb));
        struct dirent *e;
        int n = 0;

        assert_non_null(d);
        while ((e = readdir(d)))
                n += strncmp(e->d_name, RT_EXEC_PID_PREFIX, strlen(RT_EXEC_PID_PREFIX)) == 0;
        closedir(d);
        return n;
}

static uint32_t running_execs(fixture *f)
{
        uint32_t live, ready, destroyed, execs;

        sb_counts(f->reg, &live, &ready, &destroyed, &execs);
        return execs;
}

/* Whether pid is gone (or a zombie nobody reaped yet), waiting up to 3 s for it. */
static bool process_gone(pid_t pid)
{
        for (int i = 0; i < 300; i++) {
                char path[64], buf[256];
                int fd;
                ssize_t n;
                char *paren;

                snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return true;
                n = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                buf[n > 0 ? n : 0] = '\0';
                paren = strrchr(buf, ')');
                if (paren && paren[1] == ' ' && paren[2] == 'Z')
                        return true;
                usleep(10 * 1000);
        }
        return false;
}

static pid_t read_pid(const char *path)
{
        _cleanup_free_ char *text = NULL;

        if (cs_read_file(path, 64, &text, NULL, NULL) < 0)
                fail_msg("cannot read %s", path);
        return (pid_t)atoi(text);
}

/* --- the tests ------------------------------------------------------------------------- */

/* A normal exit: its code, both streams apart, the request's environment over the base
 * one, and nothing left behind (fds, pid files, the sandbox's exec count). */
static void test_exit_code_and_streams(void **state)
{
        fixture *f = *state;
        char *keys[] = { "FOO", "HOME" }, *values[] = { "bar", "/h" };
        collector c;
        run x = { .script = "echo out; echo err >&2; printf '%s|%s|%s' \"$FOO\" \"$HOME\" "
                            "\"$LANG\" >&2; exit 3",
                  .env_keys = keys,
                  .env_values = values,
                  .n_env = 2,
                  .cancel_fd = -1,
                  .out = &c,
                  .f = f };
        int fds = count_fds();

        collector_init(&c);
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_null(x.err);
        assert_int_equal(x.res.exit_code, 3);
        assert_int_equal(x.res.signal, 0);
        assert_false(x.res.cancelled);
        assert_false(x.res.timed_out);
        assert_false(x.res.oom_killed);
        assert_string_equal(c.data[EXEC_STDOUT], "out\n");
        assert_string_equal(c.data[EXEC_STDERR], "err\nbar|/h|C.UTF-8");
        assert_int_equal(count_fds(), fds);
        assert_int_equal(exec_files(f), 0);
        assert_int_equal(running_execs(f), 0);
        assert_int_equal(fake_runtime_signals(f->fake, f->container_id, 0), 0);
        collector_clear(&c);
}

/* Bulk output comes in chunks of at most EXEC_CHUNK; a little output comes at once, without
 * waiting for a newline or the end. */
static void test_output_chunks(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "head -c 1048576 /dev/zero", .cancel_fd = -1, .out = &c, .f = f };

        collector_init(&c);
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_int_equal(x.res.exit_code, 0);
        assert_int_equal(c.len[EXEC_STDOUT], 1048576);
        assert_true(c.max_chunk <= EXEC_CHUNK);
        assert_true(c.calls >= 1048576 / EXEC_CHUNK);
        collector_clear(&c);

        collector_init(&c);
        x = (run){
                .script = "printf abc; sleep 1; printf def", .cancel_fd = -1, .out = &c, .f = f
        };
        run_exec(&x);
        assert_int_equal(x.res.exit_code, 0);
        assert_string_equal(c.data[EXEC_STDOUT], "abcdef");
        assert_int_equal(c.calls, 2);
        if (c.first_ms - c.start_ms >= 800)
                fail_msg("the first chunk came after %lld ms",
                         (long long)(c.first_ms - c.start_ms));
        assert_true(x.res.wall_ms >= 1000);
        collector_clear(&c);
}

/* A process killed by a signal: 128+n and the signal, from the host status (here the host
 * process is the process) and from runsc's own convention (exit 128+n). */
static void test_signal_death(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "kill -KILL $$", .cancel_fd = -1, .out = &c, .f = f };

        collector_init(&c);
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_int_equal(x.res.exit_code, 128 + SIGKILL);
        assert_int_equal(x.res.signal, SIGKILL);
        assert_false(x.res.timed_out);
        collector_clear(&c);

        collector_init(&c);
        x = (run){ .script = "exit 130", .cancel_fd = -1, .out = &c, .f = f };
        run_exec(&x);
        assert_int_equal(x.res.exit_code, 130);
        assert_int_equal(x.res.signal, SIGINT);
        collector_clear(&c);
}

/* The timeout: SIGTERM, and a process that obeys it ends there, long before the grace. */
static void test_timeout_sigterm(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "sleep 30", .timeout_ms = 300, .cancel_fd = -1, .out = &c, .f = f };

        collector_init(&c);
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_true(x.res.timed_out);
        assert_false(x.res.cancelled);
        assert_int_equal(x.res.exit_code, -1);
        assert_int_equal(x.res.signal, SIGTERM);
        assert_true(x.res.wall_ms >= 300);
        if (x.res.wall_ms >= 3000)
                fail_msg("stopped after %lld ms", (long long)x.res.wall_ms);
        assert_int_equal(fake_runtime_signals(f->fake, f->container_id, SIGTERM), 1);
        collector_clear(&c);
}

/* A process that ignores SIGTERM gets SIGKILL after the grace, and so does what it started
 * (a background child that would otherwise outlive it). */
static void test_timeout_sigkill_after_grace(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *bg = cs_xasprintf("%s/bg", f->dir);
        char *keys[] = { "BG" }, *values[] = { bg };
        collector c;
        run x = { .script = "trap '' TERM; sleep 30 & echo $! > \"$BG\"; sleep 30",
                  .timeout_ms = 300,
                  .grace_ms = 400,
                  .env_keys = keys,
                  .env_values = values,
                  .n_env = 1,
                  .cancel_fd = -1,
                  .out = &c,
                  .f = f };

        collector_init(&c);
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_true(x.res.timed_out);
        assert_int_equal(x.res.exit_code, -1);
        assert_int_equal(x.res.signal, SIGKILL);
        assert_true(x.res.wall_ms >= 700);
        if (x.res.wall_ms >= 5000)
                fail_msg("stopped after %lld ms", (long long)x.res.wall_ms);
        assert_true(fake_runtime_signals(f->fake, f->container_id, SIGTERM) >= 1);
        assert_true(fake_runtime_signals(f->fake, f->container_id, SIGKILL) >= 2);
        assert_true(process_gone(read_pid(bg)));
        collector_clear(&c);
}

/* The caller's cancel fd: the process is stopped, what it wrote before is delivered. */
static void test_cancel(void **state)
{
        fixture *f = *state;
        int p[2];
        collector c;
        run x = { .script = "echo started; exec sleep 30", .out = &c, .f = f };

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        collector_init(&c);
        c.cancel_on_output = p[1];
        x.cancel_fd = p[0];
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_true(x.res.cancelled);
        assert_false(x.res.timed_out);
        assert_int_equal(x.res.exit_code, -1);
        assert_int_equal(x.res.signal, SIGTERM);
        assert_string_equal(c.data[EXEC_STDOUT], "started\n");
        if (x.res.wall_ms >= 3000)
                fail_msg("stopped after %lld ms", (long long)x.res.wall_ms);
        close(p[0]);
        close(p[1]);
        collector_clear(&c);
}

/* The sink failing (the client went away) cancels the exec. */
static void test_sink_fails(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "echo a; exec sleep 30", .cancel_fd = -1, .out = &c, .f = f };

        collector_init(&c);
        c.fail_at = 1;
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_null(x.err);
        assert_true(x.res.cancelled);
        assert_int_equal(x.res.exit_code, -1);
        assert_int_equal(c.calls, 1);
        if (x.res.wall_ms >= 3000)
                fail_msg("stopped after %lld ms", (long long)x.res.wall_ms);
        collector_clear(&c);
}

/* A sink that blocks: nothing more is read, the pipe fills and the process blocks in
 * write(2), with at most one chunk in the agent and one pipe's worth in the kernel. */
static void test_backpressure(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *count_path = cs_xasprintf("%s/count", f->dir);
        char *keys[] = { "COUNT" }, *values[] = { count_path };
        collector c;
        run x = { .script = "i=0; while [ $i -lt 64 ]; do head -c 65536 /dev/zero; "
                            "i=$((i+1)); echo $i > \"$COUNT\"; done",
                  .env_keys = keys,
                  .env_values = values,
                  .n_env = 1,
                  .cancel_fd = -1,
                  .out = &c,
                  .f = f };
        pthread_t thread;
        int blocks;

        collector_init(&c);
        c.block = true;
        assert_int_equal(pthread_create(&thread, NULL, run_thread, &x), 0);
        pthread_mutex_lock(&c.lock);
        while (!c.entered)
                pthread_cond_wait(&c.cond, &c.lock);
        pthread_mutex_unlock(&c.lock);
        usleep(500 * 1000); /* 4 MiB of /dev/zero takes milliseconds when nothing holds it */
        blocks = access(count_path, F_OK) == 0 ? (int)read_pid(count_path) : 0;
        /* One chunk read into the agent plus a full pipe (EXEC_CHUNK, or the default 64 KiB
         * if the pipe could not be grown), and the block in progress not counted yet. */
        if (blocks > 2 * EXEC_CHUNK / 65536)
                fail_msg("the process wrote %d blocks of 64 KiB past a blocked sink", blocks);
        pthread_mutex_lock(&c.lock);
        assert_int_equal(c.calls, 1);
        c.block = false;
        pthread_cond_broadcast(&c.cond);
        pthread_mutex_unlock(&c.lock);
        assert_int_equal(pthread_join(thread, NULL), 0);
        assert_int_equal(x.r, 0);
        assert_int_equal(x.res.exit_code, 0);
        assert_int_equal(c.len[EXEC_STDOUT], 64 * 65536);
        assert_true(c.max_chunk <= EXEC_CHUNK);
        assert_int_equal(read_pid(count_path), 64);
        collector_clear(&c);
}

/* An exec the runtime cannot start: its error, unchanged, and nothing left behind. */
static void test_exec_cannot_start(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "echo never", .cancel_fd = -1, .out = &c, .f = f };
        int fds = count_fds();

        collector_init(&c);
        fake_runtime_fail_exec(f->fake, GRPC_STATUS_UNAVAILABLE, "fake: runsc exec failed");
        run_exec(&x);
        fake_runtime_fail_exec(f->fake, 0, NULL);
        assert_int_equal(x.r, -1);
        assert_non_null(x.err);
        assert_int_equal(x.err->code, GRPC_STATUS_UNAVAILABLE);
        assert_string_equal(x.err->msg, "fake: runsc exec failed");
        cs_error_freep(&x.err);
        assert_int_equal(c.calls, 0);
        assert_int_equal(count_fds(), fds);
        assert_int_equal(exec_files(f), 0);
        assert_int_equal(running_execs(f), 0);
        collector_clear(&c);
}

/* exec_run frees only what it made: an error the caller holds survives a successful run. */
static void test_caller_error_kept(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "exit 0", .cancel_fd = -1, .out = &c, .f = f };
        cs_error *mine = NULL;

        cs_error_set(&mine, GRPC_STATUS_INTERNAL, "the caller's");
        collector_init(&c);
        x.err = mine;
        run_exec(&x);
        assert_int_equal(x.r, 0);
        assert_ptr_equal(x.err, mine);
        assert_string_equal(x.err->msg, "the caller's"); /* ASan: not freed */
        cs_error_free(mine);
        collector_clear(&c);
}

/* Out of fds after the start (pidfd_open fails with EMFILE): an error, not an abort(), and
 * the started process stopped and reaped, no fd leaked. (exec: the fake's host process is
 * the process itself, as if the runtime could stop it without knowing its pid.) */
typedef struct fd_hog {
        struct rlimit saved;
        bool hit;
} fd_hog;

/* No new fd for anyone from now on: a limit of 0 makes every open, pipe and pidfd_open fail
 * with EMFILE, whatever other threads close meanwhile. */
static void hog_fds(void *userdata, const rt_exec_spec *spec, pid_t pid)
{
        fd_hog *h = userdata;
        struct rlimit none;

        (void)spec;
        (void)pid;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &h->saved), 0);
        none = h->saved;
        none.rlim_cur = 0;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
        h->hit = true;
}

static void test_pidfd_exhausted(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "exec sleep 30", .cancel_fd = -1, .out = &c, .f = f };
        fd_hog hog = { .hit = false };
        int fds = count_fds(), status;
        pid_t pid;

        collector_init(&c);
        fake_runtime_on_exec(f->fake, hog_fds, &hog);
        run_exec(&x);
        fake_runtime_on_exec(f->fake, NULL, NULL);
        assert_true(hog.hit);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &hog.saved), 0);
        assert_int_equal(x.r, -1);
        assert_non_null(x.err);
        assert_int_equal(x.err->code, GRPC_STATUS_RESOURCE_EXHAUSTED);
        assert_non_null(strstr(x.err->msg, "cannot watch"));
        cs_error_freep(&x.err);
        pid = fake_runtime_last_exec_pid(f->fake);
        assert_true(pid > 0);
        /* Reaped already: not our child any more. */
        assert_int_equal(waitpid(pid, &status, WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
        assert_int_equal(count_fds(), fds);
        /* The pid file could not be read either (no fd for it): it stays for the next start
         * of the agent, which kills what it names. */
        assert_int_equal(exec_files(f), 1);
        assert_int_equal(running_execs(f), 0);
        collector_clear(&c);
}

/* The runtime dies mid-exec (the container destroyed under it): the exec ends with what
 * killed it, the output so far delivered. */
static void *destroy_when_started(void *arg)
{
        run *x = arg;
        cs_error *err = NULL;
        runtime *rt = fake_runtime_rt(x->f->fake);

        pthread_mutex_lock(&x->out->lock);
        while (!x->out->entered)
                pthread_cond_wait(&x->out->cond, &x->out->lock);
        pthread_mutex_unlock(&x->out->lock);
        if (rt->ops->destroy(rt, x->f->container_id, &err) < 0)
                fail_msg("destroy: %s", err->msg);
        return NULL;
}

static void test_runtime_dies_mid_exec(void **state)
{
        fixture *f = *state;
        collector c;
        run x = { .script = "echo before; exec sleep 30", .cancel_fd = -1, .out = &c, .f = f };
        runtime *rt = fake_runtime_rt(f->fake);
        rt_state st = RT_RUNNING;
        cs_error *err = NULL;
        pthread_t killer;

        collector_init(&c);
        assert_int_equal(pthread_create(&killer, NULL, destroy_when_started, &x), 0);
        run_exec(&x);
        assert_int_equal(pthread_join(killer, NULL), 0);
        assert_int_equal(x.r, 0);
        assert_false(x.res.timed_out);
        assert_false(x.res.cancelled);
        assert_int_equal(x.res.exit_code, 128 + SIGKILL);
        assert_int_equal(x.res.signal, SIGKILL);
        assert_string_equal(c.data[EXEC_STDOUT], "before\n");
        if (x.res.wall_ms >= 5000)
                fail_msg("ended after %lld ms", (long long)x.res.wall_ms);
        assert_int_equal(rt->ops->state(rt, f->container_id, &st, NULL, &err), 0);
        assert_int_equal(st, RT_ABSENT);
        /* A further exec cannot start, and says so. */
        collector_clear(&c);
        collector_init(&c);
        x = (run){ .script = "true", .cancel_fd = -1, .out = &c, .f = f };
        run_exec(&x);
        assert_int_equal(x.r, -1);
        assert_int_equal(x.err->code, GRPC_STATUS_FAILED_PRECONDITION);
        cs_error_freep(&x.err);
        collector_clear(&c);
}

/* An OOM kill in the exec's window (the cgroup's oom_kill count grew): reported as SIGKILL,
 * and the sandbox marked FAILED when its container went with it (gVisor's usual case). */
static void stop_container(void *userdata, const rt_exec_spec *spec, pid_t pid)
{
        fixture *f = userdata;

        (void)pid;
        fake_runtime_set(f->fake, spec->container_id, RT_STOPPED);
}

static void test_oom_kill(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *events =
                cs_xasprintf("%s/compute/%s/memory.events", f->cg_dir, SB_UUID);
        char *keys[] = { "EVENTS" }, *values[] = { events };
        collector c;
        run x = { .script = "echo 'oom_kill 1' > \"$EVENTS\"; kill -KILL $$",
                  .env_keys = keys,
                  .env_values = values,
                  .n_env = 1,
                  .cancel_fd = -1,
                  .out = &c,
                  .f = f };
        sb_info info = { 0 };
        cs_error *err = NULL;

        testfs_put(events, "oom_kill 0\n");
        collector_init(&c);
        fake_runtime_on_exec(f->fake, stop_container, f);
        run_exec(&x);
        fake_runtime_on_exec(f->fake, NULL, NULL);
        assert_int_equal(x.r, 0);
        assert_true(x.res.oom_killed);
        assert_int_equal(x.res.signal, SIGKILL);
        assert_int_equal(x.res.exit_code, 128 + SIGKILL);
        assert_int_equal(sb_describe(f->reg, SB_UUID, &info, &err), 0);
        assert_int_equal(info.status, SB_FAILED);
        assert_string_equal(info.status_message, "the sandbox ran out of memory (limit 1024 MiB)");
        sb_info_clear(&info);
        collector_clear(&c);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_exit_code_and_streams, setup, teardown),
                cmocka_unit_test_setup_teardown(test_output_chunks, setup, teardown),
                cmocka_unit_test_setup_teardown(test_signal_death, setup, teardown),
                cmocka_unit_test_setup_teardown(test_timeout_sigterm, setup, teardown),
                cmocka_unit_test_setup_teardown(test_timeout_sigkill_after_grace, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sink_fails, setup, teardown),
                cmocka_unit_test_setup_teardown(test_backpressure, setup, teardown),
                cmocka_unit_test_setup_teardown(test_exec_cannot_start, setup, teardown),
                cmocka_unit_test_setup_teardown(test_caller_error_kept, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pidfd_exhausted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_runtime_dies_mid_exec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_oom_kill, setup, teardown),
        };

        /* A client that went away must not kill the runner with SIGPIPE. */
        signal(SIGPIPE, SIG_IGN);
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
