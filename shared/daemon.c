#include "daemon.h"

#include <malloc.h>
#include <string.h>

#include "health.h"
#include "signals.h"

/* The servers move buffers of up to 16 MiB from many threads: with glibc's defaults they
 * land in per-thread arenas that keep them after free (measured: an idle agent holding
 * ~100 MiB after 1 GiB of file calls). From 1 MiB up, memory comes from mmap and goes back
 * to the system when freed. */
#define CS_MMAP_THRESHOLD (1024 * 1024)

static void tune_malloc(void)
{
        mallopt(M_MMAP_THRESHOLD, CS_MMAP_THRESHOLD);
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
        tune_malloc();
        return 0;
}

rpc_server *cs_daemon_server_new(const cs_daemon_config *cfg, const char *const *services,
                                 cs_error **err)
{
        rpc_server_options opts = {
                .listen = cfg->listen,
                .max_calls = (unsigned)cfg->max_calls,
                .grace_ms = cfg->grace_ms,
        };
        rpc_server *srv = rpc_server_new(&opts);

        if (cs_health_register(srv, services, err) < 0) {
                rpc_server_free(srv);
                return NULL;
        }
        return srv;
}

int cs_daemon_serve(rpc_server *srv, const char *name, cs_error **err)
{
        int sig;

        if (rpc_server_start(srv, err) < 0) {
                rpc_server_free(srv);
                return -1;
        }
        log_info("%s serving on port %d", name, rpc_server_port(srv));
        sig = cs_signals_wait();
        log_info("%s: %s received, shutting down", name, strsignal(sig));
        rpc_server_free(srv);
        log_info("%s stopped", name);
        return 0;
}
