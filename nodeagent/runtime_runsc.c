/* The runsc (gVisor) backend of the runtime seam.
 *
 * Everything runsc-specific is here and in runsc_config: the binary, its root directory, the
 * platform and the network mode. Facts this relies on (ARCHITECTURE.md): `run -detach` starts
 * a sandbox in ~0.2 s; `exec` exits with the process status (128+n when signalled) and
 * forwards no signals without a TTY, so signals go through `kill --pid`; `exec -detach` of the
 * Debian runsc (2022-12) appends its own flags to the command, so it is not used. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "runtime.h"
#include "utf8.h"
#include "util.h"
#include "uuid.h"

typedef struct runsc {
        runtime rt;
        char *path, *root, *platform, *network;
        int64_t timeout_ms;
        uint32_t max_processes;
} runsc;

#define RUNSC(r)       ((runsc *)(r))
#define RUNSC_MAX_ARGS 24

/* argv = runsc --root R [--platform P] [extra global flags] <args...>; strings borrowed. */
static size_t runsc_argv(const runsc *rs, const char **argv, const char *const *args)
{
        size_t n = 0;

        argv[n++] = rs->path;
        argv[n++] = "--root";
        argv[n++] = rs->root;
        if (rs->platform[0]) {
                argv[n++] = "--platform";
                argv[n++] = rs->platform;
        }
        for (; *args && n < RUNSC_MAX_ARGS - 1; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        return n;
}

static int runsc_run(const runsc *rs, const char *const *args, char **ret_out, cs_error **err)
{
        const char *argv[RUNSC_MAX_ARGS];

        runsc_argv(rs, argv, args);
        return proc_run((char *const *)argv, rs->timeout_ms, ret_out, err);
}

/* --- the OCI bundle -------------------------------------------------------------------- */

static json_t *mount_json(const char *dest, const char *type, const char *src,
                          const char *const *options)
{
        json_t *opts = json_array();

        for (; options && *options; options++)
                json_array_append_new(opts, json_string(*options));
        return json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type, "source", src,
                         "options", opts);
}

static json_t *strings_json(const char *const *s)
{
        json_t *a = json_array();

        for (; *s; s++)
                json_array_append_new(a, json_string(*s));
        return a;
}

/* The sandbox's init without the resident exec path: stays up, reaps orphans (it is pid 1)
 * and exits on SIGTERM. */
static const char *const init_args[] = {
        "/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done", NULL
};
/* With it: compute-init, which is an init too and connects out to the agent's socket. */
static const char *const spawner_init_args[] = { RT_INIT_PATH, "--socket", CS_SPAWNER_SOCKET,
                                                 NULL };
static const char *const caps[] = { "CAP_CHOWN",
                                    "CAP_DAC_OVERRIDE",
                                    "CAP_FOWNER",
                                    "CAP_FSETID",
                                    "CAP_KILL",
                                    "CAP_SETGID",
                                    "CAP_SETUID",
                                    "CAP_SETPCAP",
                                    "CAP_NET_BIND_SERVICE",
                                    "CAP_SYS_CHROOT",
                                    "CAP_MKNOD",
                                    "CAP_AUDIT_WRITE",
                                    "CAP_SETFCAP",
                                    NULL };

/* process.rlimits: RLIMIT_NPROC, which gVisor enforces per uid across the sandbox. */
static json_t *rlimits_json(uint32_t max_processes)
{
        json_t *limits = json_array();

        if (max_processes)
                json_array_append_new(limits, json_pack("{s:s, s:I, s:I}", "type", "RLIMIT_NPROC",
                                                        "hard", (json_int_t)max_processes, "soft",
                                                        (json_int_t)max_processes));
        return limits;
}

