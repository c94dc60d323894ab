/* Unit tests of shared/netpolicy.c: names (caps, labels, the one leading wildcard, case and
 * trailing dot), CIDRs v4 and v6, lists with a mode that does not use them, the caps, messages
 * that name the entry, and the matches the node agent asks (domains, contains, overlap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "netpolicy.h"
#include "util.h"

static int parse_domains(const char *const *v, size_t n, cs_netpolicy *ret, cs_error **err)
{
        return cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, v, n, NULL, 0, ret, err);
}

static void assert_domain(const char *in, const char *want)
{
        cs_netpolicy p;
        _cleanup_error_ cs_error *err = NULL;

        if (parse_domains(&in, 1, &p, &err) < 0)
                fail_msg("\"%s\" refused: %s", in, err->msg);
        assert_int_equal(p.n_domains, 1);
        assert_string_equal(p.domains[0], want);
        cs_netpolicy_clear(&p);
}

/* Refused with INVALID_ARGUMENT, the message holding every one of the NULL-ended parts. */
static void assert_refused(cs_egress egress, const char *const *domains, size_t n_domains,
                           const char *const *cidrs, size_t n_cidrs, const char *const *parts)
{
        cs_netpolicy p = { .egress = 42 };
        _cleanup_error_ cs_error *err = NULL;

        if (cs_netpolicy_parse(egress, domains, n_domains, cidrs, n_cidrs, &p, &err) == 0)
                fail_msg("accepted (wanted \"%s\")", parts[0]);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        for (; *parts; parts++) {
                if (!strstr(err->msg, *parts))
                        fail_msg("\"%s\" does not say \"%s\"", err->msg, *parts);
        }
        /* Nothing left to free, and safe to clear. */
        assert_int_equal(p.n_domains, 0);
        assert_null(p.domains);
        cs_netpolicy_clear(&p);
}

static void assert_domain_refused(const char *in, const char *why)
{
        const char *parts[] = { "network.allow_domains[0]", why, NULL };

        assert_refused(CS_EGRESS_ALLOWLIST, &in, 1, NULL, 0, parts);
}

static void test_names_good(void **state)
{
        char longest[CS_NET_DOMAIN_MAX + 2];

        (void)state;
        assert_domain("pypi.org", "pypi.org");
        assert_domain("localhost", "localhost");
        assert_domain("files.pythonhosted.org", "files.pythonhosted.org");
        assert_domain("PyPI.ORG", "pypi.org");
        assert_domain("pypi.org.", "pypi.org");
        assert_domain("*.cdn.test", "*.cdn.test");
        assert_domain("*.CDN.Test.", "*.cdn.test");
        assert_domain("a-b.c0.x9", "a-b.c0.x9");
        assert_domain("123.example", "123.example");
        assert_domain("xn--bcher-kva.example", "xn--bcher-kva.example");
        /* 63-byte labels, 253 bytes in all (and again with a trailing dot: 254 given). */
        memset(longest, 'a', CS_NET_DOMAIN_MAX);
        for (int i = 63; i < CS_NET_DOMAIN_MAX; i += 64)
                longest[i] = '.';
        longest[CS_NET_DOMAIN_MAX] = '\0';
        assert_domain(longest, longest);
        longest[CS_NET_DOMAIN_MAX] = '.';
        longest[CS_NET_DOMAIN_MAX + 1] = '\0';
        {
                cs_netpolicy p;
                const char *in = longest;

                assert_int_equal(parse_domains(&in, 1, &p, NULL), 0);
                assert_int_equal(strlen(p.domains[0]), CS_NET_DOMAIN_MAX);
                cs_netpolicy_clear(&p);
        }
}

