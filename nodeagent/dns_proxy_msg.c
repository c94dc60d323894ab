/* The DNS messages of the sandboxes' resolver: see dns_proxy_msg.h. ldns reads and writes every
 * message; this file decides. Owns nothing past a call: each ldns packet made here is freed
 * before the call returns. */
#include "dns_proxy_msg.h"

#include <string.h>
#include <sys/socket.h>

#include "util.h"

/* RFC 6891's extended rcode for an EDNS version the server does not speak. */
#define DNS_RCODE_BADVERS 16

static void pkt_freep(ldns_pkt **p)
{
        ldns_pkt_free(*p);
}
#define _cleanup_pkt_ _cleanup_(pkt_freep)

static void buffer_freep(ldns_buffer **b)
{
        if (*b)
                ldns_buffer_free(*b);
}

/* Whether wire[0..len) parses record by record with at most one TSIG record. ldns 1.8.3's
 * ldns_wire2pkt keeps the last TSIG of the additional section and loses the ones before without
 * freeing them (ldns_pkt_set_tsig): a leak per message that a sender could repeat for ever. */
static bool tsig_safe(const uint8_t *wire, size_t len)
{
        static const ldns_pkt_section sections[] = { LDNS_SECTION_QUESTION, LDNS_SECTION_ANSWER,
                                                     LDNS_SECTION_AUTHORITY,
                                                     LDNS_SECTION_ADDITIONAL };
        const uint16_t counts[] = { LDNS_QDCOUNT(wire), LDNS_ANCOUNT(wire), LDNS_NSCOUNT(wire),
                                    LDNS_ARCOUNT(wire) };
        size_t pos = LDNS_HEADER_SIZE;
        unsigned tsigs = 0;

        for (size_t s = 0; s < ARRAY_SIZE(sections); s++) {
                for (uint16_t i = 0; i < counts[s]; i++) {
                        ldns_rr *rr = NULL;

                        /* A message that fails part way fails ldns_wire2pkt too, after it
                         * may have lost a TSIG: refused here. */
                        if (ldns_wire2rr(&rr, wire, len, &pos, sections[s]) != LDNS_STATUS_OK)
                                return false;
                        if (sections[s] == LDNS_SECTION_ADDITIONAL &&
                            ldns_rr_get_type(rr) == LDNS_RR_TYPE_TSIG)
                                tsigs++;
                        ldns_rr_free(rr);
                }
        }
        return tsigs <= 1;
}

/* ldns_wire2pkt, but for the leak tsig_safe avoids (only a message of two additional records
 * or more can hold two TSIGs: the others are not walked twice). */
static int pkt_parse(const uint8_t *wire, size_t len, ldns_pkt **ret)
{
        *ret = NULL;
        if (len < LDNS_HEADER_SIZE || (LDNS_ARCOUNT(wire) >= 2 && !tsig_safe(wire, len)))
                return -1;
        if (ldns_wire2pkt(ret, wire, len) != LDNS_STATUS_OK) {
                *ret = NULL;
                return -1;
        }
        return 0;
}

void dns_question_clear(dns_question *q)
{
        ldns_rdf_deep_free(q->qname);
        *q = (dns_question){ 0 };
}

/* Sets the header's counts from the sections' lists, which ldns writes them from. After a
 * TSIG, ldns_wire2pkt's ARCOUNT can disagree with the records it kept (it lowers the count its
 * loop runs to), and a message written from that would not parse. */
static void pkt_counts_sync(ldns_pkt *pkt)
{
        ldns_pkt_set_qdcount(pkt, (uint16_t)ldns_rr_list_rr_count(ldns_pkt_question(pkt)));
        ldns_pkt_set_ancount(pkt, (uint16_t)ldns_rr_list_rr_count(ldns_pkt_answer(pkt)));
        ldns_pkt_set_nscount(pkt, (uint16_t)ldns_rr_list_rr_count(ldns_pkt_authority(pkt)));
        ldns_pkt_set_arcount(pkt, (uint16_t)ldns_rr_list_rr_count(ldns_pkt_additional(pkt)));
}

