/* The list+watch cache (see kube_cache.h).
 *
 * One thread per cache runs a small state machine:
 *   LIST   every page of the collection into the map in place, each object replacing the
 *          cache's copy unless that copy is newer (an upsert); the first page's
 *          resourceVersion becomes the cache's. When the last page is in, the objects the list
 *          did not have are removed (unless newer than the list) and the cache is synced.
 *          Readers meanwhile see each object at its old or its new state, never missing: a
 *          relist holds one copy of the collection (and a page), not two, and no object
 *          vanishes and comes back.
 *   WATCH  from the cache's resourceVersion. Events replace or remove objects and advance the
 *          resourceVersion, bookmarks only advance it. A watch the server ends normally is
 *          reopened from there; 410 Gone (as the answer or as an ERROR event) goes back to
 *          LIST; anything else backs off and reopens the watch from the same place.
 * Failures back off exponentially with jitter, capped, and the API server's Retry-After
 * (the Status body's details.retryAfterSeconds: the client does not expose headers) is
 * honoured. A failing incident is logged once when it starts and once when it ends. */
#include "kube_cache.h"

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define DEFAULT_WATCH_TIMEOUT_S 300
#define DEFAULT_PAGE_LIMIT      500
#define DEFAULT_BACKOFF_MIN_MS  200
#define DEFAULT_BACKOFF_MAX_MS  30000
/* A continue token that expires mid-list restarts the list; this many times in a row is a
 * failure (the collection changes faster than it can be read). */
#define MAX_LIST_RESTARTS 3
/* A watch that ends normally this soon without an event backs off like a failure, so a
 * server that closes every watch at once is not hammered. */
#define SHORT_WATCH_MS 1000

struct kube_cache {
        kube_client *client;
        char *path, *selector, *what;
        int64_t watch_timeout_s, page_limit, backoff_min_ms, backoff_max_ms;
        json_t *(*trim)(json_t *obj);

        pthread_mutex_t lock;
        pthread_cond_t cond;
        json_t *objects; /* name -> object */
        /* kube_cache_find_label's index, made by its first call: the value of label
         * index_key -> the name of the last object stored with it (checked on use). */
        char *index_key;
        json_t *index;
        char *rv; /* of the collection: the last list, event or bookmark */
        uint64_t version;
        bool synced, stopping;
        char *last_error;

        int stop_fd;
        pthread_t thread;
        bool started;

        /* For kube_cache_stats (metrics): read by any thread. */
        _Atomic uint64_t watch_restarts, relists;

        /* The thread's own. */
        int64_t backoff_ms, retry_after_ms;
        bool failing;
        unsigned failures;
        uint64_t rng;
};

typedef enum watch_end {
        WATCH_ENDED,  /* normally: reopen from the last resourceVersion */
        WATCH_GONE,   /* 410: relist */
        WATCH_FAILED, /* back off, then reopen */
        WATCH_STOP,
} watch_end;

/* --- helpers --------------------------------------------------------------------------- */

static uint64_t rng_next(kube_cache *c)
{
        /* xorshift64*: jitter only, nothing secret. */
        c->rng ^= c->rng >> 12;
        c->rng ^= c->rng << 25;
        c->rng ^= c->rng >> 27;
        return c->rng * 2685821657736338717ull;
}

/* resourceVersions are opaque to clients, but every API server backed by etcd uses its
 * revision, a decimal integer: compare those; anything else compares as unknown (-1). */
static int rv_cmp(const char *a, const char *b)
{
        char *end;
        unsigned long long x, y;

        if (!a || !b || !a[0] || !b[0])
                return -2;
        errno = 0;
        x = strtoull(a, &end, 10);
        if (*end || errno)
                return -2;
        y = strtoull(b, &end, 10);
        if (*end || errno)
                return -2;
        return x < y ? -1 : x > y;
}

static const char *obj_rv(json_t *obj)
{
        return kube_get_str(obj, "metadata.resourceVersion");
}

static void set_rv_locked(kube_cache *c, const char *rv)
{
        if (!rv || !rv[0])
                return;
        free(c->rv);
        c->rv = cs_xstrdup(rv);
}

/* Waits up to ms or until stopped. Returns false when stopped. */
static bool sleep_ms(kube_cache *c, int64_t ms)
{
        struct pollfd p = { .fd = c->stop_fd, .events = POLLIN };
        int64_t end = cs_now_monotonic_ms() + ms;

        for (;;) {
                int64_t left = end - cs_now_monotonic_ms();
                if (left <= 0)
                        return true;
                if (poll(&p, 1, (int)(left > 60000 ? 60000 : left)) > 0)
                        return false;
        }
}

