#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/support/log.h>

#include "health.h"
#include "log.h"
#include "metrics_http.h"
#include "privs.h"
#include "seccomp_filter.h"
#include "signals.h"
#include "util.h"

/* gRPC core's lines (gpr_log), from any of its threads, as one of ours each: never its own
 * "E1203 12:00:00.000 ... file.cc:123] ..." text, which a JSON log could not parse. */
static void grpc_log_line(gpr_log_func_args *a)
{
        cs_log_level level = a->severity == GPR_LOG_SEVERITY_ERROR  ? CS_LOG_ERROR
                             : a->severity == GPR_LOG_SEVERITY_INFO ? CS_LOG_INFO
                                                                    : CS_LOG_DEBUG;
        cs_log_field f[] = {
                CS_LOG_STR("source", "grpc"),
                CS_LOG_STR("grpc_file", a->file),
                CS_LOG_INT("grpc_line", a->line),
        };

        cs_log_fields(level, NULL, NULL, f, ARRAY_SIZE(f), "%s", a->message ? a->message : "");
}

int cs_daemon_setup_logging(const cs_daemon_config *cfg, cs_error **err)
{
        cs_log_level level;
        bool json;

        if (cs_log_level_parse(cfg->log_level, &level) < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--log-level: '%s' is not debug, info, warn or error",
                                    cfg->log_level);
        if (cs_log_format_parse(cfg->log_format, &json) < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--log-format: '%s' is not text or json", cfg->log_format);
        cs_log_setup(level, json);
        /* Before grpc_init, so that not even its first line is printed its own way. */
        gpr_set_log_function(grpc_log_line);
        return 0;
}

/* --- TLS files ------------------------------------------------------------------------- */

/* Far above any certificate chain or key; a bound on what a wrong path makes us read. */
#define CS_PEM_MAX_BYTES (1024 * 1024)

enum {
        TLS_CA,
        TLS_CERT,
        TLS_KEY,
        TLS_N
};

typedef struct tls_files {
        const char *flag[TLS_N]; /* option names, for messages */
        const char *env;         /* their environment variables, for messages */
        const char *path[TLS_N];
        char *pem[TLS_N];
        bool ca_optional;   /* certificate and key without the CA: TLS, no client certificates */
        bool pair_optional; /* the CA without certificate and key: TLS, no client certificate */
} tls_files;

static bool nonempty(const char *s)
{
        return s && *s;
}

/* Reads one PEM file into a new NUL-terminated string. */
static char *read_pem_file(const char *flag, const char *path, cs_error **err)
{
        char *buf = NULL;
        size_t n = 0;

        if (cs_read_file(path, CS_PEM_MAX_BYTES, &buf, &n, NULL) < 0) {
                if (errno == EFBIG)
                        cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                     "--%s %s: larger than %d bytes, not a PEM file", flag, path,
                                     CS_PEM_MAX_BYTES);
                else
                        cs_error_errno(err, errno, "--%s %s: cannot %s", flag, path,
                                       errno == ENOENT || errno == EACCES ? "open" : "read");
                return NULL;
        }
        if (n == 0)
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "--%s %s: the file is empty", flag,
                             path);
        else if (memchr(buf, '\0', n))
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "--%s %s: not PEM text (it holds a NUL byte)", flag, path);
        else
                return buf;
        explicit_bzero(buf, n);
        free(buf);
        return NULL;
}

static void tls_files_free(tls_files *t)
{
        for (int i = 0; i < TLS_N; i++) {
                if (t->pem[i])
                        explicit_bzero(t->pem[i], strlen(t->pem[i]));
                free(t->pem[i]);
                t->pem[i] = NULL;
        }
}

/* The index of a path of t that is required and missing, or -1 when the set is complete or
 * empty. Certificate and key go together; the CA too unless ca_optional; certificate and key
 * may be left out with pair_optional. */