static void test_names_bad(void **state)
{
        char label64[80], name254[CS_NET_DOMAIN_MAX + 2];

        (void)state;
        assert_domain_refused("", "empty name");
        assert_domain_refused(".", "empty name");
        assert_domain_refused("a..b", "empty label");
        assert_domain_refused(".example.com", "empty label");
        assert_domain_refused("example.com..", "empty label");
        assert_domain_refused("-a.example", "'-'");
        assert_domain_refused("a-.example", "'-'");
        assert_domain_refused("a_b.example", "letters, digits");
        assert_domain_refused("a b.example", "letters, digits");
        assert_domain_refused("bücher.example", "xn--");
        assert_domain_refused("pypi.org/simple", "letters, digits");
        assert_domain_refused("*", "'*' only as a whole leading label");
        assert_domain_refused("*.", "'*' only as a whole leading label");
        assert_domain_refused("*.*.x", "'*' only as a whole leading label");
        assert_domain_refused("a.*.x", "'*' only as a whole leading label");
        assert_domain_refused("*x.example", "'*' only as a whole leading label");
        assert_domain_refused("x*.example", "'*' only as a whole leading label");
        assert_domain_refused("**.example", "'*' only as a whole leading label");
        assert_domain_refused("10.0.0.1", "allow_cidrs");
        assert_domain_refused("*.10.0", "allow_cidrs");
        memset(label64, 'a', 64);
        strcpy(label64 + 64, ".example");
        assert_domain_refused(label64, "longer than 63");
        memset(name254, 'a', CS_NET_DOMAIN_MAX + 1);
        for (int i = 63; i < CS_NET_DOMAIN_MAX; i += 64)
                name254[i] = '.';
        name254[CS_NET_DOMAIN_MAX + 1] = '\0';
        assert_domain_refused(name254, "longer than 253");
}

static void assert_cidr(const char *in, int family, const char *want)
{
        cs_cidr c;
        char buf[CS_NET_CIDR_STRLEN + 1];
        const char *why = NULL;

        if (cs_cidr_parse(in, &c, &why) < 0)
                fail_msg("\"%s\" refused: %s", in, why);
        assert_int_equal(c.family, family);
        cs_cidr_format(&c, buf, sizeof(buf));
        assert_string_equal(buf, want);
}

static void assert_cidr_refused(const char *in, const char *why)
{
        const char *parts[] = { "network.allow_cidrs[0]", why, NULL };
        cs_cidr c;
        const char *got = NULL;

        assert_int_equal(cs_cidr_parse(in, &c, &got), -1);
        assert_non_null(got);
        assert_refused(CS_EGRESS_ALLOWLIST, NULL, 0, &in, 1, parts);
}

static void test_cidrs(void **state)
{
        (void)state;
        assert_cidr("10.0.0.0/8", AF_INET, "10.0.0.0/8");
        assert_cidr("0.0.0.0/0", AF_INET, "0.0.0.0/0");
        assert_cidr("192.0.2.7", AF_INET, "192.0.2.7/32");
        assert_cidr("192.0.2.7/32", AF_INET, "192.0.2.7/32");
        assert_cidr("2001:db8::/32", AF_INET6, "2001:db8::/32");
        assert_cidr("2001:DB8:0::/48", AF_INET6, "2001:db8::/48");
        assert_cidr("2001:db8::1", AF_INET6, "2001:db8::1/128");
        assert_cidr("::/0", AF_INET6, "::/0");
        assert_cidr("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff/128", AF_INET6,
                    "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff/128");

        assert_cidr_refused("", "empty");
        assert_cidr_refused("10.0.0.1/8", "host bits set (the network is 10.0.0.0/8)");
        assert_cidr_refused("192.0.2.129/25", "host bits set (the network is 192.0.2.128/25)");
        assert_cidr_refused("2001:db8::1/64", "host bits set (the network is 2001:db8::/64)");
        assert_cidr_refused("10.0.0.0/33", "prefix length over 32");
        assert_cidr_refused("2001:db8::/129", "prefix length over 128");
        assert_cidr_refused("10.0.0.0/", "not a number");
        assert_cidr_refused("10.0.0.0/-1", "not a number");
        assert_cidr_refused("10.0.0.0/+8", "not a number");
        assert_cidr_refused("10.0.0.0/08", "not a number");
        assert_cidr_refused("10.0.0.0/8/8", "not a number");
        assert_cidr_refused("10.0.0.0/1000", "not a number");
        assert_cidr_refused("10.0.0/8", "not an IPv4 or IPv6 address");
        assert_cidr_refused("256.0.0.0/8", "not an IPv4 or IPv6 address");
        assert_cidr_refused("example.com/8", "not an IPv4 or IPv6 address");
        assert_cidr_refused("fe80::1%eth0", "not an IPv4 or IPv6 address");
        assert_cidr_refused(" 10.0.0.0/8", "not an IPv4 or IPv6 address");
        assert_cidr_refused("garbage", "not an IPv4 or IPv6 address");
        assert_cidr_refused("1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa/128", "too long");
}

