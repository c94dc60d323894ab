/* `compute-nodeagent cleanup`: removes what a stopped local mode agent leaves on the node.
 *
 * A stopped agent leaves its live sandboxes running (a restarted agent finds them again), with
 * their workspace volumes loop-mounted under the state directory and their cgroups under
 * --cgroup-parent; an agent killed mid-way can leave runsc processes too. This stops and
 * removes all of it, in the order that lets each step succeed: containers (runsc delete
 * -force), then leftover runsc processes of the agent's runsc root, then every mount under the
 * state directory (deepest first), then the loop devices backing its files, then the cgroups,
 * then, with --delete-data, the service's directories. It refuses while an agent holds the
 * state directory's lock. Kube mode has nothing here: the kubelet owns the pods. The service
 * makes no nftables table (sandboxes have no network), so there is none to remove. */
#include "cleanup.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_defaults.h"
#include "cgroup.h"
#include "config.h"
#include "runtime.h"
#include "net.h"
#include "netlink.h"
#include "util.h"
#include "uuid.h"
#include "volume.h"

#define PROG "compute-nodeagent cleanup"

int state_dir_lock(const char *path, bool create, cs_error **err)
{
        _cleanup_close_ int dfd = -1;
        int fd;

        if (path[0] != '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--state-dir: '%s' is not an absolute path", path);
        if (create && cs_mkdir_parents(path, 0700) < 0)
                return cs_error_errno(err, errno, "cannot create %s", path);
        dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
                if (errno == ENOENT)
                        return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "%s does not exist", path);
                return cs_error_errno(err, errno, "cannot open %s", path);
        }
        fd = openat(dfd, "agent.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s/agent.lock", path);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int e = errno;
                close(fd);
                if (e == EWOULDBLOCK)
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "another node agent is using %s", path);
                return cs_error_errno(err, e, "cannot lock %s/agent.lock", path);
        }
        return fd;
}

static char *state_dir, *runsc_path, *runsc_root, *cgroup_root, *cgroup_parent, *nft_table;
static bool delete_data;

static const cs_option options[] = {
        { "state-dir", "COMPUTE_STATE_DIR", CS_OPT_STRING, NA_STATE_DIR_DEFAULT,
          "The agent's state directory: every mount and loop device under it goes.", &state_dir, 0,
          0 },
        { "runsc", "COMPUTE_RUNSC", CS_OPT_STRING, "runsc", "The runsc binary.", &runsc_path, 0,
          0 },
        { "runsc-root", "COMPUTE_RUNSC_ROOT", CS_OPT_STRING, "",
          "The agent's runsc --root (default: STATE_DIR/runsc): every container in it is "
          "stopped and deleted, and runsc processes naming it are killed.",
          &runsc_root, 0, 0 },
        { "cgroup-root", "COMPUTE_CGROUP_ROOT", CS_OPT_STRING, NA_CGROUP_ROOT_DEFAULT,
          "Where the cgroup hierarchy is mounted.", &cgroup_root, 0, 0 },
        { "cgroup-parent", "COMPUTE_CGROUP_PARENT", CS_OPT_STRING, NA_CGROUP_PARENT_DEFAULT,
          "The agent's parent cgroup: it and every cgroup beneath it go (not \"/\").",
          &cgroup_parent, 0, 0 },
        { "nft-table", "COMPUTE_NFT_TABLE", CS_OPT_STRING, "compute",
          "The agent's nftables table (family inet): removed, with the host ends of its "
          "sandboxes' veth pairs (sandbox networking, docs/security.md \"Network\").",
          &nft_table, 0, 0 },
        { "delete-data", NULL, CS_OPT_BOOL, "off",
          "Also delete the sandboxes' records, workspaces and volume images (STATE_DIR/"
          "sandboxes, workspaces, volumes, runsc, run): every workspace is lost. Images "
          "(STATE_DIR/images) and the metrics token stay.",
          &delete_data, 0, 0 },
};

