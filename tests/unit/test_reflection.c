/* The reflection index (frontend/reflection.c) on the embedded descriptor set and on sets
 * made here: every kind of symbol, extensions, and the sets it must refuse. The protocol
 * itself, over gRPC, is tests/e2e/test_reflection.py. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "reflection.h"
#include "util.h"

static cs_reflection *embedded(void)
{
        _cleanup_error_ cs_error *err = NULL;
        cs_reflection *r =
                cs_reflection_new(cs_reflection_descriptors, cs_reflection_descriptors_len, &err);

        assert_null(err);
        assert_non_null(r);
        return r;
}

static void expect_file(const cs_reflection *r, const char *symbol, const char *file)
{
        ssize_t want = cs_reflection_file_by_name(r, file);

        assert_true(want >= 0);
        if (cs_reflection_file_by_symbol(r, symbol) != want)
                fail_msg("%s: not found in %s", symbol, file);
}

static void test_embedded_symbols(void **state)
{
        cs_reflection *r = embedded();

        (void)state;
        expect_file(r, "compute.v1.ComputeService", "compute/v1/compute.proto");
        expect_file(r, "compute.v1.ComputeService.ExecCommand", "compute/v1/compute.proto");
        expect_file(r, "compute.v1.ExecEvent.stdout", "compute/v1/compute.proto");
        expect_file(r, "compute.v1.ExecEvent.event", "compute/v1/compute.proto");
        /* A map field's entry type is a nested message of its own. */
        expect_file(r, "compute.v1.ExecCommandRequest.EnvEntry", "compute/v1/compute.proto");
        expect_file(r, "compute.v1.ExecCommandRequest.EnvEntry.key", "compute/v1/compute.proto");
        expect_file(r, "compute.v1.SANDBOX_STATUS_READY", "compute/v1/compute.proto");
        expect_file(r, "common.v1.UsageMetrics.cpu_ms", "common/v1/usage.proto");
        expect_file(r, "grpc.health.v1.HealthCheckResponse.SERVING", "grpc/health/v1/health.proto");
        expect_file(r, "google.protobuf.Timestamp", "google/protobuf/timestamp.proto");
        expect_file(r, "grpc.reflection.v1alpha.ServerReflection.ServerReflectionInfo",
                    "grpc/reflection/v1alpha/reflection.proto");

        assert_int_equal(cs_reflection_file_by_symbol(r, "compute.v1.Nope"), -1);
        assert_int_equal(cs_reflection_file_by_symbol(r, ".compute.v1.ExecEvent"), -1);
        assert_int_equal(cs_reflection_file_by_symbol(r, "compute.v1"), -1);
        assert_int_equal(cs_reflection_file_by_symbol(r, ""), -1);
        assert_int_equal(cs_reflection_file_by_name(r, "compute/v1/nope.proto"), -1);
        assert_int_equal(cs_reflection_file_by_extension(r, "compute.v1.ExecEvent", 100), -1);

        assert_int_equal(cs_reflection_n_services(r), 4);
        assert_string_equal(cs_reflection_service(r, 0), "compute.v1.ComputeService");
        assert_string_equal(cs_reflection_service(r, 1), "grpc.health.v1.Health");
        assert_string_equal(cs_reflection_service(r, 2), "grpc.reflection.v1.ServerReflection");
        assert_string_equal(cs_reflection_service(r, 3),
                            "grpc.reflection.v1alpha.ServerReflection");
        assert_null(cs_reflection_service(r, 4));
        cs_reflection_free(r);
}

/* Packs files into a FileDescriptorSet; *ret_len its size. The caller frees it. */
static uint8_t *pack_set(Google__Protobuf__FileDescriptorProto **files, size_t n, size_t *ret_len)
{
        Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;
        uint8_t *buf;

        set.file = files;
        set.n_file = n;
        *ret_len = google__protobuf__file_descriptor_set__get_packed_size(&set);
        buf = cs_xmalloc(*ret_len + 1);
        google__protobuf__file_descriptor_set__pack(&set, buf);
        return buf;
}

static void expect_refused(const uint8_t *set, size_t len, const char *why)
{
        _cleanup_error_ cs_error *err = NULL;

        assert_null(cs_reflection_new(set, len, &err));
        assert_non_null(err);
        assert_int_equal(err->code, GRPC_STATUS_INTERNAL);
        if (!strstr(err->msg, why))
                fail_msg("'%s' does not say '%s'", err->msg, why);
}