static void test_lists_need_allowlist(void **state)
{
        const char *domains[] = { "pypi.org" }, *cidrs[] = { "10.0.0.0/8" };
        const char *open_d[] = { "network.allow_domains[0] 'pypi.org'", "egress is open", NULL };
        const char *none_c[] = { "network.allow_cidrs[0] '10.0.0.0/8'", "egress is none", NULL };
        const char *unspec[] = { "allow_domains[0]", "egress is unspecified", NULL };
        const char *mode[] = { "network.egress 7", NULL };
        cs_netpolicy p;

        (void)state;
        assert_refused(CS_EGRESS_OPEN, domains, 1, NULL, 0, open_d);
        assert_refused(CS_EGRESS_NONE, NULL, 0, cidrs, 1, none_c);
        assert_refused(CS_EGRESS_UNSPECIFIED, domains, 1, NULL, 0, unspec);
        assert_refused((cs_egress)7, NULL, 0, NULL, 0, mode);
        for (int e = CS_EGRESS_UNSPECIFIED; e <= CS_EGRESS_OPEN; e++) {
                assert_int_equal(cs_netpolicy_parse(e, NULL, 0, NULL, 0, &p, NULL), 0);
                assert_int_equal(p.egress, e);
                assert_int_equal(p.n_domains + p.n_cidrs, 0);
                cs_netpolicy_clear(&p);
        }
}

static void test_caps(void **state)
{
        static char names[CS_NET_MAX_DOMAINS + 1][16], nets[CS_NET_MAX_CIDRS + 1][24];
        const char *d[CS_NET_MAX_DOMAINS + 1], *c[CS_NET_MAX_CIDRS + 1];
        const char *many_d[] = { "network.allow_domains has 257 entries, more than 256", NULL };
        const char *many_c[] = { "network.allow_cidrs has 257 entries, more than 256", NULL };
        cs_netpolicy p;

        (void)state;
        for (int i = 0; i <= CS_NET_MAX_DOMAINS; i++) {
                snprintf(names[i], sizeof(names[i]), "h%d.test", i);
                d[i] = names[i];
        }
        for (int i = 0; i <= CS_NET_MAX_CIDRS; i++) {
                snprintf(nets[i], sizeof(nets[i]), "10.%d.%d.0/24", i / 256, i % 256);
                c[i] = nets[i];
        }
        assert_int_equal(cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, d, CS_NET_MAX_DOMAINS, c,
                                            CS_NET_MAX_CIDRS, &p, NULL),
                         0);
        assert_int_equal(p.n_domains, CS_NET_MAX_DOMAINS);
        assert_int_equal(p.n_cidrs, CS_NET_MAX_CIDRS);
        cs_netpolicy_clear(&p);
        assert_refused(CS_EGRESS_ALLOWLIST, d, CS_NET_MAX_DOMAINS + 1, NULL, 0, many_d);
        assert_refused(CS_EGRESS_ALLOWLIST, NULL, 0, c, CS_NET_MAX_CIDRS + 1, many_c);
}

