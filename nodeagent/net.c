/* Local mode's sandbox networking: the pool, the nftables table and each sandbox's pieces
 * (net.h). nftables through libnftables: each change is one batch of commands, applied by
 * the kernel as one transaction (all or nothing); counters are read back as its JSON. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <net/if.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dns_proxy.h"
#include "log.h"
#include "netlink.h"
#include "util.h"

/* The host end of a sandbox's veth: this prefix and 12 hex digits of its id. */
#define NET_IF_PREFIX "csb"
/* The sandbox's end, in its namespace. */
#define NET_INNER_IF "eth0"
/* A /30 per sandbox: .1 the host end (its gateway and resolver), .2 the sandbox. */
#define NET_SLOT_BITS 2

/* Always denied, whatever the policy (net.h): IPv4 ranges no sandbox may reach. The sandbox
 * subnet is added to them. */
static const char *const always_denied4[] = {
        "0.0.0.0/8",      /* "this network" */
        "127.0.0.0/8",    /* loopback: never forwarded, listed for clarity */
        "169.254.0.0/16", /* link-local and the clouds' metadata (169.254.169.254) */
        "224.0.0.0/3",    /* multicast, reserved, broadcast */
};
/* Denied unless an allow_cidrs entry names them. */
static const char *const private4[] = {
        "10.0.0.0/8",    "172.16.0.0/12", "192.168.0.0/16",
        "100.64.0.0/10", /* carrier-grade NAT (RFC 6598): a provider's own network */
        "192.0.0.0/24",  /* IETF protocol assignments */
        "198.18.0.0/15", /* benchmarking */
};

struct na_net {
        na_net_config cfg;
        char *table, *uplink;
        cs_cidr pool;
        uint32_t slots;
        pthread_mutex_t lock; /* the nft context, table_made */
        struct nft_ctx *nft;
        bool table_made; /* the table's base objects exist (made by this agent or found) */
        dns_proxy *dns;
};

/* --- names and addresses --------------------------------------------------------------- */

/* "s" and the id's 32 hex digits: the name of its chains, sets and counters. */
static void obj_name(const char *id, char buf[34])
{
        size_t n = 0;

        buf[n++] = 's';
        for (const char *p = id; *p && n < 33; p++)
                if (*p != '-')
                        buf[n++] = *p;
        buf[n] = '\0';
}

static void host_if_name(const char *id, char buf[16])
{
        size_t n = strlen(NET_IF_PREFIX);

        memcpy(buf, NET_IF_PREFIX, n);
        for (const char *p = id; *p && n < 15; p++)
                if (*p != '-')
                        buf[n++] = *p;
        buf[n] = '\0';
}

static uint32_t slot_addr(const na_net *n, uint32_t slot, uint32_t host)
{
        uint32_t base;

        memcpy(&base, n->pool.addr, 4);
        return htonl(ntohl(base) + (slot << NET_SLOT_BITS) + host);
}

static void addr_text(uint32_t addr, char buf[INET_ADDRSTRLEN])
{
        inet_ntop(AF_INET, &addr, buf, INET_ADDRSTRLEN);
}

char *na_net_netns_path(const char *dir)
{
        return cs_xasprintf("%s/netns", dir);
}

char *na_net_resolv_conf_path(const char *dir)
{
        return cs_xasprintf("%s/resolv.conf", dir);
}

/* --- nftables -------------------------------------------------------------------------- */

/* Runs a batch (one transaction). nft's own message, which names the failing command, is
 * the error. Called with n->lock held, or on a context of the caller's. */
static int nft_batch(struct nft_ctx *nft, const char *cmds, char **ret_out, cs_error **err)
{
        const char *errs, *out;
        int r;

        nft_ctx_buffer_output(nft);
        nft_ctx_buffer_error(nft);
        r = nft_run_cmd_from_buffer(nft, cmds);
        out = nft_ctx_get_output_buffer(nft);
        errs = nft_ctx_get_error_buffer(nft);
        if (r != 0) {
                size_t len = errs ? strcspn(errs, "\n") : 0;
                cs_error_set(err, GRPC_STATUS_INTERNAL, "nftables: %.*s",
                             (int)(len > 200 ? 200 : len), len ? errs : "the batch was refused");
        } else if (ret_out) {
                *ret_out = cs_xstrdup(out ? out : "");
        }
        nft_ctx_unbuffer_output(nft);
        nft_ctx_unbuffer_error(nft);
        return r != 0 ? -1 : 0;
}

