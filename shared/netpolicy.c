/* A sandbox's network policy (netpolicy.h): the one parser and checker of NetworkSpec's
 * strings, and the matches the node agent's enforcement asks. Pure: no protobuf, no I/O. */
#include "netpolicy.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

/* How much of a refused entry a message quotes. */
#define ENTRY_QUOTE_MAX 64
#define LABEL_MAX       63

const char *cs_egress_name(cs_egress e)
{
        switch (e) {
        case CS_EGRESS_NONE:
                return "none";
        case CS_EGRESS_ALLOWLIST:
                return "allowlist";
        case CS_EGRESS_OPEN:
                return "open";
        case CS_EGRESS_UNSPECIFIED:
        default:
                return "";
        }
}

int cs_egress_from_name(const char *name)
{
        if (cs_isempty(name))
                return CS_EGRESS_UNSPECIFIED;
        for (int e = CS_EGRESS_NONE; e <= CS_EGRESS_OPEN; e++) {
                if (strcmp(name, cs_egress_name(e)) == 0)
                        return e;
        }
        return -1;
}

static bool is_ldh(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* Checks the labels of name (lower case already, no trailing dot, no wildcard): NULL, or why
 * it is not a name. */
static const char *check_labels(const char *name)
{
        const char *label = name, *p = name;
        bool digits_only = true;

        for (;; p++) {
                if (*p == '.' || *p == '\0') {
                        size_t len = (size_t)(p - label);

                        if (len == 0)
                                return "empty label";
                        if (len > LABEL_MAX)
                                return "label longer than 63 bytes";
                        if (label[0] == '-' || p[-1] == '-')
                                return "label starts or ends with '-'";
                        if (*p == '\0')
                                break;
                        label = p + 1;
                        digits_only = true;
                        continue;
                }
                if (*p == '*')
                        return "'*' only as a whole leading label (\"*.example.com\")";
                if (!is_ldh(*p))
                        return "letters, digits, '-' and '.' only (an IDN as its xn-- form)";
                if (*p < '0' || *p > '9')
                        digits_only = false;
        }
        /* No top-level domain is all digits: "10.0.0.1" is an address, which a sandbox
         * reaches without asking the resolver, so as a name it would allow nothing. */
        if (digits_only)
                return "an address, not a name (addresses go in allow_cidrs)";
        return NULL;
}

/* The canonical form of one allow_domains entry (lower case, no trailing dot) into *ret
 * (the caller frees it), or -1 with why it is not one in *why. */
static int domain_parse(const char *s, char **ret, const char **why)
{
        _cleanup_free_ char *name = NULL;
        size_t len = s ? strlen(s) : 0;

        if (len > 0 && s[len - 1] == '.')
                len--;
        if (len == 0) {
                *why = "empty name";
                return -1;
        }
        if (len > CS_NET_DOMAIN_MAX) {
                *why = "longer than 253 bytes";
                return -1;
        }
        name = cs_xmalloc(len + 1);
        for (size_t i = 0; i < len; i++)
                name[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] - 'A' + 'a') : s[i];
        name[len] = '\0';
        *why = check_labels(strncmp(name, "*.", 2) == 0 ? name + 2 : name);
        if (*why)
                return -1;
        *ret = TAKE_PTR(name);
        return 0;
}

static unsigned cidr_bits(int family)
{
        return family == AF_INET ? 32 : 128;
}

