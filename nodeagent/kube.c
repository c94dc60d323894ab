/* Kube mode: finding a pod's container (see kube.h).
 *
 * Locking: one mutex guards the cache; it is held across a relist (one `runsc list` and a few
 * small file reads) so that concurrent misses share one relist rather than each running one.
 * Runtime state queries run unlocked. */
#include "kube.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spawner_paths.h"
#include "util.h"

typedef struct kube_entry {
        char *id;
        char *bundle; /* host path of the bundle directory, host_root applied */
        kb_container c;
        char *pod_cgroup;
        int64_t created_ms;
        pid_t pid;
        bool parsed; /* false: its bundle could not be read (not a CRI container, or racing
                        its creation); retried on the next relist */
} kube_entry;

/* Misses relist the runsc root at most this often (each relist is a `runsc list`): a stream
 * of lookups for pods that are not here cannot make the agent fork one per call. */
#define KUBE_RELIST_MIN_MS 250

struct kube_finder {
        runtime *rt;
        char *host_root, *default_container, *namespaces, *volume_root;
        int64_t relisted_ms; /* monotonic, the last relist */
        pthread_mutex_t lock;
        kube_entry *entries;
        size_t n;
        uint64_t generation; /* relists done */
};

kube_finder *kube_finder_new(const kube_config *cfg)
{
        kube_finder *kf = cs_xcalloc(1, sizeof(*kf));

        kf->rt = cfg->rt;
        kf->host_root = cs_xstrdup(cfg->host_root ? cfg->host_root : "");
        kf->default_container = cs_xstrdup(cfg->default_container);
        kf->namespaces = cs_xstrdup(cfg->namespaces && cfg->namespaces[0] ? cfg->namespaces : "*");
        kf->volume_root = kb_host_path(kf->host_root, cfg->volume_root && cfg->volume_root[0]
                                                              ? cfg->volume_root
                                                              : "/var/lib/kubelet/pods");
        pthread_mutex_init(&kf->lock, NULL);
        return kf;
}

static void entry_clear(kube_entry *e)
{
        free(e->id);
        free(e->bundle);
        free(e->pod_cgroup);
        kb_container_clear(&e->c);
        memset(e, 0, sizeof(*e));
}

void kube_finder_free(kube_finder *kf)
{
        if (!kf)
                return;
        for (size_t i = 0; i < kf->n; i++)
                entry_clear(&kf->entries[i]);
        free(kf->entries);
        pthread_mutex_destroy(&kf->lock);
        free(kf->host_root);
        free(kf->default_container);
        free(kf->namespaces);
        free(kf->volume_root);
        free(kf);
}

void kube_pod_clear(kube_pod *p)
{
        free(p->container_id);
        free(p->pod_cgroup);
        kb_container_clear(&p->c);
        memset(p, 0, sizeof(*p));
}

void kube_pods_free(kube_pod *p, size_t n)
{
        for (size_t i = 0; p && i < n; i++)
                kube_pod_clear(&p[i]);
        free(p);
}

/* Reads and parses bundle/config.json; fills e->c, e->pod_cgroup, e->created_ms. */
static int entry_load(kube_entry *e, cs_error **err)
{
        _cleanup_free_ char *path = cs_xasprintf("%s/config.json", e->bundle);
        _cleanup_free_ char *buf = NULL;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        ssize_t n;
        cs_error *cgerr = NULL;

        if (fd < 0)
                return cs_error_errno(err, errno, "cannot open %s", path);
        if (fstat(fd, &st) < 0)
                return cs_error_errno(err, errno, "cannot stat %s", path);
        if (!S_ISREG(st.st_mode) || st.st_size > (off_t)KB_CONFIG_MAX)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s is not a bundle config", path);
        buf = cs_xmalloc((size_t)st.st_size + 1);
        n = cs_read_full(fd, buf, (size_t)st.st_size);
        if (n < 0)
                return cs_error_errno(err, errno, "cannot read %s", path);
        if (kb_parse_config(buf, (size_t)n, &e->c, err) < 0)
                return cs_error_prefix(err, "%s", path);
        if (kb_pod_cgroup(e->c.cgroups_path, &e->pod_cgroup, &cgerr) < 0) {
                /* Usage cannot be read for it, but it can still be found and exec'd into. */
                cs_error_free(cgerr);
                e->pod_cgroup = cs_xstrdup("");
        }
        e->created_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        e->parsed = true;
        return 0;
}

