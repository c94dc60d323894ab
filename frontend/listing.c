/* ListSandboxes' pure parts (listing.h). Owns nothing; touches only what it is handed. */
#include "listing.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "utf8.h"
#include "util.h"
#include "uuid.h"

size_t fe_list_page_size(uint32_t requested)
{
        if (requested == 0)
                return FE_LIST_DEFAULT_PAGE;
        return requested > FE_LIST_MAX_PAGE ? FE_LIST_MAX_PAGE : requested;
}

/* FNV-1a 64 of tenant NUL status: tells a token given for another listing apart. */
static uint64_t token_check(const char *tenant, fe_status status)
{
        uint64_t h = 14695981039346656037ull;
        char st[16];

        for (const char *p = tenant; *p; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ 0) * 1099511628211ull;
        snprintf(st, sizeof(st), "%d", (int)status);
        for (const char *p = st; *p; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ull;
        return h;
}

void fe_list_token_encode(const char *tenant, fe_status status, int64_t created_ms, const char *id,
                          char ret[static FE_LIST_TOKEN_MAX + 1])
{
        char plain[96];
        int n = snprintf(plain, sizeof(plain), "1:%" PRId64 ":%.36s:%016" PRIx64, created_ms, id,
                         token_check(tenant, status));

        /* 1 + 20 + 36 + 16 + 3 separators = 76 bytes at most: 104 characters of base64. */
        cs_base64_encode((const uint8_t *)plain, (size_t)n, ret);
}

/* The decimal digits of s[0..n) as a value <= INT64_MAX; -1 when they are not that (no
 * sign, no spaces, 1..19 digits). */
static int64_t parse_ms(const char *s, size_t n)
{
        uint64_t v = 0;

        if (n == 0 || n > 19)
                return -1;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -1;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        return v > INT64_MAX ? -1 : (int64_t)v;
}

int fe_list_token_decode(const char *token, const char *tenant, fe_status status,
                         int64_t *ret_created_ms, char ret_id[static 37], cs_error **err)
{
        _cleanup_free_ uint8_t *plain = NULL;
        const char *p, *c1, *c2;
        char check[17], *end = NULL;
        int64_t created;
        size_t len;

        *ret_created_ms = 0;
        ret_id[0] = '\0';
        if (!token[0])
                return 0;
        /* "1:" MS ":" UUID ":" 16 lower-case hex digits, and nothing else. */
        if (strlen(token) > FE_LIST_TOKEN_MAX ||
            cs_base64_decode(token, strlen(token), 0, &plain, &len, NULL) < 0 ||
            strlen((char *)plain) != len || strncmp((char *)plain, "1:", 2) != 0)
                goto bad;
        p = (char *)plain + 2;
        c1 = strchr(p, ':');
        c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2 - c1 - 1 != CS_UUID_STRLEN || strlen(c2 + 1) != 16)
                goto bad;
        created = parse_ms(p, (size_t)(c1 - p));
        memcpy(ret_id, c1 + 1, CS_UUID_STRLEN);
        ret_id[CS_UUID_STRLEN] = '\0';
        memcpy(check, c2 + 1, sizeof(check));
        for (const char *h = check; *h; h++) {
                if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
                        goto bad;
        }
        if (created < 0 || !cs_uuid_valid(ret_id))
                goto bad;
        if (strtoull(check, &end, 16) != token_check(tenant, status)) {
                ret_id[0] = '\0';
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "page_token was given for another tenant_id or status");
        }
        *ret_created_ms = created;
        return 0;
bad:
        ret_id[0] = '\0';
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                            "page_token is not one this service gave");
}

/* The listing order: created_at_ms, then id (case-insensitively: UUIDs are compared as the
 * same id whatever their case everywhere else). */
static int order(int64_t a_created, const char *a_id, int64_t b_created, const char *b_id)
{
        if (a_created != b_created)
                return a_created < b_created ? -1 : 1;
        return strcasecmp(a_id, b_id);
}

