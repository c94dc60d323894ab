/* The node agent's metrics (agent_metrics.h). */
#include <stdatomic.h>
#include <stdlib.h>

#include "agent_metrics.h"
#include "log.h"
#include "util.h"

static _Atomic uint64_t exec_outcomes[NA_EXEC_N_OUTCOMES];
static _Atomic int64_t execs_running;
static _Atomic uint64_t file_read_bytes, file_write_bytes;
/* Exec durations: from a `true` (tens of ms through runsc) to the 1 h exec cap. */
static const double exec_bounds[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                      2.5,  5,     10,   30,  60,   300, 1800 };
static cs_histogram exec_seconds = { .bounds = exec_bounds, .n_bounds = ARRAY_SIZE(exec_bounds) };

void na_metrics_exec_started(void)
{
        atomic_fetch_add(&execs_running, 1);
}

void na_metrics_exec_ended(na_exec_outcome outcome, int64_t duration_ns)
{
        atomic_fetch_sub(&execs_running, 1);
        if ((unsigned)outcome >= NA_EXEC_N_OUTCOMES)
                outcome = NA_EXEC_ERROR;
        atomic_fetch_add(&exec_outcomes[outcome], 1);
        cs_histogram_observe(&exec_seconds, duration_ns);
}

void na_metrics_file_bytes(bool write, uint64_t bytes)
{
        atomic_fetch_add(write ? &file_write_bytes : &file_read_bytes, bytes);
}

static const char *const outcome_names[NA_EXEC_N_OUTCOMES] = {
        [NA_EXEC_EXITED] = "exited",   [NA_EXEC_SIGNALED] = "signaled",
        [NA_EXEC_TIMEOUT] = "timeout", [NA_EXEC_CANCELLED] = "cancelled",
        [NA_EXEC_OOM] = "oom",         [NA_EXEC_ERROR] = "error",
};

/* The status label values: the API's SandboxStatus names, as DescribeSandbox reports. */
static const struct {
        sb_status status;
        const char *name;
} statuses[] = {
        { SB_STARTING, "STARTING" },
        { SB_READY, "READY" },
        { SB_FAILED, "FAILED" },
        { SB_DESTROYED, "DESTROYED" },
};

/* The per-sandbox families, in the order written; each sandbox adds one sample to each. */
enum {
        M_CPU,
        M_MEM,
        M_MEM_PEAK,
        M_DISK_R,
        M_DISK_W,
        M_NET_RX,
        M_NET_TX,
        M_NET_DENIED,
        M_UPTIME,
        M_STATUS,
        M_N
};
static const struct {
        const char *name, *type, *help;
} families[M_N] = {
        [M_CPU] = { "compute_sandbox_cpu_seconds_total", "counter",
                    "CPU time the sandbox used (its cgroup), in seconds." },
        [M_MEM] = { "compute_sandbox_memory_bytes", "gauge",
                    "Memory the sandbox uses now (cgroup memory.current); 0 once it ended." },
        [M_MEM_PEAK] = { "compute_sandbox_memory_peak_bytes", "gauge",
                         "Highest memory use of the sandbox over its life." },
        [M_DISK_R] = { "compute_sandbox_disk_read_bytes_total", "counter",
                       "Bytes read from the sandbox's workspace (docs/nodeagent.md)." },
        [M_DISK_W] = { "compute_sandbox_disk_write_bytes_total", "counter",
                       "Bytes written to the sandbox's workspace (docs/nodeagent.md)." },
        [M_NET_RX] = { "compute_sandbox_network_receive_bytes_total", "counter",
                       "Bytes the sandbox received over its network." },
        [M_NET_TX] = { "compute_sandbox_network_transmit_bytes_total", "counter",
                       "Bytes the sandbox sent over its network." },
        [M_NET_DENIED] = { "compute_sandbox_egress_denied_packets_total", "counter",
                           "Packets of the sandbox its network policy dropped (local mode's "
                           "sandbox network; docs/security.md, \"Network\")." },
        [M_UPTIME] = { "compute_sandbox_uptime_seconds", "gauge",
                       "Seconds since the sandbox was created (until it was destroyed)." },
        [M_STATUS] = { "compute_sandbox_status", "gauge",
                       "1 for the sandbox's current status, 0 for the others." },
};

/* Every sandbox the source lists, destroyed ones for NA_METRICS_DESTROYED_KEEP_MS: page by
 * page; the entries are appended to *all. */
