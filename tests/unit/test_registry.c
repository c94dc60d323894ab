/* Unit tests of the sandbox registry's restart reconciliation (sandbox.h, local mode) against
 * its records on disk, behind the fake runtime (fake_runtime.h) and a fake cgroup tree. Owns
 * its temporary directory and the host processes it starts as "leftover execs"; touches
 * nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_runtime.h"
#include "testfs.h"
#include "sandbox.h"
#include "util.h"
#include "uuid.h"

#define ID_RUNNING "11111111-1111-4111-8111-111111111111" /* found running after restart */
#define ID_LOST    "22222222-2222-4222-8222-222222222222" /* its container gone */
#define ID_GONE    "33333333-3333-4333-8333-333333333333" /* destroyed before the restart */
#define ID_NOIMAGE "44444444-4444-4444-8444-444444444444" /* running, its image removed */
#define ID_BAD     "55555555-5555-4555-8555-555555555555" /* a record that is not one */

typedef struct fixture {
        char dir[64];
        char *state_dir, *images_dir, *cg_dir;
        cgroup_fs cg;
        fake_runtime *fake;
        sb_registry *reg;
} fixture;

static int n_previous_run_logs; /* log lines about exec processes of the previous run */

static void log_hook(bool warn, const char *sandbox_id, const char *msg)
{
        (void)warn;
        (void)sandbox_id;
        if (strstr(msg, "left by the agent's previous run"))
                n_previous_run_logs++;
}

static char *sandbox_path(fixture *f, const char *id, const char *name)
{
        return cs_xasprintf("%s/sandboxes/%s/%s", f->state_dir, id, name);
}

/* The sandbox's cgroup in the fake tree, with a CPU counter (usage_usec). */
static void make_cgroup(fixture *f, const char *id, unsigned long long usage_usec)
{
        _cleanup_free_ char *dir = cs_xasprintf("%s/compute/%s", f->cg_dir, id);
        _cleanup_free_ char *stat = cs_xasprintf("%s/cpu.stat", dir);
        char text[64];

        testfs_mkdir(dir);
        snprintf(text, sizeof(text), "usage_usec %llu\n", usage_usec);
        testfs_put(stat, text);
}

/* sample_interval_ms: the housekeeping tick (an hour: none during the test). */
static void open_registry_ticking(fixture *f, int64_t sample_interval_ms)
{
        cs_error *err = NULL;
        sb_config cfg = { .state_dir = f->state_dir,
                          .images_dir = f->images_dir,
                          .cgroup_parent = "/compute",
                          .grace_ms = 3600 * 1000,
                          .sample_interval_ms = sample_interval_ms,
                          .start_timeout_ms = 10000,
                          .max_sandboxes = 8 };

        if (sb_registry_open(&cfg, fake_runtime_rt(f->fake), &f->cg, log_hook, &f->reg, &err) < 0)
                fail_msg("sb_registry_open: %s", err->msg);
}

static void open_registry(fixture *f)
{
        open_registry_ticking(f, 3600 * 1000);
}

static int setup(void **state)
{
        fixture *f = cs_xcalloc(1, sizeof(*f));
        cs_error *err = NULL;
        _cleanup_free_ char *cgc = NULL, *cgp = NULL;

        snprintf(f->dir, sizeof(f->dir), "/tmp/cs-test-registry-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        f->state_dir = cs_xasprintf("%s/state", f->dir);
        f->images_dir = cs_xasprintf("%s/images", f->dir);
        f->cg_dir = cs_xasprintf("%s/cg", f->dir);
        cgc = cs_xasprintf("%s/cgroup.controllers", f->cg_dir);
        cgp = cs_xasprintf("%s/compute", f->cg_dir);
        testfs_mkdir(f->state_dir);
        testfs_mkdir(f->images_dir);
        testfs_mkdir(f->cg_dir);
        testfs_put(cgc, "cpu io memory pids\n");
        testfs_mkdir(cgp);
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ char *img =
                        cs_xasprintf("%s/%s", f->images_dir, i ? "other" : "test");
                testfs_mkdir(img);
        }
        if (cgroup_fs_detect(f->cg_dir, &f->cg, &err) < 0)
                fail_msg("cgroup_fs_detect: %s", err->msg);
        f->fake = fake_runtime_new();
        n_previous_run_logs = 0;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

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

/* Creates a sandbox and waits for it to be READY. */
static void create_ready(fixture *f, const char *id, const char *image)
{
        sb_spec spec = { .id = id, .tenant_id = "t", .session_id = id, .image = image };
        sb_info info = { 0 };
        cs_error *err = NULL;
        sandbox *sb;
        bool created;

        if (sb_create(f->reg, &spec, &info, &created, &err) < 0)
                fail_msg("sb_create: %s", err->msg);
        assert_true(created);
        sb_info_clear(&info);
        if (sb_acquire(f->reg, id, true, 5000, -1, &sb, &err) < 0)
                fail_msg("sb_acquire: %s", err->msg);
        sb_release(f->reg, sb);
}

static void describe(fixture *f, const char *id, sb_info *ret)
{
        cs_error *err = NULL;

        if (sb_describe(f->reg, id, ret, &err) < 0)
                fail_msg("sb_describe %s: %s", id, err->msg);
}

/* A host process standing for an exec of the previous run: a shell with a child. */
static pid_t start_leftover(void)
{
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0) {
                execl("/bin/sh", "sh", "-c", "sleep 30 & wait", (char *)NULL);
                _exit(127);
        }
        return pid;
}