static int tls_files_missing(const tls_files *t)
{
        bool has[TLS_N];
        int given = 0;

        for (int i = 0; i < TLS_N; i++) {
                has[i] = nonempty(t->path[i]);
                given += has[i];
        }
        if (given == 0)
                return -1;
        for (int i = 0; i < TLS_N; i++) {
                bool required = i == TLS_CA ? !t->ca_optional
                                            : !t->pair_optional || has[TLS_CERT] || has[TLS_KEY];
                if (!has[i] && required)
                        return i;
        }
        return -1;
}

static int tls_files_missing_error(const tls_files *t, int missing, cs_error **err)
{
        const char *const *f = t->flag;

        if (t->ca_optional)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--%s and --%s (%s) go together, and --%s needs them: both "
                                    "for TLS, neither for plaintext; --%s is missing",
                                    f[TLS_CERT], f[TLS_KEY], t->env, f[TLS_CA], f[missing]);
        if (t->pair_optional)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--%s and --%s (%s) go together: a client certificate and "
                                    "its key; --%s is missing",
                                    f[TLS_CERT], f[TLS_KEY], t->env, f[missing]);
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                            "--%s, --%s and --%s (%s) go together: all three for TLS, none for "
                            "plaintext; --%s is missing",
                            f[TLS_CA], f[TLS_CERT], f[TLS_KEY], t->env, f[missing]);
}

/* Reads and checks a set of TLS files: all three paths or none, but for what ca_optional or
 * pair_optional let go. Returns 1 with the PEM text in t->pem (NULL for a path not given;
 * free with tls_files_free), 0 when no path is set, -1 with *err. */
static int tls_files_load(tls_files *t, cs_error **err)
{
        int missing = tls_files_missing(t);

        if (missing >= 0)
                return tls_files_missing_error(t, missing, err);
        if (!nonempty(t->path[TLS_CERT]) && !nonempty(t->path[TLS_CA]))
                return 0; /* none given (a partial set was refused above) */
        for (int i = 0; i < TLS_N; i++) {
                if (!nonempty(t->path[i]))
                        continue; /* an optional part */
                t->pem[i] = read_pem_file(t->flag[i], t->path[i], err);
                if (!t->pem[i])
                        goto fail;
        }
        if (t->pem[TLS_CA] && rpc_tls_check_pem(t->pem[TLS_CA], NULL, NULL, err) < 0) {
                cs_error_prefix(err, "--%s %s", t->flag[TLS_CA], t->path[TLS_CA]);
                goto fail;
        }
        if (t->pem[TLS_CERT] && rpc_tls_check_pem(NULL, t->pem[TLS_CERT], NULL, err) < 0) {
                cs_error_prefix(err, "--%s %s", t->flag[TLS_CERT], t->path[TLS_CERT]);
                goto fail;
        }
        if (t->pem[TLS_CERT] &&
            rpc_tls_check_pem(NULL, t->pem[TLS_CERT], t->pem[TLS_KEY], err) < 0) {
                cs_error_prefix(err, "--%s %s", t->flag[TLS_KEY], t->path[TLS_KEY]);
                goto fail;
        }
        return 1;
fail:
        tls_files_free(t);
        return -1;
}

static tls_files server_tls_files(const cs_daemon_config *cfg)
{
        if (cfg->public_tls)
                return (tls_files){ .flag = { "public-tls-client-ca", "public-tls-cert",
                                              "public-tls-key" },
                                    .env = "COMPUTE_PUBLIC_TLS_CERT/KEY/CLIENT_CA",
                                    .path = { cfg->tls_ca, cfg->tls_cert, cfg->tls_key },
                                    .ca_optional = true };
        return (tls_files){ .flag = { "tls-ca", "tls-cert", "tls-key" },
                            .env = "COMPUTE_TLS_CA/CERT/KEY",
                            .path = { cfg->tls_ca, cfg->tls_cert, cfg->tls_key } };
}

int cs_daemon_check_server_tls(const cs_daemon_config *cfg, cs_error **err)
{
        tls_files t = server_tls_files(cfg);
        int r = tls_files_load(&t, err);

        tls_files_free(&t);
        return r < 0 ? -1 : 0;
}

