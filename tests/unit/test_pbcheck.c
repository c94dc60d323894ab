/* The RPC layer's refusal of strings that are not UTF-8 (shared/rpc_codec.c, wire_check), on
 * the service's own messages: every string field, at any depth, in repeated fields and map
 * entries, is checked, and the error names the field by its path from the top. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stdlib.h>
#include <string.h>

#include "compute/v1/compute.pb-c.h"
#include "rpc_internal.h"
#include "util.h"

#define BAD "bad\xff\xfe.txt"

/* Packs msg (protobuf-c does not check UTF-8 when packing) and decodes it as a request:
 * returns the error's message (malloc'd) or NULL when it decoded fine. */
static char *decode_error(const ProtobufCMessage *msg)
{
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint8_t *buf = cs_xmalloc(len ? len : 1);
        grpc_slice slice;
        grpc_byte_buffer *bb;
        ProtobufCMessage *out = NULL;
        cs_error *err = NULL;
        char *ret = NULL;

        protobuf_c_message_pack(msg, buf);
        slice = grpc_slice_from_copied_buffer((const char *)buf, len);
        bb = grpc_raw_byte_buffer_create(&slice, 1);
        if (rpc_message_unpack(msg->descriptor, bb, "request", GRPC_STATUS_INVALID_ARGUMENT, &out,
                               &err) < 0) {
                assert_int_equal(err->code, GRPC_STATUS_INVALID_ARGUMENT);
                ret = cs_xstrdup(err->msg);
                cs_error_free(err);
        } else {
                protobuf_c_message_free_unpacked(out, NULL);
        }
        grpc_byte_buffer_destroy(bb);
        grpc_slice_unref(slice);
        free(buf);
        return ret;
}

static void expect_refused(const ProtobufCMessage *msg, const char *field)
{
        _cleanup_free_ char *got = decode_error(msg);
        _cleanup_free_ char *want = cs_xasprintf("field %s is not valid UTF-8", field);

        if (!got || !strstr(got, want))
                fail_msg("want '%s', got '%s'", want, got ? got : "(accepted)");
}

static void test_exec_request(void **state)
{
        Compute__V1__ExecCommandRequest r = COMPUTE__V1__EXEC_COMMAND_REQUEST__INIT;
        Compute__V1__ExecCommandRequest__EnvEntry e =
                COMPUTE__V1__EXEC_COMMAND_REQUEST__ENV_ENTRY__INIT;
        Compute__V1__ExecCommandRequest__EnvEntry *envp[1] = { &e };
        char *args[3] = { "ok", "caf\xc3\xa9", "x" };

        (void)state;
        r.sandbox_id = "0b7c8a5e-0000-4000-8000-000000000000";
        r.command = "ls";
        r.args = args;
        r.n_args = 3;
        r.env = envp;
        r.n_env = 1;
        e.key = "K";
        e.value = "v";
        r.working_dir = "/workspace";
        assert_null(decode_error(&r.base)); /* valid multi-byte text passes */

        r.command = BAD;
        expect_refused(&r.base, "command");
        r.command = "ls";
        args[2] = BAD; /* the last element of a repeated field */
        expect_refused(&r.base, "args");
        args[2] = "x";
        e.value = "\xc0\xaf"; /* overlong '/' in a map entry's value */
        expect_refused(&r.base, "env.value");
        e.value = "v";
        e.key = "\xed\xa0\x80"; /* a surrogate in a map entry's key */
        expect_refused(&r.base, "env.key");
        e.key = "K";
        r.working_dir = "/work\xffspace";
        expect_refused(&r.base, "working_dir");
}

static void test_nested_message(void **state)
{
        Compute__V1__CreateSandboxRequest r = COMPUTE__V1__CREATE_SANDBOX_REQUEST__INIT;
        Compute__V1__WorkspaceSpec ws = COMPUTE__V1__WORKSPACE_SPEC__INIT;

        (void)state;
        r.tenant_id = "t";
        r.session_id = "s";
        r.workspace = &ws;
        ws.mount_path = "/workspace";
        assert_null(decode_error(&r.base));
        ws.mount_path = "/w\xe2\x82"; /* cut short */
        expect_refused(&r.base, "workspace.mount_path");
}

static void test_file_requests(void **state)
{
        Compute__V1__WriteFileRequest w = COMPUTE__V1__WRITE_FILE_REQUEST__INIT;
        Compute__V1__ListFilesRequest l = COMPUTE__V1__LIST_FILES_REQUEST__INIT;
        uint8_t data[2] = { 0xff, 0xfe };

        (void)state;
        w.sandbox_id = "0b7c8a5e-0000-4000-8000-000000000000";
        w.path = "ok.txt";
        w.data.data = data; /* bytes may hold anything */
        w.data.len = 2;
        assert_null(decode_error(&w.base));
        w.path = BAD;
        expect_refused(&w.base, "path");
        l.path = BAD;
        expect_refused(&l.base, "path");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_exec_request),
                cmocka_unit_test(test_nested_message),
                cmocka_unit_test(test_file_requests),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
