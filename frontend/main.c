/* compute-frontend: serves compute.v1.ComputeService.
 *
 * Stateless: in local mode the node agents are the record, and the frontend learns from them
 * at start which sandbox lives where; in kube mode the Kubernetes API server is, and the
 * frontend watches the sandbox and node agent pods. Validates every request, schedules
 * sandboxes through its scheduler backend and relays exec and file calls to the agent that
 * holds the sandbox.
 *
 * `--mode gc` (kube only) runs one pass of the workspace PVC GC and exits: the CronJob. */
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "metrics.h"
#include "health.h"
#include "kube_objects.h"
#include "reflection.h"
#include "scheduler.h"
#include "seccomp_filter.h"
#include "service.h"
#include "signals.h"
#include "util.h"

static cs_daemon_config cfg = { .public_tls = true }; /* --public-tls-*: CS_PUBLIC_TLS_OPTIONS */
static cs_agent_tls_config agent_tls;
static char *scheduler_name, *mode, *agents, *sandbox_image, *run_user;
static char *kubeconfig, *kube_context, *sandbox_ns, *agent_ns, *agent_selector, *runtime_class,
        *spawner_image;
static char *pvc_storage_class, *pvc_workspace_size;
static int64_t agent_timeout_ms, agent_poll_ms, wait_ready_ms, agent_port, delete_grace_s;
static int64_t max_calls_per_tenant, kube_warm_pool;