/* Appends a formatted command to *buf. */
__attribute__((format(printf, 2, 3))) static void cmd(char **buf, const char *fmt, ...)
{
        _cleanup_free_ char *line = NULL;
        char *joined;
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&line, fmt, ap) < 0)
                abort();
        va_end(ap);
        joined = cs_xasprintf("%s%s\n", *buf ? *buf : "", line);
        free(*buf);
        *buf = joined;
}

static void list_elements(char **buf, const char *const *items, size_t n, const char *extra)
{
        _cleanup_free_ char *list = cs_xstrdup("");

        for (size_t i = 0; i < n; i++) {
                char *next = cs_xasprintf("%s%s%s", list, i ? ", " : "", items[i]);
                free(list);
                list = next;
        }
        if (extra) {
                char *next = cs_xasprintf("%s%s%s", list, n ? ", " : "", extra);
                free(list);
                list = next;
        }
        *buf = TAKE_PTR(list);
}

/* The table's base: sets, maps and the hooks that send a sandbox's packets to its chains.
 * "add" leaves what exists as it is (a restarted agent's counters and elements stay). */
static int table_ensure_locked(na_net *n, cs_error **err)
{
        _cleanup_free_ char *cmds = NULL, *denied = NULL, *priv = NULL;
        char pool[CS_NET_CIDR_STRLEN + 1];
        const char *t = n->table;

        if (n->table_made)
                return 0;
        cs_cidr_format(&n->pool, pool, sizeof(pool));
        list_elements(&denied, always_denied4, ARRAY_SIZE(always_denied4), pool);
        list_elements(&priv, private4, ARRAY_SIZE(private4), NULL);
        cmd(&cmds, "add table inet %s { comment \"compute-nodeagent: sandbox egress\"; }", t);
        cmd(&cmds, "add set inet %s ifaces { type ifname; }", t);
        cmd(&cmds, "add map inet %s out_map { type ifname : verdict; }", t);
        cmd(&cmds, "add map inet %s in_map { type ifname : verdict; }", t);
        cmd(&cmds, "add map inet %s local_map { type ifname : verdict; }", t);
        cmd(&cmds, "add set inet %s denied4 { type ipv4_addr; flags interval; }", t);
        cmd(&cmds, "flush set inet %s denied4", t);
        cmd(&cmds, "add element inet %s denied4 { %s }", t, denied);
        cmd(&cmds, "add set inet %s private4 { type ipv4_addr; flags interval; }", t);
        cmd(&cmds, "flush set inet %s private4", t);
        cmd(&cmds, "add element inet %s private4 { %s }", t, priv);
        /* Before the usual filter priority: a sandbox's verdict comes first. */
        cmd(&cmds,
            "add chain inet %s forward { type filter hook forward priority filter - 10; policy "
            "accept; }",
            t);
        cmd(&cmds,
            "add chain inet %s input { type filter hook input priority filter - 10; policy "
            "accept; }",
            t);
        cmd(&cmds,
            "add chain inet %s postrouting { type nat hook postrouting priority srcnat; policy "
            "accept; }",
            t);
        cmd(&cmds, "flush chain inet %s forward", t);
        cmd(&cmds, "flush chain inet %s input", t);
        cmd(&cmds, "flush chain inet %s postrouting", t);
        /* A sandbox link with no entry in a map (one being set up or taken down): dropped. */
        cmd(&cmds, "add rule inet %s forward iifname @ifaces iifname vmap @out_map", t);
        cmd(&cmds, "add rule inet %s forward iifname @ifaces drop", t);
        cmd(&cmds, "add rule inet %s forward oifname @ifaces oifname vmap @in_map", t);
        cmd(&cmds, "add rule inet %s forward oifname @ifaces drop", t);
        cmd(&cmds, "add rule inet %s input iifname @ifaces iifname vmap @local_map", t);
        cmd(&cmds, "add rule inet %s input iifname @ifaces drop", t);
        cmd(&cmds, "add rule inet %s postrouting iifname @ifaces oifname \"%s\" masquerade", t,
            n->uplink);
        if (nft_batch(n->nft, cmds, NULL, err) < 0)
                return cs_error_prefix(err, "cannot make the nftables table %s", t);
        n->table_made = true;
        return 0;
}