/* The Status body's details.retryAfterSeconds, in ms (0: none). */
static int64_t retry_after_ms(json_t *status)
{
        json_t *v = kube_get_key(status, "details", "retryAfterSeconds", NULL);

        if (!json_is_integer(v) || json_integer_value(v) <= 0)
                return 0;
        /* Bounded: a server's hint, not a reason to stop watching for long. */
        return json_integer_value(v) > 300 ? 300000 : json_integer_value(v) * 1000;
}

/* Records a failure: logged when an incident starts, kept for wait_synced's message. */
static void note_failure(kube_cache *c, const char *msg)
{
        c->failures++;
        if (!c->failing)
                log_warn("%s: %s (retrying with backoff until it recovers)", c->what, msg);
        c->failing = true;
        pthread_mutex_lock(&c->lock);
        free(c->last_error);
        c->last_error = cs_xstrdup(msg);
        pthread_mutex_unlock(&c->lock);
}

static void note_success(kube_cache *c)
{
        if (c->failing)
                log_info("%s: recovered after %u failed attempts", c->what, c->failures);
        c->failing = false;
        c->failures = 0;
        c->backoff_ms = 0;
        c->retry_after_ms = 0;
}

/* Sleeps for the next backoff step. Returns false when stopped. */
static bool backoff(kube_cache *c)
{
        int64_t d;

        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : c->backoff_min_ms;
        if (c->backoff_ms > c->backoff_max_ms)
                c->backoff_ms = c->backoff_max_ms;
        /* "Equal jitter": half fixed, half random, so replicas spread out but never retry at
         * once. */
        d = c->backoff_ms / 2 + (int64_t)(rng_next(c) % (uint64_t)(c->backoff_ms / 2 + 1));
        if (c->retry_after_ms > d)
                d = c->retry_after_ms > c->backoff_max_ms ? c->backoff_max_ms : c->retry_after_ms;
        c->retry_after_ms = 0;
        return sleep_ms(c, d);
}

/* A failed response: its message, and its Retry-After. */
static void note_http_failure(kube_cache *c, const char *verb, const kube_response *resp)
{
        _cleanup_free_ char *msg = cs_xasprintf("%s %s: HTTP %ld: %s", verb, c->path, resp->status,
                                                kube_response_message(resp));

        c->retry_after_ms = retry_after_ms(resp->body);
        note_failure(c, msg);
}

/* --- LIST ------------------------------------------------------------------------------ */

static char *list_path(kube_cache *c, const char *cont)
{
        _cleanup_free_ char *cont_q = cont ? kube_escape(cont) : NULL;

        return cs_xasprintf("%s?limit=%" PRId64 "%s%s%s%s", c->path, c->page_limit,
                            c->selector ? "&labelSelector=" : "", c->selector ? c->selector : "",
                            cont_q ? "&continue=" : "", cont_q ? cont_q : "");
}