/* Reads t's files and sets the process-wide client TLS (rpc_client_tls_set) from them.
 * 1: TLS set; 0: no file given, nothing changed; -1 with *err. */
static int client_tls_set(tls_files *t, const char *server_name, cs_error **err)
{
        int r = tls_files_load(t, err);

        if (r <= 0)
                return r;
        r = rpc_client_tls_set(t->pem[TLS_CA], t->pem[TLS_CERT], t->pem[TLS_KEY], server_name, err);
        tls_files_free(t);
        return r < 0 ? -1 : 1;
}

int cs_daemon_setup_agent_tls(const cs_agent_tls_config *tls, cs_error **err)
{
        tls_files t = { .flag = { "agent-tls-ca", "agent-tls-cert", "agent-tls-key" },
                        .env = "COMPUTE_AGENT_TLS_CA/CERT/KEY",
                        .path = { tls->ca, tls->cert, tls->key } };
        int r = client_tls_set(&t, tls->server_name, err);

        if (r < 0)
                return -1;
        if (r == 0) {
                log_info("internal link: plaintext calls to the node agents (no --agent-tls-*)");
                return 0;
        }
        if (nonempty(tls->server_name))
                log_info("internal link: mutual TLS to the node agents (CA %s, certificate %s); "
                         "agents must present a certificate for \"%s\"",
                         tls->ca, tls->cert, tls->server_name);
        else
                log_info("internal link: mutual TLS to the node agents (CA %s, certificate %s); "
                         "agents must present a certificate for the host of their address",
                         tls->ca, tls->cert);
        return 0;
}

int cs_client_tls_setup(const cs_client_tls_config *tls, cs_error **err)
{
        tls_files t = { .flag = { "tls-ca", "tls-cert", "tls-key" },
                        .env = CS_CLIENT_TLS_ENV,
                        .path = { tls->ca, tls->cert, tls->key },
                        .pair_optional = true };

        if (!nonempty(tls->ca))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--tls-ca: no CA file to check the server's certificate "
                                    "against");
        return client_tls_set(&t, tls->server_name, err) < 0 ? -1 : 0;
}

/* --- the server ------------------------------------------------------------------------ */

/* The path of this process's Unix listening socket ("" when it serves TCP): one server per
 * process. */
static char unix_socket[PATH_MAX];

/* The group that may also connect to it (cs_daemon_set_listen_group), and its name ("": none). */
static const char *listen_group = "";
static gid_t listen_gid;

int cs_daemon_set_listen_group(const char *group, cs_error **err)
{
        struct group gr, *found = NULL;
        char buf[4096];

        listen_group = "";
        if (!group || !group[0])
                return 0;
        if (getgrnam_r(group, &gr, buf, sizeof(buf), &found) != 0 || !found)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--listen-group %s: no such group", group);
        if (gr.gr_gid == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--listen-group %s: the root group is not a client's group",
                                    group);
        listen_group = group;
        listen_gid = gr.gr_gid;
        return 0;
}

/* A "unix:PATH" listen address (the internal link of the embedded default): PATH's directory
 * is made 0700 if missing; it must be a directory of ours closed to others, and to the group
 * but for search (else PERMISSION_DENIED); it is then set to 0700, or to 0710 with the
 * --listen-group as its group, so that the group can reach the socket but not list or add
 * files. A stale socket left there by a crashed predecessor is removed, so it does not stop a
 * restart (the agent holds its state directory's lock: no live agent owns it). Anything else
 * at PATH is refused. */
