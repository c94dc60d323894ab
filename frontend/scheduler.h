/* The frontend's scheduler seam: where sandboxes are created and which node agent serves a
 * sandbox. One ops table per backend: local (node agents given on the command line) and
 * kube (Pods and PVCs through the Kubernetes API server, agents found from their DaemonSet's
 * pods). The ops take an fe_ctx, not the gRPC call, so that a test can call them (and put a
 * fake behind them) without a live call. scheduler.c holds the helpers of these types. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "log.h"
#include "netpolicy.h"
#include "path.h"
#include "rpc.h"
#include "sandbox_limits.h"
#include "share.h"
#include "usage.h"

/* Same numbers as compute.v1.SandboxStatus. */
typedef enum fe_status {
        FE_STATUS_UNSPECIFIED = 0,
        FE_STATUS_STARTING = 1,
        FE_STATUS_READY = 2,
        FE_STATUS_FAILED = 3,
        FE_STATUS_DESTROYED = 4,
} fe_status;

typedef struct fe_spec {
        const char *tenant_id, *session_id, *image;
        const char *storage_class, *size, *mount_path; /* WorkspaceSpec */
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
        /* NetworkSpec as the request gives it, checked by fe_service_create (cs_netpolicy_parse);
         * the node agent parses it again. UNSPECIFIED: the node's default. */
        cs_egress egress;
        const char *const *allow_domains;
        size_t n_allow_domains;
        const char *const *allow_cidrs;
        size_t n_allow_cidrs;
} fe_spec;

/* A sandbox as the frontend answers about it. The strings are owned (free with
 * fe_view_clear); all but id may be NULL: not known. */
typedef struct fe_view {
        char *id;
        fe_status status;
        int64_t created_at_ms, destroyed_at_ms; /* wall clock; 0: not set */
        usage_metrics usage;
        /* Why it is FAILED or still STARTING, cleaned for a tenant's eyes (fe_reason_clean);
         * NULL when READY or when there is nothing to say. */
        char *reason;
        /* ListSandboxes: whose it is, and its limits (0: not known). */
        char *tenant_id, *session_id;
        uint32_t cpu_millis;
        uint64_t memory_bytes;
        int64_t max_runtime_ms;
        /* The network policy in force. Egress UNSPECIFIED: none reported, which means no
         * network (kube mode's pods; an agent from before egress policies). */
        cs_netpolicy network;
} fe_view;

void fe_view_clear(fe_view *v);

/* What ListSandboxes asks a backend for: the tenant's sandboxes (of one status, or any),
 * ordered by (created_at_ms, id), after the cursor, at most limit of them. */
typedef struct fe_list_query {
        const char *tenant_id;
        fe_status status;         /* FE_STATUS_UNSPECIFIED: any */
        int64_t after_created_ms; /* the cursor: the last sandbox of the previous page */
        const char *after_id;     /* "": no cursor, from the start */
        size_t limit;             /* > 0 */
} fe_list_query;

/* A backend's answer to a listing: views (owned) and whether more follow the last. */
typedef struct fe_view_list {
        fe_view *v;
        size_t n, cap;
        bool more;
} fe_view_list;

/* A new zeroed view at the end of the list. */
fe_view *fe_view_list_add(fe_view_list *l);
void fe_view_list_clear(fe_view_list *l);

/* What an op needs of the request it serves: when to give up, and whom to log for. Built by
 * the service from its gRPC call (fe_ctx_from_call), or by a test or the GC by hand. Borrowed
 * by the op for its duration; the op never keeps it. */
typedef struct fe_ctx {
        int64_t deadline_ms; /* monotonic clock; INT64_MAX: none */
        int cancel_fd;       /* readable once the caller has given up (never read); -1: never */
        /* Calls to node agents are made as children of this server call (cancelled with it,
         * inheriting its deadline and request id), and log lines carry its ids. NULL outside
         * a gRPC call: agent calls then have only their own timeout. */
        rpc_call *parent;
} fe_ctx;

/* A context with no deadline, never cancelled, outside any call (the GC pass). */
#define FE_CTX_NONE ((fe_ctx){ .deadline_ms = INT64_MAX, .cancel_fd = -1, .parent = NULL })

/* The context of a server call: its deadline, its cancellation fd, the call as parent. */
fe_ctx fe_ctx_from_call(rpc_call *call);

/* Whether the caller has given up (its cancel_fd is readable). */
bool fe_ctx_cancelled(const fe_ctx *ctx);

/* Why a cancelled context was: DEADLINE_EXCEEDED once its deadline passed, else CANCELLED. */
grpc_status_code fe_ctx_cancel_status(const fe_ctx *ctx);

/* Sleeps ms, or until the context is cancelled, whichever comes first. */
void fe_ctx_sleep(const fe_ctx *ctx, int64_t ms);

