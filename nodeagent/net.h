/* Local mode's sandbox networking (docs/security.md, "Network"): for each sandbox whose policy
 * is ALLOWLIST or OPEN, a network namespace of its own joined to the host by a veth pair (an
 * address pair of the agent's --sandbox-subnet, a /30 per sandbox), masqueraded out of the
 * uplink, and the rules of one nftables table of the agent's (--nft-table, in the host's
 * namespace, where the sandbox's packets are seen: runsc's netstack writes them on a packet
 * socket, which the namespace's own netfilter never sees). A sandbox whose policy is NONE
 * gets none of this (runsc --network=none: loopback only).
 *
 * The table: every sandbox's packets go through a chain of its own (reached by a verdict map
 * on the host end's name), which drops the always-denied (the node's own addresses, which
 * only the input hook sees, link-local and metadata, the sandbox subnet, multicast and
 * reserved), accepts its allow_cidrs, drops the private ranges (RFC 1918, CGNAT), and accepts
 * the rest (OPEN) or the addresses its resolver answered (ALLOWLIST, a set with timeouts).
 * Inbound connections are dropped; the node accepts DNS only, on the sandbox's gateway
 * address. Named counters per sandbox count the IP bytes forwarded out and in (its usage) and
 * the packets dropped. They live in the kernel: a restarted agent, even after kill -9, finds
 * them and loses no byte; the table is removed once no networked sandbox is left (and by
 * `compute-nodeagent cleanup`), never while one runs, which would leave it unfiltered.
 *
 * The domain allowlist: the agent's resolver (dns_proxy.h) listens on each sandbox's gateway
 * address and adds the addresses of allowed answers to the sandbox's set. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dns_proxy.h"
#include "error.h"
#include "netpolicy.h"

typedef struct na_net_config {
        const char *subnet;       /* --sandbox-subnet, e.g. "10.77.0.0/16" */
        const char *uplink;       /* --egress-uplink; "": the interface of the default route */
        const char *table;        /* --nft-table */
        const char *upstream_dns; /* --upstream-dns, comma-separated; "": /etc/resolv.conf's */
        cs_egress egress_default; /* --egress-default (never UNSPECIFIED) */
} na_net_config;

typedef struct na_net na_net;

/* Checks the configuration (a pool that overlaps a host route is refused, naming it) and
 * readies the resolver. The table is made with the first networked sandbox. */
int na_net_open(const na_net_config *cfg, na_net **ret, cs_error **err);
void na_net_free(na_net *n);

/* How many sandboxes the pool holds (slots 0..n-1). */
uint32_t na_net_slots(const na_net *n);
cs_egress na_net_egress_default(const na_net *n);

typedef struct na_net_sandbox {
        const char *id;  /* the sandbox's UUID */
        const char *dir; /* its directory (the agent's, 0700): netns and resolv.conf go there */
        uint32_t slot;
        const cs_netpolicy *policy; /* ALLOWLIST or OPEN */
} na_net_sandbox;

/* The namespace file and the resolv.conf a sandbox's bundle uses (malloc'd). */
char *na_net_netns_path(const char *dir);
char *na_net_resolv_conf_path(const char *dir);

/* Makes the sandbox's network: namespace, veth, rules, counters, resolver, resolv.conf. On
 * failure nothing of it is left. */
int na_net_up(na_net *n, const na_net_sandbox *s, cs_error **err);
/* A restarted agent: the sandbox's rules and counters again (counters that exist are kept,
 * with their values) and its resolver. */
int na_net_restore(na_net *n, const na_net_sandbox *s, cs_error **err);
/* Removes all of it; what is already gone is fine. */
void na_net_down(na_net *n, const na_net_sandbox *s);
/* Removes the table if no sandbox is left in it (its set of links is empty). */
void na_net_drop_if_unused(na_net *n);

/* The sandbox's counters: IP bytes received from and sent to outside the node, packets
 * dropped by its policy. */
typedef struct na_net_counters {
        uint64_t rx_bytes, tx_bytes, dropped_packets;
} na_net_counters;
int na_net_read(na_net *n, const char *id, na_net_counters *ret, cs_error **err);
/* The resolver's counters over all sandboxes, since the agent started (for /metrics). */
void na_net_dns_stats(na_net *n, dns_proxy_stats *ret);

/* `compute-nodeagent cleanup`: the table, if it exists (*ret_removed tells). */
int na_net_table_remove(const char *table, bool *ret_removed, cs_error **err);
/* The host end of sandbox id's veth (buf of 16 bytes). */
void na_net_link_name(const char *id, char buf[16]);