static int pkt_encode(const ldns_pkt *pkt, dns_out *out)
{
        uint8_t *wire = NULL;
        size_t len = 0;

        if (ldns_pkt2wire(&wire, pkt, &len) != LDNS_STATUS_OK || !wire) {
                free(wire);
                return -1;
        }
        out->wire = wire;
        out->len = len;
        out->rcode = ldns_pkt_get_rcode(pkt);
        return 0;
}

/* The text of name as policies spell names (netpolicy.h): lower case, no trailing dot, only
 * letters, digits, '-', '_' and the dots between labels. false for the root and for any name
 * that ldns has to escape to print (a dot or a space inside a label, a byte outside ASCII...):
 * no policy entry can spell one, and its text could otherwise match an entry it is not. */
static bool name_text(const ldns_rdf *name, char buf[static DNS_MSG_NAME_MAX + 1])
{
        _cleanup_(buffer_freep) ldns_buffer *b = ldns_buffer_new(DNS_MSG_NAME_MAX + 2);
        const char *s;
        size_t len;

        if (!b || ldns_rdf2buffer_str_dname(b, name) != LDNS_STATUS_OK)
                return false;
        s = (const char *)ldns_buffer_begin(b);
        len = ldns_buffer_position(b);
        if (len > 0 && s[len - 1] == '.')
                len--;
        if (len == 0 || len > DNS_MSG_NAME_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];

                if (c >= 'A' && c <= 'Z')
                        c = (char)(c - 'A' + 'a');
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                      c == '.'))
                        return false;
                buf[i] = c;
        }
        buf[len] = '\0';
        return true;
}

/* The header fields the proxy's own answers copy from the query. */
typedef struct answer_hdr {
        uint16_t id;
        ldns_pkt_opcode opcode;
        bool rd, cd;
        bool edns, do_bit;
} answer_hdr;

/* The proxy's own answer: rcode (extended ones through the OPT record), the question qrr
 * (copied; NULL for none). */
static int answer_build(const answer_hdr *h, const ldns_rr *qrr, unsigned rcode, dns_out *out)
{
        _cleanup_pkt_ ldns_pkt *pkt = ldns_pkt_new();

        if (!pkt)
                return -1;
        ldns_pkt_set_id(pkt, h->id);
        ldns_pkt_set_qr(pkt, true);
        ldns_pkt_set_opcode(pkt, h->opcode);
        ldns_pkt_set_rd(pkt, h->rd);
        ldns_pkt_set_cd(pkt, h->cd);
        ldns_pkt_set_ra(pkt, true);
        /* The header holds 4 bits of it; ldns would spill more into the flags. */
        ldns_pkt_set_rcode(pkt, (uint8_t)(rcode & 0xf));
        if (qrr) {
                ldns_rr *c = ldns_rr_clone(qrr);

                if (!c || !ldns_pkt_push_rr(pkt, LDNS_SECTION_QUESTION, c)) {
                        ldns_rr_free(c);
                        return -1;
                }
        }
        if (h->edns) {
                ldns_pkt_set_edns_udp_size(pkt, DNS_MSG_UDP_MAX);
                ldns_pkt_set_edns_extended_rcode(pkt, (uint8_t)(rcode >> 4));
                ldns_pkt_set_edns_do(pkt, h->do_bit);
        }
        if (pkt_encode(pkt, out) < 0)
                return -1;
        out->rcode = (uint8_t)rcode;
        return 0;
}

