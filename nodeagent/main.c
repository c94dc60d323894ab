/* compute-nodeagent: serves nodeagent.v1.NodeAgent on one node.
 *
 * Local mode: it creates the sandboxes itself as gVisor containers (runsc), runs commands in
 * them, does their workspace file I/O on the host side and measures their usage from cgroups.
 * Its records live in the state directory, so a restart (even after kill -9) loses nothing;
 * sandboxes keep running while the agent is down.
 *
 * Kube mode: the kubelet (containerd + the runsc shim) makes the pods' containers; the agent
 * finds a pod's container under the kubelet's runsc root from the CRI annotations of its
 * bundle and serves exec, file I/O and usage for it the same way. It keeps no records: a
 * restarted agent finds everything again from the runsc root. */
#include <inttypes.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "agent_defaults.h"
#include "cgroup.h"
#include "cleanup.h"
#include "agent_metrics.h"
#include "daemon.h"
#include "exec.h"
#include "image_cmd.h"
#include "kube.h"
#include "dns_proxy.h"
#include "net.h"
#include "netlink.h"
#include "privs.h"
#include "proc.h"
#include "runtime.h"
#include "sandbox.h"
#include "seccomp_filter.h"
#include "service.h"
#include "source.h"
#include "spawner_link.h"
#include "signals.h"
#include "util.h"

#define AGENT_VERSION CS_VERSION /* the project's, from CMakeLists.txt */

static cs_daemon_config cfg;
static char *state_dir, *images_dir, *runsc_path, *runsc_root, *runsc_platform, *runsc_network;
static char *cgroup_root, *cgroup_parent, *node_name, *mode, *container_name, *host_root;
static char *pod_namespaces, *volume_root, *listen_group, *capabilities;
static int64_t grace_s, sample_ms, max_sandboxes, max_parallel_starts, max_processes, warm_pool;
static int64_t cpu_overcommit_pct, memory_overcommit_pct, session_idle_s;
static bool workspace_volumes, spawner_on, sandbox_network;
static char *sandbox_subnet, *egress_uplink, *upstream_dns, *egress_default, *nft_table;
static char *spawner_binary;

/* What the agent keeps by default: measured (docs/security.md, "Privileges"). */
#define AGENT_CAPABILITIES "chown,dac_override,fowner,fsetid,setgid,setuid,sys_admin,setfcap"

#define KUBE_RUNSC_ROOT "/run/containerd/runsc/k8s.io"