static const cs_option options[] = {
        CS_DAEMON_OPTIONS(cfg, "COMPUTE_LISTEN", "127.0.0.1:50051"),
        CS_METRICS_OPTIONS(cfg, "COMPUTE_METRICS_LISTEN", "COMPUTE_METRICS_TOKEN_FILE"),
        { "max-calls-per-tenant", "COMPUTE_MAX_CALLS_PER_TENANT", CS_OPT_INT, "0",
          "Calls one tenant (CreateSandbox's tenant_id; the owner of the sandbox a call names) "
          "may have in flight at once, over all its clients; 0: max-calls / 2.",
          &max_calls_per_tenant, 0, 65536 },
        { "scheduler", "COMPUTE_SCHEDULER", CS_OPT_STRING, "local",
          "Where sandboxes run: local (the node agents of --agents) or kube (gVisor pods and "
          "workspace PVCs through the Kubernetes API server).",
          &scheduler_name, 0, 0 },
        { "mode", "COMPUTE_MODE", CS_OPT_STRING, "serve",
          "serve (the gRPC API), or gc (one pass of the kube workspace GC, whatever "
          "--scheduler says: delete the PVCs whose delete-after has passed, then exit 0, or 1 "
          "on error).",
          &mode, 0, 0 },
        { "user", "COMPUTE_FRONTEND_USER", CS_OPT_STRING, "",
          "Once listening, run as this unprivileged user: its uid and gid only, no capabilities, "
          "no new privileges (root must start it); empty: stay. The node agents must be "
          "reachable by that user (local: TCP, not the root-only socket).",
          &run_user, 0, 0 },
        { "agents", "COMPUTE_AGENTS", CS_OPT_STRING, "127.0.0.1:50052",
          "Local scheduler: node agents to schedule sandboxes on: host:port or unix:/path, "
          "comma-separated.",
          &agents, 0, 0 },
        { "sandbox-image", "SANDBOX_IMAGE", CS_OPT_STRING, "",
          "Image for sandboxes whose CreateSandbox names none (local: an image of the node "
          "agents' images directory; empty is the agent's default, debian:bookworm-compute; "
          "kube: a container image, required unless every CreateSandbox names one).",
          &sandbox_image, 0, 0 },
        { "agent-timeout-ms", "COMPUTE_AGENT_TIMEOUT_MS", CS_OPT_INT, "30000",
          "Deadline of each unary call to a node agent.", &agent_timeout_ms, 100, 600000 },
        { "agent-poll-ms", "COMPUTE_AGENT_POLL_MS", CS_OPT_INT, "1000",
          "Local scheduler: how often node agents are health-checked (an agent is down after "
          "two failed checks in a row; one that comes back is listed again).",
          &agent_poll_ms, 50, 60000 },
        { "wait-ready-ms", "COMPUTE_WAIT_READY_MS", CS_OPT_INT, "60000",
          "How long ExecCommand (and, in kube mode, file calls) wait for a STARTING sandbox "
          "before DEADLINE_EXCEEDED.",
          &wait_ready_ms, 0, 600000 },
        { "kubeconfig", "KUBECONFIG", CS_OPT_STRING, "",
          "Kube: kubeconfig file for reaching the API server from outside the cluster; empty: "
          "in-cluster (the service account's token and CA).",
          &kubeconfig, 0, 0 },
        { "kube-context", "COMPUTE_KUBE_CONTEXT", CS_OPT_STRING, "",
          "Kube: the kubeconfig context to use (empty: its current-context).", &kube_context, 0,
          0 },
        { "sandbox-namespace", "COMPUTE_SANDBOX_NAMESPACE", CS_OPT_STRING, "compute-sandboxes",
          "Kube: namespace of the sandbox pods and their workspace PVCs.", &sandbox_ns, 0, 0 },
        { "agent-namespace", "COMPUTE_AGENT_NAMESPACE", CS_OPT_STRING, "",
          "Kube: namespace of the node agent DaemonSet's pods (empty: the kubeconfig context's "
          "or the service account's namespace).",
          &agent_ns, 0, 0 },
        { "agent-selector", "COMPUTE_AGENT_SELECTOR", CS_OPT_STRING,
          "app.kubernetes.io/name=compute-node-agent",
          "Kube: label selector of the node agent pods.", &agent_selector, 0, 0 },
        { "agent-port", "COMPUTE_AGENT_PORT", CS_OPT_INT, "50052",
          "Kube: the node agents' gRPC port, when their pod declares no container port named "
          "\"grpc\".",
          &agent_port, 1, 65535 },
        { "runtime-class", "COMPUTE_RUNTIME_CLASS", CS_OPT_STRING, "gvisor",
          "Kube: runtimeClassName of sandbox pods (empty: none, the cluster's default "
          "runtime).",
          &runtime_class, 0, 0 },
        { "spawner-image", "COMPUTE_SPAWNER_IMAGE", CS_OPT_STRING, "",
          "Kube: image holding compute-init at " SPAWNER_IMAGE_BIN ", or \"" SPAWNER_IMAGE_AGENT
          "\" for the image the node agent pods run (deploy/ sets that): sandbox pods then run "
          "compute-init as their init, installed by an init container into an emptyDir, and "
          "execs go through it (the resident exec path; nodes need runsc's host-uds=open, "
          "docs/deploy.md). Empty (or \"" SPAWNER_IMAGE_AGENT "\" while no agent pod is up): "
          "pods run a keep-alive shell and every exec is a runsc exec.",
          &spawner_image, 0, 0 },
        { "pvc-storage-class", "PVC_STORAGE_CLASS", CS_OPT_STRING, "",
          "Kube: StorageClass of workspace PVCs whose CreateSandbox names none (empty: the "
          "cluster's default).",
          &pvc_storage_class, 0, 0 },
        { "pvc-workspace-size", "PVC_WORKSPACE_SIZE", CS_OPT_STRING, "10Gi",
          "Kube: size of workspace PVCs whose CreateSandbox names none.", &pvc_workspace_size, 0,
          0 },
        { "delete-grace-s", "COMPUTE_DELETE_GRACE_S", CS_OPT_INT, "86400",
          "Kube: how long a destroyed sandbox's workspace PVC is kept (its delete-after is "
          "the destroy time plus this) before the GC deletes it.",
          &delete_grace_s, 0, 366ll * 86400 },
        { "kube-warm-pool", "COMPUTE_KUBE_WARM_POOL", CS_OPT_INT, "-1",
          "Kube: warm pool pods (with their workspace PVCs) of the default profile (the "
          "--sandbox-image, the default limits and workspace) kept ready, labelled " LABEL_POOL
          "=" POOL_PROFILE "; every frontend of a deployment must say the same "
          "(deploy/: the compute-warm-pool ConfigMap). 0: none, a pool left by an earlier "
          "size is drained, and sessions a pool served keep their sandbox (their guards are "
          "read); -1: no pool and no guards read (docs/deploy.md, \"Warm pool\").",
          &kube_warm_pool, -1, 64 },
        CS_PUBLIC_TLS_OPTIONS(cfg),
        CS_AGENT_TLS_OPTIONS(agent_tls),
};

