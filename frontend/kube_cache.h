/* A list+watch cache ("informer") of one Kubernetes collection: the objects of one path
 * (e.g. /api/v1/namespaces/NS/pods) that match one label selector, kept by name, each as the
 * configuration's trim makes it (the fields its readers read: kobj_trim), else without its
 * metadata.managedFields (nothing reads them; they are much of a real object).
 *
 * A thread of its own LISTs the collection (in pages), then WATCHes it from the list's
 * resourceVersion with bookmarks, resuming from the last resourceVersion seen when a watch
 * ends, relisting on 410 Gone (in place, page by page: see kube_cache.c), and retrying failures
 * (transport, 429, 5xx) with capped exponential backoff and jitter. Objects handed out are shared
 * and never modified: callers read them and json_decref them, and must not change them.
 *
 * Thread-safe. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "kube_client.h"

typedef struct kube_cache kube_cache;

typedef struct kube_cache_config {
        kube_client *client;        /* borrowed: must outlive the cache */
        const char *path;           /* collection path without query */
        const char *label_selector; /* NULL or "": everything */
        const char *what;           /* for log lines: "sandbox pods" */
        int64_t watch_timeout_s;    /* each watch asks for about this (0: 300), with jitter */
        int64_t page_limit;         /* LIST page size (0: 500) */
        int64_t backoff_min_ms;     /* 0: 200 */
        int64_t backoff_max_ms;     /* 0: 30000 */
        /* What is kept of each object (listed, watched or upserted): a new object made from
         * obj (borrowed), or NULL to keep nothing of it. NULL: all but managedFields. */
        json_t *(*trim)(json_t *obj);
} kube_cache_config;

/* Copies the configuration and starts the thread. NULL with *err when the thread cannot
 * start. Free with kube_cache_free. */
kube_cache *kube_cache_new(const kube_cache_config *cfg, cs_error **err);

/* Stops the thread (an open watch or backoff ends at once; a LIST in flight ends within the
 * client's request timeout) and frees every object. NULL is accepted. */
void kube_cache_free(kube_cache *c);

/* Waits until the first LIST has completed. 0, or -1 with *err: UNAVAILABLE on timeout,
 * carrying the last failure's message (e.g. the API server unreachable, or 403). */
int kube_cache_wait_synced(kube_cache *c, int64_t timeout_ms, cs_error **err);

/* The first object for which match returns true (called under the cache's lock: it must not
 * call back into the cache), as a new reference, or NULL. */
typedef bool (*kube_cache_match_fn)(json_t *obj, void *userdata);
json_t *kube_cache_find(kube_cache *c, kube_cache_match_fn match, void *userdata);

/* The first object whose metadata.labels[key] is value, as a new reference, or NULL. */
json_t *kube_cache_find_label(kube_cache *c, const char *key, const char *value);

/* A counter that grows whenever the cache's contents change (an event applied, a relist, an
 * upsert). */
uint64_t kube_cache_version(kube_cache *c);

/* Waits until kube_cache_version() differs from since, or deadline_ms (monotonic clock)
 * passes, or the cache stops. Returns the version then. */
uint64_t kube_cache_wait_change(kube_cache *c, uint64_t since, int64_t deadline_ms);

/* Inserts an object the caller got from the API server (e.g. the answer to a POST), so that
 * it is visible at once rather than when its watch event arrives. Ignored when the cache
 * already holds that object at the same or a newer resourceVersion, or when the object is
 * older than what the cache has seen of the collection (it may have been deleted since). The
 * object is copied. */
void kube_cache_upsert(kube_cache *c, json_t *obj);

/* Watches that ended in an error or 410 Gone (and were reopened), and LISTs after the
 * first (after a 410 or a failure): for the frontend's metrics. */
void kube_cache_stats(kube_cache *c, uint64_t *ret_watch_restarts, uint64_t *ret_relists);

/* Calls fn for every object, under the cache's lock (fn must not call into the cache). */
void kube_cache_each(kube_cache *c, void (*fn)(json_t *obj, void *userdata), void *userdata);