/* Logs one line: with the parent call's request and sandbox ids, or plainly without one. */
void fe_ctx_log(const fe_ctx *ctx, cs_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* One unit of a fair share (shared/share.h) that a call holds while it runs: service_core.c
 * takes it for the call's tenant and gives it back once the call has ended. */
typedef struct fe_hold {
        cs_share *share; /* NULL: holds nothing */
        char key[CS_SHARE_KEY_MAX + 1];
} fe_hold;

/* Gives the unit back, once; NULL-safe. */
void fe_hold_give(fe_hold *h);

/* Where calls for one sandbox go: a channel to its node agent and how that agent names it.
 * The channel is valid until fe_route_release(), which the holder calls once the calls made
 * on it have ended (a kube route holds its pooled channel; a local one holds nothing). */
typedef struct fe_route {
        rpc_channel *channel;
        char sandbox_id[64];
        /* kube mode: the PodRef the agent looks the sandbox up by */
        char pod_namespace[64], pod_name[256], pod_uid[64];
        char mount_path[CS_MOUNT_PATH_MAX + 1];
        void (*release)(void *arg); /* NULL: nothing to release */
        void *release_arg;
        /* The tenant's share unit the call holds while it uses the route: set by
         * service_core.c after the route op (backends leave it alone), given back with the
         * route, so every way an exec or file call ends gives it back. */
        fe_hold hold;
} fe_route;

/* Runs the route's release once and gives its hold back; the route is unusable afterwards.
 * NULL-safe. */
void fe_route_release(fe_route *route);

typedef struct scheduler scheduler;

typedef struct scheduler_ops {
        const char *name;
        /* Creates the session's sandbox, or returns the one it already has. */
        int (*create)(scheduler *s, const fe_spec *spec, const fe_ctx *ctx, fe_view *ret,
                      cs_error **err);
        int (*describe)(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                        cs_error **err);
        int (*destroy)(scheduler *s, const char *id, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err);
        /* The sandboxes of q (see fe_list_query), into *ret (the caller's to clear). A
         * backend that cannot read every place a sandbox may be fails (UNAVAILABLE) rather
         * than return a partial list. NULL: the backend cannot list. */
        int (*list)(scheduler *s, const fe_list_query *q, const fe_ctx *ctx, fe_view_list *ret,
                    cs_error **err);
        /* NOT_FOUND for a sandbox no agent has; UNAVAILABLE when its agent is unreachable.
         * *ret is the caller's to fe_route_release() on success. */
        int (*route)(scheduler *s, const char *id, const fe_ctx *ctx, fe_route *ret,
                     cs_error **err);
        /* The tenant that owns sandbox id, into ret, from what the scheduler knows already
         * (the local map, the kube pod cache): never a call to an agent or the API server,
         * since it runs before the call's share is taken. False when the sandbox is not
         * known (yet); NULL: never known. */
        bool (*tenant_of)(scheduler *s, const char *id, char ret[static CS_ID_MAX + 1]);
        /* Whether it can serve calls now (health: NOT_SERVING when false); NULL: always. */
        bool (*serving)(scheduler *s);
        /* Writes its part of the frontend's /metrics page (docs/metrics.md); NULL: none. */
        void (*metrics)(scheduler *s, struct cs_mpage *page);
        void (*free)(scheduler *s);
} scheduler_ops;

/* s->ops->serving(s), or true when the backend has no such op. */
bool scheduler_serving(scheduler *s);
/* s->ops->metrics(s, page), when the backend has the op. */
struct cs_mpage;
void scheduler_metrics(scheduler *s, struct cs_mpage *page);

struct scheduler {
        const scheduler_ops *ops;
};

typedef struct local_config {
        const char *agents;       /* "host:port,host:port" */
        int64_t agent_timeout_ms; /* per unary call to an agent */
        int64_t poll_ms;          /* agent health checks */
} local_config;

/* Connects to the agents and learns what sandboxes they hold before returning (an agent that
 * is down is learnt about when it comes back, polled every 100 ms until every agent has
 * answered once). A call arriving before that waits for it within its deadline. Serving
 * while at least one agent is reachable. */
scheduler *scheduler_local_new(const local_config *cfg, cs_error **err);

/* Kubernetes mode (see docs/kube.md for the objects, names and labels). Strings
 * are borrowed for the call; the scheduler copies what it keeps. */
typedef struct kube_config {
        const char *kubeconfig;        /* path; "" or NULL: in-cluster */
        const char *context;           /* kubeconfig context; "": current */
        const char *sandbox_namespace; /* sandbox pods and their PVCs */
        const char *agent_namespace;   /* "": the kubeconfig's / service account's */
        const char *agent_selector;    /* label selector of the node agent pods */
        int64_t agent_port;            /* when the agent pod names no "grpc" port */
        const char *runtime_class;
        const char *spawner_image;     /* compute-init's image for sandbox pods; "": none */
        const char *pvc_storage_class; /* "": the cluster's default */
        const char *pvc_workspace_size;
        int64_t delete_grace_s;     /* PVC delete-after = destroy time + this */
        int64_t agent_timeout_ms;   /* per unary call to an agent */
        int64_t wait_ready_ms;      /* how long exec and file calls wait for a STARTING pod */
        int64_t sync_timeout_ms;    /* start-up: how long to wait for the first LISTs (0: 30 s) */
        int64_t request_timeout_ms; /* per API request (0: 30 s) */
        int64_t warm_pool; /* warm pool pods of the default profile (0: none, the session guards
                            * read; -1: none, no guards) */
        const char *default_image; /* --sandbox-image: the pool's image */
} kube_config;

/* Connects to the API server and lists the sandbox pods and the agent pods before returning:
 * NULL with *err (UNAVAILABLE, saying why) when that does not succeed in time. */
scheduler *scheduler_kube_new(const kube_config *cfg, cs_error **err);

/* Whether a kube warm pool of size pods (0: none) of image (--sandbox-image) can be kept:
 * INVALID_ARGUMENT naming the flag when not (checked at start: exit 2). kube_pool.c. */
int kpool_check(const char *image, int64_t size, cs_error **err);

/* One pass of the workspace GC: deletes the managed PVCs whose delete-after has passed
 * (now_ms, wall clock), each with a UID precondition so that a PVC recreated under the same
 * name is never touched, and deletes the sandbox pods an interrupted destroy left behind.
 * Idempotent; two passes at once are safe (the loser's deletes find 404 or 409). Logs every
 * deletion. *ret_deleted: the PVCs this pass deleted. */
int kube_gc_run(const kube_config *cfg, int64_t now_ms, unsigned *ret_deleted, cs_error **err);