/* 0 to forward a question that is well formed and of class IN, else the rcode to answer. */
static unsigned question_check(const cs_netpolicy *policy, const ldns_rr *qrr,
                               char name[static DNS_MSG_NAME_MAX + 1])
{
        ldns_rr_type t = ldns_rr_get_type(qrr);
        bool spelled;

        if (!ldns_rr_owner(qrr) || t == LDNS_RR_TYPE_OPT)
                return LDNS_RCODE_FORMERR;
        if (t == LDNS_RR_TYPE_AXFR || t == LDNS_RR_TYPE_IXFR)
                return LDNS_RCODE_REFUSED;
        /* 0 and the meta types (TKEY, TSIG, MAILA...) but ANY: nothing to ask a resolver. */
        if (t == 0 || (t >= 128 && t < LDNS_RR_TYPE_ANY))
                return LDNS_RCODE_NOTIMPL;
        spelled = name_text(ldns_rr_owner(qrr), name);
        if (!spelled)
                name[0] = '\0';
        if (!policy)
                return LDNS_RCODE_REFUSED;
        switch (policy->egress) {
        case CS_EGRESS_OPEN:
                /* Any name: the sandbox reaches any address anyway. */
                return 0;
        case CS_EGRESS_ALLOWLIST:
                return spelled && cs_netpolicy_domain_allowed(policy, name) ? 0
                                                                            : LDNS_RCODE_REFUSED;
        default:
                /* NONE has no network to use an answer with; UNSPECIFIED is the agent's to
                 * resolve before: refuse rather than guess. */
                return LDNS_RCODE_REFUSED;
        }
}

/* The query for upstream: the question alone, made anew; EDNS only as the sandbox used it. */
static int upstream_query(const dns_question *q, dns_out *out)
{
        ldns_rdf *name = ldns_rdf_clone(q->qname);
        _cleanup_pkt_ ldns_pkt *pkt = NULL;

        if (!name)
                return -1;
        pkt = ldns_pkt_query_new(name, q->qtype, LDNS_RR_CLASS_IN, 0);
        if (!pkt) {
                ldns_rdf_deep_free(name);
                return -1;
        }
        ldns_pkt_set_id(pkt, 0);
        ldns_pkt_set_rd(pkt, q->rd);
        ldns_pkt_set_cd(pkt, q->cd);
        ldns_pkt_set_ad(pkt, q->ad);
        if (q->edns) {
                ldns_pkt_set_edns_udp_size(pkt, q->udp_max);
                ldns_pkt_set_edns_do(pkt, q->do_bit);
        }
        return pkt_encode(pkt, out);
}

static dns_action answer(const answer_hdr *h, const ldns_rr *qrr, unsigned rcode, dns_out *out)
{
        return answer_build(h, qrr, rcode, out) < 0 ? DNS_DROP : DNS_ANSWER;
}

dns_action dns_msg_query(const uint8_t *wire, size_t len, const cs_netpolicy *policy,
                         dns_question *ret_q, dns_out *out)
{
        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        dns_question q = { 0 };
        answer_hdr h = { 0 };
        const ldns_rr *qrr = NULL;
        unsigned rcode;

        *out = (dns_out){ 0 };
        /* A response is never answered: two resolvers would answer each other for ever. */
        if (len < LDNS_HEADER_SIZE || len > DNS_MSG_QUERY_MAX || LDNS_QR_WIRE(wire))
                return DNS_DROP;
        h.id = LDNS_ID_WIRE(wire);
        h.opcode = (ldns_pkt_opcode)LDNS_OPCODE_WIRE(wire);
        h.rd = LDNS_RD_WIRE(wire) != 0;
        if (h.opcode != LDNS_PACKET_QUERY)
                return answer(&h, NULL, LDNS_RCODE_NOTIMPL, out);
        /* One question and at most an OPT record: nothing else belongs in a query to a
         * resolver, and the rest is not worth ldns's time. */
        if (LDNS_QDCOUNT(wire) != 1 || LDNS_ANCOUNT(wire) != 0 || LDNS_NSCOUNT(wire) != 0 ||
            LDNS_ARCOUNT(wire) > 1 || pkt_parse(wire, len, &pkt) < 0 ||
            ldns_rr_list_rr_count(ldns_pkt_question(pkt)) != 1)
                /* The header is there: FORMERR tells the sandbox's resolver not to wait. */
                return answer(&h, NULL, LDNS_RCODE_FORMERR, out);

        h.cd = ldns_pkt_cd(pkt);
        h.edns = ldns_pkt_edns(pkt);
        h.do_bit = h.edns && ldns_pkt_edns_do(pkt);
        qrr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        if (h.edns && ldns_pkt_edns_version(pkt) != 0)
                return answer(&h, qrr, DNS_RCODE_BADVERS, out);
        if (ldns_rr_get_class(qrr) != LDNS_RR_CLASS_IN)
                return answer(&h, qrr, LDNS_RCODE_REFUSED, out);
        rcode = question_check(policy, qrr, q.name);
        if (rcode != 0)
                return answer(&h, qrr, rcode, out);

        q.id = h.id;
        q.qname = ldns_rdf_clone(ldns_rr_owner(qrr));
        q.qtype = ldns_rr_get_type(qrr);
        q.rd = h.rd;
        q.cd = h.cd;
        q.ad = ldns_pkt_ad(pkt);
        q.edns = h.edns;
        q.do_bit = h.do_bit;
        q.udp_max = DNS_MSG_UDP_PLAIN;
        if (h.edns && ldns_pkt_edns_udp_size(pkt) > DNS_MSG_UDP_PLAIN)
                q.udp_max = ldns_pkt_edns_udp_size(pkt) < DNS_MSG_UDP_MAX
                                    ? ldns_pkt_edns_udp_size(pkt)
                                    : DNS_MSG_UDP_MAX;
        if (!q.qname || upstream_query(&q, out) < 0) {
                dns_question_clear(&q);
                return DNS_DROP;
        }
        *ret_q = q;
        return DNS_FORWARD;
}