static kube_entry *entry_find_locked(kube_finder *kf, const char *id)
{
        for (size_t i = 0; i < kf->n; i++) {
                /* (entries moved out during a relist have no id) */
                if (kf->entries[i].id && strcmp(kf->entries[i].id, id) == 0)
                        return &kf->entries[i];
        }
        return NULL;
}

/* Lists the runtime's containers and brings the cache in line: new ones are read, gone ones
 * dropped. Called with the lock held. */
static int relist_locked(kube_finder *kf, rt_container **ret_list, size_t *ret_n, cs_error **err)
{
        rt_container *list = NULL;
        size_t n = 0, m = 0;
        kube_entry *next;

        if (kf->rt->ops->list_details(kf->rt, &list, &n, err) < 0)
                return -1;
        next = cs_xcalloc(n + 1, sizeof(*next));
        for (size_t i = 0; i < n; i++) {
                kube_entry *old = entry_find_locked(kf, list[i].id);
                kube_entry *e = &next[m++];

                if (old && old->parsed) {
                        *e = *old;
                        memset(old, 0, sizeof(*old));
                } else {
                        cs_error *lerr = NULL;
                        e->id = cs_xstrdup(list[i].id);
                        e->bundle = kb_host_path(kf->host_root, list[i].bundle);
                        if (!e->bundle)
                                e->bundle = cs_xstrdup("");
                        if (entry_load(e, &lerr) < 0)
                                cs_error_free(lerr); /* not ours to report: kept unparsed */
                }
                e->pid = list[i].pid;
        }
        /* App containers of older containerd versions name their pod on the pause only. */
        for (size_t i = 0; i < m; i++) {
                kube_entry *app = &next[i];
                if (!app->parsed || strcmp(app->c.type, KB_TYPE_CONTAINER) != 0 ||
                    (app->c.pod_namespace[0] && app->c.pod_name[0] && app->c.pod_uid[0]))
                        continue;
                for (size_t j = 0; j < m; j++) {
                        if (next[j].parsed && strcmp(next[j].c.type, KB_TYPE_SANDBOX) == 0 &&
                            strcmp(next[j].id, app->c.sandbox_id) == 0)
                                kb_inherit_pod(&app->c, &next[j].c);
                }
        }
        for (size_t i = 0; i < kf->n; i++)
                entry_clear(&kf->entries[i]);
        free(kf->entries);
        kf->entries = next;
        kf->n = m;
        kf->generation++;
        kf->relisted_ms = cs_now_monotonic_ms();
        if (ret_list) {
                *ret_list = list;
                *ret_n = n;
        } else {
                rt_containers_free(list, n);
        }
        return 0;
}

static void pod_from_entry(const kube_entry *e, kube_pod *p)
{
        memset(p, 0, sizeof(*p));
        p->container_id = cs_xstrdup(e->id);
        kb_container_copy(&e->c, &p->c);
        p->pod_cgroup = cs_xstrdup(e->pod_cgroup);
        p->created_ms = e->created_ms;
        p->pid = e->pid;
        p->state = RT_ABSENT;
}

/* Copies the cached matches of ref. */
static size_t matches_locked(kube_finder *kf, const kb_ref *ref, kube_pod **ret)
{
        size_t n = 0;
        kube_pod *out = cs_xcalloc(kf->n + 1, sizeof(*out));

        for (size_t i = 0; i < kf->n; i++) {
                if (kf->entries[i].parsed && kb_matches(&kf->entries[i].c, ref))
                        pod_from_entry(&kf->entries[i], &out[n++]);
        }
        *ret = out;
        return n;
}