/* Whether the first bits bits of a and b are equal. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
        unsigned whole = bits / 8, rest = bits % 8;
        uint8_t mask = (uint8_t)(0xff << (8 - rest));

        if (memcmp(a, b, whole) != 0)
                return false;
        return rest == 0 || ((a[whole] ^ b[whole]) & mask) == 0;
}

static void cidr_mask(cs_cidr *c)
{
        unsigned bits = c->prefix, n = cidr_bits(c->family) / 8;

        for (unsigned i = 0; i < n; i++) {
                unsigned keep = bits >= 8 ? 8 : bits;

                c->addr[i] &= (uint8_t)(0xff << (8 - keep));
                bits -= keep;
        }
}

static bool cidr_equal(const cs_cidr *a, const cs_cidr *b)
{
        return a->family == b->family && a->prefix == b->prefix &&
               memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

/* A CIDR or a bare address, host bits as given. */
static int cidr_parse_raw(const char *s, cs_cidr *ret, const char **why)
{
        char addr[INET6_ADDRSTRLEN + 1];
        const char *slash;
        size_t alen;
        unsigned prefix = 0;

        memset(ret, 0, sizeof(*ret));
        if (cs_isempty(s)) {
                *why = "empty";
                return -1;
        }
        if (strlen(s) > CS_NET_CIDR_STRLEN) {
                *why = "too long to be a CIDR";
                return -1;
        }
        slash = strchr(s, '/');
        alen = slash ? (size_t)(slash - s) : strlen(s);
        if (alen >= sizeof(addr)) {
                *why = "not an IPv4 or IPv6 address";
                return -1;
        }
        memcpy(addr, s, alen);
        addr[alen] = '\0';
        if (inet_pton(AF_INET, addr, ret->addr) == 1) {
                ret->family = AF_INET;
        } else if (inet_pton(AF_INET6, addr, ret->addr) == 1) {
                ret->family = AF_INET6;
        } else {
                *why = "not an IPv4 or IPv6 address";
                return -1;
        }
        if (!slash) {
                ret->prefix = (uint8_t)cidr_bits(ret->family);
                return 0;
        }
        if (!slash[1] || strlen(slash + 1) > 3 || (slash[1] == '0' && slash[2])) {
                *why = "prefix length is not a number";
                return -1;
        }
        for (const char *p = slash + 1; *p; p++) {
                if (*p < '0' || *p > '9') {
                        *why = "prefix length is not a number";
                        return -1;
                }
                prefix = prefix * 10 + (unsigned)(*p - '0');
        }
        if (prefix > cidr_bits(ret->family)) {
                *why = ret->family == AF_INET ? "prefix length over 32" : "prefix length over 128";
                return -1;
        }
        ret->prefix = (uint8_t)prefix;
        return 0;
}

int cs_cidr_parse(const char *s, cs_cidr *ret, const char **why)
{
        cs_cidr masked;

        if (cidr_parse_raw(s, ret, why) < 0)
                return -1;
        masked = *ret;
        cidr_mask(&masked);
        if (!cidr_equal(&masked, ret)) {
                *why = "host bits set";
                return -1;
        }
        return 0;
}

void cs_cidr_format(const cs_cidr *c, char *buf, size_t len)
{
        char addr[INET6_ADDRSTRLEN];

        if (!inet_ntop(c->family, c->addr, addr, sizeof(addr)))
                snprintf(addr, sizeof(addr), "?");
        snprintf(buf, len, "%s/%u", addr, (unsigned)c->prefix);
}

bool cs_cidr_contains(const cs_cidr *c, int family, const void *addr)
{
        return c->family == family && prefix_equal(c->addr, addr, c->prefix);
}

bool cs_cidr_overlap(const cs_cidr *a, const cs_cidr *b)
{
        return a->family == b->family &&
               prefix_equal(a->addr, b->addr, a->prefix < b->prefix ? a->prefix : b->prefix);
}

/* INVALID_ARGUMENT naming entry i of the field. */
static int entry_error(cs_error **err, const char *field, size_t i, const char *value,
                       const char *why, const char *hint)
{
        size_t len = value ? strlen(value) : 0, quoted = len;

        /* Cut at a character: the API's strings are UTF-8, and so must the message be. */
        if (len > ENTRY_QUOTE_MAX) {
                quoted = ENTRY_QUOTE_MAX;
                while (quoted > 0 && ((unsigned char)value[quoted] & 0xc0) == 0x80)
                        quoted--;
        }
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "network.%s[%zu] '%.*s%s': %s%s",
                            field, i, (int)quoted, value ? value : "", quoted < len ? "..." : "",
                            why, hint ? hint : "");
}

static int check_list_shape(cs_egress egress, const char *field, const char *const *v, size_t n,
                            size_t max, cs_error **err)
{
        char hint[64];

        if (n > max)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "network.%s has %zu entries, more than %zu", field, n, max);
        if (n > 0 && egress != CS_EGRESS_ALLOWLIST) {
                snprintf(hint, sizeof(hint), " (egress is %s)",
                         egress == CS_EGRESS_UNSPECIFIED ? "unspecified" : cs_egress_name(egress));
                return entry_error(err, field, 0, v[0], "lists apply only to egress allowlist",
                                   hint);
        }
        return 0;
}

static int parse_domains(const char *const *v, size_t n, cs_netpolicy *p, cs_error **err)
{
        p->domains = n ? cs_xcalloc(n, sizeof(*p->domains)) : NULL;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *name = NULL;
                const char *why;
                bool dup = false;

                if (domain_parse(v[i], &name, &why) < 0)
                        return entry_error(err, "allow_domains", i, v[i], why, NULL);
                for (size_t j = 0; j < p->n_domains && !dup; j++)
                        dup = strcmp(p->domains[j], name) == 0;
                if (!dup)
                        p->domains[p->n_domains++] = TAKE_PTR(name);
        }
        return 0;
}