bool fe_list_after(const fe_view *v, int64_t created_ms, const char *id)
{
        if (!id[0])
                return true;
        return order(v->created_at_ms, v->id, created_ms, id) > 0;
}

static int view_cmp(const void *a, const void *b)
{
        const fe_view *x = a, *y = b;

        return order(x->created_at_ms, x->id, y->created_at_ms, y->id);
}

void fe_list_select(fe_view_list *l, const fe_list_query *q)
{
        size_t kept = 0;

        if (l->n > 1)
                qsort(l->v, l->n, sizeof(*l->v), view_cmp);
        l->more = false;
        for (size_t i = 0; i < l->n; i++) {
                if (!fe_list_after(&l->v[i], q->after_created_ms, q->after_id)) {
                        fe_view_clear(&l->v[i]);
                } else if (kept == q->limit) {
                        l->more = true;
                        fe_view_clear(&l->v[i]);
                } else {
                        l->v[kept++] = l->v[i];
                }
        }
        l->n = kept;
}

/* --- status_reason --------------------------------------------------------------------- */

/* Words that only the container runtime's own errors carry: such a text says how the node
 * is put together (binaries, sockets, the sandbox's internals), none of it the tenant's
 * business nor of use to them. */
static const char *const runtime_words[] = { "runsc",           "gofer", "sentry", "oci runtime",
                                             "containerd-shim", "shim",  "cgroup", NULL };

#define RUNTIME_FAILED                                                                             \
        "the container runtime failed to run the sandbox (the details are in the node's logs)"

/* Characters after which a '/' starts a path (rather than sits inside a word or a URL). */
static bool path_starts_after(char c)
{
        return c == ' ' || c == '\t' || c == '"' || c == '\'' || c == '=' || c == '(' || c == '[' ||
               c == ',' || c == '`';
}

/* Whether the path that reached p ends there: at a space, a quote, a closing bracket, a
 * separator, or a colon that ends a clause ("open /x: no such file"; "/images/x:1" is one
 * path). */
static bool path_ends_at(const char *p)
{
        char c = *p;

        if (c == ':')
                return p[1] == ' ' || p[1] == '\0';
        return c == '\0' || c == ' ' || c == '\t' || c == '"' || c == '\'' || c == ',' ||
               c == ';' || c == ')' || c == ']' || c == '`' || (unsigned char)c < 0x20;
}

char *fe_reason_clean(const char *in)
{
        size_t len, cap = 0, n = 0;
        char *out = NULL;
        const char *p;

        if (!in || !in[0])
                return NULL;
        for (const char *const *w = runtime_words; *w; w++) {
                if (strcasestr(in, *w))
                        return cs_xstrdup(RUNTIME_FAILED);
        }
        len = strlen(in);
        for (p = in; *p;) {
                size_t k;

                if (*p == '/' && (p == in || path_starts_after(p[-1])) && !path_ends_at(p + 1)) {
                        while (!path_ends_at(p))
                                p++;
                        cs_text_append(&out, &n, &cap, "<path>", 6);
                        continue;
                }
                if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                        cs_text_append(&out, &n, &cap, " ", 1);
                        p++;
                        continue;
                }
                k = cs_utf8_len((const unsigned char *)p, len - (size_t)(p - in));
                if (k == 0) {
                        cs_text_append(&out, &n, &cap, "?", 1);
                        p++;
                        continue;
                }
                cs_text_append(&out, &n, &cap, p, k);
                p += k;
        }
        while (n > 0 && out[n - 1] == ' ')
                out[--n] = '\0';
        if (n > FE_REASON_MAX) {
                size_t cut = FE_REASON_MAX - 3;
                /* Back to the start of a character: never half of one. */
                while (cut > 0 && ((unsigned char)out[cut] & 0xc0) == 0x80)
                        cut--;
                memcpy(out + cut, "...", 4);
                n = cut + 3;
        }
        if (n == 0) {
                free(out);
                return NULL;
        }
        return out;
}