static const cs_program program = {
        .name = "compute-frontend",
        .summary = "Serves the compute.v1.ComputeService gRPC API, grpc.health.v1.Health and "
                   "server reflection (grpc.reflection.v1 and v1alpha), "
                   "scheduling sandboxes on the node agents given by --agents (--scheduler "
                   "local) or as gVisor pods through the Kubernetes API server (--scheduler "
                   "kube). With --mode gc it runs one pass of the workspace PVC GC instead.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const char *const services[] = { "compute.v1.ComputeService", NULL };

static kube_config kube_cfg(void)
{
        return (kube_config){
                .kubeconfig = kubeconfig,
                .context = kube_context,
                .sandbox_namespace = sandbox_ns,
                .agent_namespace = agent_ns,
                .agent_selector = agent_selector,
                .agent_port = agent_port,
                .runtime_class = runtime_class,
                .spawner_image = spawner_image,
                .pvc_storage_class = pvc_storage_class,
                .pvc_workspace_size = pvc_workspace_size,
                .delete_grace_s = delete_grace_s,
                .agent_timeout_ms = agent_timeout_ms,
                .wait_ready_ms = wait_ready_ms,
                .warm_pool = kube_warm_pool,
                .default_image = sandbox_image,
        };
}

static int check_choices(cs_error **err)
{
        if (strcmp(scheduler_name, "local") != 0 && strcmp(scheduler_name, "kube") != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--scheduler must be local or kube, not '%s'", scheduler_name);
        if (strcmp(mode, "serve") != 0 && strcmp(mode, "gc") != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--mode must be serve or gc, not '%s'", mode);
        if (kube_warm_pool > 0 && strcmp(scheduler_name, "kube") != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--kube-warm-pool is for --scheduler kube (the local "
                                    "mode's pool is the node agent's --warm-pool)");
        if (strcmp(mode, "serve") == 0 && kpool_check(sandbox_image, kube_warm_pool, err) < 0)
                return -1;
        return 0;
}

/* --mode gc: one pass, under the frontend's syscall allowlist from the start (it reads the
 * kubeconfig and starts libcurl inside the pass: the table has what they need). */
static int run_gc(cs_error **err)
{
        kube_config kc = kube_cfg();
        unsigned deleted = 0;
        int r;

        if (cs_daemon_seccomp_install(program.name, err) < 0)
                return -1;
        r = kube_gc_run(&kc, cs_now_realtime_ms(), &deleted, err);

        log_info("%s: gc pass %s: %u workspace PVCs deleted", program.name,
                 r < 0 ? "incomplete" : "done", deleted);
        return r;
}

/* Health's probe: NOT_SERVING while the scheduler cannot serve (no node agent reachable). */
static bool health_probe(void *arg)
{
        return scheduler_serving(arg);
}

/* The tenant share: --max-calls-per-tenant, by default half of --max-calls (as the per-peer
 * share), so one tenant always leaves room for others; a share of all of --max-calls needs
 * no table (the global cap alone bounds it). */
static cs_share *tenant_share_new(void)
{
        int64_t share = max_calls_per_tenant ? max_calls_per_tenant
                        : cfg.max_calls > 1  ? cfg.max_calls / 2
                                             : 1;

        if (share >= cfg.max_calls)
                return NULL;
        return cs_share_new(
                (unsigned)share,
                (size_t)(cfg.max_calls < FE_MAX_TENANTS ? cfg.max_calls : FE_MAX_TENANTS));
}

static scheduler *scheduler_new(cs_error **err)
{
        if (strcmp(scheduler_name, "kube") == 0) {
                kube_config kc = kube_cfg();
                return scheduler_kube_new(&kc, err);
        }
        local_config lc = { .agents = agents,
                            .agent_timeout_ms = agent_timeout_ms,
                            .poll_ms = agent_poll_ms };
        return scheduler_local_new(&lc, err);
}

/* The frontend's part of every scrape of --metrics-listen: its scheduler's. */
static void frontend_metrics(cs_mpage *p, void *userdata)
{
        scheduler_metrics(userdata, p);
}

int main(int argc, char **argv)
{
        _cleanup_error_ cs_error *err = NULL;
        scheduler *sched = NULL;
        rpc_server *srv = NULL;
        cs_share *tenant_share = NULL;
        cs_reflection *reflection = NULL;
        int r;

        cs_signals_block();
        r = cs_config_parse(&program, argc, argv, NULL, &err);
        if (r == 0)
                r = cs_daemon_setup_logging(&cfg, &err);
        if (r == 0)
                r = check_choices(&err);
        if (r == 0)
                r = cs_daemon_set_seccomp(&cfg, frontend_seccomp_allow, &err);
        if (r == 0 && strcmp(mode, "gc") != 0)
                r = cs_daemon_check_server_tls(&cfg, &err); /* bad files: exit 2 too */
        if (r == 0 && strcmp(mode, "gc") != 0)
                r = cs_daemon_setup_agent_tls(&agent_tls, &err);
        if (r != 0) {
                if (err)
                        fprintf(stderr, "%s: %s\n", program.name, err->msg);
                cs_config_free(&program);
                return r > 0 ? 0 : 2;
        }

        if (strcmp(mode, "gc") == 0) {
                r = run_gc(&err);
                if (err)
                        log_error("%s: %s", program.name, err->msg);
                cs_config_free(&program);
                return r < 0 ? 1 : 0;
        }

        /* Before gRPC starts its threads (they inherit the emptied bounding set). */
        if (cs_daemon_set_user(run_user, &err) < 0) {
                log_error("%s: %s", program.name, err->msg);
                cs_config_free(&program);
                return 1;
        }
        rpc_global_init();
        /* The embedded descriptors are indexed before anything starts: a build that embedded
         * a broken set fails here, at once. */
        reflection =
                cs_reflection_new(cs_reflection_descriptors, cs_reflection_descriptors_len, &err);
        sched = reflection ? scheduler_new(&err) : NULL;
        /* Every public call's access-log line at info (health checks excepted: health.c). */
        cfg.access_log_level = CS_LOG_INFO;
        if (sched)
                srv = cs_daemon_server_new(&cfg, services, &err);
        if (srv) {
                tenant_share = tenant_share_new();
                frontend_service s = { .sched = sched,
                                       .tenant_share = tenant_share,
                                       .default_image = sandbox_image,
                                       .agent_timeout_ms = agent_timeout_ms,
                                       .wait_ready_ms = wait_ready_ms };
                if (frontend_service_register(srv, &s, &err) < 0 ||
                    cs_reflection_register(srv, reflection, &err) < 0) {
                        rpc_server_free(srv);
                        srv = NULL;
                }
        }
        if (srv) {
                cs_health_set_probe(health_probe, sched);
                if (strcmp(scheduler_name, "kube") == 0)
                        log_info("%s: scheduling gVisor pods in namespace %s", program.name,
                                 sandbox_ns);
                else
                        log_info("%s: scheduling on node agents %s", program.name, agents);
                cs_daemon_set_metrics(&cfg, frontend_metrics, sched);
                cs_daemon_serve(srv, program.name, &err);
        }
        if (err)
                log_error("%s: %s", program.name, err->msg);
        if (sched)
                sched->ops->free(sched);
        cs_share_free(tenant_share);
        cs_reflection_free(reflection); /* after the server, freed by cs_daemon_serve */
        rpc_global_shutdown();
        cs_config_free(&program);
        return err ? 1 : 0;
}