static json_t *bundle_config(const runsc *rs, const rt_sandbox_spec *s)
{
        static const char *const ro_nosuid[] = { "nosuid", "noexec", "nodev", "ro", NULL };
        static const char *const nosuid[] = { "nosuid", "strictatime", "mode=755", "size=65536k",
                                              NULL };
        static const char *const rw_bind[] = { "rbind", "rw", NULL };
        /* compute-init must be executable; nothing in the socket directory is. Both are
         * read-only: the sandbox can neither replace the binary nor unlink or replace the
         * agent's socket (connect(2) works on a read-only mount: measured, docs/security.md). */
        static const char *const init_bind[] = { "rbind", "ro", "nosuid", "nodev", NULL };
        static const char *const run_bind[] = { "rbind", "ro", "nosuid", "nodev", "noexec", NULL };
        bool spawner = s->init_binary && s->spawner_dir;
        static const char *const env[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                           "/usr/bin:/sbin:/bin",
                                           "HOME=/root", NULL };
        json_t *capset = json_pack("{s:o, s:o, s:o, s:o}", "bounding", strings_json(caps),
                                   "effective", strings_json(caps), "permitted", strings_json(caps),
                                   "ambient", json_array());
        json_t *process = json_pack(
                "{s:b, s:{s:i, s:i}, s:o, s:o, s:s, s:o, s:b, s:o}", "terminal", 0, "user", "uid",
                0, "gid", 0, "args", strings_json(spawner ? spawner_init_args : init_args), "env",
                strings_json(env), "cwd", "/", "capabilities", capset, "noNewPrivileges", 1,
                "rlimits", rlimits_json(rs->max_processes));
        json_t *mounts = json_array();
        json_t *namespaces = json_array();
        static const char *const ns[] = { "pid", "network", "ipc", "uts", "mount", NULL };
        json_t *resources;

        json_array_append_new(mounts, mount_json("/proc", "proc", "proc", NULL));
        json_array_append_new(mounts, mount_json("/dev", "tmpfs", "tmpfs", nosuid));
        json_array_append_new(mounts, mount_json("/sys", "sysfs", "sysfs", ro_nosuid));
        json_array_append_new(mounts, mount_json(s->mount_path, "bind", s->workspace_dir, rw_bind));
        if (spawner) {
                json_array_append_new(mounts,
                                      mount_json(RT_INIT_PATH, "bind", s->init_binary, init_bind));
                json_array_append_new(mounts,
                                      mount_json(RT_SPAWNER_DIR, "bind", s->spawner_dir, run_bind));
        }
        if (s->netns && s->resolv_conf)
                json_array_append_new(
                        mounts, mount_json("/etc/resolv.conf", "bind", s->resolv_conf, run_bind));
        /* With a network of its own: the network namespace is the one the agent made. */
        for (const char *const *n = ns; *n; n++)
                json_array_append_new(
                        namespaces, strcmp(*n, "network") == 0 && s->netns
                                            ? json_pack("{s:s, s:s}", "type", *n, "path", s->netns)
                                            : json_pack("{s:s}", "type", *n));
        resources = json_pack("{s:{s:I, s:I}, s:{s:I}}", "cpu", "quota",
                              (json_int_t)s->cpu_millis * 100, "period", (json_int_t)100000,
                              "memory", "limit", (json_int_t)s->memory_bytes);
        if (rs->max_processes)
                json_object_set_new(resources, "pids",
                                    json_pack("{s:I}", "limit",
                                              (json_int_t)RT_HOST_TASKS_MAX(rs->max_processes)));
        return json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:{s:o, s:s, s:o}}", "ociVersion",
                         "1.0.2", "process", process, "root", "path", s->rootfs, "readonly", 0,
                         "hostname", s->hostname, "mounts", mounts, "linux", "namespaces",
                         namespaces, "cgroupsPath", s->cgroup_path, "resources", resources);
}

/* Writes a JSON document to dir/name through a temporary file and a rename. */
static int write_json_file(const char *dir, const char *name, json_t *doc, cs_error **err)
{
        _cleanup_free_ char *tmp = cs_xasprintf("%s/.%s.tmp", dir, name);
        _cleanup_free_ char *final = cs_xasprintf("%s/%s", dir, name);

        /* The messages name the file, not the agent's directories: they may reach a client. */
        if (json_dump_file(doc, tmp, JSON_INDENT(1)) < 0) {
                int e = errno ? errno : EIO;
                unlink(tmp);
                return cs_error_errno(err, e, "cannot write the runtime's %s", name);
        }
        if (rename(tmp, final) < 0) {
                int e = errno;
                unlink(tmp);
                return cs_error_errno(err, e, "cannot write the runtime's %s", name);
        }
        return 0;
}