static void test_messages_name_the_entry(void **state)
{
        char longname[300];
        const char *d[] = { "ok.test", "also.ok", "bad_name.test" };
        const char *c[] = { "10.0.0.0/8", "192.0.2.1/24" };
        const char *long_d[] = { longname };
        const char *want_d[] = { "network.allow_domains[2] 'bad_name.test': ", NULL };
        const char *want_c[] = { "network.allow_cidrs[1] '192.0.2.1/24': host bits set", NULL };
        char quoted[100];
        const char *want_long[] = { quoted, "...': longer than 253 bytes", NULL };

        (void)state;
        assert_refused(CS_EGRESS_ALLOWLIST, d, 3, c, 1, want_d);
        assert_refused(CS_EGRESS_ALLOWLIST, d, 2, c, 2, want_c);
        /* A long value is cut to 64 bytes. */
        memset(longname, 'x', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        snprintf(quoted, sizeof(quoted), "[0] '%.64s...'", longname);
        assert_refused(CS_EGRESS_ALLOWLIST, long_d, 1, NULL, 0, want_long);
        /* At a character: "é" (2 bytes) from byte 63 on is not cut in two. */
        memcpy(longname + 63, "\xc3\xa9", 2);
        snprintf(quoted, sizeof(quoted), "[0] '%.63s...'", longname);
        assert_refused(CS_EGRESS_ALLOWLIST, long_d, 1, NULL, 0, want_long);
}

static void test_duplicates_and_copy(void **state)
{
        const char *d[] = { "pypi.org", "PyPI.org.", "*.cdn.test", "pypi.org" };
        const char *c[] = { "10.0.0.0/8", "192.0.2.1", "10.0.0.0/8", "2001:db8::/32" };
        cs_netpolicy p, q;
        char buf[CS_NET_CIDR_STRLEN + 1];

        (void)state;
        assert_int_equal(cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, d, 4, c, 4, &p, NULL), 0);
        assert_int_equal(p.n_domains, 2);
        assert_string_equal(p.domains[0], "pypi.org");
        assert_string_equal(p.domains[1], "*.cdn.test");
        assert_int_equal(p.n_cidrs, 3);
        cs_netpolicy_copy(&q, &p);
        cs_netpolicy_clear(&p);
        assert_int_equal(p.n_domains, 0);
        assert_int_equal(q.egress, CS_EGRESS_ALLOWLIST);
        assert_int_equal(q.n_domains, 2);
        assert_string_equal(q.domains[1], "*.cdn.test");
        assert_int_equal(q.n_cidrs, 3);
        cs_cidr_format(&q.cidrs[2], buf, sizeof(buf));
        assert_string_equal(buf, "2001:db8::/32");
        cs_netpolicy_clear(&q);
        cs_netpolicy_clear(&q);
        cs_netpolicy_clear(NULL);
        cs_netpolicy_copy(&q, NULL);
        assert_int_equal(q.n_domains + q.n_cidrs, 0);
}

static void test_egress_names(void **state)
{
        (void)state;
        assert_string_equal(cs_egress_name(CS_EGRESS_UNSPECIFIED), "");
        assert_string_equal(cs_egress_name(CS_EGRESS_NONE), "none");
        assert_string_equal(cs_egress_name(CS_EGRESS_ALLOWLIST), "allowlist");
        assert_string_equal(cs_egress_name(CS_EGRESS_OPEN), "open");
        for (int e = CS_EGRESS_UNSPECIFIED; e <= CS_EGRESS_OPEN; e++)
                assert_int_equal(cs_egress_from_name(cs_egress_name(e)), e);
        assert_int_equal(cs_egress_from_name(NULL), CS_EGRESS_UNSPECIFIED);
        assert_int_equal(cs_egress_from_name("closed"), -1);
        assert_int_equal(cs_egress_from_name("Open"), -1);
}