static const cs_program program = {
        .name = PROG,
        .summary = "Stops every sandbox of a stopped local mode node agent and removes what "
                   "it left on the node: its runsc containers and processes, the mounts and "
                   "loop devices of its workspace volumes, its cgroups; with --delete-data its "
                   "data too. Says what it did, or \"nothing to do\". Refused while an agent "
                   "uses the state directory. Exit status: 0 done, 1 something could not be "
                   "removed (each named on stderr), 2 usage error.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

typedef struct cleanup {
        char *state; /* canonical state directory */
        char *root;  /* runsc root as given */
        unsigned containers, processes, mounts, loops, cgroups, dirs, links, tables;
        unsigned failures;
} cleanup;

static void failed(cleanup *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(cleanup *c, const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "%s: ", PROG);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        c->failures++;
}

static void failed_err(cleanup *c, cs_error *err)
{
        failed(c, "%s", err->msg);
        cs_error_free(err);
}

/* Whether path is dir or beneath it. */
static bool under(const char *path, const char *dir)
{
        size_t n = strlen(dir);

        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* --- containers ------------------------------------------------------------------------ */

static void stop_containers(cleanup *c)
{
        runsc_config rc = {
                .path = runsc_path, .root = c->root, .network = "none", .timeout_ms = 30000
        };
        rt_container *cs = NULL;
        size_t n = 0;
        cs_error *err = NULL;
        runtime *rt;

        if (access(c->root, F_OK) < 0)
                return; /* no runsc root: no containers */
        rt = runtime_runsc_new(&rc, &err);
        if (!rt) {
                failed_err(c, err);
                return;
        }
        if (rt->ops->list_details(rt, &cs, &n, &err) < 0) {
                failed_err(c, err);
        } else {
                for (size_t i = 0; i < n; i++) {
                        if (rt->ops->destroy(rt, cs[i].id, &err) < 0) {
                                failed_err(c, err);
                                err = NULL;
                                continue;
                        }
                        printf("stopped container %s\n", cs[i].id);
                        c->containers++;
                }
        }
        rt_containers_free(cs, n);
        rt->ops->free(rt);
}

/* --- processes ------------------------------------------------------------------------- */

/* Reads /proc/<pid>/cmdline into buf (NUL-separated); returns its length, 0 if unreadable. */
static size_t read_cmdline(const char *pid, char *buf, size_t size)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/%s/cmdline", pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return 0;
        n = read(fd, buf, size - 1);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        return (size_t)n;
}

static bool is_runsc(const char *pid, const char *argv0)
{
        _cleanup_free_ char *link = cs_xasprintf("/proc/%s/exe", pid);
        char exe[PATH_MAX];
        ssize_t n = readlink(link, exe, sizeof(exe) - 1);
        const char *base = strrchr(argv0, '/');

        base = base ? base + 1 : argv0;
        if (strncmp(base, "runsc", 5) == 0)
                return true;
        if (n <= 0)
                return false;
        exe[n] = '\0';
        base = strrchr(exe, '/');
        return strncmp(base ? base + 1 : exe, "runsc", 5) == 0;
}

/* Whether the NUL-separated args name the runsc root (--root=R or --root R). */
static bool names_root(const char *args, size_t len, const char *root)
{
        size_t rl = strlen(root);

        for (const char *a = args, *end = args + len; a < end; a += strlen(a) + 1) {
                const char *next = a + strlen(a) + 1;
                if (strncmp(a, "--root=", 7) == 0 && strcmp(a + 7, root) == 0)
                        return true;
                if (strcmp(a, "--root") == 0 && next < end && strncmp(next, root, rl) == 0 &&
                    next[rl] == '\0')
                        return true;
        }
        return false;
}

/* The runsc processes (sandbox, gofer, an exec) of the root that outlived their containers:
 * e.g. a `runsc exec` of an agent killed mid-command. SIGKILL, then up to 2 s for them to go. */
static void kill_processes(cleanup *c)
{
        static char args[32768];
        pid_t killed[1024];
        size_t nk = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;

        if (!d) {
                failed(c, "cannot list /proc: %s", strerror(errno));
                return;
        }
        while ((e = readdir(d))) {
                size_t len;
                pid_t pid;

                if (!isdigit((unsigned char)e->d_name[0]))
                        continue;
                pid = (pid_t)atoi(e->d_name);
                if (pid == getpid())
                        continue;
                len = read_cmdline(e->d_name, args, sizeof(args));
                if (!len || !is_runsc(e->d_name, args) || !names_root(args, len, c->root))
                        continue;
                if (kill(pid, SIGKILL) < 0) {
                        if (errno != ESRCH)
                                failed(c, "cannot kill runsc process %d: %s", (int)pid,
                                       strerror(errno));
                        continue;
                }
                printf("killed runsc process %d\n", (int)pid);
                c->processes++;
                if (nk < ARRAY_SIZE(killed))
                        killed[nk++] = pid;
        }
        closedir(d);
        for (int i = 0; i < 200; i++) {
                bool alive = false;
                for (size_t k = 0; k < nk && !alive; k++)
                        alive = kill(killed[k], 0) == 0;
                if (!alive)
                        break;
                usleep(10000);
        }
}

/* --- mounts ---------------------------------------------------------------------------- */

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
        char *o = s;

        for (; *s; s++) {
                if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
                    s[3] >= '0' && s[3] <= '7') {
                        *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
                        s += 3;
                } else {
                        *o++ = *s;
                }
        }
        *o = '\0';
}

