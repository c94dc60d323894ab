/* What a sandbox uses: live and frozen usage (cgroup counters, network counters of its host
 * process, the workspace's disk I/O), the memory samples behind averages and peaks, and the
 * usage windows of execs (sb_window_begin/end).
 *
 * Disk I/O has one source per sandbox (disk_totals_locked): a workspace volume's block
 * counters since it was attached plus the totals of its earlier attachments (everything that
 * reaches the volume: the sandbox's writes and the agent's file API alike); without a volume
 * (--workspace-volumes=off, kube mode) the cgroup's block I/O plus the agent's own file I/O
 * (sb_count_file_io).
 *
 * Owns the usage fields of a sandbox (frozen, usage_frozen, mem_*, file_*, windows, execs)
 * and reads vol_base_* and vol_start (set when the volume is attached: sandbox.c, and
 * sandbox_record.c's opening). May touch: those under the registry lock; the cgroup (read,
 * reset of the memory peak), /proc network counters and the volume's block counters, always
 * unlocked. Never the status, the list or the runtime. Locking: sandbox_internal.h. */
#include "sandbox_internal.h"

#include <string.h>

#include "net.h"
#include "util.h"
#include "volume.h"

/* a - b, 0 when a counter reads below its base (a reading taken before a claim's rebase). */
static uint64_t sub_sat(uint64_t a, uint64_t b)
{
        return a > b ? a - b : 0;
}

/* A networked sandbox's counters are its nftables counters (net.h): the IP bytes forwarded
 * between it and the outside, its resolver's answers not among them. Otherwise those of its
 * host process's network namespace (a sandbox without a network has loopback alone, which
 * does not count). */