static void write_pid(fixture *f, const char *id, const char *name, pid_t pid)
{
        _cleanup_free_ char *path = sandbox_path(f, id, name);
        char text[32];

        snprintf(text, sizeof(text), "%d\n", (int)pid);
        testfs_put(path, text);
}

static bool exists(fixture *f, const char *id, const char *name)
{
        _cleanup_free_ char *path = sandbox_path(f, id, name);

        return access(path, F_OK) == 0;
}

/* The children of pid (from /proc/<pid>/task/<pid>/children). */
static pid_t first_child(pid_t pid)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/%d/task/%d/children", (int)pid, (int)pid);

        for (int i = 0; i < 300; i++) {
                _cleanup_free_ char *text = NULL;
                if (cs_read_file(path, 256, &text, NULL, NULL) == 0 && atoi(text) > 0)
                        return (pid_t)atoi(text);
                usleep(10 * 1000);
        }
        fail_msg("pid %d started no child", (int)pid);
        return -1;
}

/* Whether pid is gone (or a zombie), waiting up to 3 s. */
static bool process_gone(pid_t pid)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/%d/stat", (int)pid);

        for (int i = 0; i < 300; i++) {
                _cleanup_free_ char *text = NULL;
                char *paren;
                if (cs_read_file(path, 512, &text, NULL, NULL) < 0)
                        return true;
                paren = strrchr(text, ')');
                if (paren && paren[1] == ' ' && paren[2] == 'Z')
                        return true;
                usleep(10 * 1000);
        }
        return false;
}

/* Records written, the agent gone, the runtime found as it is: running sandboxes READY with
 * their usage, lost ones FAILED with their last usage, destroyed ones untouched, a running
 * one whose image is gone stopped, a container without a record destroyed, exec processes
 * of the previous run killed (with what they started) where the container still runs. */
