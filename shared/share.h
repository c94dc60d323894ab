/* Fair shares: a bounded table of keys (a peer, a tenant) with a count of what each holds
 * (calls in flight), so that one greedy key is refused before it can fill a global cap.
 * Thread-safe. Library code: does not log. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Longer keys are cut. 128: a tenant id's bound (CS_ID_MAX, sandbox_limits.h) fits whole, so
 * two tenants never share a slot; the peer strings gRPC gives are shorter. */
#define CS_SHARE_KEY_MAX 128

typedef struct cs_share cs_share;

/* A table of at most max_keys keys, each allowed `share` units at once. share 0: no limit
 * (cs_share_take always succeeds, nothing is counted). The caller frees with cs_share_free. */
cs_share *cs_share_new(unsigned share, size_t max_keys);
void cs_share_free(cs_share *s);

typedef enum cs_share_verdict {
        CS_SHARE_TAKEN,      /* one unit taken: give it back with cs_share_give */
        CS_SHARE_USED_UP,    /* key already holds its share */
        CS_SHARE_TABLE_FULL, /* every slot is held by other keys */
} cs_share_verdict;

/* Takes one unit for key, and says why not when it cannot: key already holds its share, or
 * the table is full of other keys (then the key is refused too: the table is the bound on
 * memory). Every CS_SHARE_TAKEN must be matched by exactly one cs_share_give(key). */
cs_share_verdict cs_share_try(cs_share *s, const char *key);
/* cs_share_try(s, key) == CS_SHARE_TAKEN. */
bool cs_share_take(cs_share *s, const char *key);
void cs_share_give(cs_share *s, const char *key);

/* Units key holds now (tests). */
unsigned cs_share_held(cs_share *s, const char *key);
unsigned cs_share_limit(const cs_share *s);