static ldns_rr *question_rr(const dns_question *q)
{
        ldns_rr *rr = ldns_rr_new();
        ldns_rdf *name = ldns_rdf_clone(q->qname);

        if (!rr || !name) {
                ldns_rr_free(rr);
                ldns_rdf_deep_free(name);
                return NULL;
        }
        ldns_rr_set_owner(rr, name);
        ldns_rr_set_type(rr, q->qtype);
        ldns_rr_set_class(rr, LDNS_RR_CLASS_IN);
        ldns_rr_set_question(rr, true);
        return rr;
}

int dns_msg_error(const dns_question *q, uint8_t rcode, dns_out *out)
{
        answer_hdr h = { .id = q->id,
                         .opcode = LDNS_PACKET_QUERY,
                         .rd = q->rd,
                         .cd = q->cd,
                         .edns = q->edns,
                         .do_bit = q->do_bit };
        ldns_rr *qrr = question_rr(q);
        int r;

        *out = (dns_out){ 0 };
        if (!qrr)
                return -1;
        r = answer_build(&h, qrr, rcode, out);
        ldns_rr_free(qrr);
        return r;
}

/* Whether pkt is the reply to q sent with id up_id: a response to a standard query, the id,
 * and the question (name compared without case, type, class). */
static bool reply_matches(const ldns_pkt *pkt, uint16_t up_id, const dns_question *q)
{
        const ldns_rr *rr;

        if (!ldns_pkt_qr(pkt) || ldns_pkt_id(pkt) != up_id ||
            ldns_pkt_get_opcode(pkt) != LDNS_PACKET_QUERY || ldns_pkt_qdcount(pkt) != 1 ||
            ldns_rr_list_rr_count(ldns_pkt_question(pkt)) != 1)
                return false;
        rr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        return ldns_rr_owner(rr) && ldns_dname_compare(ldns_rr_owner(rr), q->qname) == 0 &&
               ldns_rr_get_type(rr) == q->qtype && ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN;
}

static bool name_in(const ldns_rdf *name, const ldns_rdf *const *names, size_t n)
{
        if (!name || ldns_rdf_get_type(name) != LDNS_RDF_TYPE_DNAME)
                return false;
        for (size_t i = 0; i < n; i++) {
                if (ldns_dname_compare(name, names[i]) == 0)
                        return true;
        }
        return false;
}

/* The names of the chain that starts at qname in the answer section: qname, its CNAME's
 * target, that one's... (DNS_PROXY_CNAME_MAX hops; a loop ends it). Borrowed from ans. */