static int parse_cidrs(const char *const *v, size_t n, cs_netpolicy *p, cs_error **err)
{
        p->cidrs = n ? cs_xcalloc(n, sizeof(*p->cidrs)) : NULL;
        for (size_t i = 0; i < n; i++) {
                char net[CS_NET_CIDR_STRLEN + 1], hint[sizeof(net) + 32];
                cs_cidr c, masked;
                const char *why;
                bool dup = false;

                if (cidr_parse_raw(v[i], &c, &why) < 0)
                        return entry_error(err, "allow_cidrs", i, v[i], why, NULL);
                masked = c;
                cidr_mask(&masked);
                if (!cidr_equal(&masked, &c)) {
                        /* cs_cidr_parse's refusal, with the network that was likely meant. */
                        cs_cidr_format(&masked, net, sizeof(net));
                        snprintf(hint, sizeof(hint), " (the network is %s)", net);
                        return entry_error(err, "allow_cidrs", i, v[i], "host bits set", hint);
                }
                for (size_t j = 0; j < p->n_cidrs && !dup; j++)
                        dup = cidr_equal(&p->cidrs[j], &c);
                if (!dup)
                        p->cidrs[p->n_cidrs++] = c;
        }
        return 0;
}

int cs_netpolicy_parse(cs_egress egress, const char *const *domains, size_t n_domains,
                       const char *const *cidrs, size_t n_cidrs, cs_netpolicy *ret, cs_error **err)
{
        cs_netpolicy p = { .egress = egress };

        memset(ret, 0, sizeof(*ret));
        if ((unsigned)egress > CS_EGRESS_OPEN)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "network.egress %d is not an EgressMode", (int)egress);
        if (check_list_shape(egress, "allow_domains", domains, n_domains, CS_NET_MAX_DOMAINS, err) <
                    0 ||
            check_list_shape(egress, "allow_cidrs", cidrs, n_cidrs, CS_NET_MAX_CIDRS, err) < 0)
                return -1;
        if (parse_domains(domains, n_domains, &p, err) < 0 ||
            parse_cidrs(cidrs, n_cidrs, &p, err) < 0) {
                cs_netpolicy_clear(&p);
                return -1;
        }
        *ret = p;
        return 0;
}

void cs_netpolicy_clear(cs_netpolicy *p)
{
        if (!p)
                return;
        for (size_t i = 0; i < p->n_domains; i++)
                free(p->domains[i]);
        free(p->domains);
        free(p->cidrs);
        memset(p, 0, sizeof(*p));
}

void cs_netpolicy_copy(cs_netpolicy *dst, const cs_netpolicy *src)
{
        memset(dst, 0, sizeof(*dst));
        if (!src)
                return;
        dst->egress = src->egress;
        if (src->n_domains) {
                dst->domains = cs_xcalloc(src->n_domains, sizeof(*dst->domains));
                for (size_t i = 0; i < src->n_domains; i++)
                        dst->domains[i] = cs_xstrdup(src->domains[i]);
                dst->n_domains = src->n_domains;
        }
        if (src->n_cidrs) {
                dst->cidrs = cs_xcalloc(src->n_cidrs, sizeof(*dst->cidrs));
                memcpy(dst->cidrs, src->cidrs, src->n_cidrs * sizeof(*dst->cidrs));
                dst->n_cidrs = src->n_cidrs;
        }
}

/* Whether the len bytes of name equal entry, ignoring ASCII case (entry is lower case). */
static bool name_equal(const char *name, size_t len, const char *entry)
{
        if (strlen(entry) != len)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = name[i];

                if (c >= 'A' && c <= 'Z')
                        c = (char)(c - 'A' + 'a');
                if (c != entry[i])
                        return false;
        }
        return true;
}

bool cs_netpolicy_domain_allowed(const cs_netpolicy *p, const char *name)
{
        size_t len;

        if (!p || cs_isempty(name))
                return false;
        /* Tolerated though the callers pass names as the header says: a query's name is
         * case-insensitive and may be written fully qualified. */
        len = strlen(name);
        if (name[len - 1] == '.')
                len--;
        for (size_t i = 0; i < p->n_domains; i++) {
                const char *d = p->domains[i];

                if (strncmp(d, "*.", 2) == 0) {
                        /* ".suffix", after at least one byte of labels of its own. */
                        size_t slen = strlen(d + 1);

                        if (len > slen && name_equal(name + len - slen, slen, d + 1))
                                return true;
                } else if (name_equal(name, len, d)) {
                        return true;
                }
        }
        return false;
}