static int unix_listen_prepare(const char *listen, cs_error **err)
{
        const char *path = listen + strlen("unix:");
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int dfd = -1;
        char *slash;
        struct stat st;

        if (path[0] != '/' || strlen(path) >= sizeof(unix_socket) || strlen(path) > 107)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--listen %s: a Unix socket needs an absolute path of at "
                                    "most 107 bytes",
                                    listen);
        dir = cs_xstrdup(path);
        slash = strrchr(dir, '/');
        slash[slash == dir ? 1 : 0] = '\0';
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return cs_error_errno(err, errno, "cannot create %s", dir);
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fstat(dfd, &st) < 0)
                return cs_error_errno(err, errno, "%s", dir);
        if (st.st_uid != geteuid() || (st.st_mode & 067))
                return cs_error_set(err, GRPC_STATUS_PERMISSION_DENIED,
                                    "%s: the directory of a Unix listening socket must be ours "
                                    "and mode 0700 (0710 with --listen-group; it is %o, uid %u)",
                                    dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
        if (listen_group[0] && fchown(dfd, (uid_t)-1, listen_gid) < 0)
                return cs_error_errno(err, errno, "cannot give %s to group %s", dir, listen_group);
        if (fchmod(dfd, listen_group[0] ? 0710 : 0700) < 0)
                return cs_error_errno(err, errno, "cannot chmod %s", dir);
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                            "%s exists and is not a socket", path);
                if (unlink(path) < 0)
                        return cs_error_errno(err, errno, "cannot remove the stale socket %s",
                                              path);
                log_info("removed a stale socket %s (left by a previous run)", path);
        } else if (errno != ENOENT) {
                return cs_error_errno(err, errno, "%s", path);
        }
        snprintf(unix_socket, sizeof(unix_socket), "%s", path);
        return 0;
}

/* The socket was bound 0700 (umask 077): 0600 at once, then, with a --listen-group, that
 * group and 0660. Never wider than that at any moment. */
static int unix_socket_restrict(cs_error **err)
{
        if (chmod(unix_socket, 0600) < 0)
                return cs_error_errno(err, errno, "cannot chmod %s", unix_socket);
        if (!listen_group[0])
                return 0;
        if (chown(unix_socket, (uid_t)-1, listen_gid) < 0 || chmod(unix_socket, 0660) < 0)
                return cs_error_errno(err, errno, "cannot give %s to group %s", unix_socket,
                                      listen_group);
        return 0;
}

rpc_server *cs_daemon_server_new(const cs_daemon_config *cfg, const char *const *services,
                                 cs_error **err)
{
        rpc_server_options opts = {
                .listen = cfg->listen,
                .max_calls = (unsigned)cfg->max_calls,
                /* 0: half of the calls, so a greedy peer always leaves room for others. */
                .max_calls_per_peer = cfg->max_calls_per_peer ? (unsigned)cfg->max_calls_per_peer
                                      : cfg->max_calls > 1    ? (unsigned)cfg->max_calls / 2
                                                              : 1,
                .grace_ms = cfg->grace_ms,
                .access_log_level = cfg->access_log_level,
        };
        tls_files t;
        int tls;
        rpc_server *srv;

        unix_socket[0] = '\0';
        if (strncmp(cfg->listen, "unix:", 5) == 0 && unix_listen_prepare(cfg->listen, err) < 0)
                return NULL;
        t = server_tls_files(cfg);
        tls = tls_files_load(&t, err);
        if (tls < 0)
                return NULL;
        opts.tls_ca_pem = t.pem[TLS_CA];
        opts.tls_cert_pem = t.pem[TLS_CERT];
        opts.tls_key_pem = t.pem[TLS_KEY];
        opts.tls_client_ca_optional = t.ca_optional;
        srv = rpc_server_new(&opts); /* copies the PEM text */
        if (tls && t.pem[TLS_CA])
                log_info("%s: mutual TLS only: certificate %s; clients must present a certificate "
                         "signed by the CA in %s",
                         cfg->listen, cfg->tls_cert, cfg->tls_ca);
        else if (tls)
                log_info("%s: TLS only: certificate %s; no client certificate asked for",
                         cfg->listen, cfg->tls_cert);
        tls_files_free(&t);

        if (cs_health_register(srv, services, err) < 0) {
                rpc_server_free(srv);
                return NULL;
        }
        return srv;
}

/* The user cs_daemon_serve() switches to once it listens ("": stay), and its ids. */
static const char *serve_user = "";
static uid_t serve_uid;
static gid_t serve_gid;

