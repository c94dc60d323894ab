/* libFuzzer target: the watch stream's framing (frontend/kube_framer.c) on untrusted bytes, as
 * an API server (or anything between it and us) could send them.
 *
 * Input: byte 0 drives the chunking (a seed for the cut points, and which event's callback
 * stops the stream); the rest is the stream. The stream is framed twice, in one chunk and in
 * the seeded chunks: both must see the same events and end the same way (a differential
 * check of the partial-line carry-over), beside what ASan and UBSan catch.
 *
 * Owns: nothing outside this file. Needs: frontend/kube_framer.c shared/error.c
 * shared/util.c and jansson (no curl, no gRPC library: only <grpc/status.h>). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube_framer.h"

/* Small, so over-long lines are reached often; the production cap is KUBE_MAX_BODY. */
#define FUZZ_MAX_LINE 512

typedef struct run {
        uint64_t hash; /* of every event seen, in order */
        int events;
        int stop_at; /* the event whose callback returns non-zero; 0: none */
} run;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
        const unsigned char *b = p;

        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 1099511628211u;
        return h;
}

static int on_event(const char *type, json_t *object, void *userdata)
{
        run *r = userdata;
        char *o = json_dumps(object, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

        r->hash = mix(r->hash, type, strlen(type) + 1);
        if (o)
                r->hash = mix(r->hash, o, strlen(o) + 1);
        free(o);
        return ++r->events == r->stop_at ? 3 : 0;
}

/* Frames p[0..n) in chunks cut by seed (0: one chunk). Returns the framer's result; *ret_msg
 * gets the error message (malloc'd) or NULL. */
static int frame(const char *p, size_t n, unsigned seed, run *r, char **ret_msg)
{
        uint32_t x = seed * 2654435761u + 1;
        cs_error *err = NULL;
        kube_framer f;
        int rc = 0;

        kube_framer_init(&f, "/fuzz", FUZZ_MAX_LINE, on_event, r);
        while (rc == 0 && n > 0) {
                size_t len = n;

                if (seed != 0) {
                        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                        len = 1 + x % (x & 1 ? 8 : 700);
                        if (len > n)
                                len = n;
                }
                rc = kube_framer_feed(&f, p, len, &err);
                p += len;
                n -= len;
        }
        if (rc == 0)
                rc = kube_framer_finish(&f, &err);
        kube_framer_release(&f);
        if (rc != 0 && err == NULL && rc != 3)
                abort(); /* a non-zero result is fn's (3) or comes with an error */
        *ret_msg = err ? strdup(err->msg) : NULL;
        cs_error_free(err);
        return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        run whole = { .hash = 14695981039346656037u }, cut;
        char *msg_whole, *msg_cut;
        int rc_whole, rc_cut;

        if (size < 1)
                return 0;
        whole.stop_at = data[0] % 5; /* 0: never stop */
        cut = whole;
        rc_whole = frame((const char *)data + 1, size - 1, 0, &whole, &msg_whole);
        rc_cut = frame((const char *)data + 1, size - 1, data[0] | 0x100u, &cut, &msg_cut);
        if (rc_whole != rc_cut || whole.events != cut.events || whole.hash != cut.hash ||
            !msg_whole != !msg_cut || (msg_whole && strcmp(msg_whole, msg_cut))) {
                fprintf(stderr, "whole: %d, %d events, %s\ncut: %d, %d events, %s\n", rc_whole,
                        whole.events, msg_whole ? msg_whole : "-", rc_cut, cut.events,
                        msg_cut ? msg_cut : "-");
                abort();
        }
        free(msg_whole);
        free(msg_cut);
        return 0;
}