static bool bundle_present(kube_finder *kf, const char *id)
{
        _cleanup_free_ char *path = NULL;
        kube_entry *e;

        pthread_mutex_lock(&kf->lock);
        e = entry_find_locked(kf, id);
        if (e)
                path = cs_xasprintf("%s/config.json", e->bundle);
        pthread_mutex_unlock(&kf->lock);
        return path && access(path, F_OK) == 0;
}

static int state_rank(rt_state st)
{
        switch (st) {
        case RT_RUNNING:
                return 3;
        case RT_CREATED:
                return 2;
        case RT_STOPPED:
                return 1;
        default:
                return 0;
        }
}

int kube_find(kube_finder *kf, const kube_ref *in, bool want_state, kube_pod *ret, cs_error **err)
{
        kb_ref ref = { .pod_namespace = in->pod_namespace,
                       .pod_name = in->pod_name,
                       .pod_uid = in->pod_uid,
                       .container_name = in->container_name && in->container_name[0]
                                                 ? in->container_name
                                                 : kf->default_container };

        /* Twice at most: from the cache, then after a relist if the cache missed or held a
         * container that is gone. */
        for (int attempt = 0; attempt < 2; attempt++) {
                kube_pod *cands = NULL;
                size_t n;
                int best = -1;
                bool stale = false;
                uint64_t gen;

                pthread_mutex_lock(&kf->lock);
                gen = kf->generation;
                n = matches_locked(kf, &ref, &cands);
                pthread_mutex_unlock(&kf->lock);
                for (size_t i = 0; i < n; i++) {
                        if (!bundle_present(kf, cands[i].container_id)) {
                                stale = true;
                                continue;
                        }
                        if (want_state) {
                                pid_t pid = 0;
                                if (kf->rt->ops->state(kf->rt, cands[i].container_id,
                                                       &cands[i].state, &pid, err) < 0) {
                                        kube_pods_free(cands, n);
                                        return -1;
                                }
                                if (cands[i].state == RT_ABSENT) {
                                        stale = true;
                                        continue;
                                }
                                if (pid > 0)
                                        cands[i].pid = pid;
                        }
                        if (best < 0 ||
                            state_rank(cands[i].state) > state_rank(cands[best].state) ||
                            (state_rank(cands[i].state) == state_rank(cands[best].state) &&
                             cands[i].created_ms > cands[best].created_ms))
                                best = (int)i;
                }
                if (best >= 0 && !(stale && attempt == 0 && n > 1)) {
                        *ret = cands[best];
                        memset(&cands[best], 0, sizeof(cands[best]));
                        kube_pods_free(cands, n);
                        return 0;
                }
                kube_pods_free(cands, n);
                if (attempt == 0) {
                        int r = 0;
                        int64_t wait;
                        pthread_mutex_lock(&kf->lock);
                        wait = kf->relisted_ms + KUBE_RELIST_MIN_MS - cs_now_monotonic_ms();
                        pthread_mutex_unlock(&kf->lock);
                        if (wait > 0)
                                usleep((useconds_t)wait * 1000);
                        pthread_mutex_lock(&kf->lock);
                        /* Someone relisted since we looked: their list is as fresh. */
                        if (kf->generation == gen)
                                r = relist_locked(kf, NULL, NULL, err);
                        pthread_mutex_unlock(&kf->lock);
                        if (r < 0)
                                return -1;
                }
        }
        if (ref.pod_uid && ref.pod_uid[0])
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                                    "no container '%s' of pod %s/%s with uid %s on this node",
                                    ref.container_name, ref.pod_namespace, ref.pod_name,
                                    ref.pod_uid);
        return cs_error_set(err, GRPC_STATUS_NOT_FOUND,
                            "no container '%s' of pod %s/%s on this node", ref.container_name,
                            ref.pod_namespace, ref.pod_name);
}

static int pod_cmp(const void *a, const void *b)
{
        const kube_pod *x = a, *y = b;
        int r = strcmp(x->c.pod_namespace, y->c.pod_namespace);

        if (!r)
                r = strcmp(x->c.pod_name, y->c.pod_name);
        return r ? r : strcmp(x->container_id, y->container_id);
}

