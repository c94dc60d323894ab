/* compute-init: the sandbox's init (pid 1), which keeps the resident spawner running
 * (init.h). `compute-init --spawner` is the spawner role alone, for tests on the host. */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void init_log(const char *fmt, ...)
{
        char line[512];
        va_list ap;
        int n;

        n = snprintf(line, sizeof(line), "compute-init[%d]: ", (int)getpid());
        va_start(ap, fmt);
        vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        strcat(line, "\n");
        /* One write per line: the roles share stderr. */
        (void)!write(2, line, strlen(line));
}

int64_t init_now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void init_close_fds_from(int from)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;

        if (!d) {
                for (int fd = from; fd < 65536; fd++)
                        close(fd);
                return;
        }
        while ((de = readdir(d))) {
                int fd = atoi(de->d_name);

                if (de->d_name[0] != '.' && fd >= from && fd != dirfd(d))
                        close(fd);
        }
        closedir(d);
}

static pid_t start_spawner(const char *path)
{
        pid_t init_pid = getpid();
        pid_t pid = fork();

        if (pid < 0) {
                init_log("fork: %s", strerror(errno));
                return -1;
        }
        if (pid == 0) {
                sigset_t none;

                /* Gone with its init (which, as pid 1, takes the sandbox with it anyway). */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != init_pid)
                        _exit(1);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                spawner_main(path);
        }
        return pid;
}

/* gVisor 20240729 (Debian's runsc) answers lgetxattr(2) on a symlink of a host-backed file
 * system (the image's root, the workspace) with EBADF, whatever the name (it calls
 * fgetxattr on an O_PATH fd; upstream gVisor issue 11049, fixed later). `ls -l` prints "Bad
 * file descriptor" for every symlink then. Measured inside a sandbox, every other xattr call
 * answers as Linux does, and lgetxattr answers ENODATA for every name on every host-backed
 * file; only files in the sandbox's memory (/tmp, writes to the root) can hold attributes.
 * So every process of the sandbox that descends from init gets lgetxattr answered ENODATA
 * ("no such attribute", Linux's answer on a symlink) by a seccomp filter: getxattr and
 * fgetxattr are untouched. It needs no_new_privs (init has no CAP_SYS_ADMIN), which
 * libseccomp sets: a setuid binary gains nothing in a sandbox, where commands run as root.
 * A failure is logged and the sandbox goes on without the filter. */
static void install_xattr_filter(void)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        int r = -ENOMEM;

        if (ctx) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENODATA), SCMP_SYS(lgetxattr), 0);
                if (r == 0)
                        r = seccomp_load(ctx);
                seccomp_release(ctx);
        }
        if (r < 0)
                init_log("no lgetxattr filter (ls -l may print EBADF on symlinks): %s",
                         strerror(-r));
}

/* The init role: reaps everything, keeps one spawner alive (10 ms to 1 s between restarts
 * of one that dies young), and lets no signal but the runtime's SIGTERM end it. */
static _Noreturn void init_main(const char *path)
{
        int64_t started_ms = 0, next_start_ms = 0;
        int backoff = 10;
        pid_t spawner = 0;
        sigset_t all;

        /* Outside a pid namespace (tests), orphans of the spawner's tree come here. */
        if (getpid() != 1)
                prctl(PR_SET_CHILD_SUBREAPER, 1);
        install_xattr_filter();
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (;;) {
                struct timespec ts = { .tv_sec = 1 };
                siginfo_t si;
                int64_t now = init_now_ms();
                int status;
                pid_t p;

                if (spawner <= 0 && now >= next_start_ms) {
                        spawner = start_spawner(path);
                        started_ms = now;
                        if (spawner < 0)
                                next_start_ms = now + 1000;
                }
                if (spawner <= 0) {
                        int64_t wait_ms = next_start_ms - now;

                        ts.tv_sec = wait_ms / 1000;
                        ts.tv_nsec = (wait_ms % 1000) * 1000000;
                }
                if (sigtimedwait(&all, &si, &ts) > 0) {
                        /* SIGTERM from outside the sandbox (si_pid 0: no process of our pid
                         * namespace) is the runtime stopping it: exit, as the previous init
                         * did. From inside (a command's `kill 1`), or any other signal: no. */
                        if (si.si_signo == SIGTERM && (si.si_pid == 0 || getpid() != 1)) {
                                init_log("SIGTERM: exiting");
                                exit(0);
                        }
                        if (si.si_signo != SIGCHLD)
                                init_log("ignoring signal %d from pid %d", si.si_signo,
                                         (int)si.si_pid);
                }
                while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
                        if (p != spawner)
                                continue;
                        now = init_now_ms();
                        init_log("the spawner ended (%s %d); restarting it",
                                 WIFSIGNALED(status) ? "signal" : "exit status",
                                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                        /* A spawner that lived 10 s was not crash-looping: start again fast. */
                        backoff = now - started_ms > 10000 ? 10 : backoff;
                        next_start_ms = now + backoff;
                        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
                        spawner = 0;
                }
        }
}

