/* The baselines' side: runsc run directly by this process, files, cgroups and /proc. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "util.h"

extern char **environ;

/* Reads from the pipes, as the node agent does: 64 KiB at a time. */
#define HOST_READ_CHUNK (64 * 1024)
/* cgroup files and /proc/PID/status: a few KiB; more would be a different file. */
#define SMALL_FILE_MAX (64 * 1024)

/* The child gets a default signal disposition and mask, an empty pipe as stdin (as the node
 * agent gives `runsc exec`, which fchowns its stdio: never the host's /dev/null) and
 * out_fd/err_fd as stdout/stderr; every other fd of ours is O_CLOEXEC. */
static int host_spawn(const char *const *argv, int out_fd, int err_fd, pid_t *ret_pid,
                      cs_error **err)
{
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none, all;
        int in[2], r;

        if (pipe2(in, O_CLOEXEC) < 0)
                return cs_error_errno(err, errno, "pipe");
        close(in[1]); /* the child reads EOF at once */
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
        posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
        posix_spawnattr_init(&attr);
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        r = posix_spawnp(ret_pid, argv[0], &fa, &attr, (char *const *)argv, environ);
        close(in[0]);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return cs_error_errno(err, r, "cannot start %s", argv[0]);
        return 0;
}

static int host_wait(pid_t pid)
{
        int status = 0;

        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        return WEXITSTATUS(status);
}

static void keep_head(host_result *ret, size_t *have, const uint8_t *p, size_t n)
{
        if (n > sizeof(ret->stderr_head) - 1 - *have)
                n = sizeof(ret->stderr_head) - 1 - *have;
        memcpy(ret->stderr_head + *have, p, n);
        *have += n;
        ret->stderr_head[*have] = '\0';
}

int host_run(const char *const *argv, svc_output_fn on_stdout, void *userdata, host_result *ret,
             cs_error **err)
{
        int out[2] = { -1, -1 }, errp[2] = { -1, -1 };
        _cleanup_free_ uint8_t *buf = cs_xmalloc(HOST_READ_CHUNK);
        size_t have_err = 0;
        pid_t pid;
        int r;

        memset(ret, 0, sizeof(*ret));
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
                r = cs_error_errno(err, errno, "pipe");
                goto out;
        }
        r = host_spawn(argv, out[1], errp[1], &pid, err);
        close(out[1]);
        close(errp[1]);
        out[1] = errp[1] = -1;
        if (r < 0)
                goto out;
        for (bool open_out = true, open_err = true; open_out || open_err;) {
                struct pollfd pf[2] = { { .fd = open_out ? out[0] : -1, .events = POLLIN },
                                        { .fd = open_err ? errp[0] : -1, .events = POLLIN } };

                if (poll(pf, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (pf[0].revents) {
                        ssize_t n = read(out[0], buf, HOST_READ_CHUNK);
                        if (n <= 0) {
                                open_out = n < 0 && errno == EINTR;
                        } else {
                                ret->stdout_bytes += (uint64_t)n;
                                if (on_stdout)
                                        on_stdout(userdata, buf, (size_t)n);
                        }
                }
                if (pf[1].revents) {
                        ssize_t n = read(errp[0], buf, HOST_READ_CHUNK);
                        if (n <= 0)
                                open_err = n < 0 && errno == EINTR;
                        else
                                keep_head(ret, &have_err, buf, (size_t)n);
                }
        }
        ret->status = host_wait(pid);
        r = 0;
out:
        for (int i = 0; i < 2; i++) {
                cs_closep(&out[i]);
                cs_closep(&errp[i]);
        }
        return r;
}

int host_run_ok(const char *const *argv, svc_output_fn on_stdout, void *userdata, host_result *ret,
                cs_error **err)
{
        if (host_run(argv, on_stdout, userdata, ret, err) < 0)
                return -1;
        if (ret->status != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s %s: exit status %d: %s", argv[0],
                                    argv[1] ? argv[1] : "", ret->status, ret->stderr_head);
        return 0;
}

int host_run_logged(const char *const *argv, const char *log_path, cs_error **err)
{
        _cleanup_close_ int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        pid_t pid;
        int status;

        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s", log_path);
        if (host_spawn(argv, fd, fd, &pid, err) < 0)
                return -1;
        status = host_wait(pid);
        if (status != 0)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: exit status %d (see %s)",
                                    argv[0], status, log_path);
        return 0;
}