static int longest_first(const void *a, const void *b)
{
        size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);

        return la < lb ? 1 : la > lb ? -1 : 0;
}

/* The mount points strictly beneath dir (the state directory itself, a disk of its own,
 * stays), deepest first. */
static char **mounts_under(const char *dir, size_t *ret_n)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char **list = NULL, *line = NULL;
        size_t n = 0, cap = 0;

        *ret_n = 0;
        if (!f)
                return NULL;
        while (getline(&line, &cap, f) > 0) {
                char point[PATH_MAX + 1];

                /* id parent major:minor root mount-point ... */
                if (sscanf(line, "%*s %*s %*s %*s %4096s", point) != 1)
                        continue;
                unescape(point);
                if (!under(point, dir) || strcmp(point, dir) == 0)
                        continue;
                list = realloc(list, (n + 1) * sizeof(*list));
                if (!list)
                        abort();
                list[n++] = cs_xstrdup(point);
        }
        free(line);
        fclose(f);
        if (n)
                qsort(list, n, sizeof(*list), longest_first);
        *ret_n = n;
        return list;
}

static void unmount_all(cleanup *c)
{
        size_t n;
        char **list = mounts_under(c->state, &n);

        for (size_t i = 0; i < n; i++) {
                /* One unmount per line of mountinfo: a stacked mount is listed once each. */
                if (vol_umount_one(list[i]) < 0) {
                        if (errno != EINVAL && errno != ENOENT)
                                failed(c, "cannot unmount %s: %s", list[i], strerror(errno));
                } else {
                        printf("unmounted %s\n", list[i]);
                        c->mounts++;
                }
                free(list[i]);
        }
        free(list);
}

/* --- loop devices ---------------------------------------------------------------------- */

/* Detaches every loop device whose backing file is under the state directory: a volume's
 * device detaches itself when its mount goes (autoclear), so these are the ones left by an
 * agent killed between attaching and mounting, or attached by hand. */