static bool str_eq(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

static const char *label_of(json_t *obj, const char *key)
{
        return json_string_value(kube_get_key(obj, "metadata", "labels", key, NULL));
}

/* Notes that the object stored under name carries its index label (if it does). */
static void index_put_locked(kube_cache *c, const char *name, json_t *obj)
{
        const char *v = c->index_key ? label_of(obj, c->index_key) : NULL;

        if (v)
                json_object_set_new(c->index, v, json_string(name));
}

static void index_rebuild_locked(kube_cache *c)
{
        const char *name;
        json_t *obj;

        if (!c->index_key)
                return;
        json_object_clear(c->index);
        json_object_foreach(c->objects, name, obj) index_put_locked(c, name, obj);
}

/* What the cache keeps of an object, as a new reference (NULL: nothing): the configured
 * trim's copy, else obj without metadata.managedFields, which nothing here reads and which is
 * a large part of a real API server's objects (client-go's informers drop it the same way,
 * with a transform). own: obj is the cache's to change (a list item, an event). Called
 * outside the lock. */
static json_t *kept(kube_cache *c, json_t *obj, bool own)
{
        if (c->trim)
                return c->trim(obj);
        obj = own ? json_incref(obj) : json_deep_copy(obj);
        json_object_del(json_object_get(obj, "metadata"), "managedFields");
        return obj;
}

/* Stores what is kept of an object (a new reference, taken) under name unless the cache
 * holds a newer copy (an upsert after the list or event it comes from). */
static void store_locked(kube_cache *c, const char *name, json_t *obj)
{
        json_t *old = json_object_get(c->objects, name);

        if (old && rv_cmp(obj_rv(old), obj_rv(obj)) == 1) {
                json_decref(obj);
                return;
        }
        json_object_set_new(c->objects, name, obj);
        index_put_locked(c, name, obj);
}

/* Removes the object stored under name (and its index entry). */
static void remove_locked(kube_cache *c, const char *name)
{
        json_t *old = json_object_get(c->objects, name);
        const char *v = c->index_key && old ? label_of(old, c->index_key) : NULL;

        if (v && str_eq(json_string_value(json_object_get(c->index, v)), name))
                json_object_del(c->index, v);
        json_object_del(c->objects, name);
}

/* Reads one page into the cache (store_locked), noting each object's name in seen; *ret_cont
 * is the continue token (NULL on the last page). 1 when the continue token expired, 0 on
 * success, -1 on failure (noted). */
static int list_page(kube_cache *c, const char *cont, json_t *seen, char **ret_rv, char **ret_cont)
{
        _cleanup_free_ char *path = list_path(c, cont);
        _cleanup_error_ cs_error *err = NULL;
        kube_response resp = { 0 };
        json_t *items, *item;
        const char *s;
        size_t i;

        /* The stop fd ends a LIST in flight too: stopping never waits for a slow server. */
        if (kube_request_ex(c->client, "GET", path, NULL, 0, c->stop_fd, &resp, &err) < 0) {
                note_failure(c, err->msg);
                return -1;
        }
        if (resp.status == 410 && cont) {
                kube_response_clear(&resp);
                return 1;
        }
        if (resp.status != 200 || !json_is_object(resp.body)) {
                note_http_failure(c, "LIST", &resp);
                kube_response_clear(&resp);
                return -1;
        }
        /* Trimmed outside the lock, each item's whole copy freed as it goes. */
        items = json_object_get(resp.body, "items");
        json_array_foreach(items, i, item)
        {
                const char *name = kube_get_str(item, "metadata.name");
                json_t *k = name ? kept(c, item, true) : NULL;

                json_array_set_new(items, i, k ? k : json_null());
        }
        pthread_mutex_lock(&c->lock);
        json_array_foreach(items, i, item)
        {
                const char *name = kube_get_str(item, "metadata.name");

                if (name) {
                        json_object_set_new(seen, name, json_true());
                        store_locked(c, name, json_incref(item));
                }
        }
        c->version++;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        s = kube_get_str(resp.body, "metadata.resourceVersion");
        if (!*ret_rv && s)
                *ret_rv = cs_xstrdup(s);
        s = kube_get_str(resp.body, "metadata.continue");
        *ret_cont = s && s[0] ? cs_xstrdup(s) : NULL;
        kube_response_clear(&resp);
        return 0;
}

/* Removes the objects a complete list did not have, but for those newer than it (upserted
 * since: the watch from the list's resourceVersion will say what becomes of them). */
static void drop_unseen_locked(kube_cache *c, json_t *seen, const char *rv)
{
        const char *name;
        json_t *obj;
        void *it;

        for (it = json_object_iter(c->objects); it;) {
                name = json_object_iter_key(it);
                obj = json_object_iter_value(it);
                it = json_object_iter_next(c->objects, it);
                if (!json_object_get(seen, name) && rv_cmp(obj_rv(obj), rv) != 1)
                        remove_locked(c, name);
        }
}

/* Lists the whole collection into the cache in place. 0, or -1 (noted; the objects listed
 * so far are in, the others as they were). */
static int do_list(kube_cache *c)
{
        for (unsigned restarts = 0;; restarts++) {
                json_t *seen = json_object();
                _cleanup_free_ char *rv = NULL, *cont = NULL;
                int r;

                do {
                        char *next = NULL;
                        r = list_page(c, cont, seen, &rv, &next);
                        free(cont);
                        cont = next;
                } while (r == 0 && cont);
                if (r == 0) {
                        pthread_mutex_lock(&c->lock);
                        drop_unseen_locked(c, seen, rv);
                        set_rv_locked(c, rv);
                        c->version++;
                        if (!c->synced)
                                log_info("%s: synced (%zu objects)", c->what,
                                         json_object_size(c->objects));
                        c->synced = true;
                        pthread_cond_broadcast(&c->cond);
                        pthread_mutex_unlock(&c->lock);
                        json_decref(seen);
                        return 0;
                }
                json_decref(seen);
                if (r < 0)
                        return -1;
                if (restarts + 1 >= MAX_LIST_RESTARTS) {
                        note_failure(c, "LIST: the continue token kept expiring");
                        return -1;
                }
                log_info("%s: a LIST continue token expired; listing again", c->what);
        }
}

/* --- WATCH ----------------------------------------------------------------------------- */

typedef struct watch_state {
        kube_cache *c;
        unsigned events;
        char *error; /* an ERROR event that is not 410 */
} watch_state;

enum {
        EV_GONE = 1,
        EV_ERROR = 2
};

/* k: what is kept of obj (taken; NULL for a DELETED event). */
static void apply_locked(kube_cache *c, const char *type, json_t *obj, json_t *k)
{
        const char *name = kube_get_str(obj, "metadata.name");
        const char *rv = obj_rv(obj);

        if (!name) {
                json_decref(k);
                return;
        }
        if (strcmp(type, "DELETED") == 0) {
                /* A late DELETED of an old incarnation must not drop a newer one (recreated
                 * under the same name and upserted already). */
                json_t *old = json_object_get(c->objects, name);
                const char *uid = kube_get_str(obj, "metadata.uid");
                const char *old_uid = old ? kube_get_str(old, "metadata.uid") : NULL;
                if (!uid || !old_uid || strcmp(uid, old_uid) == 0)
                        remove_locked(c, name);
        } else if (k) {
                /* An upsert may have put a newer copy there already. */
                store_locked(c, name, k);
        }
        set_rv_locked(c, rv);
        c->version++;
        pthread_cond_broadcast(&c->cond);
}

static int on_event(const char *type, json_t *obj, void *userdata)
{
        watch_state *ws = userdata;
        kube_cache *c = ws->c;

        ws->events++;
        if (strcmp(type, "ERROR") == 0) {
                json_t *code = json_object_get(obj, "code");
                if (json_integer_value(code) == 410)
                        return EV_GONE;
                ws->error = cs_xasprintf("WATCH %s: ERROR event %" JSON_INTEGER_FORMAT ": %s",
                                         c->path, json_integer_value(code),
                                         kube_get_str(obj, "message") ?: "(no message)");
                c->retry_after_ms = retry_after_ms(obj);
                return EV_ERROR;
        }
        /* Events flow again: the incident (if any) is over, and the backoff starts afresh. */
        if (ws->events == 1)
                note_success(c);
        if (strcmp(type, "BOOKMARK") == 0) {
                pthread_mutex_lock(&c->lock);
                set_rv_locked(c, obj_rv(obj));
                pthread_mutex_unlock(&c->lock);
        } else if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 ||
                   strcmp(type, "DELETED") == 0) {
                /* Trimmed before the lock is taken. */
                json_t *k = strcmp(type, "DELETED") != 0 ? kept(c, obj, true) : NULL;

                pthread_mutex_lock(&c->lock);
                apply_locked(c, type, obj, k);
                pthread_mutex_unlock(&c->lock);
        }
        return 0;
}

