/* Conversions between the project's internal values and the well-known protobuf types, for
 * the service files (the only ones that include generated headers). Results live on the
 * call's arena. */
#pragma once

#include <stdint.h>

#include "common/v1/usage.pb-c.h"
#include "compute/v1/compute.pb-c.h"
#include "error.h"
#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "netpolicy.h"
#include "rpc.h"
#include "usage.h"

/* A Timestamp for wall-clock milliseconds; NULL (unset) for ms <= 0. */
Google__Protobuf__Timestamp *pb_timestamp(rpc_call *call, int64_t ms);
int64_t pb_timestamp_ms(const Google__Protobuf__Timestamp *ts);

Google__Protobuf__Duration *pb_duration(rpc_call *call, int64_t ms);
/* Milliseconds of a Duration: 0 when unset, -1 when negative, saturated when huge. */
int64_t pb_duration_ms(const Google__Protobuf__Duration *d);

Common__V1__UsageMetrics *pb_usage(rpc_call *call, const usage_metrics *u);
void pb_usage_read(const Common__V1__UsageMetrics *m, usage_metrics *ret);

/* A policy as the NetworkSpec of an answer (the policy in force, docs/api.md "Network"):
 * egress UNSPECIFIED, which no answer gives, is written NONE (no policy reported: a sandbox
 * without network). */
Compute__V1__NetworkSpec *pb_network(rpc_call *call, const cs_netpolicy *p);
/* A NetworkSpec as a policy, checked by cs_netpolicy_parse (INVALID_ARGUMENT naming the
 * entry); NULL: egress UNSPECIFIED and no lists. *ret is the caller's to cs_netpolicy_clear. */
int pb_network_read(const Compute__V1__NetworkSpec *m, cs_netpolicy *ret, cs_error **err);