void host_runsc_argv(const bench_ctx *b, const char *root, const char **argv,
                     const char *const *args)
{
        size_t n = 0;

        argv[n++] = b->runsc;
        argv[n++] = "--root";
        argv[n++] = root;
        for (; *args && n < HOST_MAX_ARGV - 1; args++)
                argv[n++] = *args;
        argv[n] = NULL;
}

char *host_workspace_dir(const bench_ctx *b, const char *id)
{
        return cs_xasprintf("%s/workspaces/%s", b->state_dir, id);
}

/* cs_read_file() of a small file (at most max bytes: more is an error, not a cut), the error
 * named. */
static int read_small(const char *path, size_t max, char **ret, cs_error **err)
{
        if (cs_read_file(path, max, ret, NULL, NULL) < 0)
                return cs_error_errno(err, errno, "cannot read %s", path);
        return 0;
}

int host_cgroup_cpu_ns(const bench_ctx *b, const char *id, uint64_t *ret, cs_error **err)
{
        const char *parent = b->cgroup_parent;
        _cleanup_free_ char *v1 = NULL, *v2 = NULL, *buf = NULL;
        const char *p;

        while (*parent == '/')
                parent++;
        v1 = cs_xasprintf("%s/cpuacct/%s/%s/cpuacct.usage", b->cgroup_root, parent, id);
        if (access(v1, R_OK) == 0) {
                if (read_small(v1, SMALL_FILE_MAX, &buf, err) < 0)
                        return -1;
                *ret = strtoull(buf, NULL, 10);
                return 0;
        }
        v2 = cs_xasprintf("%s/%s/%s/cpu.stat", b->cgroup_root, parent, id);
        if (read_small(v2, SMALL_FILE_MAX, &buf, err) < 0)
                return cs_error_prefix(err, "no cgroup v1 %s", v1);
        p = strstr(buf, "usage_usec ");
        if (!p)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: no usage_usec", v2);
        *ret = strtoull(p + strlen("usage_usec "), NULL, 10) * 1000;
        return 0;
}

static uint64_t status_kib(pid_t pid, const char *field)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/%d/status", (int)pid), *buf = NULL;
        const char *p;
        cs_error *err = NULL;

        if (pid <= 0 || read_small(path, SMALL_FILE_MAX, &buf, &err) < 0) {
                cs_error_free(err);
                return 0;
        }
        p = strstr(buf, field);
        return p ? strtoull(p + strlen(field), NULL, 10) * 1024 : 0;
}

uint64_t host_peak_rss(pid_t pid)
{
        return status_kib(pid, "VmHWM:");
}

uint64_t host_rss(pid_t pid)
{
        return status_kib(pid, "VmRSS:");
}

/* proc(5): writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS. */
void host_reset_peak_rss(pid_t pid)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/%d/clear_refs", (int)pid);
        _cleanup_close_ int fd = pid > 0 ? open(path, O_WRONLY | O_CLOEXEC) : -1;

        if (fd >= 0 && write(fd, "5", 1) < 0)
                return;
}

/* xorshift64*: fast, and the same bytes for the same seed on both sides of a comparison. */
void host_fill_pattern(uint8_t *buf, size_t len, uint64_t seed)
{
        uint64_t x = seed | 1;
        size_t i = 0;

        for (; i + 8 <= len; i += 8) {
                uint64_t v;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                v = x * 0x2545F4914F6CDD1DULL;
                memcpy(buf + i, &v, 8);
        }
        for (; i < len; i++)
                buf[i] = (uint8_t)(i * 131 + seed);
}

void text_out_keep(void *userdata, const uint8_t *data, size_t len)
{
        text_out *t = userdata;
        size_t room = sizeof(t->buf) - 1 - t->len;

        if (len > room)
                len = room;
        memcpy(t->buf + t->len, data, len);
        t->len += len;
        t->buf[t->len] = '\0';
}
