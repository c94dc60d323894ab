/* Fair shares (share.h): a linear table, small by design (max_keys is a few thousand at most
 * and a take is one scan under a mutex, cheap next to starting a handler thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "share.h"
#include "util.h"

typedef struct share_slot {
        char key[CS_SHARE_KEY_MAX + 1];
        unsigned held; /* 0: the slot is free */
} share_slot;

struct cs_share {
        pthread_mutex_t lock;
        unsigned share;
        size_t n;
        share_slot *slots;
};

cs_share *cs_share_new(unsigned share, size_t max_keys)
{
        cs_share *s = cs_xcalloc(1, sizeof(*s));

        pthread_mutex_init(&s->lock, NULL);
        s->share = share;
        s->n = max_keys ? max_keys : 1;
        s->slots = cs_xcalloc(s->n, sizeof(*s->slots));
        return s;
}

void cs_share_free(cs_share *s)
{
        if (!s)
                return;
        pthread_mutex_destroy(&s->lock);
        free(s->slots);
        free(s);
}

/* Under lock: key's slot, or a free one (key copied in) when create, or NULL. */
static share_slot *slot_find(cs_share *s, const char *key, bool create)
{
        share_slot *free_slot = NULL;

        for (size_t i = 0; i < s->n; i++) {
                share_slot *sl = &s->slots[i];
                if (sl->held == 0) {
                        if (!free_slot)
                                free_slot = sl;
                } else if (strncmp(sl->key, key, CS_SHARE_KEY_MAX) == 0) {
                        return sl;
                }
        }
        if (!create || !free_slot)
                return NULL;
        snprintf(free_slot->key, sizeof(free_slot->key), "%s", key);
        return free_slot;
}

cs_share_verdict cs_share_try(cs_share *s, const char *key)
{
        cs_share_verdict v = CS_SHARE_TAKEN;
        share_slot *sl;

        if (!s || s->share == 0)
                return CS_SHARE_TAKEN;
        pthread_mutex_lock(&s->lock);
        sl = slot_find(s, key, true);
        if (!sl)
                v = CS_SHARE_TABLE_FULL;
        else if (sl->held >= s->share)
                v = CS_SHARE_USED_UP;
        else
                sl->held++;
        pthread_mutex_unlock(&s->lock);
        return v;
}

bool cs_share_take(cs_share *s, const char *key)
{
        return cs_share_try(s, key) == CS_SHARE_TAKEN;
}

void cs_share_give(cs_share *s, const char *key)
{
        share_slot *sl;

        if (!s || s->share == 0)
                return;
        pthread_mutex_lock(&s->lock);
        sl = slot_find(s, key, false);
        if (sl && sl->held > 0)
                sl->held--;
        pthread_mutex_unlock(&s->lock);
}

unsigned cs_share_held(cs_share *s, const char *key)
{
        share_slot *sl;
        unsigned n;

        if (!s || s->share == 0)
                return 0;
        pthread_mutex_lock(&s->lock);
        sl = slot_find(s, key, false);
        n = sl ? sl->held : 0;
        pthread_mutex_unlock(&s->lock);
        return n;
}

unsigned cs_share_limit(const cs_share *s)
{
        return s ? s->share : 0;
}