/* The container's host pid, from the file `runsc run --pid-file` wrote. */
static int read_pid_file(const char *path, pid_t *ret, cs_error **err)
{
        _cleanup_free_ char *text = NULL;
        char *end;
        long pid;

        if (cs_read_file(path, 64, &text, NULL, NULL) < 0)
                return cs_error_errno(err, errno, "runsc run wrote no pid file %s", path);
        errno = 0;
        pid = strtol(text, &end, 10);
        if (errno || end == text || pid <= 0 || pid > INT32_MAX)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: not a pid", path);
        *ret = (pid_t)pid;
        return 0;
}

/* `runsc run -detach` returns once the container runs (create + start) and writes its pid to
 * --pid-file: no `runsc state` (about 20 ms, measured) is needed on the start path. */
static int runsc_create(runtime *rt, const rt_sandbox_spec *spec, pid_t *ret_pid, cs_error **err)
{
        runsc *rs = RUNSC(rt);
        json_t *config = bundle_config(rs, spec);
        _cleanup_free_ char *network =
                cs_xasprintf("--network=%s", spec->netns ? "sandbox" : rs->network);
        _cleanup_free_ char *pid_file = cs_xasprintf("%s/container.pid", spec->bundle_dir);
        int r;

        r = write_json_file(spec->bundle_dir, "config.json", config, err);
        json_decref(config);
        if (r < 0)
                return -1;
        {
                /* The image's root under an overlay whose upper layer is memory: the sandbox
                 * may write anywhere in its root (/tmp, its home, installs), the writes count
                 * against its memory limit and go when it stops, and the image directory,
                 * shared by sandboxes, is never written. The OCI root is not "readonly": that
                 * would make the overlay read-only too. (Not --overlay: it would overlay the
                 * workspace bind mount as well, and its writes would never reach the host.) */
                /* --host-uds=open lets the sandbox connect(2) to host sockets in its mounts:
                 * only with the spawner, whose directory holds the one such socket (the
                 * image is a directory of images_dir, the workspace refuses sockets). */
                const char *args[12];
                const char *argv[RUNSC_MAX_ARGS];
                _cleanup_free_ char *log = cs_xasprintf("%s/runsc.log", spec->bundle_dir);
                size_t n = 0;

                args[n++] = network;
                args[n++] = "--overlay2=root:memory";
                if (spec->init_binary && spec->spawner_dir)
                        args[n++] = "--host-uds=open";
                args[n++] = "run";
                args[n++] = "-detach";
                args[n++] = "-pid-file";
                args[n++] = pid_file;
                args[n++] = "-bundle";
                args[n++] = spec->bundle_dir;
                args[n++] = spec->container_id;
                args[n] = NULL;
                /* The sandbox's daemons inherit stdout/stderr: a file, not our pipes. */
                runsc_argv(rs, argv, args);
                unlink(pid_file);
                if (proc_run_detached((char *const *)argv, rs->timeout_ms, log, spec->netns != NULL,
                                      err) < 0)
                        return -1;
                return read_pid_file(pid_file, ret_pid, err);
        }
}

static rt_state state_from_string(const char *s)
{
        if (strcmp(s, "running") == 0)
                return RT_RUNNING;
        if (strcmp(s, "created") == 0 || strcmp(s, "creating") == 0)
                return RT_CREATED;
        return RT_STOPPED;
}

static int runsc_list_details(runtime *rt, rt_container **ret, size_t *ret_n, cs_error **err);

/* Whether runsc knows container id, from `runsc list`'s JSON. runsc's state and delete fail
 * with exit status 1 whatever the cause (no such container, a broken root, a timeout), so a
 * failure is told apart by asking again in a structured way rather than by matching their
 * stderr text, whose wording changes between runsc releases. */