int kube_list(kube_finder *kf, const char *container_name, kube_pod **ret, size_t *ret_n,
              cs_error **err)
{
        const char *name =
                container_name && container_name[0] ? container_name : kf->default_container;
        rt_container *list = NULL;
        size_t n_list = 0, n = 0;
        kube_pod *out;

        pthread_mutex_lock(&kf->lock);
        if (relist_locked(kf, &list, &n_list, err) < 0) {
                pthread_mutex_unlock(&kf->lock);
                return -1;
        }
        out = cs_xcalloc(kf->n + 1, sizeof(*out));
        for (size_t i = 0; i < kf->n; i++) {
                const kube_entry *e = &kf->entries[i];
                if (!e->parsed || strcmp(e->c.type, KB_TYPE_CONTAINER) != 0 ||
                    !e->c.pod_namespace[0] || strcmp(e->c.container_name, name) != 0 ||
                    !kube_namespace_served(kf, e->c.pod_namespace))
                        continue;
                pod_from_entry(e, &out[n]);
                for (size_t j = 0; j < n_list; j++) {
                        if (strcmp(list[j].id, e->id) == 0)
                                out[n].state = list[j].state;
                }
                n++;
        }
        pthread_mutex_unlock(&kf->lock);
        rt_containers_free(list, n_list);
        qsort(out, n, sizeof(*out), pod_cmp);
        *ret = out;
        *ret_n = n;
        return 0;
}

char *kube_workspace_dir(kube_finder *kf, const kube_pod *p, const char *mount_path)
{
        const char *src = kb_mount_source(&p->c, mount_path);

        return src ? kb_host_path(kf->host_root, src) : NULL;
}

char *kube_spawner_dir(kube_finder *kf, const kube_pod *p)
{
        const char *src = kb_mount_source(&p->c, CS_SPAWNER_DIR);
        _cleanup_free_ char *dir = src ? kb_host_path(kf->host_root, src) : NULL;
        _cleanup_free_ char *own = NULL;
        size_t n;

        /* Only this pod's own emptyDir, where the kubelet keeps it: <volume root>/<pod
         * uid>/volumes/kubernetes.io~empty-dir/<name>. Never a hostPath, another pod's volume
         * or anything else a pod spec could point the agent's socket at. */
        if (!dir || !p->c.pod_uid[0] || strchr(p->c.pod_uid, '/') || p->c.pod_uid[0] == '.')
                return NULL;
        own = cs_xasprintf("%s/%s/volumes/kubernetes.io~empty-dir/", kf->volume_root, p->c.pod_uid);
        n = strlen(own);
        if (strncmp(dir, own, n) != 0 || !dir[n] || dir[n] == '.' || strchr(dir + n, '/'))
                return NULL;
        return TAKE_PTR(dir);
}

bool kube_namespace_served(kube_finder *kf, const char *ns)
{
        size_t n = strlen(ns);

        if (strcmp(kf->namespaces, "*") == 0)
                return true;
        for (const char *p = kf->namespaces; *p;) {
                size_t len = strcspn(p, ",");
                if (len == n && strncmp(p, ns, n) == 0)
                        return true;
                p += len;
                if (*p == ',')
                        p++;
        }
        return false;
}

int kube_open_workspace(kube_finder *kf, const char *workspace_dir, cs_error **err)
{
        struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
        size_t n = strlen(kf->volume_root);
        _cleanup_close_ int root = -1;
        const char *rel;
        int fd;

        if (strncmp(workspace_dir, kf->volume_root, n) != 0 || workspace_dir[n] != '/')
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "the mount's host directory %s is not a pod volume (not "
                                    "beneath %s)",
                                    workspace_dir, kf->volume_root);
        for (rel = workspace_dir + n; *rel == '/'; rel++)
                ;
        root = open(kf->volume_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "the volume root %s is not reachable: %s", kf->volume_root,
                                    strerror(errno));
        fd = (int)syscall(SYS_openat2, root, rel[0] ? rel : ".", &how, sizeof(how));
        if (fd < 0)
                return cs_error_set(err, GRPC_STATUS_FAILED_PRECONDITION,
                                    "the workspace's host directory %s is not reachable: %s",
                                    workspace_dir, strerror(errno));
        return fd;
}