/* --install DEST: copies this binary to DEST, mode 0555, whole or not at all (a temporary
 * name in DEST's directory, renamed once written and synced). How a pod's init container puts
 * compute-init into the emptyDir its sandbox container runs it from (kube mode): the image
 * needs nothing else, not even a shell or cp. */
static int install_self(const char *dest)
{
        char tmp[4096], buf[65536];
        int in, out, r = 1;
        ssize_t n = 0;

        if (snprintf(tmp, sizeof(tmp), "%s.tmp-%d", dest, (int)getpid()) >= (int)sizeof(tmp)) {
                init_log("--install: path too long");
                return 1;
        }
        in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (in < 0) {
                init_log("--install: /proc/self/exe: %s", strerror(errno));
                return 1;
        }
        out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0555);
        if (out < 0) {
                init_log("--install: %s: %s", tmp, strerror(errno));
                close(in);
                return 1;
        }
        for (;;) {
                ssize_t w = 0;

                n = read(in, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                while (w < n) {
                        ssize_t k = write(out, buf + w, (size_t)(n - w));
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0) {
                                n = -1;
                                break;
                        }
                        w += k;
                }
                if (n < 0)
                        break;
        }
        if (n == 0 && fsync(out) == 0 && close(out) == 0) {
                out = -1;
                if (rename(tmp, dest) == 0)
                        r = 0;
        }
        if (r != 0) {
                init_log("--install: %s: %s", dest, strerror(errno));
                if (out >= 0)
                        close(out);
                unlink(tmp);
        }
        close(in);
        return r;
}

static void usage(FILE *f)
{
        fprintf(f, "Usage: compute-init [--spawner] [--socket PATH]\n"
                   "       compute-init --install DEST\n"
                   "\n"
                   "The sandbox's init process: reaps orphans and keeps the resident spawner\n"
                   "running, which connects to the node agent's Unix socket and starts commands\n"
                   "on its request (compute.spawner.v1).\n"
                   "\n"
                   "  --socket PATH  the agent's socket (default " INIT_DEFAULT_SOCKET ")\n"
                   "  --spawner      run the spawner role alone (no init), e.g. on a host\n"
                   "  --install DEST copy this binary to DEST (mode 0555) and exit: a kube\n"
                   "                 pod's init container installs it into an emptyDir\n"
                   "  --version      print the version\n"
                   "  --help         this text\n");
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },  { "spawner", no_argument, NULL, 'S' },
                { "install", required_argument, NULL, 'i' }, { "version", no_argument, NULL, 'V' },
                { "help", no_argument, NULL, 'h' },          { 0 },
        };
        const char *path = INIT_DEFAULT_SOCKET, *install = NULL;
        bool spawner = false;
        int c;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                switch (c) {
                case 's':
                        path = optarg;
                        break;
                case 'S':
                        spawner = true;
                        break;
                case 'i':
                        install = optarg;
                        break;
                case 'V': /* the project's version (INIT_VERSION is the spawner protocol's) */
                        puts("compute-init " CS_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind != argc) {
                usage(stderr);
                return 2;
        }
        if (install)
                return install_self(install);
        if (spawner)
                spawner_main(path);
        init_main(path);
}