/* Whether an allow_cidrs entry lies inside one of the private ranges (it names it). */
static bool cidr_is_private(const cs_cidr *c)
{
        for (size_t i = 0; i < ARRAY_SIZE(private4); i++) {
                const char *why;
                cs_cidr p;
                if (cs_cidr_parse(private4[i], &p, &why) < 0)
                        abort(); /* a constant */
                if (c->prefix >= p.prefix && cs_cidr_contains(&p, AF_INET, c->addr))
                        return true;
        }
        return false;
}

/* One sandbox's sets, counters and chains, and its entries in the maps. */
static int sandbox_rules_locked(na_net *n, const na_net_sandbox *s, cs_error **err)
{
        _cleanup_free_ char *cmds = NULL;
        char o[34], ifn[16], host[INET_ADDRSTRLEN], inner[INET_ADDRSTRLEN];
        const char *t = n->table;
        bool open = s->policy->egress == CS_EGRESS_OPEN;

        obj_name(s->id, o);
        host_if_name(s->id, ifn);
        addr_text(slot_addr(n, s->slot, 1), host);
        addr_text(slot_addr(n, s->slot, 2), inner);
        cmd(&cmds, "add counter inet %s %s_tx", t, o);
        cmd(&cmds, "add counter inet %s %s_rx", t, o);
        cmd(&cmds, "add counter inet %s %s_drop", t, o);
        /* allow_cidrs in two sets: an entry inside a private range names it and opens it
         * (checked before the private ranges' drop); any other, 0.0.0.0/0 too, opens
         * public addresses only (checked after). */
        cmd(&cmds, "add set inet %s %s_cidr4 { type ipv4_addr; flags interval; }", t, o);
        cmd(&cmds, "flush set inet %s %s_cidr4", t, o);
        cmd(&cmds, "add set inet %s %s_priv4 { type ipv4_addr; flags interval; }", t, o);
        cmd(&cmds, "flush set inet %s %s_priv4", t, o);
        for (size_t i = 0; i < s->policy->n_cidrs; i++) {
                char c[CS_NET_CIDR_STRLEN + 1];
                if (s->policy->cidrs[i].family != AF_INET)
                        continue; /* a sandbox has IPv4 only in this version */
                cs_cidr_format(&s->policy->cidrs[i], c, sizeof(c));
                cmd(&cmds, "add element inet %s %s_%s { %s }", t, o,
                    cidr_is_private(&s->policy->cidrs[i]) ? "priv4" : "cidr4", c);
        }
        cmd(&cmds, "add set inet %s %s_dns4 { type ipv4_addr; flags timeout; }", t, o);
        cmd(&cmds, "add chain inet %s %s_out", t, o);
        cmd(&cmds, "flush chain inet %s %s_out", t, o);
        cmd(&cmds, "add rule inet %s %s_out meta nfproto != ipv4 counter name %s_drop drop", t, o,
            o);
        cmd(&cmds, "add rule inet %s %s_out ip saddr != %s counter name %s_drop drop", t, o, inner,
            o);
        cmd(&cmds, "add rule inet %s %s_out oifname != \"%s\" counter name %s_drop drop", t, o,
            n->uplink, o);
        cmd(&cmds, "add rule inet %s %s_out ip daddr @denied4 counter name %s_drop drop", t, o, o);
        cmd(&cmds, "add rule inet %s %s_out ip daddr @%s_priv4 counter name %s_tx accept", t, o, o,
            o);
        cmd(&cmds, "add rule inet %s %s_out ip daddr @private4 counter name %s_drop drop", t, o, o);
        cmd(&cmds, "add rule inet %s %s_out ip daddr @%s_cidr4 counter name %s_tx accept", t, o, o,
            o);
        if (open)
                cmd(&cmds, "add rule inet %s %s_out counter name %s_tx accept", t, o, o);
        else
                cmd(&cmds, "add rule inet %s %s_out ip daddr @%s_dns4 counter name %s_tx accept", t,
                    o, o, o);
        cmd(&cmds, "add rule inet %s %s_out counter name %s_drop drop", t, o, o);
        cmd(&cmds, "add chain inet %s %s_in", t, o);
        cmd(&cmds, "flush chain inet %s %s_in", t, o);
        cmd(&cmds,
            "add rule inet %s %s_in iifname \"%s\" ct state established,related counter name "
            "%s_rx accept",
            t, o, n->uplink, o);
        cmd(&cmds, "add rule inet %s %s_in drop", t, o);
        cmd(&cmds, "add chain inet %s %s_local", t, o);
        cmd(&cmds, "flush chain inet %s %s_local", t, o);
        cmd(&cmds,
            "add rule inet %s %s_local ip daddr %s meta l4proto { udp, tcp } th dport 53 accept", t,
            o, host);
        cmd(&cmds, "add rule inet %s %s_local counter name %s_drop drop", t, o, o);
        cmd(&cmds, "add element inet %s out_map { \"%s\" : jump %s_out }", t, ifn, o);
        cmd(&cmds, "add element inet %s in_map { \"%s\" : jump %s_in }", t, ifn, o);
        cmd(&cmds, "add element inet %s local_map { \"%s\" : jump %s_local }", t, ifn, o);
        cmd(&cmds, "add element inet %s ifaces { \"%s\" }", t, ifn);
        if (nft_batch(n->nft, cmds, NULL, err) < 0)
                return cs_error_prefix(err, "cannot add the sandbox's nftables rules");
        return 0;
}