static const cs_option options[] = {
        CS_DAEMON_OPTIONS(cfg, "COMPUTE_AGENT_LISTEN", "127.0.0.1:50052"),
        CS_METRICS_OPTIONS(cfg, "COMPUTE_AGENT_METRICS_LISTEN", "COMPUTE_AGENT_METRICS_TOKEN_FILE"),
        CS_SERVER_TLS_OPTIONS(cfg),
        { "listen-group", "COMPUTE_AGENT_LISTEN_GROUP", CS_OPT_STRING, "",
          "With --listen unix:PATH: the group that may connect too (an unprivileged frontend's): "
          "the socket is 0660 and its directory 0710 (search only), both of that group; the "
          "directories above must let it search. Empty: only this agent's user (0600, 0700).",
          &listen_group, 0, 0 },
        { "capabilities", "COMPUTE_AGENT_CAPABILITIES", CS_OPT_STRING, AGENT_CAPABILITIES,
          "The capabilities the agent (and runsc, which it runs) keeps, comma-separated; every "
          "other one leaves its bounding, permitted and effective sets at start, for good "
          "(docs/security.md says why each is kept). \"all\": keep what it was given.",
          &capabilities, 0, 0 },
        { "mode", "COMPUTE_AGENT_MODE", CS_OPT_STRING, "local",
          "local: the agent creates and records the sandboxes itself; kube: the kubelet makes "
          "them (gVisor pods) and the agent finds a pod's container under --runsc-root from "
          "its CRI annotations (CreateSandbox/DestroySandbox are then UNIMPLEMENTED).",
          &mode, 0, 0 },
        { "state-dir", "COMPUTE_STATE_DIR", CS_OPT_STRING, NA_STATE_DIR_DEFAULT,
          "Directory for the agent's records and workspaces; created if missing, and locked so "
          "that two agents never share it.",
          &state_dir, 0, 0 },
        { "images-dir", "COMPUTE_IMAGES_DIR", CS_OPT_STRING, "",
          "Directory of image root filesystems: image NAME is the directory NAME in it "
          "(default: STATE_DIR/images). A sandbox that names no image gets "
          "debian:bookworm-compute (scripts/run builds it); `compute-nodeagent image import` "
          "adds OCI layouts and docker save tarballs.",
          &images_dir, 0, 0 },
        { "runsc", "COMPUTE_RUNSC", CS_OPT_STRING, "runsc", "The runsc binary.", &runsc_path, 0,
          0 },
        { "runsc-root", "COMPUTE_RUNSC_ROOT", CS_OPT_STRING, "",
          "runsc's state directory (--root) for the sandboxes (default: STATE_DIR/runsc in "
          "local mode, " KUBE_RUNSC_ROOT " (containerd's runsc shim) in kube mode).",
          &runsc_root, 0, 0 },
        { "container-name", "COMPUTE_CONTAINER_NAME", CS_OPT_STRING, "sandbox",
          "Kube mode: the sandbox container's name in a pod, when a pod reference gives none; "
          "ListSandboxes lists the containers of this name.",
          &container_name, 0, 0 },
        { "pod-namespaces", "COMPUTE_POD_NAMESPACES", CS_OPT_STRING, "compute-sandboxes",
          "Kube mode: the namespaces whose pods this agent serves, comma-separated (\"*\": "
          "any); a reference to a pod of another namespace is NOT_FOUND.",
          &pod_namespaces, 0, 0 },
        { "volume-root", "COMPUTE_VOLUME_ROOT", CS_OPT_STRING, "/var/lib/kubelet/pods",
          "Kube mode: the host directory the kubelet mounts pod volumes under; a workspace "
          "whose host directory is not beneath it (a hostPath, /etc/hosts) is never opened.",
          &volume_root, 0, 0 },
        { "host-root", "COMPUTE_HOST_ROOT", CS_OPT_STRING, "",
          "Kube mode: where the host's / is mounted in the agent's view (e.g. /host); host "
          "paths read from the runtime and the bundles (bundle directories, volume sources) "
          "are looked up under it. Empty: the paths as they are.",
          &host_root, 0, 0 },
        { "runsc-platform", "COMPUTE_RUNSC_PLATFORM", CS_OPT_STRING, "",
          "runsc --platform (ptrace, kvm, systrap); empty: runsc's default.", &runsc_platform, 0,
          0 },
        { "runsc-network", "COMPUTE_RUNSC_NETWORK", CS_OPT_STRING, "none",
          "runsc --network of sandboxes without a network. Local mode: none only (a sandbox "
          "with a network policy gets runsc's sandbox network in a namespace of the agent's: "
          "--sandbox-network).",
          &runsc_network, 0, 0 },
        { "sandbox-network", "COMPUTE_SANDBOX_NETWORK", CS_OPT_BOOL, "on",
          "Local mode: sandboxes may have a network (CreateSandbox's network: egress allowlist "
          "or open): each such sandbox gets a network namespace, a veth pair to the host, an "
          "address of --sandbox-subnet and the rules of an nftables table (docs/security.md, "
          "\"Network\"). The agent then keeps net_admin, net_raw and net_bind_service too. "
          "off: every sandbox has loopback only and a create asking for more is "
          "FAILED_PRECONDITION.",
          &sandbox_network, 0, 0 },
        { "sandbox-subnet", "COMPUTE_SANDBOX_SUBNET", CS_OPT_STRING, "10.77.0.0/16",
          "Local mode: the IPv4 range sandboxes' addresses come from (a /30 per networked "
          "sandbox: a /16 holds 16384). The agent refuses to start when it overlaps a route "
          "of the host.",
          &sandbox_subnet, 0, 0 },
        { "egress-uplink", "COMPUTE_EGRESS_UPLINK", CS_OPT_STRING, "",
          "Local mode: the interface sandboxes' traffic leaves by, masqueraded as its "
          "address; nothing of theirs is forwarded to any other. Empty: the interface of the "
          "host's default route.",
          &egress_uplink, 0, 0 },
        { "upstream-dns", "COMPUTE_UPSTREAM_DNS", CS_OPT_STRING, "",
          "Local mode: the resolvers the agent's sandbox resolver asks (comma-separated IPv4 "
          "or IPv6 addresses, port 53). Empty: the nameservers of the host's /etc/resolv.conf.",
          &upstream_dns, 0, 0 },
        { "egress-default", "COMPUTE_EGRESS_DEFAULT", CS_OPT_STRING, "none",
          "Local mode: the egress of a sandbox whose CreateSandbox names none: none (loopback "
          "only) or open (anything but the always-denied ranges).",
          &egress_default, 0, 0 },
        { "nft-table", "COMPUTE_NFT_TABLE", CS_OPT_STRING, "compute",
          "Local mode: the name of the agent's nftables table (family inet). Two agents on "
          "one host need two names (and two --sandbox-subnet ranges).",
          &nft_table, 0, 0 },
        { "cgroup-root", "COMPUTE_CGROUP_ROOT", CS_OPT_STRING, NA_CGROUP_ROOT_DEFAULT,
          "Where the cgroup hierarchy is mounted (v1 or v2, detected).", &cgroup_root, 0, 0 },
        { "cgroup-parent", "COMPUTE_CGROUP_PARENT", CS_OPT_STRING, NA_CGROUP_PARENT_DEFAULT,
          "Parent cgroup of the sandboxes: each gets PARENT/<sandbox id>.", &cgroup_parent, 0, 0 },
        { "workspace-grace-s", "COMPUTE_WORKSPACE_GRACE_S", CS_OPT_INT, "86400",
          "After a destroy, how long the workspace is kept before the agent removes it.", &grace_s,
          0, 365 * 86400 },
        { "workspace-volumes", "COMPUTE_WORKSPACE_VOLUMES", CS_OPT_BOOL, "on",
          "Local mode: each workspace is an ext4 volume of its requested size (a sparse image "
          "under STATE_DIR/volumes on a loop device), so it holds no more than that and its "
          "disk usage comes from the volume's block counters; without loop devices "
          "CreateSandbox is FAILED_PRECONDITION. off: a plain directory, unbounded (it can fill "
          "the state directory's filesystem).",
          &workspace_volumes, 0, 0 },
        { "sample-interval-ms", "COMPUTE_SAMPLE_INTERVAL_MS", CS_OPT_INT, "1000",
          "Period of memory sampling (for averages), status checks and workspace GC.", &sample_ms,
          50, 60000 },
        { "max-sandboxes", "COMPUTE_MAX_SANDBOXES", CS_OPT_INT, "64",
          "Live sandboxes this agent runs at once; more get RESOURCE_EXHAUSTED.", &max_sandboxes, 1,
          4096 },
        { "max-parallel-starts", "COMPUTE_MAX_PARALLEL_STARTS", CS_OPT_INT, "0",
          "Local mode: sandboxes started by the runtime (runsc run) at once; the others of a "
          "burst wait in STARTING for a turn. 0: two per CPU this agent may run on.",
          &max_parallel_starts, 0, 1024 },
        { "warm-pool", "COMPUTE_WARM_POOL", CS_OPT_INT, "0",
          "Local mode: warm sandboxes of the default profile (default image, limits and "
          "workspace size) kept READY; a CreateSandbox of that profile claims one, a "
          "running sandbox. They count against no tenant and are removed when the agent "
          "stops. 0: none; at most 64. Kube mode: must be 0 (the pool is the frontend's "
          "--kube-warm-pool).",
          &warm_pool, 0, SB_WARM_POOL_MAX },
        { "cpu-overcommit-percent", "COMPUTE_CPU_OVERCOMMIT_PERCENT", CS_OPT_INT, "3200",
          "Local mode: CPU limits of live sandboxes may add up to this percent of the node's "
          "CPUs (sched_getaffinity, capped by /sys/fs/cgroup/cpu.max); a create beyond gets "
          "RESOURCE_EXHAUSTED. 0: no admission control.",
          &cpu_overcommit_pct, 0, 10000 },
        { "memory-overcommit-percent", "COMPUTE_MEMORY_OVERCOMMIT_PERCENT", CS_OPT_INT, "300",
          "Local mode: memory limits of live sandboxes may add up to this percent of the node's "
          "MemTotal; a create beyond gets RESOURCE_EXHAUSTED. 0: no admission control.",
          &memory_overcommit_pct, 0, 10000 },
        { "max-processes", "COMPUTE_MAX_PROCESSES", CS_OPT_INT, "1024",
          "Processes per user in a sandbox (RLIMIT_NPROC, enforced by gVisor): a fork past it "
          "fails with EAGAIN and the sandbox goes on. Local mode also caps the sandbox's host "
          "tasks (cgroup pids.max) at 4x this + 256, the node's last line. 0: no limit.",
          &max_processes, 0, 1048576 },
        { "spawner", "COMPUTE_SPAWNER", CS_OPT_BOOL, "on",
          "Local mode: the resident exec path. Each new sandbox runs compute-init "
          "(--spawner-binary) as its init, which connects to a socket of the agent in the "
          "sandbox's directory (runsc --host-uds=open) and starts commands on request; an exec "
          "goes through it while it is connected and through `runsc exec` otherwise (a sandbox "
          "made without it, a spawner that died or has not connected yet). off: every sandbox "
          "gets the plain init and every exec `runsc exec`.",
          &spawner_on, 0, 0 },
        { "session-idle-s", "COMPUTE_SESSION_IDLE_S", CS_OPT_INT, "300",
          "ExecSession: a session with no message from its client and no output for this "
          "many seconds is ended as a timeout is (SIGTERM, SIGKILL the grace later, "
          "ExecCompleted{timed_out}). 0: no idle limit (the 600 s cap still holds).",
          &session_idle_s, 0, 86400 },
        { "spawner-binary", "COMPUTE_SPAWNER_BINARY", CS_OPT_STRING, "",
          "The compute-init binary (static) bind-mounted read-only into each sandbox. Empty: "
          "compute-init next to the agent's own executable. Missing: the spawner is off (a "
          "warning says so).",
          &spawner_binary, 0, 0 },
        { "node-name", "COMPUTE_NODE_NAME", CS_OPT_STRING, "",
          "Name this node reports (default: the host name; in kube mode the DaemonSet sets it "
          "to the Kubernetes node name, spec.nodeName).",
          &node_name, 0, 0 },
};

