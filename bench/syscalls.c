/* sandbox-syscalls: the cost of a few system calls as a sandboxed program sees them. Built
 * static, so it runs in any image; bench/runsc-compare copies it into a sandbox's workspace
 * and runs it there under each runsc it compares.
 *
 *   sandbox-syscalls DIR [ROUNDS]
 *
 * Prints one line per figure, "name microseconds-per-call" (the median of ROUNDS rounds,
 * default 5, each the mean of a fixed number of calls): getppid (a bare syscall), stat of a
 * file in DIR, and open+write 4 KiB+close of a new file in DIR (then unlinked). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CALLS_SYSCALL 20000
#define CALLS_STAT    5000
#define CALLS_CREATE  500
#define MAX_ROUNDS    50

static double now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

static int round_syscall(const char *dir, double *ret_us)
{
        double t = now_us();

        (void)dir;
        for (int i = 0; i < CALLS_SYSCALL; i++)
                getppid();
        *ret_us = (now_us() - t) / CALLS_SYSCALL;
        return 0;
}

static int round_stat(const char *dir, double *ret_us)
{
        char path[4096];
        struct stat st;
        double t;
        int fd;

        snprintf(path, sizeof(path), "%s/.stat-probe", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -1;
        close(fd);
        t = now_us();
        for (int i = 0; i < CALLS_STAT; i++)
                if (stat(path, &st) < 0)
                        return -1;
        *ret_us = (now_us() - t) / CALLS_STAT;
        unlink(path);
        return 0;
}

static int round_create(const char *dir, double *ret_us)
{
        static char buf[4096];
        char path[4096];
        double t = now_us();

        memset(buf, 'x', sizeof(buf));
        for (int i = 0; i < CALLS_CREATE; i++) {
                int fd;
                snprintf(path, sizeof(path), "%s/.create-%d", dir, i);
                fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd < 0 || write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
                        return -1;
                close(fd);
        }
        *ret_us = (now_us() - t) / CALLS_CREATE;
        for (int i = 0; i < CALLS_CREATE; i++) {
                snprintf(path, sizeof(path), "%s/.create-%d", dir, i);
                unlink(path);
        }
        return 0;
}

static const struct {
        const char *name;
        int (*run)(const char *dir, double *ret_us);
} figures[] = {
        { "getppid", round_syscall },
        { "stat", round_stat },
        { "create_write_4k", round_create },
};

int main(int argc, char **argv)
{
        int rounds = argc > 2 ? atoi(argv[2]) : 5;

        if (argc < 2 || rounds < 1 || rounds > MAX_ROUNDS) {
                fprintf(stderr, "usage: %s DIR [ROUNDS 1..%d]\n", argv[0], MAX_ROUNDS);
                return 2;
        }
        for (size_t f = 0; f < sizeof(figures) / sizeof(figures[0]); f++) {
                double us[MAX_ROUNDS];
                for (int r = 0; r < rounds; r++) {
                        if (figures[f].run(argv[1], &us[r]) < 0) {
                                fprintf(stderr, "%s: %s: %s\n", argv[0], figures[f].name,
                                        strerror(errno));
                                return 1;
                        }
                }
                qsort(us, (size_t)rounds, sizeof(us[0]), cmp_double);
                printf("%s %.3f\n", figures[f].name, us[rounds / 2]);
        }
        return 0;
}