/* Runs one command whose failure (an object already gone) does not matter. */
static void nft_try(na_net *n, const char *c)
{
        cs_error *ignored = NULL;

        nft_batch(n->nft, c, NULL, &ignored);
        cs_error_free(ignored);
}

/* Removes one sandbox's objects: its map entries first (its link's packets then meet the
 * base chains' drop), then chains, sets and counters. A command each: a part already gone
 * must not keep the rest. */
static void sandbox_rules_remove_locked(na_net *n, const char *id)
{
        static const char *const maps[] = { "out_map", "in_map", "local_map", "ifaces" };
        /* What sandbox_rules_locked makes, by kind and name suffix. */
        static const struct {
                const char *kind, *suffix;
        } objs[] = { { "chain", "out" },  { "chain", "in" },   { "chain", "local" },
                     { "set", "cidr4" },  { "set", "priv4" },  { "set", "dns4" },
                     { "counter", "tx" }, { "counter", "rx" }, { "counter", "drop" } };
        char o[34], ifn[16];

        obj_name(id, o);
        host_if_name(id, ifn);
        for (size_t i = 0; i < ARRAY_SIZE(maps); i++) {
                _cleanup_free_ char *c = cs_xasprintf("delete element inet %s %s { \"%s\" }",
                                                      n->table, maps[i], ifn);
                nft_try(n, c);
        }
        for (size_t i = 0; i < ARRAY_SIZE(objs); i++) {
                _cleanup_free_ char *c = cs_xasprintf("delete %s inet %s %s_%s", objs[i].kind,
                                                      n->table, o, objs[i].suffix);
                nft_try(n, c);
        }
}

void na_net_link_name(const char *id, char buf[16])
{
        host_if_name(id, buf);
}

int na_net_table_remove(const char *table, bool *ret_removed, cs_error **err)
{
        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        _cleanup_free_ char *c = cs_xasprintf("delete table inet %s", table);
        _cleanup_free_ char *probe = cs_xasprintf("list table inet %s", table);
        cs_error *absent = NULL;
        int r = 0;

        if (!nft)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "nftables: no context");
        *ret_removed = false;
        if (nft_batch(nft, probe, NULL, &absent) == 0) {
                r = nft_batch(nft, c, NULL, err);
                *ret_removed = r == 0;
        }
        cs_error_free(absent);
        nft_ctx_free(nft);
        return r;
}

/* --- the resolver's answers ------------------------------------------------------------ */