static void test_restart_reconciliation(void **state)
{
        fixture *f = *state;
        cs_error *err = NULL;
        sb_info info = { 0 };
        sandbox *sb;
        _cleanup_free_ char *spec_file = NULL;
        pid_t leftover, leftover_child, bystander, bystander_child;
        int status;

        open_registry(f);
        make_cgroup(f, ID_RUNNING, 5000000);
        make_cgroup(f, ID_LOST, 7000000);
        create_ready(f, ID_RUNNING, "test");
        create_ready(f, ID_LOST, "test");
        create_ready(f, ID_GONE, "test");
        create_ready(f, ID_NOIMAGE, "other");
        if (sb_acquire(f->reg, ID_RUNNING, true, 0, -1, &sb, &err) < 0)
                fail_msg("sb_acquire: %s", err->msg);
        sb_count_file_io(f->reg, sb, 1000, 2000);
        sb_release(f->reg, sb);
        /* Readings that go into the records. */
        describe(f, ID_RUNNING, &info);
        assert_int_equal(info.usage.cpu_ms, 5000);
        assert_int_equal(info.usage.disk_read_bytes, 1000);
        sb_info_clear(&info);
        describe(f, ID_LOST, &info);
        assert_int_equal(info.usage.cpu_ms, 7000);
        sb_info_clear(&info);
        if (sb_destroy(f->reg, ID_GONE, -1, &info, &err) < 0)
                fail_msg("sb_destroy: %s", err->msg);
        sb_info_clear(&info);
        sb_registry_free(f->reg);
        f->reg = NULL;

        /* While the agent is down: one container lost with its cgroup, an image removed, a
         * container nobody recorded, exec processes left behind. */
        fake_runtime_set(f->fake, "cs-" ID_LOST, RT_ABSENT);
        {
                _cleanup_free_ char *cg = cs_xasprintf("%s/compute/%s", f->cg_dir, ID_LOST);
                _cleanup_free_ char *img = cs_xasprintf("%s/other", f->images_dir);
                cs_remove_tree(AT_FDCWD, cg);
                assert_int_equal(rmdir(img), 0);
        }
        fake_runtime_set(f->fake, "cs-stray", RT_RUNNING);
        leftover = start_leftover();
        leftover_child = first_child(leftover);
        fake_runtime_add_process(f->fake, "cs-" ID_RUNNING, leftover);
        write_pid(f, ID_RUNNING, RT_EXEC_PID_PREFIX "old" RT_EXEC_PID_SUFFIX, leftover);
        spec_file = sandbox_path(f, ID_RUNNING, RT_EXEC_PID_PREFIX "old.json");
        testfs_put(spec_file, "{}");
        bystander = start_leftover();
        bystander_child = first_child(bystander);
        write_pid(f, ID_LOST, RT_EXEC_PID_PREFIX "old" RT_EXEC_PID_SUFFIX, bystander);

        open_registry(f);

        describe(f, ID_RUNNING, &info);
        assert_int_equal(info.status, SB_READY);
        assert_int_equal(info.usage.cpu_ms, 5000);
        assert_int_equal(info.usage.disk_read_bytes, 1000);
        assert_int_equal(info.usage.disk_write_bytes, 2000);
        sb_info_clear(&info);
        describe(f, ID_LOST, &info);
        assert_int_equal(info.status, SB_FAILED);
        assert_string_equal(info.status_message, "the container was lost while the agent was down");
        assert_int_equal(info.usage.cpu_ms, 7000);
        sb_info_clear(&info);
        describe(f, ID_GONE, &info);
        assert_int_equal(info.status, SB_DESTROYED);
        sb_info_clear(&info);
        describe(f, ID_NOIMAGE, &info);
        assert_int_equal(info.status, SB_FAILED);
        assert_non_null(strstr(info.status_message, "not an image of this node"));
        sb_info_clear(&info);

        /* Only the containers that had to go were destroyed. */
        assert_int_equal(fake_runtime_destroys(f->fake, "cs-stray"), 1);
        assert_int_equal(fake_runtime_destroys(f->fake, "cs-" ID_NOIMAGE), 1);
        assert_int_equal(fake_runtime_destroys(f->fake, "cs-" ID_RUNNING), 0);
        assert_int_equal(fake_runtime_destroys(f->fake, "cs-" ID_GONE), 1); /* its sb_destroy */

        /* The leftover exec of the running sandbox: killed with its child, files removed. */
        assert_int_equal(waitpid(leftover, &status, 0), leftover);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGKILL);
        assert_true(process_gone(leftover_child));
        assert_true(fake_runtime_signals(f->fake, "cs-" ID_RUNNING, SIGKILL) >= 2);
        assert_false(exists(f, ID_RUNNING, RT_EXEC_PID_PREFIX "old" RT_EXEC_PID_SUFFIX));
        assert_false(exists(f, ID_RUNNING, RT_EXEC_PID_PREFIX "old.json"));
        assert_int_equal(n_previous_run_logs, 1);
        /* A lost container's pid file names no process of it any more: not signalled. */
        assert_false(exists(f, ID_LOST, RT_EXEC_PID_PREFIX "old" RT_EXEC_PID_SUFFIX));
        assert_int_equal(waitpid(bystander, &status, WNOHANG), 0);
        assert_int_equal(kill(bystander_child, 0), 0); /* not signalled */
        kill(bystander_child, SIGKILL);
        kill(bystander, SIGKILL);
        assert_int_equal(waitpid(bystander, &status, 0), bystander);
}

