/* The frontend's gRPC service, compute.v1.ComputeService. */
#pragma once

#include <stdint.h>

#include "rpc.h"
#include "scheduler.h"
#include "share.h"

/* The tenant share's table holds at most this many tenants with calls in flight (each holds
 * one call at least, so below this many calls in flight it never fills); one beyond it is
 * refused. The same bound as the RPC layer's table of peers (RPC_MAX_PEERS). */
#define FE_MAX_TENANTS 4096

typedef struct frontend_service {
        scheduler *sched;
        /* Calls in flight per tenant (--max-calls-per-tenant); NULL: no tenant share. The
         * caller owns it and frees it after the server. */
        cs_share *tenant_share;
        const char *default_image; /* CreateSandbox.image when empty (SANDBOX_IMAGE) */
        int64_t agent_timeout_ms;  /* per unary call relayed to an agent */
        int64_t wait_ready_ms;     /* how long ExecCommand waits for a STARTING sandbox */
} frontend_service;

/* Registers every ComputeService method on srv. s->sched must outlive the server. */
int frontend_service_register(rpc_server *srv, const frontend_service *s, cs_error **err);