static int dns_allow(void *data, const char *key, const char *name, const dns_addr *addrs,
                     size_t n_addrs)
{
        na_net *n = data;
        _cleanup_free_ char *cmds = NULL;
        char o[34], a[INET_ADDRSTRLEN];
        cs_error *err = NULL;
        int r;

        obj_name(key, o);
        /* Add, then replace with the answer's timeout: an element's timeout is set when it is
         * made, and a new answer must extend it. One transaction for the whole answer. */
        for (size_t i = 0; i < n_addrs; i++) {
                if (addrs[i].family != AF_INET)
                        continue; /* a sandbox has IPv4 only in this version */
                inet_ntop(AF_INET, addrs[i].addr, a, sizeof(a));
                cmd(&cmds, "add element inet %s %s_dns4 { %s }", n->table, o, a);
                cmd(&cmds, "delete element inet %s %s_dns4 { %s }", n->table, o, a);
                cmd(&cmds, "add element inet %s %s_dns4 { %s timeout %us }", n->table, o, a,
                    addrs[i].ttl_s);
        }
        if (!cmds)
                return 0;
        pthread_mutex_lock(&n->lock);
        r = nft_batch(n->nft, cmds, NULL, &err);
        pthread_mutex_unlock(&n->lock);
        if (r < 0) {
                log_warn("sandbox %s: cannot allow the addresses of %s: %s", key, name, err->msg);
                cs_error_free(err);
        }
        return r;
}

/* --- the manager ----------------------------------------------------------------------- */

/* --upstream-dns: "ADDR[,ADDR...]", or the host's resolv.conf. */
static int upstreams_parse(const char *spec, struct sockaddr_storage *ret, size_t max,
                           size_t *ret_n, cs_error **err)
{
        _cleanup_free_ char *copy = NULL;
        char *save = NULL;
        size_t n = 0;

        if (!spec || !spec[0])
                return dns_read_resolv_conf("/etc/resolv.conf", ret, max, ret_n, err);
        copy = cs_xstrdup(spec);
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                struct sockaddr_in *v4 = (struct sockaddr_in *)&ret[n];
                struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ret[n];
                if (n == max)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "--upstream-dns: more than %zu resolvers", max);
                memset(&ret[n], 0, sizeof(ret[n]));
                if (inet_pton(AF_INET, tok, &v4->sin_addr) == 1) {
                        v4->sin_family = AF_INET;
                        v4->sin_port = htons(53);
                } else if (inet_pton(AF_INET6, tok, &v6->sin6_addr) == 1) {
                        v6->sin6_family = AF_INET6;
                        v6->sin6_port = htons(53);
                } else {
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "--upstream-dns: '%s' is not an IP address", tok);
                }
                n++;
        }
        *ret_n = n;
        return 0;
}

static void na_net_freep(na_net **n)
{
        na_net_free(*n);
}

int na_net_open(const na_net_config *cfg, na_net **ret, cs_error **err)
{
        _cleanup_(na_net_freep) na_net *n = NULL;
        struct sockaddr_storage ups[8];
        size_t n_ups = 0;
        const char *why = NULL;
        char uplink[IF_NAMESIZE + 1] = "", route[96];
        bool overlap;

        n = cs_xcalloc(1, sizeof(*n));
        pthread_mutex_init(&n->lock, NULL);
        n->cfg = *cfg;
        n->table = cs_xstrdup(cfg->table);
        if (cs_cidr_parse(cfg->subnet, &n->pool, &why) < 0 || n->pool.family != AF_INET)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "--sandbox-subnet %s: %s",
                                    cfg->subnet, why ? why : "an IPv4 network is needed");
        if (n->pool.prefix > 30 - 1 || n->pool.prefix < 8)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--sandbox-subnet %s: a /8 to a /29 is needed", cfg->subnet);
        n->slots = 1u << (32 - n->pool.prefix - NET_SLOT_BITS);
        if (nl_route_overlap(&n->pool, NET_IF_PREFIX, &overlap, route, sizeof(route), err) < 0)
                return -1;
        if (overlap)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--sandbox-subnet %s overlaps the host's route %s: choose "
                                    "another range",
                                    cfg->subnet, route);
        if (cfg->uplink && cfg->uplink[0])
                snprintf(uplink, sizeof(uplink), "%s", cfg->uplink);
        else if (nl_default_route_if(uplink, sizeof(uplink), err) < 0)
                return cs_error_prefix(err, "--egress-uplink (the default route's interface)");
        if (!nl_link_exists(uplink))
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "--egress-uplink %s: no such interface", uplink);
        n->uplink = cs_xstrdup(uplink);
        if (upstreams_parse(cfg->upstream_dns, ups, ARRAY_SIZE(ups), &n_ups, err) < 0)
                return -1;
        if (!n_ups)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "no upstream resolver: set --upstream-dns");
        n->nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!n->nft)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "nftables: no context");
        nft_ctx_output_set_flags(n->nft, NFT_CTX_OUTPUT_JSON);
        if (dns_proxy_new(ups, n_ups, NULL, dns_allow, n, &n->dns, err) < 0)
                return -1;
        *ret = TAKE_PTR(n);
        return 0;
}

