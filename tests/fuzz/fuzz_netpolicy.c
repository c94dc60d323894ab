/* Fuzz target: a sandbox's network policy, cs_netpolicy_parse() in shared/netpolicy.c, which
 * checks NetworkSpec's strings from any client (the frontend, then the node agent again).
 *
 * Input: the first byte picks egress (its value mod 5: the four modes and one that is none);
 * the rest is lines, "d NAME" an allow_domains entry and anything else an allow_cidrs entry
 * (the whole line). No more entries than the caps allow plus one, so that the cap's refusal
 * is reached too.
 *
 * Beyond "no crash": a refusal is INVALID_ARGUMENT with a one-line message; an accepted policy
 * is canonical (parsing its own domains and its formatted CIDRs again gives the same policy),
 * each of its domains is allowed by it (a wildcard: a name one label below it, never the
 * suffix itself) and each CIDR contains its own network address and overlaps itself.
 *
 * Owns: this file. Touches nothing outside the process. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES (CS_NET_MAX_DOMAINS + CS_NET_MAX_CIDRS + 2)

static void check_canonical(const cs_netpolicy *p)
{
        char(*text)[CS_NET_CIDR_STRLEN + 1] = cs_xcalloc(p->n_cidrs + 1, sizeof(*text));
        const char **cidrs = cs_xcalloc(p->n_cidrs + 1, sizeof(*cidrs));
        cs_error *err = NULL;
        cs_netpolicy q;

        for (size_t i = 0; i < p->n_cidrs; i++) {
                cs_cidr_format(&p->cidrs[i], text[i], sizeof(text[i]));
                cidrs[i] = text[i];
        }
        if (cs_netpolicy_parse(p->egress, (const char *const *)p->domains, p->n_domains, cidrs,
                               p->n_cidrs, &q, &err) < 0) {
                fprintf(stderr, "an accepted policy is refused again: %s\n", err->msg);
                abort();
        }
        if (q.n_domains != p->n_domains || q.n_cidrs != p->n_cidrs)
                abort();
        for (size_t i = 0; i < q.n_domains; i++) {
                if (strcmp(q.domains[i], p->domains[i]) != 0)
                        abort();
        }
        for (size_t i = 0; i < q.n_cidrs; i++) {
                if (memcmp(&q.cidrs[i], &p->cidrs[i], sizeof(q.cidrs[i])) != 0)
                        abort();
        }
        cs_netpolicy_clear(&q);
        free(cidrs);
        free(text);
}

static void check_matches(const cs_netpolicy *p)
{
        for (size_t i = 0; i < p->n_domains; i++) {
                const char *d = p->domains[i];

                if (strncmp(d, "*.", 2) == 0) {
                        _cleanup_free_ char *below = cs_xasprintf("x%s", d + 1);

                        if (!cs_netpolicy_domain_allowed(p, below))
                                abort();
                } else if (!cs_netpolicy_domain_allowed(p, d)) {
                        abort();
                }
        }
        for (size_t i = 0; i < p->n_cidrs; i++) {
                if (!cs_cidr_contains(&p->cidrs[i], p->cidrs[i].family, p->cidrs[i].addr) ||
                    !cs_cidr_overlap(&p->cidrs[i], &p->cidrs[i]))
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *buf = NULL;
        const char *domains[MAX_LINES], *cidrs[MAX_LINES];
        size_t n_domains = 0, n_cidrs = 0;
        cs_error *err = NULL;
        cs_netpolicy p;
        cs_egress egress;
        char *line, *next;

        if (size == 0)
                return 0;
        egress = (cs_egress)(data[0] % 5);
        buf = cs_xmalloc(size);
        memcpy(buf, data + 1, size - 1);
        buf[size - 1] = '\0';
        for (line = buf; line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                if (n_domains + n_cidrs == MAX_LINES)
                        break;
                if (strncmp(line, "d ", 2) == 0)
                        domains[n_domains++] = line + 2;
                else
                        cidrs[n_cidrs++] = line;
        }
        if (cs_netpolicy_parse(egress, domains, n_domains, cidrs, n_cidrs, &p, &err) < 0) {
                if (!err || err->code != GRPC_STATUS_INVALID_ARGUMENT || !err->msg ||
                    strchr(err->msg, '\n'))
                        abort();
                cs_error_free(err);
                return 0;
        }
        if (p.egress != egress || ((n_domains || n_cidrs) && egress != CS_EGRESS_ALLOWLIST))
                abort();
        check_canonical(&p);
        check_matches(&p);
        cs_netpolicy_clear(&p);
        return 0;
}