/* A record that cannot be read is skipped; the others load. */
static void test_reopen_skips_bad_record(void **state)
{
        fixture *f = *state;
        cs_error *err = NULL;
        sb_info info = { 0 };
        _cleanup_free_ char *dir = NULL, *record = NULL;

        open_registry(f);
        make_cgroup(f, ID_RUNNING, 1000);
        create_ready(f, ID_RUNNING, "test");
        sb_registry_free(f->reg);
        f->reg = NULL;
        dir = cs_xasprintf("%s/sandboxes/%s", f->state_dir, ID_BAD);
        testfs_mkdir(dir);
        record = sandbox_path(f, ID_BAD, "sandbox.json");
        testfs_put(record, "{\"id\": \"" ID_BAD "\", \"status\": 99}");

        open_registry(f);
        describe(f, ID_RUNNING, &info);
        assert_int_equal(info.status, SB_READY);
        sb_info_clear(&info);
        assert_int_equal(sb_describe(f->reg, ID_BAD, &info, &err), -1);
        assert_int_equal(err->code, GRPC_STATUS_NOT_FOUND);
        cs_error_freep(&err);
}

/* Whether the sandbox's cgroup directory in the fake tree is gone, waiting up to 5 s. */
static bool cgroup_gone(fixture *f, const char *id)
{
        _cleanup_free_ char *dir = cs_xasprintf("%s/compute/%s", f->cg_dir, id);

        for (int i = 0; i < 500; i++) {
                if (access(dir, F_OK) < 0)
                        return true;
                usleep(10 * 1000);
        }
        return false;
}

/* The sandbox's status once it is no longer READY, waiting up to 5 s: the housekeeping
 * thread removes the cgroup a moment before it marks the sandbox FAILED. */
static void describe_settled(fixture *f, const char *id, sb_info *ret)
{
        for (int i = 0; i < 500; i++) {
                describe(f, id, ret);
                if (ret->status != SB_READY)
                        return;
                sb_info_clear(ret);
                usleep(10 * 1000);
        }
        fail_msg("%s is still READY after 5 s", id);
}

/* A max_runtime stop that fails (runsc: "context deadline exceeded") still removes the
 * sandbox's cgroup (its tasks killed through it), and the removal of a destroyed sandbox
 * removes a cgroup its runtime left behind: the attack pass found them leaked for good. */
static void test_failed_stop_removes_cgroup(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *dir = cs_xasprintf("%s/compute/%s", f->cg_dir, ID_RUNNING);
        sb_spec spec = { .id = ID_RUNNING,
                         .tenant_id = "t",
                         .session_id = "s",
                         .image = "test",
                         .max_runtime_ms = 1000 };
        sb_info info = { 0 };
        cs_error *err = NULL;
        sandbox *sb;
        bool created;

        open_registry_ticking(f, 20);
        if (sb_create(f->reg, &spec, &info, &created, &err) < 0)
                fail_msg("sb_create: %s", err->msg);
        sb_info_clear(&info);
        if (sb_acquire(f->reg, ID_RUNNING, true, 5000, -1, &sb, &err) < 0)
                fail_msg("sb_acquire: %s", err->msg);
        sb_release(f->reg, sb);
        /* Empty, as a real cgroup's directory is to rmdir (its files are the kernel's). */
        testfs_mkdir(dir);
        fake_runtime_fail_destroy(f->fake, true);

        assert_true(cgroup_gone(f, ID_RUNNING));
        describe_settled(f, ID_RUNNING, &info);
        assert_int_equal(info.status, SB_FAILED);
        assert_non_null(strstr(info.status_message, "max_runtime"));
        sb_info_clear(&info);
        assert_true(fake_runtime_destroys(f->fake, "cs-" ID_RUNNING) >= 1);

        /* The runtime stops it at last but leaves the cgroup: the removal takes it. */
        fake_runtime_fail_destroy(f->fake, false);
        testfs_mkdir(dir);
        if (sb_destroy(f->reg, ID_RUNNING, 0, &info, &err) < 0)
                fail_msg("sb_destroy: %s", err->msg);
        sb_info_clear(&info);
        assert_true(cgroup_gone(f, ID_RUNNING));
}

/* --- the warm pool ------------------------------------------------------------------------- */

#define POOL_CREATES 64

static pthread_barrier_t pool_start; /* the creates go at once */