void na_net_dns_stats(na_net *n, dns_proxy_stats *ret)
{
        dns_proxy_get_stats(n->dns, ret);
}

void na_net_free(na_net *n)
{
        if (!n)
                return;
        dns_proxy_free(n->dns);
        if (n->nft)
                nft_ctx_free(n->nft);
        pthread_mutex_destroy(&n->lock);
        free(n->table);
        free(n->uplink);
        free(n);
}

uint32_t na_net_slots(const na_net *n)
{
        return n->slots;
}

cs_egress na_net_egress_default(const na_net *n)
{
        return n->cfg.egress_default;
}

static int resolv_conf_write(const char *dir, uint32_t gateway, cs_error **err)
{
        _cleanup_free_ char *path = na_net_resolv_conf_path(dir);
        _cleanup_free_ char *text = NULL;
        char a[INET_ADDRSTRLEN];

        addr_text(gateway, a);
        text = cs_xasprintf("# the node agent's resolver (docs/api.md, \"Network\")\n"
                            "nameserver %s\noptions timeout:2 attempts:2\n",
                            a);
        _cleanup_close_ int fd =
                open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);

        if (fd < 0 || cs_write_all(fd, text, strlen(text)) < 0)
                return cs_error_errno(err, errno, "cannot write the sandbox's resolv.conf");
        return 0;
}

/* The sandbox's resolver, on its gateway address and bound to its link. */
static int dns_listen(na_net *n, const na_net_sandbox *s, cs_error **err)
{
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(53) };
        char ifn[16];

        host_if_name(s->id, ifn);
        sin.sin_addr.s_addr = slot_addr(n, s->slot, 1);
        return dns_proxy_add(n->dns, s->id, (struct sockaddr *)&sin, sizeof(sin), ifn, s->policy,
                             err);
}

int na_net_up(na_net *n, const na_net_sandbox *s, cs_error **err)
{
        _cleanup_free_ char *ns = na_net_netns_path(s->dir);
        char ifn[16];
        nl_veth v;
        int r;

        if (s->slot >= n->slots)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "the sandbox subnet is full");
        host_if_name(s->id, ifn);
        v = (nl_veth){ .host_if = ifn,
                       .inner_if = NET_INNER_IF,
                       .netns = ns,
                       .host_addr = slot_addr(n, s->slot, 1),
                       .inner_addr = slot_addr(n, s->slot, 2),
                       .prefix = 32 - NET_SLOT_BITS };
        pthread_mutex_lock(&n->lock);
        r = table_ensure_locked(n, err);
        if (r == 0)
                r = sandbox_rules_locked(n, s, err);
        pthread_mutex_unlock(&n->lock);
        if (r < 0)
                goto fail;
        /* The rules first: the link is never up without them. */
        nl_netns_remove(ns, NULL);
        if (nl_netns_create(ns, err) < 0 || nl_veth_create(&v, err) < 0 ||
            nl_forwarding_on(n->uplink, err) < 0 ||
            resolv_conf_write(s->dir, v.host_addr, err) < 0 || dns_listen(n, s, err) < 0)
                goto fail;
        return 0;
fail:
        cs_error_prefix(err, "sandbox network");
        na_net_down(n, s);
        return -1;
}

int na_net_restore(na_net *n, const na_net_sandbox *s, cs_error **err)
{
        char ifn[16];
        int r;

        host_if_name(s->id, ifn);
        if (!nl_link_exists(ifn))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "its link %s is gone", ifn);
        pthread_mutex_lock(&n->lock);
        r = table_ensure_locked(n, err);
        if (r == 0)
                r = sandbox_rules_locked(n, s, err);
        pthread_mutex_unlock(&n->lock);
        if (r < 0)
                return -1;
        return dns_listen(n, s, err);
}

