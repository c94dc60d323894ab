/* The fair-share table (shared/share.c) and the RPC layer's per-peer key and share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rpc_internal.h"
#include "share.h"

#include <string.h>

static void test_share_refuses_greedy_key_only(void **state)
{
        cs_share *s = cs_share_new(3, 8);

        (void)state;
        for (int i = 0; i < 3; i++)
                assert_true(cs_share_take(s, "greedy"));
        assert_false(cs_share_take(s, "greedy"));
        assert_true(cs_share_take(s, "neighbour"));
        assert_int_equal(cs_share_held(s, "greedy"), 3);
        cs_share_give(s, "greedy");
        assert_true(cs_share_take(s, "greedy"));
        cs_share_give(s, "unknown"); /* no-op */
        assert_int_equal(cs_share_held(s, "neighbour"), 1);
        cs_share_free(s);
}

static void test_share_table_bounded_and_slots_reused(void **state)
{
        cs_share *s = cs_share_new(1, 2);

        (void)state;
        assert_true(cs_share_take(s, "a"));
        assert_true(cs_share_take(s, "b"));
        assert_false(cs_share_take(s, "c")); /* table full */
        cs_share_give(s, "a");
        assert_true(cs_share_take(s, "c")); /* a's slot freed at 0 */
        assert_int_equal(cs_share_held(s, "a"), 0);
        cs_share_free(s);
}

/* cs_share_try says why a key is refused; a key of CS_SHARE_KEY_MAX bytes (a tenant id at its
 * bound) is kept whole, so two such keys differing in the last byte are two keys. */
static void test_share_try_says_why(void **state)
{
        cs_share *s = cs_share_new(2, 2);
        char k1[CS_SHARE_KEY_MAX + 1], k2[CS_SHARE_KEY_MAX + 1];

        (void)state;
        memset(k1, 'k', CS_SHARE_KEY_MAX);
        k1[CS_SHARE_KEY_MAX] = '\0';
        memcpy(k2, k1, sizeof(k2));
        k2[CS_SHARE_KEY_MAX - 1] = 'z';
        assert_int_equal(cs_share_try(s, k1), CS_SHARE_TAKEN);
        assert_int_equal(cs_share_try(s, k1), CS_SHARE_TAKEN);
        assert_int_equal(cs_share_try(s, k1), CS_SHARE_USED_UP);
        assert_int_equal(cs_share_try(s, k2), CS_SHARE_TAKEN);
        assert_int_equal(cs_share_held(s, k1), 2);
        assert_int_equal(cs_share_held(s, k2), 1);
        assert_int_equal(cs_share_try(s, "third"), CS_SHARE_TABLE_FULL);
        assert_int_equal(cs_share_held(s, "third"), 0);
        cs_share_free(s);
}

static void test_share_zero_is_unlimited(void **state)
{
        cs_share *s = cs_share_new(0, 1);

        (void)state;
        for (int i = 0; i < 100; i++)
                assert_true(cs_share_take(s, "x"));
        cs_share_free(s);
        cs_share_free(NULL);
}

static void test_peer_key(void **state)
{
        char k[CS_SHARE_KEY_MAX + 1];

        (void)state;
        rpc_peer_key("ipv4:10.1.2.3:5555", k, sizeof(k));
        assert_string_equal(k, "ipv4:10.1.2.3");
        rpc_peer_key("ipv6:[2001:db8::1]:5555", k, sizeof(k));
        assert_string_equal(k, "ipv6:[2001:db8::1]");
        rpc_peer_key("ipv4:127.0.0.1:5555", k, sizeof(k));
        assert_string_equal(k, "ipv4:127.0.0.1:5555");
        rpc_peer_key("ipv6:[::1]:6", k, sizeof(k));
        assert_string_equal(k, "ipv6:[::1]:6");
        rpc_peer_key("unix:/run/x.sock", k, sizeof(k));
        assert_string_equal(k, "unix:/run/x.sock");
        assert_int_equal(rpc_peer_share(256, 0), 256);
        assert_int_equal(rpc_peer_share(256, 1000), 256);
        assert_int_equal(rpc_peer_share(1, 5), 1);
        assert_int_equal(rpc_peer_share(10, 4), 4);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_share_refuses_greedy_key_only),
                cmocka_unit_test(test_share_table_bounded_and_slots_reused),
                cmocka_unit_test(test_share_try_says_why),
                cmocka_unit_test(test_share_zero_is_unlimited),
                cmocka_unit_test(test_peer_key),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
