/* compute-frontend: serves compute.v1.ComputeService.
 *
 * The service itself arrives with the scheduler backends; today the binary serves health
 * checks on its listen address and shuts down cleanly on SIGTERM/SIGINT. */
#include <stdio.h>

#include "daemon.h"
#include "signals.h"
#include "util.h"

static cs_daemon_config cfg;

static const cs_option options[] = {
        CS_DAEMON_OPTIONS(cfg, "COMPUTE_LISTEN", "127.0.0.1:50051"),
};

static const cs_program program = {
        .name = "compute-frontend",
        .summary = "Serves the compute.v1.ComputeService gRPC API and grpc.health.v1.Health.",
        .options = options,
        .n_options = ARRAY_SIZE(options),
};

static const char *const services[] = { "compute.v1.ComputeService", NULL };

int main(int argc, char **argv)
{
        _cleanup_error_ cs_error *err = NULL;
        rpc_server *srv;
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
        srv = cs_daemon_server_new(&cfg, services, &err);
        if (srv)
                r = cs_daemon_serve(srv, program.name, &err);
        if (!srv || r < 0)
                log_error("%s: %s", program.name, err->msg);
        rpc_global_shutdown();
        cs_config_free(&program);
        return err ? 1 : 0;
}
