/* grpc.health.v1.Health/Check and Watch, served by both binaries.
 *
 * The empty service name and each name in `services` answer SERVING (NOT_SERVING once the
 * server is shutting down, or while the probe set by cs_health_set_probe() says no); any
 * other name gets NOT_FOUND, as the health protocol asks. Watch streams the current status
 * and then each change (SERVICE_UNKNOWN for an unknown name) until the client cancels. */
#pragma once

#include "rpc.h"

/* Registers Check and Watch on srv. `services` is a NULL-terminated list that must outlive srv. */
int cs_health_register(rpc_server *srv, const char *const *services, cs_error **err);

/* Sets a probe asked at every Check: false answers NOT_SERVING (the frontend: no node agent
 * reachable). arg is borrowed; the probe must stay callable while the server runs and be
 * safe from any thread. NULL: no probe. */
void cs_health_set_probe(bool (*probe)(void *arg), void *arg);
