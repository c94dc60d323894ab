/* Message encoding shared by the server and client halves of the RPC layer. */
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "rpc_internal.h"
#include "util.h"

int rpc_message_pack(const ProtobufCMessage *msg, size_t max, grpc_byte_buffer **ret,
                     cs_error **err)
{
        size_t size = protobuf_c_message_get_packed_size(msg);
        grpc_slice slice;

        if (size > max)
                return cs_error_set(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "%s message of %zu bytes is over the %zu-byte cap",
                                    msg->descriptor->name, size, max);
        slice = grpc_slice_malloc(size);
        protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
        *ret = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        return 0;
}

int rpc_message_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb,
                       const char *what, grpc_status_code bad_code, ProtobufCMessage **ret,
                       cs_error **err)
{
        grpc_byte_buffer_reader reader;
        grpc_slice slice;
        ProtobufCMessage *msg;

        if (!grpc_byte_buffer_reader_init(&reader, bb))
                return cs_error_set(err, bad_code, "%s: cannot read the %s bytes", desc->name,
                                    what);
        slice = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                        GRPC_SLICE_START_PTR(slice));
        grpc_slice_unref(slice);
        if (!msg)
                return cs_error_set(err, bad_code, "malformed %s: not a valid %s", what,
                                    desc->name);
        *ret = msg;
        return 0;
}

void rpc_size_args(grpc_arg args[RPC_N_SIZE_ARGS], int max_message)
{
        args[0] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                              .value.integer = max_message };
        args[1] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                              .key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                              .value.integer = max_message };
}

int64_t rpc_deadline_remaining_ms(gpr_timespec deadline)
{
        gpr_timespec now, left;

        if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0)
                return INT64_MAX;
        now = gpr_now(deadline.clock_type);
        left = gpr_time_sub(deadline, now);
        return gpr_time_to_millis(left);
}

gpr_timespec rpc_deadline_from_timeout(int64_t timeout_ms)
{
        if (timeout_ms <= 0)
                return gpr_inf_future(GPR_CLOCK_MONOTONIC);
        return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                            gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

bool rpc_request_id_valid(const char *s, size_t len)
{
        if (len == 0 || len > RPC_REQUEST_ID_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] <= 0x20 || s[i] >= 0x7f)
                        return false;
        }
        return true;
}

void rpc_global_init(void)
{
        grpc_init();
}

void rpc_global_shutdown(void)
{
        grpc_shutdown_blocking();
}