typedef struct pool_create {
        fixture *f;
        bool wait;
        char session[16];
        sb_info info;
        bool created;
        int r;
} pool_create;

static void *pool_create_main(void *arg)
{
        pool_create *c = arg;
        char id[CS_UUID_STRLEN + 1];
        sb_spec spec = { .id = id, .tenant_id = "t", .session_id = c->session };
        cs_error *err = NULL;

        cs_uuid_generate(id);
        if (c->wait)
                pthread_barrier_wait(&pool_start);
        c->r = sb_create(c->f->reg, &spec, &c->info, &c->created, &err);
        cs_error_free(err);
        return NULL;
}

static void wait_pool_ready(fixture *f, uint32_t n)
{
        sb_pool_stats st;

        for (int i = 0; i < 1000; i++) {
                sb_pool_stats_read(f->reg, &st);
                if (st.ready >= n)
                        return;
                usleep(10 * 1000);
        }
        fail_msg("the warm pool never had %u READY sandboxes", n);
}

/* 64 creates of the default profile at once against a pool of 4: every session gets exactly
 * one sandbox, no two the same; the claims are the pool's; a retry returns the same one; the
 * pool is not listed and refills. */
static void test_warm_pool_concurrent_claims(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *img = cs_xasprintf("%s/%s", f->images_dir, SB_DEFAULT_IMAGE);
        pool_create *cs = cs_xcalloc(POOL_CREATES, sizeof(*cs));
        pthread_t threads[POOL_CREATES];
        cs_error *err = NULL;
        sb_config cfg = { .state_dir = f->state_dir,
                          .images_dir = f->images_dir,
                          .cgroup_parent = "/compute",
                          .grace_ms = 3600 * 1000,
                          .sample_interval_ms = 3600 * 1000,
                          .start_timeout_ms = 10000,
                          .max_sandboxes = 128,
                          .warm_pool = 4 };
        sb_pool_stats st;
        sb_info *list = NULL;
        size_t n = 0;
        int ready = 0;

        testfs_mkdir(img);
        if (sb_registry_open(&cfg, fake_runtime_rt(f->fake), &f->cg, log_hook, &f->reg, &err) < 0)
                fail_msg("sb_registry_open: %s", err->msg);
        wait_pool_ready(f, 4);
        assert_int_equal(sb_list(f->reg, true, &list, &n, &err), 0);
        assert_int_equal(n, 0); /* warm sandboxes are nobody's */
        sb_infos_free(list, n);
        pthread_barrier_init(&pool_start, NULL, POOL_CREATES);
        for (int i = 0; i < POOL_CREATES; i++) {
                cs[i].f = f;
                cs[i].wait = true;
                snprintf(cs[i].session, sizeof(cs[i].session), "s%d", i);
                assert_int_equal(pthread_create(&threads[i], NULL, pool_create_main, &cs[i]), 0);
        }
        for (int i = 0; i < POOL_CREATES; i++)
                pthread_join(threads[i], NULL);
        pthread_barrier_destroy(&pool_start);
        for (int i = 0; i < POOL_CREATES; i++) {
                assert_int_equal(cs[i].r, 0);
                assert_true(cs[i].created);
                assert_string_equal(cs[i].info.session_id, cs[i].session);
                ready += cs[i].info.status == SB_READY; /* a claim: READY at once */
                for (int j = 0; j < i; j++)
                        assert_string_not_equal(cs[i].info.id, cs[j].info.id);
        }
        sb_pool_stats_read(f->reg, &st);
        assert_int_equal(st.hits + st.misses, POOL_CREATES);
        assert_int_equal(st.hits, ready);
        assert_true(st.hits >= 4);
        /* Retries: the same sandbox per session. */
        for (int i = 0; i < POOL_CREATES; i++) {
                pool_create again = { .f = f };
                snprintf(again.session, sizeof(again.session), "%s", cs[i].session);
                pool_create_main(&again);
                assert_int_equal(again.r, 0);
                assert_false(again.created);
                assert_string_equal(again.info.id, cs[i].info.id);
                sb_info_clear(&again.info);
        }
        assert_int_equal(sb_list(f->reg, true, &list, &n, &err), 0);
        assert_int_equal(n, POOL_CREATES);
        sb_infos_free(list, n);
        wait_pool_ready(f, 4); /* refilled */
        for (int i = 0; i < POOL_CREATES; i++)
                sb_info_clear(&cs[i].info);
        free(cs);
}