static int runsc_known(runtime *rt, const char *id, bool *ret, cs_error **err)
{
        rt_container *cs = NULL;
        size_t n = 0;

        if (runsc_list_details(rt, &cs, &n, err) < 0)
                return -1;
        *ret = false;
        for (size_t i = 0; i < n && !*ret; i++)
                *ret = strcmp(cs[i].id, id) == 0;
        rt_containers_free(cs, n);
        return 0;
}

static int runsc_state(runtime *rt, const char *id, rt_state *ret, pid_t *ret_pid, cs_error **err)
{
        _cleanup_free_ char *out = NULL;
        const char *args[] = { "state", id, NULL };
        json_t *doc;
        const char *status = NULL;
        json_int_t pid = 0;
        bool known = true;

        if (runsc_run(RUNSC(rt), args, &out, err) < 0) {
                cs_error *lerr = NULL;
                /* Absent when `list` confirms it; otherwise the state's own error stands. */
                if (runsc_known(rt, id, &known, &lerr) < 0)
                        cs_error_free(lerr);
                if (known)
                        return -1;
                cs_error_freep(err);
                *ret = RT_ABSENT;
                if (ret_pid)
                        *ret_pid = 0;
                return 0;
        }
        doc = json_loads(out, 0, NULL);
        if (!doc || json_unpack(doc, "{s:s, s?I}", "status", &status, "pid", &pid) < 0) {
                json_decref(doc);
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "runsc state %s: unexpected output",
                                    id);
        }
        *ret = state_from_string(status);
        if (ret_pid)
                *ret_pid = (pid_t)pid;
        json_decref(doc);
        return 0;
}

/* `runsc list --format=json`: an array of OCI states (null when there are none). */
static int runsc_list_details(runtime *rt, rt_container **ret, size_t *ret_n, cs_error **err)
{
        _cleanup_free_ char *out = NULL;
        const char *args[] = { "list", "--format=json", NULL };
        json_t *doc, *item;
        size_t i, n = 0;
        rt_container *cs;

        if (runsc_run(RUNSC(rt), args, &out, err) < 0)
                return -1;
        doc = json_loads(out, JSON_DECODE_ANY, NULL);
        if (!doc || !(json_is_array(doc) || json_is_null(doc))) {
                json_decref(doc);
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "runsc list: unexpected output");
        }
        cs = cs_xcalloc(json_is_array(doc) ? json_array_size(doc) + 1 : 1, sizeof(*cs));
        json_array_foreach(doc, i, item)
        {
                const char *id = json_string_value(json_object_get(item, "id"));
                const char *status = json_string_value(json_object_get(item, "status"));
                const char *bundle = json_string_value(json_object_get(item, "bundle"));
                json_int_t pid = json_integer_value(json_object_get(item, "pid"));
                if (!id)
                        continue;
                cs[n].id = cs_xstrdup(id);
                cs[n].state = state_from_string(status ? status : "stopped");
                cs[n].pid = pid > 0 ? (pid_t)pid : 0;
                cs[n].bundle = cs_xstrdup(bundle ? bundle : "");
                n++;
        }
        json_decref(doc);
        *ret = cs;
        *ret_n = n;
        return 0;
}

void rt_containers_free(rt_container *c, size_t n)
{
        for (size_t i = 0; c && i < n; i++) {
                free(c[i].id);
                free(c[i].bundle);
        }
        free(c);
}

/* NULL when a string is not UTF-8 (jansson refuses it; the RPC layer already has, so this is
 * a second line, never a silently dropped argument or environment entry). */
static json_t *exec_process_json(const runsc *rs, const rt_exec_spec *spec)
{
        json_t *args = json_array(), *env = json_array();

        for (char *const *a = spec->argv; *a; a++) {
                if (json_array_append_new(args, json_string(*a)) < 0)
                        goto bad;
        }
        for (char *const *e = spec->env; *e; e++) {
                if (json_array_append_new(env, json_string(*e)) < 0)
                        goto bad;
        }
        return json_pack("{s:b, s:{s:i, s:i}, s:o, s:o, s:s, s:{s:o, s:o, s:o}, s:o}", "terminal",
                         0, "user", "uid", 0, "gid", 0, "args", args, "env", env, "cwd", spec->cwd,
                         "capabilities", "bounding", strings_json(caps), "effective",
                         strings_json(caps), "permitted", strings_json(caps), "rlimits",
                         rlimits_json(rs->max_processes));
bad:
        json_decref(args);
        json_decref(env);
        return NULL;
}