static void read_net(sb_registry *reg, sandbox *sb, uint64_t *rx, uint64_t *tx)
{
        cs_error *err = NULL;
        na_net_counters c;
        bool networked;

        *rx = *tx = 0;
        pthread_mutex_lock(&reg->lock);
        networked = sb->net_has_slot && !sb->net_going && reg->cfg.net;
        pthread_mutex_unlock(&reg->lock);
        if (networked) {
                if (na_net_read(reg->cfg.net, sb->id, &c, &err) < 0) {
                        cs_error_free(err);
                        return;
                }
                *rx = c.rx_bytes;
                *tx = c.tx_bytes;
                pthread_mutex_lock(&reg->lock);
                sb->net_dropped = c.dropped_packets;
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        if (sb->host_pid > 0 && proc_read_net("/proc", sb->host_pid, rx, tx, &err) < 0)
                cs_error_free(err);
}

/* A reading of the volume's block counters, taken unlocked (sysfs). */
typedef struct disk_reading {
        bool have;
        uint64_t read, written;
} disk_reading;

static void read_volume(sandbox *sb, disk_reading *ret)
{
        cs_error *err = NULL;

        *ret = (disk_reading){ 0 };
        if (!sb->volume)
                return;
        ret->have = vol_io_bytes(sb->workspace_dir, &ret->read, &ret->written, &err) == 0;
        cs_error_free(err);
}

/* Under the lock: the workspace's disk I/O totals from the readings just taken (see the top
 * of this file). A volume that cannot be read keeps the last totals. */
static void disk_totals_locked(const sandbox *sb, const cgroup_sample *s, const disk_reading *d,
                               uint64_t *ret_read, uint64_t *ret_written)
{
        if (!sb->volume) {
                *ret_read = sub_sat(s->io_read_bytes, sb->base_io_read) + sb->file_read;
                *ret_written = sub_sat(s->io_write_bytes, sb->base_io_written) + sb->file_written;
        } else if (d->have && d->read >= sb->vol_start.read &&
                   d->written >= sb->vol_start.written) {
                *ret_read = sb->vol_base_read + d->read - sb->vol_start.read;
                *ret_written = sb->vol_base_written + d->written - sb->vol_start.written;
        } else {
                *ret_read = sb->frozen.disk_read_bytes;
                *ret_written = sb->frozen.disk_write_bytes;
        }
}

/* Cgroup counters, memory samples, the workspace's disk I/O; reads the sandbox's counters
 * under the lock. */
void sandbox_usage_live(sb_registry *reg, sandbox *sb, usage_metrics *ret)
{
        cgroup_sample s = { 0 };
        cs_error *err = NULL;
        uint64_t rx, tx;
        disk_reading d;
        bool have = cgroup_read(reg->cg, sb->cgroup_path, &s, &err) == 0;

        cs_error_free(err);
        read_net(reg, sb, &rx, &tx);
        read_volume(sb, &d);
        pthread_mutex_lock(&reg->lock);
        /* Frozen, or the cgroup is gone (a container lost while the agent was down): the last
         * reading is the best there is. */
        if (sb->usage_frozen || !have) {
                *ret = sb->frozen;
                sb->mem_now = 0;
                pthread_mutex_unlock(&reg->lock);
                return;
        }
        /* A claimed warm sandbox's counters start at its claim (sandbox_usage_rebase). */
        rx = sub_sat(rx, sb->base_net_rx);
        tx = sub_sat(tx, sb->base_net_tx);
        ret->cpu_ms = sub_sat(s.cpu_ns, sb->base_cpu_ns) / 1000000;
        ret->memory_peak_bytes =
                s.memory_peak_bytes > sb->mem_max ? s.memory_peak_bytes : sb->mem_max;
        ret->memory_avg_bytes = sb->mem_n ? sb->mem_sum / sb->mem_n : s.memory_bytes;
        disk_totals_locked(sb, &s, &d, &ret->disk_read_bytes, &ret->disk_write_bytes);
        /* Cumulative: a counter that cannot be read any more (the sandbox process is gone)
         * keeps its last value rather than going back to 0. */
        ret->network_ingress_bytes =
                rx > sb->frozen.network_ingress_bytes ? rx : sb->frozen.network_ingress_bytes;
        ret->network_egress_bytes =
                tx > sb->frozen.network_egress_bytes ? tx : sb->frozen.network_egress_bytes;
        sb->frozen = *ret; /* the last reading, kept in the record */
        sb->mem_now = s.memory_bytes;
        pthread_mutex_unlock(&reg->lock);
}

void sandbox_usage_rebase(sb_registry *reg, sandbox *sb)
{
        cgroup_sample s = { 0 };
        cs_error *err = NULL;
        uint64_t rx, tx;
        disk_reading d;

        if (cgroup_read(reg->cg, sb->cgroup_path, &s, &err) < 0)
                cs_error_freep(&err);
        read_net(reg, sb, &rx, &tx);
        read_volume(sb, &d);
        /* cgroup v1 resets its high-water mark; v2 cannot (cgroup.h): there the peak is the
         * cgroup's lifetime peak, the warm idle time's few MiB included. */
        if (cgroup_reset_peak(reg->cg, sb->cgroup_path, &err) < 0)
                cs_error_freep(&err);
        pthread_mutex_lock(&reg->lock);
        sb->base_cpu_ns = s.cpu_ns;
        sb->base_io_read = s.io_read_bytes;
        sb->base_io_written = s.io_write_bytes;
        sb->base_net_rx = rx;
        sb->base_net_tx = tx;
        if (d.have)
                sb->vol_start = (vol_counters){ d.read, d.written };
        sb->vol_base_read = sb->vol_base_written = 0;
        sb->file_read = sb->file_written = 0;
        sb->mem_sum = sb->mem_n = sb->mem_max = 0;
        sb->mem_now = 0;
        memset(&sb->frozen, 0, sizeof(sb->frozen));
        pthread_mutex_unlock(&reg->lock);
}

void sandbox_usage_freeze(sb_registry *reg, sandbox *sb)
{
        usage_metrics u;

        sandbox_usage_live(reg, sb, &u);
        pthread_mutex_lock(&reg->lock);
        if (!sb->usage_frozen) {
                sb->frozen = u;
                sb->usage_frozen = true;
        }
        pthread_mutex_unlock(&reg->lock);
}

void sb_count_file_io(sb_registry *reg, sandbox *sb, uint64_t read, uint64_t written)
{
        if (sb->volume)
                return; /* the volume's block counters see these bytes already */
        pthread_mutex_lock(&reg->lock);
        sb->file_read += read;
        sb->file_written += written;
        pthread_mutex_unlock(&reg->lock);
}

/* --- exec windows ---------------------------------------------------------------------- */

static void window_sample_locked(sb_window *w, uint64_t mem)
{
        w->mem_sum += mem;
        w->mem_n++;
        if (mem > w->mem_max)
                w->mem_max = mem;
}

sb_window *sb_window_begin(sb_registry *reg, sandbox *sb)
{
        sb_window *w = cs_xcalloc(1, sizeof(*w));
        cs_error *err = NULL;
        disk_reading d;
        uint64_t rx, tx;
        bool alone;

        pthread_mutex_lock(&reg->lock);
        alone = sb->windows == NULL;
        pthread_mutex_unlock(&reg->lock);
        if (cgroup_read(reg->cg, sb->cgroup_path, &w->start, &err) < 0)
                cs_error_freep(&err);
        /* Alone in the sandbox, the exec can have the kernel's own high-water mark: fold the
         * sandbox's peak so far into its record, then reset the mark. Not in kube mode: the
         * pod cgroup is the kubelet's, and its peak is the pod's lifetime peak. */
        if (alone && w->start.has_peak && !sb->attached) {
                pthread_mutex_lock(&reg->lock);
                if (w->start.memory_peak_bytes > sb->mem_max)
                        sb->mem_max = w->start.memory_peak_bytes;
                pthread_mutex_unlock(&reg->lock);
                w->peak_reset = cgroup_reset_peak(reg->cg, sb->cgroup_path, &err) == 0;
                cs_error_free(err);
        }
        read_net(reg, sb, &rx, &tx);
        read_volume(sb, &d);
        pthread_mutex_lock(&reg->lock);
        disk_totals_locked(sb, &w->start, &d, &w->disk_read, &w->disk_written);
        w->net_rx = rx;
        w->net_tx = tx;
        window_sample_locked(w, w->start.memory_bytes);
        for (sb_window *o = sb->windows; o; o = o->next)
                o->shared = w->shared = true;
        w->next = sb->windows;
        sb->windows = w;
        sb->execs++;
        pthread_mutex_unlock(&reg->lock);
        return w;
}

bool sb_window_shared(sb_registry *reg, sb_window *w)
{
        bool shared;

        pthread_mutex_lock(&reg->lock);
        shared = w->shared;
        pthread_mutex_unlock(&reg->lock);
        return shared;
}

static uint64_t delta(uint64_t end, uint64_t start)
{
        return end > start ? end - start : 0;
}

void sb_window_end(sb_registry *reg, sandbox *sb, sb_window *w, usage_metrics *ret, bool *ret_oom)
{
        cgroup_sample end = { 0 };
        cs_error *err = NULL;
        bool have = cgroup_read(reg->cg, sb->cgroup_path, &end, &err) == 0;
        uint64_t rx, tx, disk_r, disk_w;
        disk_reading d;

        cs_error_free(err);
        read_net(reg, sb, &rx, &tx);
        read_volume(sb, &d);
        pthread_mutex_lock(&reg->lock);
        for (sb_window **p = &sb->windows; *p; p = &(*p)->next) {
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        }
        sb->execs--;
        if (have)
                window_sample_locked(w, end.memory_bytes);
        else
                end = w->start; /* the container is gone: no growth can be measured */
        disk_totals_locked(sb, &end, &d, &disk_r, &disk_w);
        *ret = (usage_metrics){
                .cpu_ms = delta(end.cpu_ns, w->start.cpu_ns) / 1000000,
                .memory_peak_bytes = w->mem_max,
                .memory_avg_bytes = w->mem_n ? w->mem_sum / w->mem_n : 0,
                .disk_read_bytes = delta(disk_r, w->disk_read),
                .disk_write_bytes = delta(disk_w, w->disk_written),
                .network_ingress_bytes = delta(rx, w->net_rx),
                .network_egress_bytes = delta(tx, w->net_tx),
        };
        if (w->peak_reset && end.has_peak && end.memory_peak_bytes > ret->memory_peak_bytes)
                ret->memory_peak_bytes = end.memory_peak_bytes;
        if (ret->memory_peak_bytes > sb->mem_max)
                sb->mem_max = ret->memory_peak_bytes;
        *ret_oom = end.oom_kills > w->start.oom_kills;
        pthread_mutex_unlock(&reg->lock);
        free(w);
}

int sandbox_sample_memory(sb_registry *reg, sandbox *sb, cgroup_sample *ret, cs_error **err)
{
        cgroup_sample s;

        if (cgroup_read(reg->cg, sb->cgroup_path, &s, err) < 0)
                return -1;
        *ret = s;
        pthread_mutex_lock(&reg->lock);
        sb->mem_sum += s.memory_bytes;
        sb->mem_n++;
        if (s.memory_bytes > sb->mem_max)
                sb->mem_max = s.memory_bytes;
        for (sb_window *w = sb->windows; w; w = w->next)
                window_sample_locked(w, s.memory_bytes);
        pthread_mutex_unlock(&reg->lock);
        return 0;
}
