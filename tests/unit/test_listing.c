/* Unit tests for frontend/listing.c: ListSandboxes' page size, page token, order and page, and
 * the cleaning of a status_reason. Pure functions: no scheduler, no call. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "listing.h"
#include "utf8.h"
#include "util.h"

#define ID_A "0a000000-0000-4000-8000-000000000001"
#define ID_B "0b000000-0000-4000-8000-000000000002"
#define ID_C "0c000000-0000-4000-8000-000000000003"

static void test_page_size(void **state)
{
        (void)state;
        assert_int_equal(fe_list_page_size(0), FE_LIST_DEFAULT_PAGE);
        assert_int_equal(fe_list_page_size(1), 1);
        assert_int_equal(fe_list_page_size(FE_LIST_MAX_PAGE), FE_LIST_MAX_PAGE);
        assert_int_equal(fe_list_page_size(FE_LIST_MAX_PAGE + 1), FE_LIST_MAX_PAGE);
        assert_int_equal(fe_list_page_size(UINT32_MAX), FE_LIST_MAX_PAGE);
}

static void test_token_round_trip(void **state)
{
        char tok[FE_LIST_TOKEN_MAX + 1], id[37];
        int64_t created = -1;
        cs_error *err = NULL;

        (void)state;
        /* The empty token is the start. */
        assert_int_equal(
                fe_list_token_decode("", "acme", FE_STATUS_UNSPECIFIED, &created, id, &err), 0);
        assert_int_equal(created, 0);
        assert_string_equal(id, "");

        fe_list_token_encode("acme", FE_STATUS_READY, 1767225600123ll, ID_B, tok);
        assert_true(strlen(tok) <= FE_LIST_TOKEN_MAX);
        assert_int_equal(fe_list_token_decode(tok, "acme", FE_STATUS_READY, &created, id, &err), 0);
        assert_int_equal(created, 1767225600123ll);
        assert_string_equal(id, ID_B);

        /* The longest: a huge time and a full id still fit. */
        fe_list_token_encode("acme", FE_STATUS_READY, INT64_MAX, ID_B, tok);
        assert_true(strlen(tok) <= FE_LIST_TOKEN_MAX);
        assert_int_equal(fe_list_token_decode(tok, "acme", FE_STATUS_READY, &created, id, &err), 0);
        assert_int_equal(created, INT64_MAX);
}

static void assert_token_refused(const char *tok, const char *tenant, fe_status st,
                                 const char *want_msg_part)
{
        char id[37];
        int64_t created;
        cs_error *err = NULL;

        assert_int_equal(fe_list_token_decode(tok, tenant, st, &created, id, &err), -1);
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(err->msg, want_msg_part));
        cs_error_free(err);
}

/* base64 of plain text, as a forger would make a token. */
static void b64(const char *plain, char *out)
{
        cs_base64_encode((const uint8_t *)plain, strlen(plain), out);
}