static void detach_loops(cleanup *c)
{
        DIR *d = opendir("/sys/block");
        struct dirent *e;

        if (!d)
                return;
        while ((e = readdir(d))) {
                _cleanup_free_ char *path = NULL, *dev = NULL;
                _cleanup_close_ int fd = -1;
                char backing[PATH_MAX + 16];
                FILE *f;
                char *nl;

                if (strncmp(e->d_name, "loop", 4) != 0 || !isdigit((unsigned char)e->d_name[4]))
                        continue;
                path = cs_xasprintf("/sys/block/%s/loop/backing_file", e->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue; /* not attached */
                if (!fgets(backing, sizeof(backing), f)) {
                        fclose(f);
                        continue;
                }
                fclose(f);
                if ((nl = strchr(backing, '\n')))
                        *nl = '\0';
                if (!under(backing, c->state))
                        continue;
                dev = cs_xasprintf("/dev/%s", e->d_name);
                fd = open(dev, O_RDONLY | O_CLOEXEC);
                if (fd < 0 || ioctl(fd, LOOP_CLR_FD, 0) < 0) {
                        failed(c, "cannot detach %s (%s): %s", dev, backing, strerror(errno));
                        continue;
                }
                printf("detached %s (%s)\n", dev, backing);
                c->loops++;
        }
        closedir(d);
}

/* --- cgroups --------------------------------------------------------------------------- */

static void remove_cgroups(cleanup *c)
{
        cgroup_fs fs = { 0 };
        cs_error *err = NULL;
        char **names = NULL;
        size_t n = 0;

        if (cgroup_fs_detect(cgroup_root, &fs, &err) < 0) {
                failed_err(c, err);
                return;
        }
        if (cgroup_children(&fs, cgroup_parent, &names, &n, &err) < 0) {
                failed_err(c, err);
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *path = cs_xasprintf("%s/%s", cgroup_parent, names[i]);

                if (cgroup_remove(&fs, path, &err) < 0) {
                        failed_err(c, err);
                        err = NULL;
                        continue;
                }
                printf("removed cgroup %s\n", path);
                c->cgroups++;
        }
        if (cgroup_exists(&fs, cgroup_parent)) {
                if (cgroup_remove(&fs, cgroup_parent, &err) < 0) {
                        failed_err(c, err);
                } else {
                        printf("removed cgroup %s\n", cgroup_parent);
                        c->cgroups++;
                }
        }
out:
        cgroup_children_free(names, n);
        cgroup_fs_free(&fs);
}

/* --- data ------------------------------------------------------------------------------ */

static void delete_dir(cleanup *c, const char *path)
{
        size_t n;
        char **left;

        if (access(path, F_OK) < 0)
                return;
        /* Never into a mount: one that could not be unmounted keeps its directory. */
        left = mounts_under(path, &n);
        for (size_t i = 0; i < n; i++)
                free(left[i]);
        free(left);
        if (n) {
                failed(c, "not deleting %s: %zu mount%s beneath it", path, n, n == 1 ? "" : "s");
                return;
        }
        if (cs_remove_tree(AT_FDCWD, path) < 0) {
                failed(c, "cannot delete %s: %s", path, strerror(errno));
                return;
        }
        printf("deleted %s\n", path);
        c->dirs++;
}

static void delete_all_data(cleanup *c)
{
        static const char *const dirs[] = { "sandboxes", "workspaces", "volumes", "runsc", "run" };

        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                _cleanup_free_ char *p = cs_xasprintf("%s/%s", c->state, dirs[i]);
                delete_dir(c, p);
        }
        if (!under(c->root, c->state))
                delete_dir(c, c->root);
}

/* --- main ------------------------------------------------------------------------------ */

/* Sandbox networking: the host end of each recorded sandbox's veth (its peer and the
 * namespace go with it and the namespace file's mount, unmount_all), then the table. */
static void remove_network(cleanup *c)
{
        _cleanup_free_ char *dir = cs_xasprintf("%s/sandboxes", c->state);
        DIR *d = opendir(dir);
        struct dirent *e;
        cs_error *err = NULL;
        bool removed = false;

        while (d && (e = readdir(d))) {
                char link[16];
                if (!cs_uuid_valid(e->d_name))
                        continue;
                na_net_link_name(e->d_name, link);
                if (!nl_link_exists(link))
                        continue;
                if (nl_link_delete(link, &err) < 0)
                        failed_err(c, err), err = NULL;
                else
                        c->links++;
        }
        if (d)
                closedir(d);
        if (na_net_table_remove(nft_table, &removed, &err) < 0)
                failed_err(c, err);
        else if (removed)
                c->tables++;
}

