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

        /* kube_pool.c: the warm pool. pool_target and pool_image are set at start; pool_lock
         * guards pool_stopping and pool_size (it is taken alone, never with another). */
        int64_t pool_target;
        /* --kube-warm-pool given (0 included): creates read the session guards, so a session
         * a pool served keeps its sandbox after the pool is turned off. */
        bool pool_guards;
        char *pool_image;
        pthread_t pool_thread;
        bool pool_init, pool_started, pool_stopping;
        pthread_mutex_t pool_lock;
        pthread_cond_t pool_cond;
        uint64_t pool_size, pool_hits, pool_misses, pool_claim_ms_sum;
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
 * its pooled channel until fe_route_release(). UNAVAILABLE when the pod has no node yet, or
 * the node has had no running agent for the 10 s waited for one (within ctx's deadline). */
int kagent_route(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, fe_route *ret,
                 cs_error **err);

/* The sandbox's cumulative usage, measured now by its node's agent. */
int kagent_usage(kube *k, const fe_ctx *ctx, const char *id, json_t *pod, usage_metrics *ret,
                 cs_error **err);

/* Frees every channel (the scheduler is going away: no route is held any more). */
void kagent_channels_free(kube *k);
/* The image of a node agent pod that is up (its first container's), malloc'd; NULL when no
 * agent pod is up. --spawner-image agent: sandbox pods take compute-init from it. */
char *kagent_image(kube *k);

/* --- kube_pool.c: the warm pool ---------------------------------------------------------- */

/* Starts the pool's thread once the pod cache is synced (also with size 0: it drains a pool
 * an earlier configuration left). */
int kpool_start(kube *k, int64_t size, const char *image, cs_error **err);
/* Stops the thread (the pool's pods stay for the next frontend). */
void kpool_stop(kube *k);
void kpool_metrics(kube *k, struct cs_mpage *p);

/* Whether a create's spec is the pool's profile (and a pool is configured). */
bool kpool_profile_matches(const kube *k, const kobj_spec *spec);
/* The live sandbox the session's guard (named name) records: 0 with *ret_pod, NULL when
 * there is no guard, or its sandbox was destroyed or is gone (the guard is deleted then); -1.
 * INTERNAL when an object of that name is not the session's. */
int kpool_guard_find(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                     json_t **ret_pod, cs_error **err);
/* Claims a READY pool pod for spec's session (name: the session's pod name, to spread
 * concurrent claims): 0 with *ret_pod, NULL when none was free (a miss), or -1. Counts the
 * hit or miss and wakes the pool thread. */
int kpool_claim(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                json_t **ret_pod, cs_error **err);
/* Records *pod as the session's sandbox in its guard. When another create of the session
 * recorded another live sandbox first, *pod is released (deleted with its PVC) and replaced
 * by the winner's pod. 0 or -1. */
int kpool_guard_settle(kube *k, const fe_ctx *ctx, const kobj_spec *spec, const char *name,
                       json_t **pod, cs_error **err);
/* A destroy's end: deletes the session's guard when it still names id (best effort). */
void kpool_guard_drop(kube *k, const fe_ctx *ctx, json_t *pod, const char *id);
