/* Fair shares: a bounded table of keys (a peer, a tenant) with a count of what each holds
 * (calls in flight), so that one greedy key is refused before it can fill a global cap.
 * Thread-safe. Library code: does not log. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define CS_SHARE_KEY_MAX 127 /* longer keys are cut (the peer strings gRPC gives are shorter) */

typedef struct cs_share cs_share;

/* A table of at most max_keys keys, each allowed `share` units at once. share 0: no limit
 * (cs_share_take always succeeds, nothing is counted). The caller frees with cs_share_free. */
cs_share *cs_share_new(unsigned share, size_t max_keys);
void cs_share_free(cs_share *s);

/* Takes one unit for key. False when key already holds its share, or when the table is full
 * of other keys (then the key is refused too: the table is the bound on memory). Every true
 * must be matched by exactly one cs_share_give(key). */
bool cs_share_take(cs_share *s, const char *key);
void cs_share_give(cs_share *s, const char *key);

/* Units key holds now (tests). */
unsigned cs_share_held(cs_share *s, const char *key);
unsigned cs_share_limit(const cs_share *s);
