/* The watch stream's framing: newline-delimited JSON events, as the API server sends them
 * over a chunked response, cut into events whatever the chunk boundaries.
 *
 * Owns: the partial line between chunks and the event-line checks. Touches: nothing but its
 * arguments (no curl, no I/O, no locks), so it is unit-tested and fuzzed on byte strings.
 * One framer belongs to one watch and is used by one thread at a time. */
#pragma once

#include <stddef.h>

#include "error.h"
#include "kube_client.h"

typedef struct kube_framer {
        const char *what; /* names the watch in messages (its path); borrowed */
        size_t max_line;  /* longest event line accepted, '\n' excluded */
        kube_watch_fn fn;
        void *userdata;
        char *buf; /* the partial line carried from one chunk to the next; owned */
        size_t len, cap;
} kube_framer;

/* A framer that hands each event of the stream to fn(type, object, userdata). what is
 * borrowed for the framer's life. Release with kube_framer_release. */
void kube_framer_init(kube_framer *f, const char *what, size_t max_line, kube_watch_fn fn,
                      void *userdata);
void kube_framer_release(kube_framer *f);

/* Feeds the next n bytes of the stream (any split: a line may span many calls, a call may
 * hold many lines). For each complete line: trailing " \t\r" is dropped, an empty line is
 * skipped, anything else must be a JSON object {"type": string, "object": any}. Returns
 *   0   every complete line handled (the rest of a partial one is kept),
 *   -1  with *err (INTERNAL): a line that is not such an event ("malformed event line") or
 *       longer than max_line ("event line larger than ..."); fn is not called for it,
 *   fn's value when fn returned non-zero (*err untouched, even when that value is -1).
 * After a non-zero return the stream is finished: do not feed it again. */
int kube_framer_feed(kube_framer *f, const char *p, size_t n, cs_error **err);

/* The stream ended: the last line if it had no '\n' is handled as kube_framer_feed would.
 * Same returns. */
int kube_framer_finish(kube_framer *f, cs_error **err);
