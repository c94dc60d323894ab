/* The node agent's gRPC service, nodeagent.v1.NodeAgent. */
#pragma once

#include <stdint.h>

#include "cgroup.h"
#include "kube.h"
#include "rpc.h"
#include "runtime.h"
#include "sandbox.h"

typedef struct agent_service {
        /* NULL in local mode; in kube mode sandboxes are named by pod and found through it
         * (the registry then only holds the attached containers' accounting). */
        kube_finder *kube;
        sb_registry *reg;
        runtime *rt;
        const cgroup_fs *cg;
        const char *node_name;
        const char *version;
        const char *runtime_version;
        int64_t started_at_ms;
        uint32_t max_sandboxes;
        uint32_t cpu_millis_capacity;
        uint64_t memory_bytes_capacity;
} agent_service;

/* Registers every NodeAgent method on srv. The pointers in s must outlive the server. */
int agent_service_register(rpc_server *srv, const agent_service *s, cs_error **err);
