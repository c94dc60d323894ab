/* The bounds and defaults of a sandbox's resources, as the public API documents them: one
 * place for the frontend (which checks them before the Kubernetes API server would) and the
 * node agent (which checks them in local mode). Plain constants only; this header owns
 * nothing and touches nothing. (Not named limits.h: shared/ is on the include path, and
 * that name would shadow the C library's <limits.h>.) */
#pragma once

/* tenant_id and session_id: at most this many bytes. */
#define CS_ID_MAX 128

/* ResourceLimits.cpu_millis: the range accepted, and the value when 0 (unset). */
#define CS_MIN_CPU_MILLIS     50
#define CS_MAX_CPU_MILLIS     64000
#define CS_DEFAULT_CPU_MILLIS 1000

/* ResourceLimits.memory_bytes: the range accepted, and the value when 0 (unset). */
#define CS_MIN_MEMORY     (64ull << 20)
#define CS_MAX_MEMORY     (64ull << 30)
#define CS_DEFAULT_MEMORY (1ull << 30)

/* ResourceLimits.max_runtime: the range accepted (1 s..24 h), and the value when unset. */
#define CS_MIN_RUNTIME_MS     1000ll
#define CS_MAX_RUNTIME_MS     (24ll * 3600 * 1000)
#define CS_DEFAULT_RUNTIME_MS (15ll * 60 * 1000)

/* WorkspaceSpec.mount_path when empty. */
#define CS_DEFAULT_MOUNT_PATH "/workspace"

/* WorkspaceSpec.size: the value when empty, and the range accepted (a Kubernetes quantity,
 * parsed by quantity.h; the frontend's --pvc-workspace-size default is the same 10Gi). */
#define CS_DEFAULT_WORKSPACE_SIZE "10Gi"
#define CS_MIN_WORKSPACE_BYTES    (16ull << 20)
#define CS_MAX_WORKSPACE_BYTES    (1ull << 40)