static watch_end do_watch(kube_cache *c)
{
        watch_state ws = { .c = c };
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_free_ char *path = NULL, *rv = NULL;
        json_t *body = NULL;
        long status = 0;
        bool cancelled = false;
        int64_t timeout_s, started = cs_now_monotonic_ms();
        int r;

        /* Between the timeout and twice it, as client-go does, so replicas' watches do not
         * all end at once. */
        timeout_s = c->watch_timeout_s + (int64_t)(rng_next(c) % (uint64_t)c->watch_timeout_s);
        pthread_mutex_lock(&c->lock);
        rv = cs_xstrdup(c->rv ? c->rv : "");
        pthread_mutex_unlock(&c->lock);
        path = cs_xasprintf("%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
                            "&timeoutSeconds=%" PRId64 "%s%s",
                            c->path, rv, timeout_s, c->selector ? "&labelSelector=" : "",
                            c->selector ? c->selector : "");
        /* The server ends the watch at timeoutSeconds; silence well past that is a dead
         * connection. */
        r = kube_watch(c->client, path, on_event, &ws, c->stop_fd, (timeout_s + 30) * 1000, &status,
                       &body, &cancelled, &err);
        if (cancelled) {
                json_decref(body);
                free(ws.error);
                return WATCH_STOP;
        }
        if (r < 0) {
                note_failure(c, err->msg);
                return WATCH_FAILED;
        }
        if (r == EV_GONE || status == 410) {
                json_decref(body);
                log_info("%s: resourceVersion %s is too old (410 Gone); listing again", c->what,
                         rv);
                return WATCH_GONE;
        }
        if (r == EV_ERROR) {
                note_failure(c, ws.error);
                free(ws.error);
                return WATCH_FAILED;
        }
        if (status != 200) {
                kube_response resp = { .status = status, .body = body };
                note_http_failure(c, "WATCH", &resp);
                kube_response_clear(&resp);
                return WATCH_FAILED;
        }
        json_decref(body);
        if (ws.events == 0 && cs_now_monotonic_ms() - started < SHORT_WATCH_MS)
                return WATCH_FAILED; /* not worth a log line; backs off quietly */
        note_success(c);
        return WATCH_ENDED;
}

