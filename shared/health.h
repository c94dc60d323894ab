/* grpc.health.v1.Health/Check, served by both binaries.
 *
 * The empty service name and each name in `services` answer SERVING (NOT_SERVING once the
 * server is shutting down); any other name gets NOT_FOUND, as the health protocol asks. */
#pragma once

#include "rpc.h"

/* Registers Check on srv. `services` is a NULL-terminated list that must outlive srv. */
int cs_health_register(rpc_server *srv, const char *const *services, cs_error **err);