static size_t chain_follow(const ldns_rr_list *ans, const ldns_rdf *qname,
                           const ldns_rdf *names[static DNS_PROXY_CNAME_MAX + 1])
{
        size_t n = 0;

        names[n++] = qname;
        for (size_t hop = 0; hop < DNS_PROXY_CNAME_MAX; hop++) {
                const ldns_rdf *next = NULL;

                for (size_t i = 0; i < ldns_rr_list_rr_count(ans) && !next; i++) {
                        const ldns_rr *rr = ldns_rr_list_rr(ans, i);

                        if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME &&
                            ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN &&
                            ldns_rr_rd_count(rr) == 1 &&
                            name_in(ldns_rr_owner(rr), names + n - 1, 1))
                                next = ldns_rr_rdf(rr, 0);
                }
                if (!next || ldns_rdf_get_type(next) != LDNS_RDF_TYPE_DNAME ||
                    name_in(next, names, n))
                        break;
                names[n++] = next;
        }
        return n;
}

/* The address of an A or AAAA record of class IN, its TTL floored and capped. */
static bool rr_address(const ldns_rr *rr, dns_addr *ret)
{
        const ldns_rdf *rd;
        uint32_t ttl = ldns_rr_ttl(rr);

        if (ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns_rr_rd_count(rr) != 1)
                return false;
        rd = ldns_rr_rdf(rr, 0);
        *ret = (dns_addr){ 0 };
        if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_A && ldns_rdf_get_type(rd) == LDNS_RDF_TYPE_A &&
            ldns_rdf_size(rd) == 4)
                ret->family = AF_INET;
        else if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_AAAA &&
                 ldns_rdf_get_type(rd) == LDNS_RDF_TYPE_AAAA && ldns_rdf_size(rd) == 16)
                ret->family = AF_INET6;
        else
                return false;
        memcpy(ret->addr, ldns_rdf_data(rd), ldns_rdf_size(rd));
        ret->ttl_s = ttl < DNS_PROXY_TTL_FLOOR_S ? DNS_PROXY_TTL_FLOOR_S
                     : ttl > DNS_PROXY_TTL_CAP_S ? DNS_PROXY_TTL_CAP_S
                                                 : ttl;
        return true;
}

/* Adds a to addrs[0..*n): a repeated address keeps the longer TTL. false when a is new and
 * there is no room. */
static bool addrs_add(dns_addr *addrs, size_t *n, const dns_addr *a)
{
        size_t len = a->family == AF_INET ? 4 : 16;

        for (size_t i = 0; i < *n; i++) {
                if (addrs[i].family == a->family && memcmp(addrs[i].addr, a->addr, len) == 0) {
                        if (a->ttl_s > addrs[i].ttl_s)
                                addrs[i].ttl_s = a->ttl_s;
                        return true;
                }
        }
        if (*n == DNS_PROXY_ADDRS_MAX)
                return false;
        addrs[(*n)++] = *a;
        return true;
}

/* The addresses of q's chain in pkt's answer section, into addrs; the records of that chain
 * past DNS_PROXY_ADDRS_MAX addresses are taken out of the section. */
static size_t addrs_collect(ldns_pkt *pkt, const dns_question *q,
                            dns_addr addrs[static DNS_PROXY_ADDRS_MAX])
{
        ldns_rr_list *ans = ldns_pkt_answer(pkt);
        const ldns_rdf *chain[DNS_PROXY_CNAME_MAX + 1];
        size_t n_chain, n = 0, kept = 0, count;

        if (!ans)
                return 0;
        count = ldns_rr_list_rr_count(ans);
        n_chain = chain_follow(ans, q->qname, chain);
        for (size_t i = 0; i < count; i++) {
                ldns_rr *rr = ldns_rr_list_rr(ans, i);
                dns_addr a;

                if (rr_address(rr, &a) && name_in(ldns_rr_owner(rr), chain, n_chain) &&
                    !addrs_add(addrs, &n, &a)) {
                        ldns_rr_free(rr);
                        continue;
                }
                ldns_rr_list_set_rr(ans, rr, kept++);
        }
        ldns_rr_list_set_rr_count(ans, kept);
        return n;
}

