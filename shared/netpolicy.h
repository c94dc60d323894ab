/* A sandbox's network policy (compute.v1.NetworkSpec): what it may reach outside the node.
 * One representation and one validator for the frontend (which checks a CreateSandbox before
 * any scheduling) and the node agent (which checks again and enforces it, nodeagent/net*.c).
 * No protobuf here: the callers convert. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Same numbers as compute.v1.EgressMode. */
typedef enum cs_egress {
        CS_EGRESS_UNSPECIFIED = 0, /* the node's default (--egress-default) */
        CS_EGRESS_NONE = 1,        /* no network at all (loopback only) */
        CS_EGRESS_ALLOWLIST = 2,   /* allow_domains (through the node's resolver) and allow_cidrs */
        CS_EGRESS_OPEN = 3,        /* anything outside the always-denied ranges */
} cs_egress;

/* The API's caps (docs/api.md, "Network"). */
#define CS_NET_MAX_DOMAINS 256
#define CS_NET_MAX_CIDRS   256
#define CS_NET_DOMAIN_MAX  253 /* bytes of a name, without a trailing dot */
#define CS_NET_CIDR_STRLEN 49  /* "ffff:...:ffff/128" */

typedef struct cs_cidr {
        int family;       /* AF_INET or AF_INET6 */
        uint8_t addr[16]; /* network byte order; host bits zero */
        uint8_t prefix;   /* 0..32 or 0..128 */
} cs_cidr;

typedef struct cs_netpolicy {
        cs_egress egress;
        char **domains; /* lower case, no trailing dot; "*.example.com" for a wildcard */
        size_t n_domains;
        cs_cidr *cidrs;
        size_t n_cidrs;
} cs_netpolicy;

/* Parses and checks one policy from the API's strings: caps, names (exact, or one leading
 * "*." label; letters, digits, '-', labels of 1..63 bytes, no leading or trailing '-'),
 * CIDRs (v4 or v6, a prefix in range, host bits zero: "10.0.0.1/8" is refused so that no
 * one believes it means one host; a bare address is a /32 or /128). Lists given with egress
 * other than ALLOWLIST are refused (they would do nothing). INVALID_ARGUMENT naming the entry
 * (by index and value, cut to 64 bytes) on the first fault. Duplicates are kept once.
 * *ret is filled (cs_netpolicy_clear frees it). */
int cs_netpolicy_parse(cs_egress egress, const char *const *domains, size_t n_domains,
                       const char *const *cidrs, size_t n_cidrs, cs_netpolicy *ret, cs_error **err);
void cs_netpolicy_clear(cs_netpolicy *p);
/* A deep copy. */
void cs_netpolicy_copy(cs_netpolicy *dst, const cs_netpolicy *src);

/* "none", "allowlist", "open" ("" for UNSPECIFIED); and back (-1 if unknown). */
const char *cs_egress_name(cs_egress e);
int cs_egress_from_name(const char *name);

/* Text of a CIDR: "10.0.0.0/8", "2001:db8::/32". buf of CS_NET_CIDR_STRLEN + 1 bytes. */
void cs_cidr_format(const cs_cidr *c, char *buf, size_t len);
/* Parses one CIDR (or a bare address) as cs_netpolicy_parse does; -1 with a reason in
 * *why (a static string) when it is not one. */
int cs_cidr_parse(const char *s, cs_cidr *ret, const char **why);
/* Whether address addr (of family) is inside c. */
bool cs_cidr_contains(const cs_cidr *c, int family, const void *addr);
/* Whether a and b share any address. */
bool cs_cidr_overlap(const cs_cidr *a, const cs_cidr *b);

/* Whether name (lower case, no trailing dot) is allowed by the policy's domains: an exact
 * entry, or "*.suffix" matching any name with at least one more label before ".suffix"
 * (not "suffix" itself). Upper case and one trailing dot in name are tolerated too. */
bool cs_netpolicy_domain_allowed(const cs_netpolicy *p, const char *name);
