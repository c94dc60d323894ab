/* The node agent's runtime seam: how sandbox containers are created, inspected, exec'd into,
 * signalled and destroyed. One ops table per backend; runsc (gVisor) is the one built now.
 * Finding a sandbox's container (its id, workspace and cgroup) is not part of this seam: the
 * registry (local mode) or the kube discovery does that and hands the ids in. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "spawner_paths.h"

typedef enum rt_state {
        RT_ABSENT,  /* no such container */
        RT_CREATED, /* created, not started yet */
        RT_RUNNING,
        RT_STOPPED, /* its init has exited */
} rt_state;

typedef struct rt_sandbox_spec {
        const char *container_id;
        const char *bundle_dir;    /* created by the caller; the backend writes config.json */
        const char *rootfs;        /* the image's directory, never written: the sandbox's
                                      writes to its root are kept in its memory */
        const char *workspace_dir; /* host directory bind-mounted read-write at mount_path */
        const char *mount_path;
        const char *cgroup_path; /* linux.cgroupsPath */
        const char *hostname;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        /* The resident exec path; both NULL: the sandbox's init is a shell loop. Otherwise
         * init_binary (compute-init, static) is bind-mounted read-only at RT_INIT_PATH and
         * runs as the init, spawner_dir (a host directory of the agent's, 0700) is mounted
         * read-only at RT_SPAWNER_DIR, and the sandbox may connect to host sockets in its
         * mounts (runsc --host-uds=open): the one socket there is the agent's listener. */
        const char *init_binary;
        const char *spawner_dir;
        /* A network of its own (net.h); NULL: the runtime's configured network (none). netns:
         * the namespace file the sandbox joins (runsc --network=sandbox takes its veth's
         * address and routes); resolv_conf: a host file bind-mounted read-only at
         * /etc/resolv.conf. */
        const char *netns;
        const char *resolv_conf;
} rt_sandbox_spec;

#define RT_INIT_PATH   CS_SPAWNER_BIN
#define RT_SPAWNER_DIR CS_SPAWNER_DIR

typedef struct rt_exec_spec {
        const char *container_id;
        char *const *argv; /* command and args, as the process sees them */
        char *const *env;  /* "K=V" strings */
        const char *cwd;
        const char *scratch_dir; /* where the backend may write per-exec files */
        int stdout_fd, stderr_fd;
} rt_exec_spec;

/* While an exec runs, its in-sandbox pid is in scratch_dir/exec-<uuid>.pid (removed by
 * rt_exec_free). A restarted agent kills what such files name: the execs of its previous
 * life, orphaned by kill -9. */
#define RT_EXEC_PID_PREFIX "exec-"
#define RT_EXEC_PID_SUFFIX ".pid"

/* A running exec: the host process that carries it and how to find the process inside. */
typedef struct rt_exec {
        pid_t host_pid;  /* reaped by the caller (proc_wait) */
        char *pid_file;  /* where the backend reports the in-sandbox pid */
        char *spec_file; /* removed by rt_exec_free */
} rt_exec;

/* An exec whose command never started, as the backend reported it (strip_own_errors). */
#define RT_START_ERROR_MAX 256
typedef struct rt_start_error {
        int exit_code; /* what a shell would say: 127 not found, 126 not executable; 0: none */
        char msg[RT_START_ERROR_MAX + 1]; /* "NAME: command not found": safe for a client */
} rt_start_error;

typedef struct rt_proc {
        int pid, ppid; /* in the sandbox's pid namespace */
} rt_proc;

/* One container as the runtime lists it. */
typedef struct rt_container {
        char *id;
        rt_state state;
        pid_t pid;    /* its host process (runsc: the sandbox's), 0 if none */
        char *bundle; /* its OCI bundle directory as the runtime recorded it (a host path) */
} rt_container;

void rt_containers_free(rt_container *c, size_t n);

typedef struct runtime runtime;

typedef struct runtime_ops {
        const char *name;
        /* Writes the bundle and starts the container detached; returns once it is running,
         * with its host pid in *ret_pid (the sandbox's, as state reports it). */
        int (*create)(runtime *rt, const rt_sandbox_spec *spec, pid_t *ret_pid, cs_error **err);
        int (*state)(runtime *rt, const char *container_id, rt_state *ret, pid_t *ret_pid,
                     cs_error **err);
        /* Every container the backend knows, with its state, host pid and bundle (malloc'd
         * array). */
        int (*list_details)(runtime *rt, rt_container **ret, size_t *ret_n, cs_error **err);
        /* Starts a process in the container with stdout/stderr on the given fds. */
        int (*exec)(runtime *rt, const rt_exec_spec *spec, rt_exec *ret, cs_error **err);
        /* Signals one process of the container (pid in its namespace). */
        int (*signal)(runtime *rt, const char *container_id, int pid, int sig, cs_error **err);
        /* The container's processes. */
        int (*processes)(runtime *rt, const char *container_id, rt_proc **ret, size_t *ret_n,
                         cs_error **err);
        /* Optional (NULL: nothing to take out). Takes the backend's own error lines out of a
         * chunk of an exec's stderr, in place, and returns the length left: runsc exec writes
         * its failures to the process's stderr (`waiting on pid 5: ... urpc method
         * "containerManager.WaitPID" failed: EOF` when an OOM kill takes the sandbox), and a
         * client must not see the runtime's internals. A line saying that the command could
         * not be started (not found, not executable, no such working directory) fills
         * *start (once): the caller reports it as the spawner does (exit 127/126 and the
         * message on stderr, docs/api.md). */
        size_t (*strip_own_errors)(runtime *rt, char *buf, size_t n, rt_start_error *start);
        /* Kills the container and removes it; absent is fine. */
        int (*destroy)(runtime *rt, const char *container_id, cs_error **err);
        void (*free)(runtime *rt);
} runtime_ops;

struct runtime {
        const runtime_ops *ops;
};

typedef struct runsc_config {
        const char *path;       /* the runsc binary */
        const char *root;       /* --root: runsc's state directory */
        const char *platform;   /* --platform; empty: runsc's default */
        const char *network;    /* --network: none, sandbox or host */
        int64_t timeout_ms;     /* for each runsc command but exec */
        bool create_root;       /* make the root directory if missing (local mode: it is ours) */
        uint32_t max_processes; /* processes per uid in a sandbox (RLIMIT_NPROC, enforced by
                                   gVisor: a fork past it fails with EAGAIN); 0: no limit */
} runsc_config;

/* The cgroup pids.max of a sandbox whose processes are capped at n: its host tasks (the
 * sentry's threads and the platform's stub processes, about two per sandbox process with
 * systrap, measured; they are not given back when processes exit). A last line for the
 * node: a sandbox that reaches it loses its sentry. 0 when n is 0. */
#define RT_HOST_TASKS_MAX(n) ((n) ? 4 * (uint64_t)(n) + 256 : 0)

runtime *runtime_runsc_new(const runsc_config *cfg, cs_error **err);

/* Reads the in-sandbox pid an exec's backend reported; 0 while not known yet. */
int rt_exec_internal_pid(const rt_exec *ex);
void rt_exec_free(rt_exec *ex);

/* The pids of pid's descendants in procs, found by parent links (pid itself excluded).
 * Returns how many; *ret is malloc'd (the caller frees it). */
size_t rt_descendants(const rt_proc *procs, size_t n, int pid, int **ret);

/* Kills pid and every descendant of it (by parent links) in the container with sig.
 * Returns how many processes were signalled. */
int rt_kill_tree(runtime *rt, const char *container_id, int pid, int sig, cs_error **err);