static void *cache_main(void *arg)
{
        kube_cache *c = arg;
        bool listed = false;

        for (;;) {
                if (!listed) {
                        bool again = c->synced; /* a LIST after the first */

                        listed = do_list(c) == 0;
                        if (listed && again)
                                atomic_fetch_add(&c->relists, 1);
                        if (listed)
                                note_success(c);
                        else if (!backoff(c))
                                return NULL;
                        continue;
                }
                switch (do_watch(c)) {
                case WATCH_ENDED:
                        break;
                case WATCH_GONE:
                        atomic_fetch_add(&c->watch_restarts, 1);
                        listed = false;
                        break;
                case WATCH_FAILED:
                        atomic_fetch_add(&c->watch_restarts, 1);
                        if (!backoff(c))
                                return NULL;
                        break;
                case WATCH_STOP:
                        return NULL;
                }
        }
}

/* --- public ---------------------------------------------------------------------------- */

kube_cache *kube_cache_new(const kube_cache_config *cfg, cs_error **err)
{
        kube_cache *c = cs_xcalloc(1, sizeof(*c));
        int r;

        c->client = cfg->client;
        c->path = cs_xstrdup(cfg->path);
        c->selector = cfg->label_selector && cfg->label_selector[0]
                              ? kube_escape(cfg->label_selector)
                              : NULL;
        c->what = cs_xstrdup(cfg->what ? cfg->what : cfg->path);
        c->watch_timeout_s =
                cfg->watch_timeout_s > 0 ? cfg->watch_timeout_s : DEFAULT_WATCH_TIMEOUT_S;
        c->page_limit = cfg->page_limit > 0 ? cfg->page_limit : DEFAULT_PAGE_LIMIT;
        c->backoff_min_ms = cfg->backoff_min_ms > 0 ? cfg->backoff_min_ms : DEFAULT_BACKOFF_MIN_MS;
        c->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : DEFAULT_BACKOFF_MAX_MS;
        c->trim = cfg->trim;
        if (c->backoff_max_ms < c->backoff_min_ms)
                c->backoff_max_ms = c->backoff_min_ms;
        c->objects = json_object();
        c->rng = (uint64_t)cs_now_realtime_ms() ^ ((uint64_t)(uintptr_t)c << 16) ^
                 (uint64_t)getpid();
        if (!c->rng)
                c->rng = 1;
        pthread_mutex_init(&c->lock, NULL);
        cs_cond_init_monotonic(&c->cond);
        c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->stop_fd < 0) {
                cs_error_errno(err, errno, "%s: eventfd", c->what);
                kube_cache_free(c);
                return NULL;
        }
        r = pthread_create(&c->thread, NULL, cache_main, c);
        if (r != 0) {
                cs_error_errno(err, r, "%s: cannot start the watch thread", c->what);
                kube_cache_free(c);
                return NULL;
        }
        c->started = true;
        return c;
}

void kube_cache_free(kube_cache *c)
{
        if (!c)
                return;
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (c->stop_fd >= 0) {
                uint64_t one = 1;
                if (write(c->stop_fd, &one, sizeof(one)) < 0) {
                        /* Cannot fail on a fresh eventfd; the join below would hang if it
                         * did, so say so. */
                        log_error("%s: cannot signal the watch thread: %m", c->what);
                }
        }
        if (c->started)
                pthread_join(c->thread, NULL);
        if (c->stop_fd >= 0)
                close(c->stop_fd);
        json_decref(c->objects);
        json_decref(c->index);
        free(c->index_key);
        free(c->rv);
        free(c->last_error);
        free(c->path);
        free(c->selector);
        free(c->what);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c);
}