int cs_daemon_set_user(const char *user, cs_error **err)
{
        struct passwd pw, *found = NULL;
        char buf[4096];
        int rc;

        serve_user = "";
        if (!user || !user[0])
                return 0;
        rc = getpwnam_r(user, &pw, buf, sizeof(buf), &found);
        if (rc != 0 || !found)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "--user %s: no such user",
                                    user);
        if (pw.pw_uid == 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--user %s: not an unprivileged user", user);
        if (geteuid() != 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "--user %s: only root can change user", user);
        /* Now, while this is the only thread: the bounding set and no_new_privs are per
         * thread and inherited, so every thread made later has them too. Neither takes away
         * what this process may do now (bind, read its TLS files). */
        if (cs_caps_bound(0, err) < 0)
                return -1;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return cs_error_errno(err, errno, "cannot set no_new_privs");
        serve_user = user;
        serve_uid = pw.pw_uid;
        serve_gid = pw.pw_gid;
        return 0;
}

/* Root to the --user for good: no supplementary groups, its uid and gid (real, effective,
 * saved). glibc applies setgroups/setresgid/setresuid to every thread (gRPC's too), and the
 * uid change clears every thread's permitted and effective capabilities. */
static int drop_privileges(cs_error **err)
{
        uid_t r, e, sv;

        if (setgroups(0, NULL) < 0 || setresgid(serve_gid, serve_gid, serve_gid) < 0 ||
            setresuid(serve_uid, serve_uid, serve_uid) < 0)
                return cs_error_errno(err, errno, "--user %s: cannot change user", serve_user);
        /* There is no way back. */
        if (setresuid(0, 0, 0) == 0 || getresuid(&r, &e, &sv) < 0 || r != serve_uid ||
            e != serve_uid || sv != serve_uid)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "--user %s: root regained",
                                    serve_user);
        log_info("running as %s (uid %u, gid %u), no capabilities, no new privileges", serve_user,
                 (unsigned)serve_uid, (unsigned)serve_gid);
        return 0;
}

/* The metrics endpoint of cs_daemon_serve (cs_daemon_set_metrics). */
static struct {
        const char *listen;
        const char *token_file;
        cs_daemon_metrics_fn fn;
        void *userdata;
        /* Set by cs_daemon_serve for the collector. */
        rpc_server *srv;
        const char *name;
} metrics;

static void metrics_collect(cs_mpage *p, void *userdata)
{
        const char *build[] = { "program", metrics.name, "version", CS_VERSION, NULL };

        (void)userdata;
        cs_mpage_process(p);
        cs_mpage_family(p, "compute_build_info", "gauge", "The program and its version; always 1.");
        cs_mpage_sample(p, "compute_build_info", build, 1);
        rpc_server_metrics(metrics.srv, p);
        if (metrics.fn)
                metrics.fn(p, metrics.userdata);
}

void cs_daemon_set_metrics(const cs_daemon_config *cfg, cs_daemon_metrics_fn fn, void *userdata)
{
        metrics.listen = cfg->metrics_listen;
        metrics.token_file = cfg->metrics_token_file;
        metrics.fn = fn;
        metrics.userdata = userdata;
}

/* The bearer token in path: its first line, 16 to 256 printable ASCII characters. */
static char *metrics_token_read(const char *path, cs_error **err)
{
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;

        if (cs_read_file(path, 4096, &buf, &len, NULL) < 0)
                return cs_error_errno(err, errno, "--metrics-token-file %s: cannot read it", path),
                       NULL;
        buf[strcspn(buf, "\r\n")] = '\0';
        len = strlen(buf);
        for (size_t i = 0; i < len; i++)
                if (buf[i] <= ' ' || buf[i] > '~')
                        len = 0;
        if (len < 16 || len > 256)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--metrics-token-file %s: the token must be one line of 16 to "
                                    "256 printable characters without spaces",
                                    path),
                       NULL;
        return TAKE_PTR(buf);
}

/* The table cs_daemon_serve() installs; NULL: --seccomp=off. */
static const char *const *seccomp_allow;
static bool seccomp_log_only; /* --seccomp=log */

