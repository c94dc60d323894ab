/* bench-list: what one ListFiles costs on a big directory, at the agent's workspace layer
 * (ws_list, no gRPC), for a few max_entries. Prints figures; asserts nothing.
 *
 * Usage: bench-list DIR [ENTRIES [RUNS]]. DIR/big is filled with ENTRIES (default 100000)
 * empty files the first time (kept for later runs; remove DIR yourself).
 *
 * Figures (ext4, this 2-core VM, 10^6 entries, median of 5): before reading stopped at the cap
 * 419 / 576 / 732 ms for max_entries 1 / 1000 / 10000; after, 0.30 / 1.71 / 23.9 ms. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "workspace_io.h"

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* Creates DIR/big/f<i> for i < n (those present are kept). */
static int fill(int root, long n)
{
        int dfd;

        char last[32];
        struct stat st;

        snprintf(last, sizeof(last), "big/f%07ld", n - 1);
        if (fstatat(root, last, &st, 0) == 0)
                return 0; /* filled by an earlier run */
        if (mkdirat(root, "big", 0755) < 0 && errno != EEXIST)
                return -1;
        dfd = openat(root, "big", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -1;
        for (long i = 0; i < n; i++) {
                char name[32];
                int fd;

                snprintf(name, sizeof(name), "f%07ld", i);
                fd = openat(dfd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                if (fd < 0) {
                        close(dfd);
                        return -1;
                }
                close(fd);
        }
        close(dfd);
        return 0;
}

int main(int argc, char **argv)
{
        static const uint32_t caps[] = { 1, 1000, 10000 };
        long n = argc > 2 ? atol(argv[2]) : 100000;
        int runs = argc > 3 ? atoi(argv[3]) : 5;
        double *t;
        int root;

        if (argc < 2 || n < 1 || runs < 1) {
                fprintf(stderr, "usage: %s DIR [ENTRIES [RUNS]]\n", argv[0]);
                return 2;
        }
        if (mkdir(argv[1], 0755) < 0 && errno != EEXIST)
                return perror(argv[1]), 1;
        root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0 || fill(root, n) < 0)
                return perror("fill"), 1;
        t = calloc((size_t)runs, sizeof(*t));
        printf("ListFiles of a directory of %ld entries, %d runs each (ms)\n", n, runs);
        printf("%-12s %10s %10s %10s %8s\n", "max_entries", "min", "median", "max", "listed");
        for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
                ws_root wr = { .dirfd = root, .mount_path = "/workspace" };
                size_t listed = 0;

                for (int r = 0; r < runs; r++) {
                        ws_entry *e;
                        bool trunc;
                        cs_error *err = NULL;
                        double t0 = now_ms();

                        if (ws_list(&wr, "big", false, caps[c], &e, &listed, &trunc, &err) < 0) {
                                fprintf(stderr, "ws_list: %s\n", err->msg);
                                return 1;
                        }
                        t[r] = now_ms() - t0;
                        ws_entries_free(e, listed);
                }
                qsort(t, (size_t)runs, sizeof(*t), cmp_double);
                printf("%-12u %10.2f %10.2f %10.2f %8zu\n", caps[c], t[0], t[runs / 2], t[runs - 1],
                       listed);
        }
        free(t);
        close(root);
        return 0;
}