/* The process spec goes in a file (--process) rather than on the command line, so that no
 * command or argument can ever be taken for a runsc flag. */
static int runsc_exec(runtime *rt, const rt_exec_spec *spec, rt_exec *ret, cs_error **err)
{
        runsc *rs = RUNSC(rt);
        char id[CS_UUID_STRLEN + 1];
        _cleanup_free_ char *name = NULL, *pid_file = NULL, *spec_file = NULL;
        proc_spawn_opts opts = { .stdin_fd = -1,
                                 .stdout_fd = spec->stdout_fd,
                                 .stderr_fd = spec->stderr_fd,
                                 .die_with_parent = true };
        json_t *process = exec_process_json(rs, spec);
        const char *argv[RUNSC_MAX_ARGS];
        int r;

        if (!process)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "the command, an argument, an environment entry or "
                                    "working_dir is not valid UTF-8");

        cs_uuid_generate(id);
        name = cs_xasprintf("exec-%s.json", id);
        spec_file = cs_xasprintf("%s/%s", spec->scratch_dir, name);
        pid_file = cs_xasprintf("%s/" RT_EXEC_PID_PREFIX "%s" RT_EXEC_PID_SUFFIX, spec->scratch_dir,
                                id);
        r = write_json_file(spec->scratch_dir, name, process, err);
        json_decref(process);
        if (r < 0)
                return -1;
        {
                const char *args[] = { "exec",    "--internal-pid-file", pid_file, "--process",
                                       spec_file, spec->container_id,    NULL };
                runsc_argv(rs, argv, args);
        }
        if (proc_spawn((char *const *)argv, &opts, &ret->host_pid, err) < 0) {
                unlink(spec_file);
                return -1;
        }
        ret->pid_file = TAKE_PTR(pid_file);
        ret->spec_file = TAKE_PTR(spec_file);
        return 0;
}

static int runsc_signal(runtime *rt, const char *id, int pid, int sig, cs_error **err)
{
        char pid_s[16], sig_s[16];
        const char *args[] = { "kill", "--pid", pid_s, id, sig_s, NULL };

        snprintf(pid_s, sizeof(pid_s), "%d", pid);
        snprintf(sig_s, sizeof(sig_s), "%d", sig);
        return runsc_run(RUNSC(rt), args, NULL, err);
}

/* Parses `runsc ps` (a table: UID PID PPID C TTY STIME TIME CMD); the Debian runsc's JSON
 * format gives bare pids only. */
static int runsc_processes(runtime *rt, const char *id, rt_proc **ret, size_t *ret_n,
                           cs_error **err)
{
        _cleanup_free_ char *out = NULL;
        const char *args[] = { "ps", id, NULL };
        size_t n = 0, cap = 0;
        rt_proc *procs = NULL;
        char *save = NULL;

        if (runsc_run(RUNSC(rt), args, &out, err) < 0)
                return -1;
        for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                int uid, pid, ppid;
                if (sscanf(line, "%d %d %d", &uid, &pid, &ppid) != 3)
                        continue; /* the header */
                procs = cs_xgrow(procs, n, &cap, sizeof(*procs));
                procs[n++] = (rt_proc){ .pid = pid, .ppid = ppid };
        }
        *ret = procs;
        *ret_n = n;
        return 0;
}

static int runsc_destroy(runtime *rt, const char *id, cs_error **err)
{
        const char *kill_args[] = { "kill", id, "KILL", NULL };
        const char *delete_args[] = { "delete", "-force", id, NULL };
        cs_error *ignored = NULL;

        /* Killing a stopped or absent container fails; delete is what must succeed. */
        runsc_run(RUNSC(rt), kill_args, NULL, &ignored);
        cs_error_free(ignored);
        if (runsc_run(RUNSC(rt), delete_args, NULL, err) < 0) {
                cs_error *lerr = NULL;
                bool known = true;
                /* Absent is fine: asked of `list`, not read from delete's stderr. */
                if (runsc_known(rt, id, &known, &lerr) < 0)
                        cs_error_free(lerr);
                if (known)
                        return -1;
                cs_error_freep(err);
        }
        return 0;
}