static int usage_error(const char *msg)
{
        fprintf(stderr, "%s: %s (see --help)\n", PROG, msg);
        return 2;
}

static int run(void)
{
        _cleanup_close_ int lock = -1;
        _cleanup_free_ char *root_default = NULL;
        cs_error *err = NULL;
        cleanup c = { 0 };
        char real[PATH_MAX];

        if (state_dir[0] != '/')
                return usage_error("--state-dir must be an absolute path");
        if (cgroup_parent[0] != '/' || !cgroup_parent[strspn(cgroup_parent, "/")] ||
            strstr(cgroup_parent, ".."))
                return usage_error("--cgroup-parent must be an absolute cgroup path below /");
        if (runsc_root[0] && runsc_root[0] != '/')
                return usage_error("--runsc-root must be an absolute path");
        lock = state_dir_lock(state_dir, false, &err);
        if (lock < 0) {
                bool missing = err->code == GRPC_STATUS_NOT_FOUND;
                fprintf(stderr, "%s: %s%s\n", PROG, err->msg,
                        missing ? ""
                        : err->code == GRPC_STATUS_FAILED_PRECONDITION
                                ? ": stop it first (cleanup stops its sandboxes)"
                                : "");
                cs_error_free(err);
                if (!missing)
                        return 1;
                /* No state directory: its cgroups may still be there. */
        }
        c.state = cs_xstrdup(realpath(state_dir, real) ? real : state_dir);
        c.root = runsc_root[0] ? runsc_root : (root_default = cs_xasprintf("%s/runsc", state_dir));

        stop_containers(&c);
        kill_processes(&c);
        unmount_all(&c);
        detach_loops(&c);
        remove_cgroups(&c);
        remove_network(&c);
        if (delete_data && lock >= 0)
                delete_all_data(&c);

        if (c.containers | c.processes | c.mounts | c.loops | c.cgroups | c.dirs)
                printf("%u container%s stopped, %u runsc process%s killed, %u mount%s "
                       "unmounted, %u loop device%s detached, %u cgroup%s removed, %u "
                       "director%s deleted\n",
                       c.containers, c.containers == 1 ? "" : "s", c.processes,
                       c.processes == 1 ? "" : "es", c.mounts, c.mounts == 1 ? "" : "s", c.loops,
                       c.loops == 1 ? "" : "s", c.cgroups, c.cgroups == 1 ? "" : "s", c.dirs,
                       c.dirs == 1 ? "y" : "ies");
        if (c.links | c.tables)
                printf("%u network link%s deleted, %u nftables table%s removed\n", c.links,
                       c.links == 1 ? "" : "s", c.tables, c.tables == 1 ? "" : "s");
        if (!(c.containers | c.processes | c.mounts | c.loops | c.cgroups | c.dirs | c.links |
              c.tables))
                printf("nothing to do\n");
        if (c.failures)
                fprintf(stderr, "%s: %u thing%s could not be removed\n", PROG, c.failures,
                        c.failures == 1 ? "" : "s");
        free(c.state);
        return c.failures ? 1 : 0;
}

int cleanup_main(int argc, char **argv)
{
        cs_error *err = NULL;
        int r = cs_config_parse(&program, argc, argv, NULL, &err);

        if (r < 0) {
                fprintf(stderr, "%s: %s%s\n", PROG, err->msg,
                        strstr(err->msg, "--help") ? "" : " (see --help)");
                cs_error_free(err);
                cs_config_free(&program);
                return 2;
        }
        if (r == 0)
                r = run();
        else
                r = 0; /* --help */
        cs_config_free(&program);
        return r;
}
