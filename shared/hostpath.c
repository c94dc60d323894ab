/* Host paths out of client-facing messages (hostpath.h). */
#include "hostpath.h"

#include <stdbool.h>
#include <string.h>

#include "util.h"

static bool starts_path(const char *msg, size_t i)
{
        return msg[i] == '/' && (i == 0 || strchr(" \t'\"`([=,:", msg[i - 1]));
}

static size_t path_len(const char *p)
{
        return strcspn(p, " \t'\"`)],;:");
}

/* Whether the len bytes at p are one of dirs or beneath one. */
static bool is_hidden(const char *p, size_t len, const char *const *dirs)
{
        for (; dirs && *dirs; dirs++) {
                size_t n = strlen(*dirs);

                if ((*dirs)[0] != '/')
                        continue;
                while (n > 1 && (*dirs)[n - 1] == '/')
                        n--;
                if (len >= n && memcmp(p, *dirs, n) == 0 && (len == n || p[n] == '/' || n == 1))
                        return true;
        }
        return false;
}

char *cs_paths_hide(const char *msg, const char *const *dirs)
{
        size_t len = strlen(msg), w = 0;
        /* Each replaced path is at least 1 byte: the copy grows by strlen(CS_HIDDEN_PATH) at
         * most per byte of msg. */
        _cleanup_free_ char *out = cs_xmalloc(len * sizeof(CS_HIDDEN_PATH) + 1);
        bool changed = false;

        for (size_t i = 0; i < len;) {
                size_t n;

                if (!starts_path(msg, i)) {
                        out[w++] = msg[i++];
                        continue;
                }
                n = path_len(msg + i);
                if (is_hidden(msg + i, n, dirs)) {
                        memcpy(out + w, CS_HIDDEN_PATH, sizeof(CS_HIDDEN_PATH) - 1);
                        w += sizeof(CS_HIDDEN_PATH) - 1;
                        changed = true;
                } else {
                        memcpy(out + w, msg + i, n);
                        w += n;
                }
                i += n;
        }
        out[w] = '\0';
        return changed ? TAKE_PTR(out) : NULL;
}