int kube_cache_wait_synced(kube_cache *c, int64_t timeout_ms, cs_error **err)
{
        int64_t deadline = cs_now_monotonic_ms() + timeout_ms;

        pthread_mutex_lock(&c->lock);
        while (!c->synced && !c->stopping && cs_now_monotonic_ms() < deadline)
                cs_cond_wait_until(&c->cond, &c->lock, deadline);
        if (!c->synced) {
                cs_error_set(err, GRPC_STATUS_UNAVAILABLE,
                             "%s: not listed after %" PRId64 " ms: %s", c->what, timeout_ms,
                             c->last_error ? c->last_error : "no answer yet");
                pthread_mutex_unlock(&c->lock);
                return -1;
        }
        pthread_mutex_unlock(&c->lock);
        return 0;
}

json_t *kube_cache_find(kube_cache *c, kube_cache_match_fn match, void *userdata)
{
        const char *name;
        json_t *obj, *found = NULL;

        pthread_mutex_lock(&c->lock);
        json_object_foreach(c->objects, name, obj)
        {
                if (match(obj, userdata)) {
                        found = json_incref(obj);
                        break;
                }
        }
        pthread_mutex_unlock(&c->lock);
        return found;
}

typedef struct label_match {
        const char *key, *value;
} label_match;

static bool match_label(json_t *obj, void *userdata)
{
        const label_match *m = userdata;
        const char *v = json_string_value(kube_get_key(obj, "metadata", "labels", m->key, NULL));

        return v && strcmp(v, m->value) == 0;
}

/* By the index (one label per cache, the first asked for: the sandbox id); a scan for any
 * other label, or when the index's entry is stale (the object's label changed). */
json_t *kube_cache_find_label(kube_cache *c, const char *key, const char *value)
{
        label_match m = { key, value };
        json_t *obj = NULL;
        const char *name;

        pthread_mutex_lock(&c->lock);
        if (!c->index_key) {
                c->index_key = cs_xstrdup(key);
                c->index = json_object();
                index_rebuild_locked(c);
        }
        if (strcmp(c->index_key, key) == 0) {
                name = json_string_value(json_object_get(c->index, value));
                obj = name ? json_object_get(c->objects, name) : NULL;
                if (!name || (obj && str_eq(label_of(obj, key), value))) {
                        json_incref(obj);
                        pthread_mutex_unlock(&c->lock);
                        return obj;
                }
        }
        pthread_mutex_unlock(&c->lock);
        return kube_cache_find(c, match_label, &m);
}

uint64_t kube_cache_version(kube_cache *c)
{
        uint64_t v;

        pthread_mutex_lock(&c->lock);
        v = c->version;
        pthread_mutex_unlock(&c->lock);
        return v;
}

uint64_t kube_cache_wait_change(kube_cache *c, uint64_t since, int64_t deadline_ms)
{
        uint64_t v;

        pthread_mutex_lock(&c->lock);
        while (c->version == since && !c->stopping && cs_now_monotonic_ms() < deadline_ms)
                cs_cond_wait_until(&c->cond, &c->lock, deadline_ms);
        v = c->version;
        pthread_mutex_unlock(&c->lock);
        return v;
}

void kube_cache_upsert(kube_cache *c, json_t *obj)
{
        const char *name = kube_get_str(obj, "metadata.name");
        const char *rv = obj_rv(obj);
        json_t *old, *copy;

        if (!name || !rv)
                return;
        /* Made outside the lock; most upserts are kept (the answer to a write). */
        copy = kept(c, obj, false);
        if (!copy)
                return;
        pthread_mutex_lock(&c->lock);
        old = json_object_get(c->objects, name);
        if (old ? rv_cmp(rv, obj_rv(old)) > 0 : rv_cmp(rv, c->rv) > 0) {
                json_object_set_new(c->objects, name, TAKE_PTR(copy));
                index_put_locked(c, name, json_object_get(c->objects, name));
                c->version++;
                pthread_cond_broadcast(&c->cond);
        }
        pthread_mutex_unlock(&c->lock);
        json_decref(copy);
}

void kube_cache_stats(kube_cache *c, uint64_t *ret_watch_restarts, uint64_t *ret_relists)
{
        *ret_watch_restarts = atomic_load(&c->watch_restarts);
        *ret_relists = atomic_load(&c->relists);
}

void kube_cache_each(kube_cache *c, void (*fn)(json_t *obj, void *userdata), void *userdata)
{
        const char *name;
        json_t *obj;

        pthread_mutex_lock(&c->lock);
        json_object_foreach(c->objects, name, obj) fn(obj, userdata);
        pthread_mutex_unlock(&c->lock);
}
