/* The node agent's gRPC service, nodeagent.v1.NodeAgent: translates protobuf to the sandbox
 * source's plain structs (source.h) and back; the only agent code with generated headers. */
#pragma once

#include <stdint.h>

#include "cgroup.h"
#include "rpc.h"
#include "runtime.h"
#include "sandbox.h"
#include "source.h"

typedef struct agent_service {
        /* Where sandboxes come from (local registry or kube finder); every lookup, create,
         * destroy, list and count goes through it. */
        source *src;
        sb_registry *reg; /* the source's registry: exec, release and file I/O accounting */
        runtime *rt;
        const cgroup_fs *cg;
        const char *node_name;
        const char *version;
        const char *runtime_version;
        int64_t started_at_ms;
        uint32_t cpu_millis_capacity;
        uint64_t memory_bytes_capacity;
        bool spawner_enabled;    /* the resident exec path (GetAgentInfo) */
        int64_t session_idle_ms; /* ExecSession's idle limit; 0: none */
        /* NULL-terminated host directories (state, images, runsc root, volumes, cgroups) that
         * no error message may name to a client (service.c hides them); may be NULL. */
        const char *const *host_dirs;
} agent_service;

/* Registers every NodeAgent method on srv. The pointers in s must outlive the server. */
int agent_service_register(rpc_server *srv, const agent_service *s, cs_error **err);