static void test_token_refusals(void **state)
{
        char tok[FE_LIST_TOKEN_MAX + 1], forged[256], big[FE_LIST_TOKEN_MAX + 2];

        (void)state;
        fe_list_token_encode("acme", FE_STATUS_READY, 5, ID_A, tok);
        /* Given back for another tenant or another status. */
        assert_token_refused(tok, "other", FE_STATUS_READY, "another tenant_id or status");
        assert_token_refused(tok, "acme", FE_STATUS_UNSPECIFIED, "another tenant_id or status");
        /* Not base64, not ours, cut, too long. */
        assert_token_refused("not a token!", "acme", FE_STATUS_READY, "not one this service gave");
        assert_token_refused("aGVsbG8=", "acme", FE_STATUS_READY, "not one this service gave");
        tok[strlen(tok) - 4] = '\0';
        assert_token_refused(tok, "acme", FE_STATUS_READY, "not one this service gave");
        memset(big, 'A', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        assert_token_refused(big, "acme", FE_STATUS_READY, "not one this service gave");
        /* Well-formed but wrong inside: another version, a negative time, not a UUID, a
         * trailing byte, an embedded NUL. */
        b64("2:5:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:-5:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:5:not-a-uuid:0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:5:" ID_A ":0000000000000000x", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:+5:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1: 5:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:99999999999999999999:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:9223372036854775808:" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1::" ID_A ":0000000000000000", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:5:" ID_A ":000000000000000G", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        b64("1:5:" ID_A ":0000000000000000:", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        cs_base64_encode((const uint8_t *)"1:5\0:", 5, forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "not one this service gave");
        /* A forged check for the right tenant would pass: the token is a position, not a
         * credential (the tenant comes from the request). A wrong one does not. */
        b64("1:5:" ID_A ":0123456789abcdef", forged);
        assert_token_refused(forged, "acme", FE_STATUS_READY, "another tenant_id or status");
}

static void add(fe_view_list *l, const char *id, int64_t created)
{
        fe_view *v = fe_view_list_add(l);

        v->id = cs_xstrdup(id);
        v->created_at_ms = created;
        v->tenant_id = cs_xstrdup("acme");
}

static void test_select_orders_and_pages(void **state)
{
        fe_view_list l = { 0 };
        fe_list_query q = { .tenant_id = "acme", .after_id = "", .limit = 2 };

        (void)state;
        /* Given out of order; created_at first, then the id (case-insensitive). */
        add(&l, ID_C, 10);
        add(&l, ID_B, 20);
        add(&l, ID_A, 20);
        add(&l, "0A000000-0000-4000-8000-000000000000", 20);
        fe_list_select(&l, &q);
        assert_int_equal(l.n, 2);
        assert_true(l.more);
        assert_string_equal(l.v[0].id, ID_C);
        assert_string_equal(l.v[1].id, "0A000000-0000-4000-8000-000000000000");
        fe_view_list_clear(&l);

        /* After the cursor (20, the upper-case id): the rest, and no more. */
        add(&l, ID_C, 10);
        add(&l, ID_B, 20);
        add(&l, ID_A, 20);
        add(&l, "0A000000-0000-4000-8000-000000000000", 20);
        q.after_created_ms = 20;
        q.after_id = "0a000000-0000-4000-8000-000000000000";
        fe_list_select(&l, &q);
        assert_int_equal(l.n, 2);
        assert_false(l.more);
        assert_string_equal(l.v[0].id, ID_A);
        assert_string_equal(l.v[1].id, ID_B);
        fe_view_list_clear(&l);

        /* Nothing after the last. */
        add(&l, ID_A, 1);
        q.after_created_ms = 1;
        q.after_id = ID_A;
        fe_list_select(&l, &q);
        assert_int_equal(l.n, 0);
        assert_false(l.more);
        fe_view_list_clear(&l);

        /* Exactly limit: no more. */
        add(&l, ID_A, 1);
        add(&l, ID_B, 2);
        q.after_id = "";
        q.after_created_ms = 0;
        fe_list_select(&l, &q);
        assert_int_equal(l.n, 2);
        assert_false(l.more);
        fe_view_list_clear(&l);
        assert_null(l.v);
}

static void assert_clean(const char *in, const char *want)
{
        _cleanup_free_ char *got = fe_reason_clean(in);

        if (!want) {
                assert_null(got);
                return;
        }
        assert_non_null(got);
        assert_string_equal(got, want);
}

static void test_reason_clean(void **state)
{
        char big[2000];
        _cleanup_free_ char *cut = NULL;

        (void)state;
        assert_clean(NULL, NULL);
        assert_clean("", NULL);
        assert_clean(" \n\t", NULL);
        /* The agent's own sentences pass as they are. */
        assert_clean("the sandbox ran out of memory (limit 256 MiB)",
                     "the sandbox ran out of memory (limit 256 MiB)");
        assert_clean("max_runtime of 900 s exceeded", "max_runtime of 900 s exceeded");
        /* Host paths go, wherever they start; image references and URLs stay. */
        assert_clean("cannot open /var/lib/compute/sandboxes/x/config.json: no such file",
                     "cannot open <path>: no such file");
        assert_clean("/etc/x failed", "<path> failed");
        assert_clean("mount \"/srv/ws\" (bind)", "mount \"<path>\" (bind)");
        assert_clean("path=/a/b,other", "path=<path>,other");
        assert_clean("no directory /images/python:3.12 here", "no directory <path> here");
        assert_clean("at /a/b:", "at <path>:");
        assert_clean("pull docker.io/library/busybox:nope from https://registry-1.docker.io/v2/",
                     "pull docker.io/library/busybox:nope from https://registry-1.docker.io/v2/");
        assert_clean("a / b", "a / b");
        /* The runtime's own errors say only that it failed. */
        assert_clean("runsc create: exit status 128: loading container: open /run/runsc",
                     "the container runtime failed to run the sandbox (the details are in the "
                     "node's logs)");
        assert_clean("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to "
                     "start containerd-shim",
                     "the container runtime failed to run the sandbox (the details are in the "
                     "node's logs)");
        /* Control characters become spaces, bad UTF-8 '?', good UTF-8 stays. */
        assert_clean("a\nb\x1b[31mc\x7f", "a b [31mc");
        assert_clean("caf\xc3\xa9 \xff\xfe ok \xe2\x82", "caf\xc3\xa9 ?? ok ??");

        /* Bounded: cut at a character, ending "...". */
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        for (size_t i = 500; i < 520; i += 2)
                memcpy(big + i, "\xc3\xa9", 2);
        for (int shift = 0; shift < 2; shift++) {
                cut = fe_reason_clean(big + shift);
                assert_true(strlen(cut) <= FE_REASON_MAX);
                assert_true(strlen(cut) >= FE_REASON_MAX - 4);
                assert_true(cs_utf8_valid(cut, strlen(cut)));
                assert_string_equal(cut + strlen(cut) - 3, "...");
                free(cut);
                cut = NULL;
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_page_size),
                cmocka_unit_test(test_token_round_trip),
                cmocka_unit_test(test_token_refusals),
                cmocka_unit_test(test_select_orders_and_pages),
                cmocka_unit_test(test_reason_clean),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