static const cs_program program = {
        .name = "compute-nodeagent",
        .summary = "Serves the nodeagent.v1.NodeAgent gRPC API (internal: the frontend is its "
                   "only client) and grpc.health.v1.Health. `compute-nodeagent image "
                   "import|list|rm` manages the local mode's images (`image --help`); "
                   "`compute-nodeagent cleanup` removes what a stopped local mode agent left "
                   "on the node (`cleanup --help`).",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const char *const services[] = { "nodeagent.v1.NodeAgent", NULL };

/* Limits the agent to --capabilities, while it has one thread. */
static int agent_limit_capabilities(cs_error **err)
{
        _cleanup_free_ char *kept = NULL;
        uint64_t keep, kept_mask;

        if (cs_caps_parse(capabilities, &keep, err) < 0) {
                cs_error_prefix(err, "--capabilities");
                return -1;
        }
        /* Sandbox networking: namespaces, links, nftables (net_admin); runsc's netstack on
         * a packet socket (net_raw); the sandboxes' resolver on port 53 (net_bind_service). */
        if (sandbox_network && strcmp(mode, "local") == 0) {
                uint64_t net;
                if (cs_caps_parse("net_admin,net_raw,net_bind_service", &net, err) < 0)
                        return -1;
                keep |= net;
        }
        if (cs_caps_limit(keep, &kept_mask, err) < 0)
                return -1;
        kept = cs_caps_format(kept_mask);
        log_info("%s: keeps the capabilities %s", program.name, kept[0] ? kept : "(none)");
        return 0;
}

static void registry_log(bool warn, const char *sandbox_id, const char *msg)
{
        cs_log(warn ? CS_LOG_WARN : CS_LOG_INFO, NULL, sandbox_id, "%s", msg);
}

/* The first line of `runsc --version`, or "unknown". */
static char *runtime_version(void)
{
        char *argv[] = { runsc_path, "--version", NULL };
        char *out = NULL;
        cs_error *err = NULL;

        if (proc_run(argv, 10000, &out, &err) < 0) {
                cs_error_free(err);
                return cs_xstrdup("unknown");
        }
        out[strcspn(out, "\n")] = '\0';
        return out;
}

/* Everything the agent runs on, opened in order; freed in reverse by agent_close(). */
typedef struct agent {
        cgroup_fs cg;
        runtime *rt;
        sb_registry *reg;
        source *src; /* where sandboxes come from: picked once, here */
        char *runtime_version;
        spawn_mgr *spawner;   /* the resident exec path's connections; NULL: off */
        na_net *net;          /* local mode's sandbox networking; NULL: off */
        char *spawner_binary; /* compute-init, resolved */
        na_capacity capacity; /* the node's, read once: GetAgentInfo and admission control */
        char hostname[256];
} agent;

/* The agent's part of every scrape of --metrics-listen. */
static void agent_metrics(cs_mpage *p, void *userdata)
{
        agent *a = userdata;

        na_metrics_write(p, a->src);
        na_metrics_write_pool(p, a->reg);
        na_metrics_write_dns(p, a->net);
}

/* Kube mode: the finder of the pods' containers under the kubelet's runsc root. */
static kube_finder *kube_finder_for(runtime *rt)
{
        kube_config kc = { .rt = rt,
                           .host_root = host_root,
                           .default_container = container_name,
                           .namespaces = pod_namespaces,
                           .volume_root = volume_root };

        return kube_finder_new(&kc);
}

/* compute-init: --spawner-binary, or next to this executable. */
static char *spawner_binary_path(void)
{
        char self[PATH_MAX];
        ssize_t n;
        char *slash;

        if (spawner_binary[0])
                return cs_xstrdup(spawner_binary);
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
                return NULL;
        self[n] = 0;
        slash = strrchr(self, '/');
        if (!slash)
                return NULL;
        *slash = 0;
        return cs_xasprintf("%s/compute-init", self);
}

/* The resident exec path, when --spawner is on: in local mode when compute-init is there; in
 * kube mode the pods bring compute-init (the frontend's --spawner-image) and the agent listens
 * in their compute-run emptyDir. */
static int spawner_open(agent *a, bool kube, cs_error **err)
{
        _cleanup_free_ char *path = NULL;

        if (!spawner_on) {
                log_info("spawner: off (--spawner=off): every exec goes through runsc exec");
                return 0;
        }
        if (kube) {
                a->spawner = spawn_mgr_new(registry_log, err);
                if (!a->spawner)
                        return -1;
                log_info("spawner: on: pods that run compute-init get the resident exec path "
                         "once it connects (the node's runsc needs host-uds=open); runsc exec "
                         "for the others");
                return 0;
        }
        path = spawner_binary_path();
        if (!path || path[0] != '/' || access(path, X_OK) < 0) {
                log_warn("spawner: off: no compute-init at %s (--spawner-binary); every exec goes "
                         "through runsc exec",
                         path ? path : "(unknown)");
                return 0;
        }
        a->spawner = spawn_mgr_new(registry_log, err);
        if (!a->spawner)
                return -1;
        a->spawner_binary = TAKE_PTR(path);
        log_info("spawner: on (%s): new sandboxes get the resident exec path; runsc exec when "
                 "a sandbox's spawner is not connected",
                 a->spawner_binary);
        return 0;
}

/* Local mode's sandbox networking (--sandbox-network). */
static int net_open(agent *a, cs_error **err)
{
        int def = cs_egress_from_name(egress_default);
        na_net_config nc = { .subnet = sandbox_subnet,
                             .uplink = egress_uplink,
                             .table = nft_table,
                             .upstream_dns = upstream_dns,
                             .egress_default = (cs_egress)def };

        if (def != CS_EGRESS_NONE && def != CS_EGRESS_OPEN)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--egress-default: '%s' is not none or open", egress_default);
        if (!nft_table[0] ||
            strspn(nft_table, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(nft_table) ||
            strlen(nft_table) > 32)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--nft-table: 1..32 of a-z, 0-9 and _");
        if (!sandbox_network) {
                if (def != CS_EGRESS_NONE)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "--egress-default %s needs --sandbox-network on",
                                            egress_default);
                log_info("sandbox network: off: every sandbox has loopback only");
                return 0;
        }
        /* Left to their defaults, a host with no default route or no resolver in its
         * resolv.conf has no sandbox network to give: off, said once, unless the default
         * egress needs it. */
        if (!egress_uplink[0] || !upstream_dns[0]) {
                struct sockaddr_storage ups[1];
                char ifname[IF_NAMESIZE];
                size_t n = 0;
                cs_error *why = NULL;
                if ((!egress_uplink[0] && nl_default_route_if(ifname, sizeof(ifname), &why) < 0) ||
                    (!upstream_dns[0] &&
                     dns_read_resolv_conf("/etc/resolv.conf", ups, 1, &n, &why) < 0)) {
                        if (def != CS_EGRESS_NONE) {
                                cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                             "sandbox network: %s (set --egress-uplink and "
                                             "--upstream-dns)",
                                             why->msg);
                                cs_error_free(why);
                                return -1;
                        }
                        log_warn("sandbox network: off: %s (set --egress-uplink and "
                                 "--upstream-dns, or --sandbox-network=off)",
                                 why->msg);
                        cs_error_free(why);
                        return 0;
                }
        }
        if (na_net_open(&nc, &a->net, err) < 0)
                return cs_error_prefix(err, "sandbox network");
        log_info("sandbox network: on: subnet %s, table inet %s, default egress %s", sandbox_subnet,
                 nft_table, egress_default);
        return 0;
}