static int list_all(source *src, src_entry **all, size_t *n_all, cs_error **err)
{
        _cleanup_free_ char *token = NULL;
        size_t cap = 0;

        do {
                src_page page = { .token = token ? token : "",
                                  .size = SRC_PAGE_MAX,
                                  .include_destroyed = true };
                src_entry *e = NULL;
                size_t n = 0;
                char *next = NULL;

                if (src->ops->list(src, &page, &e, &n, &next, err) < 0)
                        return -1;
                for (size_t i = 0; i < n; i++) {
                        *all = cs_xgrow(*all, *n_all, &cap, sizeof(**all));
                        (*all)[(*n_all)++] = e[i];
                }
                free(e); /* the entries moved */
                free(token);
                token = next;
        } while (token);
        return 0;
}

static void write_sandboxes(cs_mpage *p, source *src)
{
        src_entry *all = NULL;
        size_t n = 0;
        cs_error *err = NULL;
        int64_t now = cs_now_realtime_ms();
        bool *shown;

        if (list_all(src, &all, &n, &err) < 0) {
                log_warn("metrics: cannot list the sandboxes: %s", err->msg);
                cs_error_free(err);
        }
        shown = cs_xcalloc(n + 1, sizeof(*shown));
        for (size_t i = 0; i < n; i++) {
                const sb_info *in = &all[i].info;

                shown[i] = in->status != SB_DESTROYED ||
                           now - in->destroyed_at_ms < NA_METRICS_DESTROYED_KEEP_MS;
        }
        for (int m = 0; m < M_N; m++) {
                cs_mpage_family(p, families[m].name, families[m].type, families[m].help);
                for (size_t i = 0; i < n; i++) {
                        const sb_info *in = &all[i].info;
                        const usage_metrics *u = &in->usage;
                        const char *labels[] = { "sandbox_id",  in->id,       "tenant_id",
                                                 in->tenant_id, "session_id", in->session_id,
                                                 NULL,          NULL,         NULL };
                        int64_t end = in->destroyed_at_ms ? in->destroyed_at_ms : now;

                        if (!shown[i])
                                continue;
                        switch (m) {
                        case M_CPU:
                                cs_mpage_sample(p, families[m].name, labels,
                                                (double)u->cpu_ms / 1000);
                                break;
                        case M_MEM:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    in->memory_now_bytes);
                                break;
                        case M_MEM_PEAK:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    u->memory_peak_bytes);
                                break;
                        case M_DISK_R:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    u->disk_read_bytes);
                                break;
                        case M_DISK_W:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    u->disk_write_bytes);
                                break;
                        case M_NET_RX:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    u->network_ingress_bytes);
                                break;
                        case M_NET_TX:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    u->network_egress_bytes);
                                break;
                        case M_NET_DENIED:
                                cs_mpage_sample_u64(p, families[m].name, labels,
                                                    in->net_dropped_packets);
                                break;
                        case M_UPTIME:
                                cs_mpage_sample(p, families[m].name, labels,
                                                in->created_at_ms && end > in->created_at_ms
                                                        ? (double)(end - in->created_at_ms) / 1000
                                                        : 0);
                                break;
                        case M_STATUS:
                                labels[6] = "status";
                                for (size_t k = 0; k < ARRAY_SIZE(statuses); k++) {
                                        labels[7] = statuses[k].name;
                                        cs_mpage_sample_u64(p, families[m].name, labels,
                                                            in->status == statuses[k].status);
                                }
                                break;
                        }
                }
        }
        free(shown);
        src_entries_free(all, n);
}

void na_metrics_write(cs_mpage *p, source *src)
{
        write_sandboxes(p, src);
        cs_mpage_family(p, "compute_exec_total", "counter",
                        "Execs that ended, by how: exited, signaled, timeout, cancelled, oom, "
                        "error (could not start or lost).");
        for (int i = 0; i < NA_EXEC_N_OUTCOMES; i++) {
                const char *labels[] = { "outcome", outcome_names[i], NULL };

                cs_mpage_sample_u64(p, "compute_exec_total", labels,
                                    atomic_load(&exec_outcomes[i]));
        }
        cs_mpage_family(p, "compute_exec_duration_seconds", "histogram",
                        "Wall time of execs, from start to the process's end.");
        cs_mpage_histogram(p, "compute_exec_duration_seconds", NULL, &exec_seconds);
        cs_mpage_family(p, "compute_execs_running", "gauge", "Execs running now.");
        cs_mpage_sample(p, "compute_execs_running", NULL, (double)atomic_load(&execs_running));
        cs_mpage_family(p, "compute_file_bytes_total", "counter",
                        "Workspace bytes moved by ReadFile (op=read) and WriteFile (op=write).");
        {
                const char *r[] = { "op", "read", NULL }, *w[] = { "op", "write", NULL };

                cs_mpage_sample_u64(p, "compute_file_bytes_total", r,
                                    atomic_load(&file_read_bytes));
                cs_mpage_sample_u64(p, "compute_file_bytes_total", w,
                                    atomic_load(&file_write_bytes));
        }
}

