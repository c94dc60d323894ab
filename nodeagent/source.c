/* What both sandbox sources share (see source.h): freeing entries, the source destructor and
 * ListSandboxes' paging. Owns nothing else; touches no registry and no finder state. */
#include "source.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

/* A token longer than three Kubernetes names and their separators is none this agent gave. */
#define SRC_POD_KEY_MAX (3 * 300)

void src_entry_clear(src_entry *e)
{
        sb_info_clear(&e->info);
        free(e->pod.pod_namespace);
        free(e->pod.pod_name);
        free(e->pod.pod_uid);
        free(e->pod.container_name);
        free(e->pod.mount_path);
        memset(e, 0, sizeof(*e));
}

void src_entries_free(src_entry *e, size_t n)
{
        for (size_t i = 0; e && i < n; i++)
                src_entry_clear(&e[i]);
        free(e);
}

void source_free(source *s)
{
        if (s)
                s->ops->free(s);
}

size_t src_page_count(size_t n, size_t start, uint32_t asked)
{
        size_t page = !asked ? SRC_PAGE_DEFAULT : asked < SRC_PAGE_MAX ? asked : SRC_PAGE_MAX;

        if (start >= n)
                return 0;
        return n - start < page ? n - start : page;
}

int src_page_token_invalid(cs_error **err)
{
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                            "page_token is not one this agent gave");
}

int src_offset_token_parse(const char *token, size_t *ret_offset, cs_error **err)
{
        unsigned long long v;
        char *end = NULL;

        *ret_offset = 0;
        if (!token[0])
                return 0;
        v = strtoull(token, &end, 10);
        if (!end || *end || v > 1000000)
                return src_page_token_invalid(err);
        *ret_offset = (size_t)v;
        return 0;
}

int src_pod_key_parse(const char *token, src_pod_key *ret_key, cs_error **err)
{
        const char *parts[3] = { NULL, NULL, NULL };
        char *save = NULL, *part;
        size_t k = 0;

        *ret_key = (src_pod_key){ 0 };
        if (!token[0])
                return 0;
        ret_key->buf = cs_xstrdup(token);
        for (part = strtok_r(ret_key->buf, "/", &save); part && k < 3;
             part = strtok_r(NULL, "/", &save))
                parts[k++] = part;
        if (k != 3 || part || strlen(token) > SRC_POD_KEY_MAX) {
                free(ret_key->buf);
                *ret_key = (src_pod_key){ 0 };
                return src_page_token_invalid(err);
        }
        ret_key->pod_namespace = parts[0];
        ret_key->pod_name = parts[1];
        ret_key->container_id = parts[2];
        return 0;
}

size_t src_pod_key_start(const kube_pod *pods, size_t n, const src_pod_key *key)
{
        size_t start = 0;

        if (!key->buf)
                return 0;
        for (; start < n; start++) {
                const kube_pod *p = &pods[start];
                int c = strcmp(p->c.pod_namespace, key->pod_namespace);
                if (!c)
                        c = strcmp(p->c.pod_name, key->pod_name);
                if (!c)
                        c = strcmp(p->container_id, key->container_id);
                if (c > 0)
                        break;
        }
        return start;
}