static int agent_open(agent *a, cs_error **err)
{
        _cleanup_free_ char *def_images = cs_xasprintf("%s/images", state_dir);
        bool kube = strcmp(mode, "kube") == 0;
        _cleanup_free_ char *def_root =
                kube ? cs_xstrdup(KUBE_RUNSC_ROOT) : cs_xasprintf("%s/runsc", state_dir);
        runsc_config rc = { .path = runsc_path,
                            .root = runsc_root[0] ? runsc_root : def_root,
                            .platform = runsc_platform,
                            .network = runsc_network,
                            .create_root = !kube,
                            .max_processes = (uint32_t)max_processes };
        sb_config sc = { .state_dir = state_dir,
                         .images_dir = images_dir[0] ? images_dir : def_images,
                         .cgroup_parent = cgroup_parent,
                         .grace_ms = grace_s * 1000,
                         .sample_interval_ms = sample_ms,
                         .max_sandboxes = (uint32_t)max_sandboxes,
                         .max_parallel_starts = (uint32_t)max_parallel_starts,
                         .pids_max = RT_HOST_TASKS_MAX((uint64_t)max_processes),
                         .volumes = workspace_volumes && !kube,
                         .kube = kube,
                         .warm_pool = (uint32_t)warm_pool };

        if (kube && warm_pool)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--warm-pool: in kube mode the pool is the frontend's "
                                    "--kube-warm-pool (use 0 here)");

        /* Measured with runsc 20240729 (docs/security.md, "Network"): runsc's own networks
         * cannot be given to every local sandbox at once: sandbox needs the network namespace
         * the agent makes per sandbox (--sandbox-network), host fails in the gofer. */
        if (!kube && strcmp(runsc_network, "none") != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--runsc-network %s: in local mode a sandbox's network is "
                                    "its CreateSandbox's network policy (--sandbox-network); "
                                    "none is the only value here (docs/security.md, "
                                    "\"Network\")",
                                    runsc_network);
        if (na_capacity_read("/proc/meminfo", "/sys/fs/cgroup/cpu.max", &a->capacity, err) < 0)
                return -1;
        if (!kube && cpu_overcommit_pct && memory_overcommit_pct) {
                sc.capacity = a->capacity;
                sc.capacity.cpu_overcommit = (double)cpu_overcommit_pct / 100;
                sc.capacity.memory_overcommit = (double)memory_overcommit_pct / 100;
                log_info("admission: %" PRIu64 " MiB, %" PRIu32 "m CPU; overcommit %.2f (memory), "
                         "%.2f (cpu)",
                         sc.capacity.memory_bytes >> 20, sc.capacity.cpu_millis,
                         sc.capacity.memory_overcommit, sc.capacity.cpu_overcommit);
        }
        if (cgroup_fs_detect(cgroup_root, &a->cg, err) < 0)
                return -1;
        a->rt = runtime_runsc_new(&rc, err);
        if (!a->rt)
                return -1;
        a->runtime_version = runtime_version();
        log_info("runtime %s (%s), cgroup v%d%s at %s (found by %s)", a->rt->ops->name,
                 a->runtime_version, (int)a->cg.version, a->cg.hybrid ? " (hybrid host)" : "",
                 cgroup_root, a->cg.libcgroup ? "libcgroup" : "its files");
        if (kube)
                log_info("kube mode: pods of namespaces %s under the runsc root %s, container "
                         "'%s', volumes under %s, host root '%s'",
                         pod_namespaces, rc.root, container_name, volume_root, host_root);
        if (spawner_open(a, kube, err) < 0 || (!kube && net_open(a, err) < 0))
                return -1;
        sc.net = a->net;
        sc.spawner = a->spawner;
        sc.spawner_binary = a->spawner_binary;
        if (warm_pool) {
                sc.warm_up = exec_warm_up;
                sc.warm_up_data = a->rt;
        }
        if (sb_registry_open(&sc, a->rt, &a->cg, registry_log, &a->reg, err) < 0)
                return -1;
        a->src = kube ? source_kube_new(kube_finder_for(a->rt), a->reg, a->rt)
                      : source_local_new(a->reg, (uint32_t)max_sandboxes);
        return 0;
}

