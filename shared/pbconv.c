#include "pbconv.h"

#include <string.h>

Google__Protobuf__Timestamp *pb_timestamp(rpc_call *call, int64_t ms)
{
        Google__Protobuf__Timestamp *ts;

        if (ms <= 0)
                return NULL;
        ts = rpc_call_alloc(call, sizeof(*ts));
        google__protobuf__timestamp__init(ts);
        ts->seconds = ms / 1000;
        ts->nanos = (int32_t)(ms % 1000) * 1000000;
        return ts;
}

int64_t pb_timestamp_ms(const Google__Protobuf__Timestamp *ts)
{
        return ts ? ts->seconds * 1000 + ts->nanos / 1000000 : 0;
}

Google__Protobuf__Duration *pb_duration(rpc_call *call, int64_t ms)
{
        Google__Protobuf__Duration *d = rpc_call_alloc(call, sizeof(*d));

        google__protobuf__duration__init(d);
        d->seconds = ms / 1000;
        d->nanos = (int32_t)(ms % 1000) * 1000000;
        return d;
}

int64_t pb_duration_ms(const Google__Protobuf__Duration *d)
{
        if (!d)
                return 0;
        if (d->seconds < 0 || d->nanos < 0)
                return -1;
        if (d->seconds > INT64_MAX / 2000)
                return INT64_MAX / 2;
        return d->seconds * 1000 + d->nanos / 1000000;
}

Common__V1__UsageMetrics *pb_usage(rpc_call *call, const usage_metrics *u)
{
        Common__V1__UsageMetrics *m = rpc_call_alloc(call, sizeof(*m));

        common__v1__usage_metrics__init(m);
        m->cpu_ms = u->cpu_ms;
        m->memory_peak_bytes = u->memory_peak_bytes;
        m->memory_avg_bytes = u->memory_avg_bytes;
        m->disk_read_bytes = u->disk_read_bytes;
        m->disk_write_bytes = u->disk_write_bytes;
        m->network_egress_bytes = u->network_egress_bytes;
        m->network_ingress_bytes = u->network_ingress_bytes;
        return m;
}

void pb_usage_read(const Common__V1__UsageMetrics *m, usage_metrics *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (!m)
                return;
        *ret = (usage_metrics){
                .cpu_ms = m->cpu_ms,
                .memory_peak_bytes = m->memory_peak_bytes,
                .memory_avg_bytes = m->memory_avg_bytes,
                .disk_read_bytes = m->disk_read_bytes,
                .disk_write_bytes = m->disk_write_bytes,
                .network_egress_bytes = m->network_egress_bytes,
                .network_ingress_bytes = m->network_ingress_bytes,
        };
}

_Static_assert((int)CS_EGRESS_NONE == (int)COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_NONE &&
                       (int)CS_EGRESS_ALLOWLIST ==
                               (int)COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_ALLOWLIST &&
                       (int)CS_EGRESS_OPEN == (int)COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_OPEN,
               "cs_egress numbers are compute.v1.EgressMode's");

Compute__V1__NetworkSpec *pb_network(rpc_call *call, const cs_netpolicy *p)
{
        Compute__V1__NetworkSpec *m = rpc_call_alloc(call, sizeof(*m));

        compute__v1__network_spec__init(m);
        m->egress = p->egress == CS_EGRESS_UNSPECIFIED ? COMPUTE__V1__EGRESS_MODE__EGRESS_MODE_NONE
                                                       : (Compute__V1__EgressMode)p->egress;
        m->n_allow_domains = p->n_domains;
        m->allow_domains = rpc_call_alloc(call, (p->n_domains + 1) * sizeof(*m->allow_domains));
        for (size_t i = 0; i < p->n_domains; i++)
                m->allow_domains[i] = rpc_call_strdup(call, p->domains[i]);
        m->n_allow_cidrs = p->n_cidrs;
        m->allow_cidrs = rpc_call_alloc(call, (p->n_cidrs + 1) * sizeof(*m->allow_cidrs));
        for (size_t i = 0; i < p->n_cidrs; i++) {
                m->allow_cidrs[i] = rpc_call_alloc(call, CS_NET_CIDR_STRLEN + 1);
                cs_cidr_format(&p->cidrs[i], m->allow_cidrs[i], CS_NET_CIDR_STRLEN + 1);
        }
        return m;
}

int pb_network_read(const Compute__V1__NetworkSpec *m, cs_netpolicy *ret, cs_error **err)
{
        if (!m)
                return cs_netpolicy_parse(CS_EGRESS_UNSPECIFIED, NULL, 0, NULL, 0, ret, err);
        return cs_netpolicy_parse((cs_egress)m->egress, (const char *const *)m->allow_domains,
                                  m->n_allow_domains, (const char *const *)m->allow_cidrs,
                                  m->n_allow_cidrs, ret, err);
}