void na_net_down(na_net *n, const na_net_sandbox *s)
{
        _cleanup_free_ char *ns = na_net_netns_path(s->dir);
        _cleanup_free_ char *rc = na_net_resolv_conf_path(s->dir);
        char ifn[16];
        cs_error *err = NULL;

        dns_proxy_remove(n->dns, s->id);
        host_if_name(s->id, ifn);
        if (nl_link_delete(ifn, &err) < 0) {
                log_warn("sandbox %s: %s", s->id, err->msg);
                cs_error_freep(&err);
        }
        if (nl_netns_remove(ns, &err) < 0) {
                log_warn("sandbox %s: %s", s->id, err->msg);
                cs_error_freep(&err);
        }
        unlink(rc);
        pthread_mutex_lock(&n->lock);
        sandbox_rules_remove_locked(n, s->id); /* a previous life's table too */
        pthread_mutex_unlock(&n->lock);
}

void na_net_drop_if_unused(na_net *n)
{
        _cleanup_free_ char *list = cs_xasprintf("list set inet %s ifaces", n->table);
        _cleanup_free_ char *del = cs_xasprintf("delete table inet %s", n->table);
        _cleanup_free_ char *out = NULL;
        cs_error *err = NULL;
        json_t *doc;
        bool empty = false;

        pthread_mutex_lock(&n->lock);
        if (nft_batch(n->nft, list, &out, &err) < 0) {
                cs_error_free(err); /* no table */
                n->table_made = false;
                pthread_mutex_unlock(&n->lock);
                return;
        }
        doc = json_loads(out, 0, NULL);
        {
                json_t *items = json_object_get(doc, "nftables"), *item;
                size_t i;
                json_array_foreach(items, i, item)
                {
                        json_t *set = json_object_get(item, "set");
                        if (set)
                                empty = json_array_size(json_object_get(set, "elem")) == 0;
                }
        }
        json_decref(doc);
        if (empty && nft_batch(n->nft, del, NULL, &err) == 0)
                n->table_made = false;
        cs_error_free(err);
        pthread_mutex_unlock(&n->lock);
}

/* Reads the three counters of a sandbox from nft's JSON listing. */
int na_net_read(na_net *n, const char *id, na_net_counters *ret, cs_error **err)
{
        _cleanup_free_ char *cmds = NULL, *out = NULL;
        char o[34];
        json_t *doc, *items, *item;
        size_t i;
        int r;

        *ret = (na_net_counters){ 0 };
        obj_name(id, o);
        cmd(&cmds, "list counter inet %s %s_tx", n->table, o);
        cmd(&cmds, "list counter inet %s %s_rx", n->table, o);
        cmd(&cmds, "list counter inet %s %s_drop", n->table, o);
        pthread_mutex_lock(&n->lock);
        r = nft_batch(n->nft, cmds, &out, err);
        pthread_mutex_unlock(&n->lock);
        if (r < 0)
                return -1;
        /* One JSON document per command, one after the other. */
        for (const char *p = out; p && *p;) {
                json_error_t jerr;
                size_t used;
                doc = json_loads(p, JSON_DISABLE_EOF_CHECK, &jerr);
                if (!doc)
                        break;
                used = (size_t)jerr.position;
                items = json_object_get(doc, "nftables");
                json_array_foreach(items, i, item)
                {
                        json_t *c = json_object_get(item, "counter");
                        const char *name = json_string_value(json_object_get(c, "name"));
                        uint64_t bytes = (uint64_t)json_integer_value(json_object_get(c, "bytes"));
                        uint64_t packets =
                                (uint64_t)json_integer_value(json_object_get(c, "packets"));
                        size_t ol = strlen(o);
                        if (!name || strncmp(name, o, ol) != 0)
                                continue;
                        if (strcmp(name + ol, "_tx") == 0)
                                ret->tx_bytes = bytes;
                        else if (strcmp(name + ol, "_rx") == 0)
                                ret->rx_bytes = bytes;
                        else if (strcmp(name + ol, "_drop") == 0)
                                ret->dropped_packets = packets;
                }
                json_decref(doc);
                if (!used)
                        break;
                p += used;
                p += strspn(p, " \t\r\n");
        }
        return 0;
}