static void agent_close(agent *a)
{
        source_free(a->src);
        sb_registry_free(a->reg);
        /* After the registry: no exec runs any more; the spawners see their connections
         * drop and kill what they still run. */
        spawn_mgr_free(a->spawner);
        free(a->spawner_binary);
        na_net_free(a->net);
        if (a->rt)
                a->rt->ops->free(a->rt);
        cgroup_fs_free(&a->cg);
        free(a->runtime_version);
}

static int agent_register(agent *a, rpc_server *srv, cs_error **err)
{
        agent_service s = {
                .src = a->src,
                .reg = a->reg,
                .rt = a->rt,
                .cg = &a->cg,
                .node_name = node_name[0] ? node_name : a->hostname,
                .version = AGENT_VERSION,
                .runtime_version = a->runtime_version,
                .started_at_ms = cs_now_realtime_ms(),
                .cpu_millis_capacity = a->capacity.cpu_millis,
                .memory_bytes_capacity = a->capacity.memory_bytes,
                .spawner_enabled = a->spawner != NULL,
                .session_idle_ms = session_idle_s * 1000,
        };

        /* Named to no client (service.c); the strings live as long as the flags. */
        static const char *host_dirs[6];

        host_dirs[0] = state_dir;
        host_dirs[1] = images_dir;
        host_dirs[2] = runsc_root;
        host_dirs[3] = volume_root;
        host_dirs[4] = cgroup_root;
        s.host_dirs = host_dirs;
        gethostname(a->hostname, sizeof(a->hostname) - 1);
        return agent_service_register(srv, &s, err);
}