static void wait_creates(fixture *f, size_t asked, size_t in_flight)
{
        size_t a, n, max;

        for (int i = 0; i < 1000; i++) {
                fake_runtime_creates(f->fake, &a, &n, &max);
                if (a == asked && n == in_flight)
                        return;
                usleep(10 * 1000);
        }
        fail_msg("creates: %zu asked, %zu in flight; wanted %zu and %zu", a, n, asked, in_flight);
}

static void wait_status(fixture *f, const char *id, sb_status status)
{
        sb_info info = { 0 };

        for (int i = 0; i < 1000; i++) {
                describe(f, id, &info);
                if (info.status == status) {
                        sb_info_clear(&info);
                        return;
                }
                sb_info_clear(&info);
                usleep(10 * 1000);
        }
        fail_msg("sandbox %s never reached status %d", id, (int)status);
}

/* Six creates at once with max_parallel_starts 2: two reach the runtime, four wait in
 * STARTING; a queued one destroyed never reaches it; the others start two at a time. */
static void test_parallel_starts_bounded(void **state)
{
        fixture *f = *state;
        _cleanup_free_ char *img = cs_xasprintf("%s/%s", f->images_dir, SB_DEFAULT_IMAGE);
        char ids[6][CS_UUID_STRLEN + 1];
        cs_error *err = NULL;
        sb_config cfg = { .state_dir = f->state_dir,
                          .images_dir = f->images_dir,
                          .cgroup_parent = "/compute",
                          .grace_ms = 3600 * 1000,
                          .sample_interval_ms = 3600 * 1000,
                          .max_sandboxes = 8,
                          .max_parallel_starts = 2 };
        size_t asked, in_flight, max;
        sb_info info = { 0 };
        int starting = 0, queued = -1;

        testfs_mkdir(img);
        if (sb_registry_open(&cfg, fake_runtime_rt(f->fake), &f->cg, log_hook, &f->reg, &err) < 0)
                fail_msg("sb_registry_open: %s", err->msg);
        fake_runtime_hold_creates(f->fake, true);
        for (int i = 0; i < 6; i++) {
                char session[8];
                sb_spec spec = { .id = ids[i], .tenant_id = "t", .session_id = session };
                bool created = false;

                snprintf(session, sizeof(session), "s%d", i);
                cs_uuid_generate(ids[i]);
                if (sb_create(f->reg, &spec, &info, &created, &err) < 0)
                        fail_msg("sb_create: %s", err->msg);
                assert_int_equal(info.status, SB_STARTING);
                sb_info_clear(&info);
        }
        wait_creates(f, 2, 2);
        usleep(100 * 1000); /* no third one comes */
        fake_runtime_creates(f->fake, &asked, &in_flight, &max);
        assert_int_equal(asked, 2);
        for (int i = 0; i < 6; i++) {
                describe(f, ids[i], &info);
                starting += info.status == SB_STARTING;
                sb_info_clear(&info);
        }
        assert_int_equal(starting, 6);
        /* One that waits, destroyed meanwhile, never reaches the runtime. */
        for (int i = 0; i < 6 && queued < 0; i++) {
                _cleanup_free_ char *cid = cs_xasprintf("cs-%s", ids[i]);
                if (!fake_runtime_creating(f->fake, cid))
                        queued = i;
        }
        assert_true(queued >= 0);
        if (sb_destroy(f->reg, ids[queued], -1, &info, &err) < 0)
                fail_msg("sb_destroy: %s", err->msg);
        sb_info_clear(&info);
        fake_runtime_hold_creates(f->fake, false);
        for (int i = 0; i < 6; i++)
                wait_status(f, ids[i], i == queued ? SB_DESTROYED : SB_READY);
        fake_runtime_creates(f->fake, &asked, &in_flight, &max);
        assert_int_equal(asked, 5);
        assert_int_equal(max, 2);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_restart_reconciliation, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reopen_skips_bad_record, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_stop_removes_cgroup, setup, teardown),
                cmocka_unit_test_setup_teardown(test_warm_pool_concurrent_claims, setup, teardown),
                cmocka_unit_test_setup_teardown(test_parallel_starts_bounded, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