void na_metrics_write_pool(cs_mpage *p, sb_registry *reg)
{
        sb_pool_stats st;
        const char *ready[] = { "status", "ready", NULL },
                   *starting[] = { "status", "starting", NULL };
        const char *hit[] = { "result", "hit", NULL }, *miss[] = { "result", "miss", NULL };

        if (!reg)
                return;
        sb_pool_stats_read(reg, &st);
        if (!st.target)
                return;
        cs_mpage_family(p, "compute_warm_pool_target", "gauge",
                        "Warm sandboxes the agent keeps (--warm-pool).");
        cs_mpage_sample_u64(p, "compute_warm_pool_target", NULL, st.target);
        cs_mpage_family(p, "compute_warm_pool_sandboxes", "gauge",
                        "Warm sandboxes now, by status (ready: claimable).");
        cs_mpage_sample_u64(p, "compute_warm_pool_sandboxes", ready, st.ready);
        cs_mpage_sample_u64(p, "compute_warm_pool_sandboxes", starting, st.starting);
        cs_mpage_family(p, "compute_warm_pool_claims_total", "counter",
                        "CreateSandbox calls of the default profile: hit (a warm sandbox "
                        "claimed), miss (none READY: the cold path).");
        cs_mpage_sample_u64(p, "compute_warm_pool_claims_total", hit, st.hits);
        cs_mpage_sample_u64(p, "compute_warm_pool_claims_total", miss, st.misses);
        cs_mpage_family(p, "compute_warm_pool_claim_seconds", "histogram",
                        "Time a claim takes in the agent (usage rebase and record included).");
        cs_mpage_histogram(p, "compute_warm_pool_claim_seconds", NULL, st.claim_seconds);
}

void na_metrics_write_dns(cs_mpage *p, na_net *net)
{
        dns_proxy_stats st;
        const char *refused[] = { "result", "refused", NULL },
                   *dropped[] = { "result", "dropped", NULL },
                   *servfail[] = { "result", "servfail", NULL };
        const char *timeout[] = { "reason", "timeout", NULL },
                   *bad[] = { "reason", "bad_reply", NULL };

        if (!net)
                return;
        na_net_dns_stats(net, &st);
        cs_mpage_family(p, "compute_dns_queries_total", "counter",
                        "DNS queries the agent's resolver read from sandboxes.");
        cs_mpage_sample_u64(p, "compute_dns_queries_total", NULL, st.queries);
        cs_mpage_family(p, "compute_dns_replies_by_agent_total", "counter",
                        "Queries the resolver settled itself: refused (REFUSED, NOTIMP, FORMERR: "
                        "a name the policy does not allow, a malformed query), dropped "
                        "(unanswered: no DNS header, over the size cap or the sandbox's rate), "
                        "servfail (no upstream answered, or a cap on queries in flight).");
        cs_mpage_sample_u64(p, "compute_dns_replies_by_agent_total", refused, st.refused);
        cs_mpage_sample_u64(p, "compute_dns_replies_by_agent_total", dropped, st.dropped);
        cs_mpage_sample_u64(p, "compute_dns_replies_by_agent_total", servfail, st.servfail);
        cs_mpage_family(p, "compute_dns_upstream_queries_total", "counter",
                        "Attempts the resolver sent to an upstream resolver (--upstream-dns).");
        cs_mpage_sample_u64(p, "compute_dns_upstream_queries_total", NULL, st.forwarded);
        cs_mpage_family(p, "compute_dns_upstream_errors_total", "counter",
                        "Upstream attempts that failed: timeout, or bad_reply (a reply that "
                        "failed the checks, ignored).");
        cs_mpage_sample_u64(p, "compute_dns_upstream_errors_total", timeout, st.upstream_timeouts);
        cs_mpage_sample_u64(p, "compute_dns_upstream_errors_total", bad, st.upstream_bad);
        cs_mpage_family(p, "compute_dns_tcp_refused_total", "counter",
                        "TCP connections to the resolver closed at once: over a sandbox's cap.");
        cs_mpage_sample_u64(p, "compute_dns_tcp_refused_total", NULL, st.tcp_refused);
}
