/* What the files of the kube scheduler share, and nothing else includes: the scheduler's
 * struct, the API wrapper (kube_api.c) and the agent channel pool (kube_agents.c). The
 * objects themselves are kube_objects.h; the ops are scheduler_kube.c; the GC kube_gc.c.
 *
 * Locking, written once for all of them:
 *  - Everything in struct kube but the channel pool is set by scheduler_kube_new and only
 *    read afterwards: no lock.
 *  - kube.lock guards the channel pool: the channels list, each channel's refs, swept_ms.
 *    Only kube_agents.c takes it.
 *  - The two kube_cache's and the kube_client lock inside themselves.
 *  - Lock order: kube.lock, then a cache's lock (the channel sweep reads the agent cache
 *    while holding kube.lock), then the client's. A cache's match callback never takes
 *    kube.lock, and nothing waits on the API server or an agent while holding kube.lock. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "kube_cache.h"
#include "kube_client.h"
#include "kube_objects.h"
#include "metrics.h"
#include "scheduler.h"

/* One gRPC channel to one node agent address, shared by the routes to that agent. */
typedef struct channel {
        struct channel *next;
        char *addr;
        rpc_channel *ch;
        unsigned refs; /* routes holding it (until they are released) */
} channel;

typedef struct kube {
        scheduler s;
        kube_client *kc;
        kube_cache *pods, *agents;
        kube_cache *pvcs; /* the workspace PVCs: metrics only (compute_workspace_pvcs_expired) */
        char *ns, *agent_ns, *runtime_class, *spawner_image, *storage_class, *size;
        int64_t agent_port, delete_grace_s, agent_timeout_ms, wait_ready_ms;

        pthread_mutex_t lock; /* the channel pool: channels, their refs, swept_ms */
        channel *channels;
        int64_t swept_ms;
} kube;

#define KUBE(s) ((kube *)(s))

static inline void kube_response_clearp(kube_response *r)
{
        kube_response_clear(r);
}
#define _cleanup_resp_ _cleanup_(kube_response_clearp)

static inline int64_t min64(int64_t a, int64_t b)
{
        return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b)
{
        return a > b ? a : b;
}

/* --- kube_api.c: requests with retries, and the reads and deletes of sandbox objects --- */

/* The API client a kube_config asks for (UNAVAILABLE or INVALID_ARGUMENT saying why). */
kube_client *kapi_client_new(const kube_config *cfg, cs_error **err);

/* Sends one request, trying again after transport failures, 429 and 5xx (a few times in all,
 * within ctx's deadline, each attempt bounded by what is left of it and ended by ctx's
 * cancellation; the Status body's retryAfterSeconds is honoured when it fits). ctx NULL: no
 * deadline, never cancelled. 0 with *ret for any other answer, whatever its status (the
 * caller decides what a 404 or 409 means); -1 with UNAVAILABLE when every attempt failed,
 * DEADLINE_EXCEEDED when the deadline passed, or the client's own error (INTERNAL: a
 * malformed answer). */
int kapi_request(kube_client *kc, const fe_ctx *ctx, const char *method, const char *path,
                 json_t *body, kube_response *ret, cs_error **err);

/* An answer the caller did not expect, as the API reference's INTERNAL with the API
 * server's message; quota and admission refusals say so. Returns -1. */
int kapi_fail(const kube_response *r, cs_error **err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* The collections of the sandbox namespace (malloc'd). */
char *kapi_pods_path(const kube *k);
/* compute_agent_up{agent=<node>} for every agent pod the agent cache holds. */
void kagent_metrics(kube *k, struct cs_mpage *p);
char *kapi_pvcs_path(const kube *k);

/* GETs one object by name: 0 with *ret (NULL when it does not exist), or -1. */
int kapi_get_named(kube *k, const fe_ctx *ctx, const char *collection, const char *name,
                   json_t **ret, cs_error **err);
int kapi_get_pvc(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err);

/* The sandbox's pod: from the cache, else (another replica may have just made it, or
 * `fresh` asks for the API server's word) from the API server by label. 0 with *ret (NULL:
 * none), or -1. */
int kapi_find_pod_fresh(kube *k, const fe_ctx *ctx, const char *id, bool fresh, json_t **ret,
                        cs_error **err);
int kapi_find_pod(kube *k, const fe_ctx *ctx, const char *id, json_t **ret, cs_error **err);

/* DELETE with preconditions (uid and resourceVersion, each when given): 0 when this
 * deleted it, 1 when it was already gone or is no longer the object judged (404, 409), -1
 * otherwise. */
int kapi_delete_exact(kube_client *kc, const fe_ctx *ctx, const char *path, const char *uid,
                      const char *rv, cs_error **err);
/* Deletes the pod with its uid as precondition: 0 (also when gone already) or -1. */
int kapi_delete_pod(kube *k, const fe_ctx *ctx, json_t *pod, cs_error **err);

/* --- kube_agents.c: the node agent channel pool and routing ----------------------------- */

/* The route to a sandbox pod that is on a node, through the agent pod on that node; it holds
 * its pooled channel until fe_route_release(). UNAVAILABLE when the pod has no node yet or
 * the node no running agent. */
int kagent_route(kube *k, const char *id, json_t *pod, fe_route *ret, cs_error **err);

/* The sandbox's cumulative usage, measured now by its node's agent. */
int kagent_usage(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, usage_metrics *ret,
                 cs_error **err);

/* Frees every channel (the scheduler is going away: no route is held any more). */
void kagent_channels_free(kube *k);
/* The image of a node agent pod that is up (its first container's), malloc'd; NULL when no
 * agent pod is up. --spawner-image agent: sandbox pods take compute-init from it. */
char *kagent_image(kube *k);
