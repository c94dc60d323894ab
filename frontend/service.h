/* The frontend's gRPC service, compute.v1.ComputeService. */
#pragma once

#include <stdint.h>

#include "rpc.h"
#include "scheduler.h"

typedef struct frontend_service {
        scheduler *sched;
        const char *default_image; /* CreateSandbox.image when empty (SANDBOX_IMAGE) */
        int64_t agent_timeout_ms;  /* per unary call relayed to an agent */
        int64_t wait_ready_ms;     /* how long ExecCommand waits for a STARTING sandbox */
} frontend_service;

/* Registers every ComputeService method on srv. s->sched must outlive the server. */
int frontend_service_register(rpc_server *srv, const frontend_service *s, cs_error **err);
