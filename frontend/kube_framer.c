/* The watch stream's framing: bytes in any chunks to one fn call per event line. See
 * kube_framer.h.
 *
 * Owns: the framer's line buffer. Touches: nothing else (no curl, no I/O, no locks). */
#include "kube_framer.h"

#include <string.h>

#include "util.h"

void kube_framer_init(kube_framer *f, const char *what, size_t max_line, kube_watch_fn fn,
                      void *userdata)
{
        *f = (kube_framer){ .what = what, .max_line = max_line, .fn = fn, .userdata = userdata };
}

void kube_framer_release(kube_framer *f)
{
        free(f->buf);
        f->buf = NULL;
        f->len = f->cap = 0;
}

static int too_long(const kube_framer *f, cs_error **err)
{
        return cs_error_set(err, GRPC_STATUS_INTERNAL,
                            "kube watch %s: event line larger than %zu bytes", f->what,
                            f->max_line);
}

/* Appends to the partial line; -1 with *err past max_line. */
static int buf_append(kube_framer *f, const char *p, size_t n, cs_error **err)
{
        if (n > f->max_line - f->len)
                return too_long(f, err);
        if (f->len + n > f->cap) {
                size_t cap = f->cap ? f->cap : 4096;

                while (cap < f->len + n)
                        cap *= 2;
                f->buf = realloc(f->buf, cap);
                if (!f->buf)
                        abort();
                f->cap = cap;
        }
        memcpy(f->buf + f->len, p, n);
        f->len += n;
        return 0;
}

/* One complete line (no '\n'). fn's value, 0 for an empty line, or -1 with *err. */
static int framer_line(kube_framer *f, const char *line, size_t len, cs_error **err)
{
        json_error_t jerr;
        json_t *ev, *type, *obj;
        int r;

        while (len > 0 && strchr(" \t\r", line[len - 1]))
                len--;
        if (len == 0)
                return 0;
        ev = json_loadb(line, len, 0, &jerr);
        type = json_object_get(ev, "type");
        obj = json_object_get(ev, "object");
        if (!json_is_string(type) || !obj) {
                cs_error_set(err, GRPC_STATUS_INTERNAL, "kube watch %s: malformed event line (%s)",
                             f->what, ev ? "no type or object" : jerr.text);
                json_decref(ev);
                return -1;
        }
        r = f->fn(json_string_value(type), obj, f->userdata);
        json_decref(ev);
        return r;
}

int kube_framer_feed(kube_framer *f, const char *p, size_t n, cs_error **err)
{
        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t chunk = nl ? (size_t)(nl - p) : n;
                int r;

                /* A line wholly inside this chunk is parsed where it lies, without a copy. */
                if (!nl || f->len > 0) {
                        if (buf_append(f, p, chunk, err) < 0)
                                return -1;
                } else if (chunk > f->max_line) {
                        return too_long(f, err);
                }
                if (!nl)
                        return 0;
                if (f->len > 0) {
                        r = framer_line(f, f->buf, f->len, err);
                        f->len = 0;
                } else {
                        r = framer_line(f, p, chunk, err);
                }
                if (r != 0)
                        return r;
                p += chunk + 1;
                n -= chunk + 1;
        }
        return 0;
}

int kube_framer_finish(kube_framer *f, cs_error **err)
{
        int r = 0;

        if (f->len > 0)
                r = framer_line(f, f->buf, f->len, err);
        f->len = 0;
        return r;
}
