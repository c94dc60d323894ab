/* The kernel's network objects a sandbox's network is made of, through rtnetlink (libmnl):
 * a network namespace of its own (a file the namespace is bind-mounted on, as `ip netns`
 * does), a veth pair from the host into it, IPv4 addresses and routes, and the host's routes
 * for the checks of the sandbox subnet. No shelling out to ip(8).
 *
 * The calling thread enters a sandbox's namespace for a moment (setns) and always comes
 * back; nothing else of the process changes namespace. Needs CAP_NET_ADMIN and CAP_SYS_ADMIN
 * (the bind mount). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "netpolicy.h"

/* Makes a new network namespace and binds it on path (created as an empty file). In it: lo
 * up and IPv6 off (a sandbox has IPv4 only in this version). */
int nl_netns_create(const char *path, cs_error **err);
/* Unbinds and unlinks a namespace file; absent is fine. The namespace ends with its last
 * process. */
int nl_netns_remove(const char *path, cs_error **err);

typedef struct nl_veth {
        const char *host_if;  /* the host end's name (at most 15 bytes) */
        const char *inner_if; /* its peer's name in the namespace, e.g. "eth0" */
        const char *netns;    /* the namespace file (nl_netns_create) */
        uint32_t host_addr;   /* network order: the host end's address, the sandbox's gateway */
        uint32_t inner_addr;  /* network order: the sandbox's address */
        uint8_t prefix;       /* of both addresses (a /30 per sandbox) */
} nl_veth;

/* Creates the pair, addresses both ends, brings them up, routes the namespace's default via
 * the host end, turns forwarding on for the host end alone and IPv6 off on it. EEXIST (a
 * pair left by a start that failed half-way) is removed and made again. */
int nl_veth_create(const nl_veth *v, cs_error **err);
/* Deletes a link (its veth peer goes with it); absent is fine. */
int nl_link_delete(const char *ifname, cs_error **err);
/* Whether the link exists. */
bool nl_link_exists(const char *ifname);

/* The interface of the host's IPv4 default route (the lowest metric); NOT_FOUND without one. */
int nl_default_route_if(char *buf, size_t len, cs_error **err);
/* The first IPv4 route of the host (main table) whose destination shares an address with
 * pool, other than a default route and routes through links named with skip_prefix (the
 * agent's own veths): its text in desc ("10.77.0.0/24 dev eth1"). *ret false if none. */
int nl_route_overlap(const cs_cidr *pool, const char *skip_prefix, bool *ret, char *desc,
                     size_t desc_len, cs_error **err);
/* Writes "1" to /proc/sys/net/ipv4/conf/<ifname>/forwarding (the host namespace's). */
int nl_forwarding_on(const char *ifname, cs_error **err);