static void ttls_cap(ldns_rr_list *list)
{
        for (size_t i = 0; list && i < ldns_rr_list_rr_count(list); i++) {
                ldns_rr *rr = ldns_rr_list_rr(list, i);

                if (ldns_rr_ttl(rr) > DNS_PROXY_TTL_CAP_S)
                        ldns_rr_set_ttl(rr, DNS_PROXY_TTL_CAP_S);
        }
}

/* The OPT record of an answer for the sandbox: upstream's options (a cookie for the proxy,
 * padding...) are not the sandbox's and would make a truncated answer as large as they are;
 * its size becomes the proxy's. ldns writes an OPT if upstream's answer had one (it cannot be
 * told otherwise), and upstream has one only if the proxy's query did, as the sandbox's did. */
static void edns_restamp(ldns_pkt *pkt)
{
        ldns_rdf_deep_free(ldns_pkt_edns_data(pkt));
        ldns_pkt_set_edns_data(pkt, NULL);
        if (ldns_pkt_edns(pkt))
                ldns_pkt_set_edns_udp_size(pkt, DNS_MSG_UDP_MAX);
}

/* Empties pkt's answer, authority and additional sections and sets TC: what a UDP client gets
 * instead of an answer too large for it (it asks again over TCP). The caller syncs the counts. */
static void pkt_truncate(ldns_pkt *pkt)
{
        /* An empty list each (NULL if ldns is out of memory: its writer skips those). */
        ldns_rr_list_deep_free(ldns_pkt_answer(pkt));
        ldns_pkt_set_answer(pkt, ldns_rr_list_new());
        ldns_rr_list_deep_free(ldns_pkt_authority(pkt));
        ldns_pkt_set_authority(pkt, ldns_rr_list_new());
        ldns_rr_list_deep_free(ldns_pkt_additional(pkt));
        ldns_pkt_set_additional(pkt, ldns_rr_list_new());
        ldns_pkt_set_tc(pkt, true);
}

dns_reply_action dns_msg_reply(const uint8_t *wire, size_t len, uint16_t up_id,
                               const dns_question *q, size_t max, bool collect,
                               dns_addr addrs[static DNS_PROXY_ADDRS_MAX], size_t *ret_n,
                               dns_out *out)
{
        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        dns_reply_action action = DNS_REPLY_FORWARD;
        size_t n = 0;

        *ret_n = 0;
        *out = (dns_out){ 0 };
        if (len > DNS_MSG_TCP_MAX || pkt_parse(wire, len, &pkt) < 0 ||
            !reply_matches(pkt, up_id, q))
                return DNS_REPLY_BAD;
        switch (ldns_pkt_get_rcode(pkt)) {
        case LDNS_RCODE_NOERROR:
                if (collect)
                        n = addrs_collect(pkt, q, addrs);
                break;
        case LDNS_RCODE_SERVFAIL:
        case LDNS_RCODE_REFUSED:
                action = DNS_REPLY_RETRY;
                break;
        default:
                break;
        }
        ttls_cap(ldns_pkt_answer(pkt));
        ldns_pkt_set_id(pkt, q->id);
        /* Signed for the proxy, if at all: meaningless to the sandbox. */
        ldns_rr_free(ldns_pkt_tsig(pkt));
        ldns_pkt_set_tsig(pkt, NULL);
        edns_restamp(pkt);
        pkt_counts_sync(pkt);
        if (pkt_encode(pkt, out) < 0)
                return DNS_REPLY_BAD;
        if (out->len > max) {
                free(out->wire);
                *out = (dns_out){ 0 };
                n = 0;
                if (max >= DNS_MSG_TCP_MAX) {
                        /* Only ldns's compression, worse than upstream's, can get here. */
                        if (dns_msg_error(q, LDNS_RCODE_SERVFAIL, out) < 0)
                                return DNS_REPLY_BAD;
                        return action;
                }
                pkt_truncate(pkt);
                pkt_counts_sync(pkt);
                if (pkt_encode(pkt, out) < 0)
                        return DNS_REPLY_BAD;
        }
        *ret_n = n;
        return action;
}