static void test_refuses_bad_sets(void **state)
{
        static const uint8_t wrong_field[] = { 0x12, 0x00 };
        static const uint8_t too_long[] = { 0x0a, 0x7f, 0x00 };
        static const uint8_t bad_varint[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff,
                                              0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
        static const uint8_t not_a_file[] = { 0x0a, 0x02, 0xff, 0xff };
        Google__Protobuf__FileDescriptorProto f = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
        Google__Protobuf__FileDescriptorProto *files[] = { &f };
        char *deps[] = { "missing.proto" };
        _cleanup_free_ uint8_t *set = NULL;
        size_t len;

        (void)state;
        expect_refused(wrong_field, sizeof(wrong_field), "does not decode");
        expect_refused(too_long, sizeof(too_long), "does not decode");
        expect_refused(bad_varint, sizeof(bad_varint), "does not decode");
        expect_refused(not_a_file, sizeof(not_a_file), "does not decode");
        expect_refused(cs_reflection_descriptors, cs_reflection_descriptors_len - 1,
                       "does not decode");

        f.name = "a.proto";
        f.dependency = deps;
        f.n_dependency = 1;
        set = pack_set(files, 1, &len);
        expect_refused(set, len, "a.proto imports missing.proto");
}

/* Extensions, declared at the top of a file and inside a message; a file without a
 * package; its transitive imports resolved in any order. */
static void test_extensions_and_scopes(void **state)
{
        Google__Protobuf__FileDescriptorProto base = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT,
                                              ext = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
        Google__Protobuf__DescriptorProto target = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT,
                                          holder = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
        Google__Protobuf__FieldDescriptorProto
                top = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT,
                nested = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT;
        Google__Protobuf__DescriptorProto *base_msgs[] = { &target }, *ext_msgs[] = { &holder };
        Google__Protobuf__FieldDescriptorProto *top_exts[] = { &top }, *nested_exts[] = { &nested };
        /* The importing file first: --include_imports never does that, the index must not care. */
        Google__Protobuf__FileDescriptorProto *files[] = { &ext, &base };
        char *deps[] = { "base.proto" };
        _cleanup_error_ cs_error *err = NULL;
        _cleanup_free_ uint8_t *set = NULL;
        cs_reflection *r;
        size_t len;

        (void)state;
        base.name = "base.proto"; /* no package */
        target.name = "Target";
        base.message_type = base_msgs;
        base.n_message_type = 1;

        ext.name = "ext.proto";
        ext.package = "t";
        ext.dependency = deps;
        ext.n_dependency = 1;
        top.name = "top";
        top.extendee = ".Target";
        top.number = 100;
        top.has_number = 1;
        ext.extension = top_exts;
        ext.n_extension = 1;
        holder.name = "Holder";
        nested.name = "inner";
        nested.extendee = ".Target";
        nested.number = 101;
        nested.has_number = 1;
        holder.extension = nested_exts;
        holder.n_extension = 1;
        ext.message_type = ext_msgs;
        ext.n_message_type = 1;

        set = pack_set(files, 2, &len);
        r = cs_reflection_new(set, len, &err);
        assert_null(err);
        assert_non_null(r);
        assert_int_equal(cs_reflection_file_by_name(r, "ext.proto"), 0);
        assert_int_equal(cs_reflection_file_by_name(r, "base.proto"), 1);
        assert_int_equal(cs_reflection_file_by_symbol(r, "Target"), 1);
        assert_int_equal(cs_reflection_file_by_symbol(r, "t.top"), 0);
        assert_int_equal(cs_reflection_file_by_symbol(r, "t.Holder.inner"), 0);
        assert_int_equal(cs_reflection_file_by_extension(r, "Target", 100), 0);
        assert_int_equal(cs_reflection_file_by_extension(r, "Target", 101), 0);
        assert_int_equal(cs_reflection_file_by_extension(r, "Target", 102), -1);
        assert_int_equal(cs_reflection_file_by_extension(r, ".Target", 100), -1);
        assert_int_equal(cs_reflection_n_services(r), 0);
        cs_reflection_free(r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_embedded_symbols),
                cmocka_unit_test(test_refuses_bad_sets),
                cmocka_unit_test(test_extensions_and_scopes),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