int main(int argc, char **argv)
{
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_close_ int lock_fd = -1;
        rpc_server *srv = NULL;
        agent a = { 0 };
        int r;

        if (argc > 1 && strcmp(argv[1], "image") == 0)
                return image_main(argc - 1, argv + 1);
        if (argc > 1 && strcmp(argv[1], "cleanup") == 0)
                return cleanup_main(argc - 1, argv + 1);
        cs_signals_block();
        r = cs_config_parse(&program, argc, argv, NULL, &err);
        if (r == 0)
                r = cs_daemon_setup_logging(&cfg, &err);
        if (r == 0)
                r = cs_daemon_check_server_tls(&cfg, &err);
        if (r == 0)
                r = cs_daemon_set_seccomp(&cfg, agent_seccomp_allow, &err);
        if (r == 0 && cs_daemon_set_listen_group(listen_group, &err) < 0)
                r = -1;
        if (r != 0) {
                if (err)
                        fprintf(stderr, "%s: %s\n", program.name, err->msg);
                cs_config_free(&program);
                return r > 0 ? 0 : 2;
        }

        if (strcmp(mode, "local") != 0 && strcmp(mode, "kube") != 0) {
                fprintf(stderr, "%s: --mode: '%s' is not local or kube\n", program.name, mode);
                cs_config_free(&program);
                return 2;
        }
        if (!container_name[0] || strchr(container_name, '/')) {
                fprintf(stderr, "%s: --container-name must be a container name\n", program.name);
                cs_config_free(&program);
                return 2;
        }
        if (host_root[0] && host_root[0] != '/') {
                fprintf(stderr, "%s: --host-root must be an absolute path\n", program.name);
                cs_config_free(&program);
                return 2;
        }

        if (agent_limit_capabilities(&err) < 0) {
                log_error("%s: %s", program.name, err->msg);
                cs_config_free(&program);
                return 1;
        }
        rpc_global_init();
        lock_fd = state_dir_lock(state_dir, true, &err);
        if (lock_fd >= 0) {
                log_info("%s: state in %s", program.name, state_dir);
                /* The agent's one client is the frontend (one connection per frontend):
                 * a per-peer share would halve the node's calls, so 0 means none here. */
                if (cfg.max_calls_per_peer == 0)
                        cfg.max_calls_per_peer = cfg.max_calls;
                if (agent_open(&a, &err) == 0)
                        srv = cs_daemon_server_new(&cfg, services, &err);
        }
        if (srv && agent_register(&a, srv, &err) < 0) {
                rpc_server_free(srv);
                srv = NULL;
        }
        if (srv) {
                cs_daemon_set_metrics(&cfg, agent_metrics, &a);
                r = cs_daemon_serve(srv, program.name, &err);
        }
        if (err)
                log_error("%s: %s", program.name, err->msg);
        agent_close(&a);
        rpc_global_shutdown();
        cs_config_free(&program);
        return err ? 1 : 0;
}