static void test_domain_allowed(void **state)
{
        const char *d[] = { "pypi.org", "*.cdn.test" };
        cs_netpolicy p;

        (void)state;
        assert_int_equal(cs_netpolicy_parse(CS_EGRESS_ALLOWLIST, d, 2, NULL, 0, &p, NULL), 0);
        assert_true(cs_netpolicy_domain_allowed(&p, "pypi.org"));
        assert_true(cs_netpolicy_domain_allowed(&p, "a.cdn.test"));
        assert_true(cs_netpolicy_domain_allowed(&p, "x.y.cdn.test"));
        /* Case and a trailing dot are tolerated. */
        assert_true(cs_netpolicy_domain_allowed(&p, "PyPI.org."));
        assert_true(cs_netpolicy_domain_allowed(&p, "A.CDN.test"));

        assert_false(cs_netpolicy_domain_allowed(&p, "cdn.test"));
        assert_false(cs_netpolicy_domain_allowed(&p, "evilcdn.test"));
        assert_false(cs_netpolicy_domain_allowed(&p, "a.evilcdn.test"));
        assert_false(cs_netpolicy_domain_allowed(&p, "cdn.test.evil"));
        assert_false(cs_netpolicy_domain_allowed(&p, "files.pypi.org"));
        assert_false(cs_netpolicy_domain_allowed(&p, "pypi.org.evil"));
        assert_false(cs_netpolicy_domain_allowed(&p, "ypi.org"));
        assert_false(cs_netpolicy_domain_allowed(&p, "xpypi.org"));
        assert_false(cs_netpolicy_domain_allowed(&p, ""));
        assert_false(cs_netpolicy_domain_allowed(&p, NULL));
        assert_false(cs_netpolicy_domain_allowed(NULL, "pypi.org"));
        cs_netpolicy_clear(&p);
        assert_false(cs_netpolicy_domain_allowed(&p, "pypi.org"));
}

static cs_cidr cidr(const char *s)
{
        cs_cidr c;
        const char *why;

        if (cs_cidr_parse(s, &c, &why) < 0)
                fail_msg("\"%s\": %s", s, why);
        return c;
}

static bool contains(const char *net, const char *addr)
{
        cs_cidr c = cidr(net);
        uint8_t a[16];
        int family = strchr(addr, ':') ? AF_INET6 : AF_INET;

        assert_int_equal(inet_pton(family, addr, a), 1);
        return cs_cidr_contains(&c, family, a);
}

static bool overlap(const char *a, const char *b)
{
        cs_cidr x = cidr(a), y = cidr(b);

        assert_true(cs_cidr_overlap(&x, &y) == cs_cidr_overlap(&y, &x));
        return cs_cidr_overlap(&x, &y);
}

static void test_contains_overlap(void **state)
{
        (void)state;
        assert_true(contains("10.0.0.0/8", "10.255.1.2"));
        assert_false(contains("10.0.0.0/8", "11.0.0.0"));
        assert_true(contains("192.0.2.128/25", "192.0.2.200"));
        assert_false(contains("192.0.2.128/25", "192.0.2.127"));
        assert_true(contains("192.0.2.7", "192.0.2.7"));
        assert_false(contains("192.0.2.7", "192.0.2.6"));
        assert_true(contains("0.0.0.0/0", "203.0.113.9"));
        assert_true(contains("2001:db8::/32", "2001:db8:1::1"));
        assert_false(contains("2001:db8::/32", "2001:db9::1"));
        assert_true(contains("fd00:ec2::254", "fd00:ec2::254"));
        assert_true(contains("::/0", "::1"));
        /* Families never match, not even ::ffff:a.b.c.d against a v4 network. */
        assert_false(contains("0.0.0.0/0", "::ffff:10.0.0.1"));
        assert_false(contains("::/0", "10.0.0.1"));

        assert_true(overlap("10.0.0.0/8", "10.1.0.0/16"));
        assert_true(overlap("10.0.0.0/8", "10.0.0.0/8"));
        assert_true(overlap("0.0.0.0/0", "192.0.2.1"));
        assert_false(overlap("10.0.0.0/8", "11.0.0.0/8"));
        assert_false(overlap("192.0.2.0/25", "192.0.2.128/25"));
        assert_true(overlap("2001:db8::/32", "2001:db8:ab::/48"));
        assert_false(overlap("2001:db8::/32", "2001:db9::/32"));
        assert_false(overlap("::/0", "0.0.0.0/0"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names_good),
                cmocka_unit_test(test_names_bad),
                cmocka_unit_test(test_cidrs),
                cmocka_unit_test(test_lists_need_allowlist),
                cmocka_unit_test(test_caps),
                cmocka_unit_test(test_messages_name_the_entry),
                cmocka_unit_test(test_duplicates_and_copy),
                cmocka_unit_test(test_egress_names),
                cmocka_unit_test(test_domain_allowed),
                cmocka_unit_test(test_contains_overlap),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