/* Whether a line of an exec's stderr is runsc exec's own failure, not the process's: the
 * forms seen when the sandbox dies under an exec or an exec meets a stopped container. */
static bool runsc_own_error_line(const char *line, size_t n)
{
        static const char *const prefixes[] = { "waiting on pid ",
                                                "executing processes for container: " };

        for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++)
                if (n >= strlen(prefixes[i]) && memcmp(line, prefixes[i], strlen(prefixes[i])) == 0)
                        return true;
        return memmem(line, n, "urpc method \"", 13) != NULL;
}

/* `runsc exec`'s line when the command never started, e.g.
 *   executing processes for container: executing command "x" in sandbox: error finding
 *   executable "x" in PATH [/usr/local/sbin ...]: no such file or directory
 *   ... in sandbox: failed to load /etc/passwd: permission denied
 *   ... in sandbox: failed to find initial working directory "/nodir": no such file or directory
 * told as the spawner tells it (nodeagent/init/spawner.c, start_error): 127 for ENOENT, 126
 * otherwise, and a message with the sandbox's names only. Other lines: left alone. */
static void runsc_start_error(const char *line, size_t n, rt_start_error *start)
{
        static const char head[] = "executing processes for container: executing command \"";
        static const char in_sandbox[] = " in sandbox: ";
        _cleanup_free_ char *text = NULL;
        const char *why, *what, *colon;
        bool enoent;
        int len;

        if (start->exit_code || n < sizeof(head) - 1 || memcmp(line, head, sizeof(head) - 1) != 0)
                return;
        text = strndup(line, n);
        if (!text)
                abort();
        text[strcspn(text, "\n")] = '\0';
        why = strstr(text, in_sandbox);
        colon = why ? strrchr(why, ':') : NULL;
        if (!why || !colon || colon[1] != ' ')
                return;
        why += sizeof(in_sandbox) - 1;
        enoent = strcmp(colon + 2, "no such file or directory") == 0;
        if (!enoent && strcmp(colon + 2, "permission denied") != 0)
                return;
        if ((what = strstr(why, "error finding executable \"")) == why) {
                what += strlen("error finding executable \"");
                len = (int)strcspn(what, "\"");
                if (enoent)
                        snprintf(start->msg, sizeof(start->msg), "%.*s: command not found", len,
                                 what);
                else
                        snprintf(start->msg, sizeof(start->msg), "%.*s: Permission denied", len,
                                 what);
        } else if ((what = strstr(why, "failed to load ")) == why) {
                what += strlen("failed to load ");
                snprintf(start->msg, sizeof(start->msg), "%.*s: %s", (int)(colon - what), what,
                         enoent ? "No such file or directory" : "Permission denied");
        } else if ((what = strstr(why, "failed to find initial working directory \"")) == why) {
                what += strlen("failed to find initial working directory \"");
                snprintf(start->msg, sizeof(start->msg), "cannot enter working directory %.*s: %s",
                         (int)strcspn(what, "\""), what,
                         enoent ? "No such file or directory" : "Permission denied");
        } else {
                return;
        }
        for (size_t m = strlen(start->msg); m > 0 && !cs_utf8_valid(start->msg, m);)
                start->msg[--m] = '\0';
        start->exit_code = enoent ? 127 : 126;
}

static size_t runsc_strip_own_errors(runtime *rt, char *buf, size_t n, rt_start_error *start)
{
        size_t kept = 0;

        (void)rt;
        for (size_t at = 0; at < n;) {
                char *nl = memchr(buf + at, '\n', n - at);
                size_t len = nl ? (size_t)(nl - (buf + at)) + 1 : n - at;

                if (!runsc_own_error_line(buf + at, len)) {
                        memmove(buf + kept, buf + at, len);
                        kept += len;
                } else {
                        runsc_start_error(buf + at, len, start);
                }
                at += len;
        }
        return kept;
}

