/* compute-nodeagent: serves nodeagent.v1.NodeAgent on one node.
 *
 * The runtime, exec, workspace I/O and usage services arrive with the node agent issue;
 * today the binary claims its state directory, serves health checks and shuts down cleanly
 * on SIGTERM/SIGINT. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "daemon.h"
#include "signals.h"
#include "util.h"

static cs_daemon_config cfg;
static char *state_dir;

static const cs_option options[] = {
        CS_DAEMON_OPTIONS(cfg, "COMPUTE_AGENT_LISTEN", "127.0.0.1:50052"),
        { "state-dir", "COMPUTE_STATE_DIR", CS_OPT_STRING, "/var/lib/compute",
          "Directory for the agent's records and workspaces; created if missing, and locked so "
          "that two agents never share it.",
          &state_dir, 0, 0 },
};

static const cs_program program = {
        .name = "compute-nodeagent",
        .summary = "Serves the nodeagent.v1.NodeAgent gRPC API (internal: the frontend is its "
                   "only client) and grpc.health.v1.Health.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const char *const services[] = { "nodeagent.v1.NodeAgent", NULL };

/* Creates path and its parents (mode 0700 for what it creates). */
static int mkdir_parents(const char *path, cs_error **err)
{
        _cleanup_free_ char *p = cs_xstrdup(path);

        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != '\0')
                        continue;
                char c = *s;
                *s = '\0';
                if (mkdir(p, 0700) < 0 && errno != EEXIST)
                        return cs_error_errno(err, errno, "cannot create %s", p);
                *s = c;
                if (c == '\0')
                        return 0;
        }
}

/* Creates the state directory and takes its lock; the returned fd holds the lock for the
 * life of the process. */
static int state_dir_claim(const char *path, cs_error **err)
{
        _cleanup_close_ int dfd = -1;
        int fd;

        if (path[0] != '/')
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--state-dir: '%s' is not an absolute path", path);
        if (mkdir_parents(path, err) < 0)
                return -1;
        dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return cs_error_errno(err, errno, "cannot open %s", path);
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

int main(int argc, char **argv)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_close_ int lock_fd = -1;
        rpc_server *srv = NULL;
        int r;

        cs_signals_block();
        r = cs_config_parse(&program, argc, argv, NULL, &err);
        if (r == 0)
                r = cs_daemon_setup_logging(&cfg, &err);
        if (r != 0) {
                if (err)
                        fprintf(stderr, "%s: %s\n", program.name, err->msg);
                cs_config_free(&program);
                return r > 0 ? 0 : 2;
        }

        rpc_global_init();
        lock_fd = state_dir_claim(state_dir, &err);
        if (lock_fd >= 0) {
                log_info("%s: state in %s", program.name, state_dir);
                srv = cs_daemon_server_new(&cfg, services, &err);
        }
        if (srv)
                r = cs_daemon_serve(srv, program.name, &err);
        if (err)
                log_error("%s: %s", program.name, err->msg);
        rpc_global_shutdown();
        cs_config_free(&program);
        return err ? 1 : 0;
}
