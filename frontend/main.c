/* compute-frontend: serves compute.v1.ComputeService.
 *
 * Stateless: in local mode the node agents are the record, and the frontend learns from them
 * at start which sandbox lives where. Validates every request, schedules sandboxes through
 * its scheduler backend and relays exec and file calls to the agent that holds the sandbox. */
#include <stdio.h>

#include "daemon.h"
#include "scheduler.h"
#include "service.h"
#include "signals.h"
#include "util.h"

static cs_daemon_config cfg;
static cs_agent_tls_config agent_tls;
static char *agents, *sandbox_image;
static int64_t agent_timeout_ms, agent_poll_ms, wait_ready_ms;

static const cs_option options[] = {
        CS_DAEMON_OPTIONS(cfg, "COMPUTE_LISTEN", "127.0.0.1:50051"),
        CS_AGENT_TLS_OPTIONS(agent_tls),
        { "agents", "COMPUTE_AGENTS", CS_OPT_STRING, "127.0.0.1:50052",
          "Node agents to schedule sandboxes on: host:port, comma-separated.", &agents, 0, 0 },
        { "sandbox-image", "SANDBOX_IMAGE", CS_OPT_STRING, "",
          "Image for sandboxes whose CreateSandbox names none (empty: the agent's default, "
          "the host's root read-only).",
          &sandbox_image, 0, 0 },
        { "agent-timeout-ms", "COMPUTE_AGENT_TIMEOUT_MS", CS_OPT_INT, "30000",
          "Deadline of each unary call to a node agent.", &agent_timeout_ms, 100, 600000 },
        { "agent-poll-ms", "COMPUTE_AGENT_POLL_MS", CS_OPT_INT, "1000",
          "How often node agents are health-checked (an agent that comes back is listed "
          "again).",
          &agent_poll_ms, 50, 60000 },
        { "wait-ready-ms", "COMPUTE_WAIT_READY_MS", CS_OPT_INT, "60000",
          "How long ExecCommand waits for a STARTING sandbox before DEADLINE_EXCEEDED.",
          &wait_ready_ms, 0, 600000 },
};

static const cs_program program = {
        .name = "compute-frontend",
        .summary = "Serves the compute.v1.ComputeService gRPC API and grpc.health.v1.Health, "
                   "scheduling sandboxes on the node agents given by --agents.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const char *const services[] = { "compute.v1.ComputeService", NULL };

int main(int argc, char **argv)
{
        _cleanup_error_ cs_error *err = NULL;
        scheduler *sched = NULL;
        rpc_server *srv = NULL;
        int r;

        cs_signals_block();
        r = cs_config_parse(&program, argc, argv, NULL, &err);
        if (r == 0)
                r = cs_daemon_setup_logging(&cfg, &err);
        if (r == 0)
                r = cs_daemon_setup_agent_tls(&agent_tls, &err);
        if (r != 0) {
                if (err)
                        fprintf(stderr, "%s: %s\n", program.name, err->msg);
                cs_config_free(&program);
                return r > 0 ? 0 : 2;
        }

        rpc_global_init();
        {
                local_config lc = { .agents = agents,
                                    .agent_timeout_ms = agent_timeout_ms,
                                    .poll_ms = agent_poll_ms };
                sched = scheduler_local_new(&lc, &err);
        }
        if (sched)
                srv = cs_daemon_server_new(&cfg, services, &err);
        if (srv) {
                frontend_service s = { .sched = sched,
                                       .default_image = sandbox_image,
                                       .agent_timeout_ms = agent_timeout_ms,
                                       .wait_ready_ms = wait_ready_ms };
                if (frontend_service_register(srv, &s, &err) < 0) {
                        rpc_server_free(srv);
                        srv = NULL;
                }
        }
        if (srv) {
                log_info("%s: scheduling on node agents %s", program.name, agents);
                cs_daemon_serve(srv, program.name, &err);
        }
        if (err)
                log_error("%s: %s", program.name, err->msg);
        if (sched)
                sched->ops->free(sched);
        rpc_global_shutdown();
        cs_config_free(&program);
        return err ? 1 : 0;
}