static void runsc_free(runtime *rt)
{
        runsc *rs = RUNSC(rt);

        if (!rs)
                return;
        free(rs->path);
        free(rs->root);
        free(rs->platform);
        free(rs->network);
        free(rs);
}

static const runtime_ops runsc_ops = {
        .name = "runsc",
        .create = runsc_create,
        .state = runsc_state,
        .list_details = runsc_list_details,
        .exec = runsc_exec,
        .signal = runsc_signal,
        .processes = runsc_processes,
        .strip_own_errors = runsc_strip_own_errors,
        .destroy = runsc_destroy,
        .free = runsc_free,
};

runtime *runtime_runsc_new(const runsc_config *cfg, cs_error **err)
{
        runsc *rs;

        if (strcmp(cfg->network, "none") != 0 && strcmp(cfg->network, "sandbox") != 0 &&
            strcmp(cfg->network, "host") != 0) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "--runsc-network: '%s' is not none, sandbox or host", cfg->network);
                return NULL;
        }
        if (cfg->create_root && mkdir(cfg->root, 0700) < 0 && errno != EEXIST) {
                cs_error_errno(err, errno, "cannot create the runsc root %s", cfg->root);
                return NULL;
        }
        rs = cs_xcalloc(1, sizeof(*rs));
        rs->rt.ops = &runsc_ops;
        rs->path = cs_xstrdup(cfg->path);
        rs->root = cs_xstrdup(cfg->root);
        rs->platform = cs_xstrdup(cfg->platform ? cfg->platform : "");
        rs->network = cs_xstrdup(cfg->network);
        rs->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
        rs->max_processes = cfg->max_processes;
        return &rs->rt;
}

/* --- helpers common to every backend --------------------------------------------------- */

int rt_exec_internal_pid(const rt_exec *ex)
{
        char buf[32] = { 0 };
        int fd = open(ex->pid_file, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return 0;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        return n > 0 ? atoi(buf) : 0;
}

void rt_exec_free(rt_exec *ex)
{
        if (ex->pid_file) {
                unlink(ex->pid_file);
                free(ex->pid_file);
        }
        if (ex->spec_file) {
                unlink(ex->spec_file);
                free(ex->spec_file);
        }
        ex->pid_file = ex->spec_file = NULL;
}

size_t rt_descendants(const rt_proc *procs, size_t n, int pid, int **ret)
{
        /* Breadth-first: found[] grows as children of what it holds are found. A table read
         * while processes come and go may list a pid twice (under two parents) or hold a
         * parent loop: a pid already found is not added again, so each is signalled once
         * and at most n are found. */
        int *found = cs_xcalloc(n + 1, sizeof(*found));
        size_t nf = 0;

        for (size_t k = 0; k <= nf; k++) {
                int parent = k == 0 ? pid : found[k - 1];
                for (size_t i = 0; i < n && nf < n; i++) {
                        bool seen = procs[i].pid == pid;
                        if (procs[i].ppid != parent)
                                continue;
                        for (size_t j = 0; j < nf && !seen; j++)
                                seen = found[j] == procs[i].pid;
                        if (!seen)
                                found[nf++] = procs[i].pid;
                }
        }
        *ret = found;
        return nf;
}

int rt_kill_tree(runtime *rt, const char *container_id, int pid, int sig, cs_error **err)
{
        _cleanup_free_ rt_proc *procs = NULL;
        _cleanup_free_ int *victims = NULL;
        size_t n = 0, nv;
        int killed = 0;

        if (rt->ops->processes(rt, container_id, &procs, &n, err) < 0)
                return -1;
        nv = rt_descendants(procs, n, pid, &victims);
        for (size_t v = 0; v <= nv; v++) {
                cs_error *ignored = NULL; /* a process may exit on its own meanwhile */
                if (rt->ops->signal(rt, container_id, v == 0 ? pid : victims[v - 1], sig,
                                    &ignored) == 0)
                        killed++;
                cs_error_free(ignored);
        }
        return killed;
}
