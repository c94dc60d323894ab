/* The local sandbox source (see source.h): the registry's own sandboxes, named by sandbox_id,
 * created and destroyed by this agent (sb_create, sb_destroy), listed from its records.
 *
 * Owns: the local mode's checks of a reference and its page tokens (offsets into sb_list).
 * May touch: the registry's public API only. No lock of its own. */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

#include "util.h"
#include "uuid.h"

typedef struct source_local {
        source base;
        sb_registry *reg;
        uint32_t max_sandboxes;
} source_local;

static source_local *local_of(source *s)
{
        return (source_local *)s;
}

static void call_named(const src_call *c, const char *id)
{
        if (c && c->set_sandbox_id)
                c->set_sandbox_id(c->userdata, id);
}

/* The sandbox id ref names: local sandboxes are named by sandbox_id, never by pod. */
static const char *ref_id(const src_call *c, const src_ref *ref, cs_error **err)
{
        if (!ref) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "ref is missing");
                return NULL;
        }
        if (ref->pod_name[0] || ref->pod_namespace[0]) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                             "this agent runs in local mode: name the sandbox by sandbox_id, "
                             "not by pod");
                return NULL;
        }
        if (!cs_uuid_valid(ref->sandbox_id)) {
                cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "sandbox_id is not a valid UUID");
                return NULL;
        }
        call_named(c, ref->sandbox_id);
        return ref->sandbox_id;
}

static int local_create(source *s, const src_call *c, const sb_spec *spec, sb_info *ret,
                        bool *ret_created, cs_error **err)
{
        call_named(c, spec->id);
        if (spec->max_runtime_ms < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "max_runtime is negative");
        return sb_create(local_of(s)->reg, spec, ret, ret_created, err);
}

static int local_destroy(source *s, const src_call *c, const src_ref *ref, const int64_t *grace_ms,
                         sb_info *ret, cs_error **err)
{
        const char *id = ref_id(c, ref, err);

        if (!id)
                return -1;
        if (grace_ms && *grace_ms < 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "grace is negative");
        return sb_destroy(local_of(s)->reg, id, grace_ms ? *grace_ms : -1, ret, err);
}

static int local_acquire(source *s, const src_call *c, const src_ref *ref, bool need_ready,
                         int64_t wait_ready_ms, sandbox **ret, cs_error **err)
{
        const char *id = ref_id(c, ref, err);

        if (!id)
                return -1;
        return sb_acquire(local_of(s)->reg, id, need_ready, wait_ready_ms, c ? c->cancel_fd : -1,
                          ret, err);
}

static int local_open_workspace(source *s, const char *workspace_dir, cs_error **err)
{
        int fd = open(workspace_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        (void)s;
        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open the workspace");
        return fd;
}

static int local_describe(source *s, const src_call *c, const src_ref *ref, src_entry *ret,
                          cs_error **err)
{
        const char *id = ref_id(c, ref, err);

        if (!id)
                return -1;
        *ret = (src_entry){ 0 };
        return sb_describe(local_of(s)->reg, id, &ret->info, err);
}

/* Ordered by creation time (sb_list); the page token is the offset of the next page. */
static int local_list(source *s, const src_page *page, src_entry **ret, size_t *ret_n,
                      char **ret_next_token, cs_error **err)
{
        size_t offset, n = 0, count;
        sb_info *infos = NULL;
        src_entry *out;

        if (src_offset_token_parse(page->token, &offset, err) < 0 ||
            sb_list(local_of(s)->reg, page->include_destroyed, &infos, &n, err) < 0)
                return -1;
        count = src_page_count(n, offset, page->size);
        out = cs_xcalloc(count ? count : 1, sizeof(*out));
        for (size_t i = 0; i < count; i++) {
                out[i].info = infos[offset + i];
                infos[offset + i] = (sb_info){ 0 }; /* moved */
        }
        *ret_next_token = offset + count < n ? cs_xasprintf("%zu", offset + count) : NULL;
        *ret = out;
        *ret_n = count;
        sb_infos_free(infos, n);
        return 0;
}

static int local_counts(source *s, src_counts *ret, cs_error **err)
{
        source_local *l = local_of(s);
        sb_info *infos = NULL;
        sb_pool_stats pool;
        size_t n = 0;

        *ret = (src_counts){ .max_sandboxes = l->max_sandboxes };
        sb_counts(l->reg, &ret->live, &ret->ready, &ret->destroyed, &ret->execs_running);
        sb_pool_stats_read(l->reg, &pool);
        ret->warm_ready = pool.ready;
        if (sb_list(l->reg, false, &infos, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                ret->cpu_millis_allocated += infos[i].cpu_millis;
                ret->memory_bytes_allocated += infos[i].memory_bytes;
        }
        sb_infos_free(infos, n);
        return 0;
}

static void local_free(source *s)
{
        free(local_of(s));
}

static const source_ops local_ops = {
        .name = "local",
        .kind = SRC_LOCAL,
        .create = local_create,
        .destroy = local_destroy,
        .acquire = local_acquire,
        .open_workspace = local_open_workspace,
        .describe = local_describe,
        .list = local_list,
        .counts = local_counts,
        .free = local_free,
};

source *source_local_new(sb_registry *reg, uint32_t max_sandboxes)
{
        source_local *l = cs_xcalloc(1, sizeof(*l));

        l->base.ops = &local_ops;
        l->reg = reg;
        l->max_sandboxes = max_sandboxes;
        return &l->base;
}