int cs_daemon_set_seccomp(const cs_daemon_config *cfg, const char *const *allow, cs_error **err)
{
        seccomp_allow = NULL;
        if (strcmp(cfg->seccomp, "off") == 0)
                return 0;
        seccomp_log_only = strcmp(cfg->seccomp, "log") == 0;
        if (strcmp(cfg->seccomp, "on") != 0 && !seccomp_log_only)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--seccomp must be on, off or log, not '%s'", cfg->seccomp);
        seccomp_allow = allow;
        return 0;
}

int cs_daemon_seccomp_install(const char *name, cs_error **err)
{
        size_t n = 0;

        if (!seccomp_allow) {
                log_warn("%s: --seccomp=off: no syscall filter (debugging only)", name);
                return 0;
        }
        while (seccomp_allow[n])
                n++;
        if (seccomp_log_only) {
                if (cs_seccomp_install_logging(name, seccomp_allow, err) < 0)
                        return -1;
                log_warn("%s: --seccomp=log: %zu syscalls listed, others allowed and logged "
                         "in the kernel log (debugging only)",
                         name, n);
                return 0;
        }
        if (cs_seccomp_install(name, seccomp_allow, err) < 0)
                return -1;
        log_info("%s: seccomp filter on: %zu syscalls allowed, others fail with EPERM", name, n);
        return 0;
}

/* For the "serving on" line. */
static const char *tls_mode(const rpc_server *srv)
{
        return rpc_server_tls_mutual(srv) ? " (mutual TLS)" : rpc_server_tls(srv) ? " (TLS)" : "";
}

int cs_daemon_serve(rpc_server *srv, const char *name, cs_error **err)
{
        cs_metrics_server *ms = NULL;
        _cleanup_free_ char *token = NULL;
        cs_log_field version = CS_LOG_STR("version", CS_VERSION);
        int sig, r;
        mode_t mask;

        /* A Unix socket is created 0700 (the umask) and restricted at once: only our user
         * (and the --listen-group) can connect from the moment it listens. */
        mask = umask(077);
        r = rpc_server_start(srv, err);
        umask(mask);
        if (r == 0 && unix_socket[0])
                r = unix_socket_restrict(err);
        metrics.srv = srv;
        metrics.name = name;
        if (r == 0 && metrics.listen && metrics.listen[0] && metrics.token_file &&
            metrics.token_file[0] && !(token = metrics_token_read(metrics.token_file, err)))
                r = -1;
        if (r == 0 && metrics.listen && metrics.listen[0]) {
                ms = cs_metrics_server_start(metrics.listen, token, metrics_collect, NULL, err);
                if (!ms)
                        r = -1;
                else
                        log_info("%s: metrics on http://%s/metrics (port %d%s)", name,
                                 metrics.listen, cs_metrics_server_port(ms),
                                 token ? ", bearer token required" : "");
        }
        if (r == 0 && serve_user[0])
                r = drop_privileges(err);
        /* Last: gRPC's threads exist (TSYNC reaches them), the files are open. */
        if (r == 0)
                r = cs_daemon_seccomp_install(name, err);
        if (r < 0) {
                cs_metrics_server_stop(ms);
                rpc_server_free(srv);
                return -1;
        }
        if (unix_socket[0])
                cs_log_fields(CS_LOG_INFO, NULL, NULL, &version, 1,
                              "%s %s serving on unix:%s (mode %s%s)%s", name, CS_VERSION,
                              unix_socket, listen_group[0] ? "0660, group " : "0600", listen_group,
                              tls_mode(srv));
        else
                cs_log_fields(CS_LOG_INFO, NULL, NULL, &version, 1, "%s %s serving on port %d%s",
                              name, CS_VERSION, rpc_server_port(srv), tls_mode(srv));
        sig = cs_signals_wait();
        log_info("%s: %s received, shutting down", name, strsignal(sig));
        cs_metrics_server_stop(ms); /* its collector reads srv */
        rpc_server_free(srv);
        if (unix_socket[0])
                unlink(unix_socket);
        log_info("%s stopped", name);
        return 0;
}
