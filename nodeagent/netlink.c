/* rtnetlink through libmnl: namespaces, veths, addresses and routes (netlink.h). */
#include "netlink.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* A request, or a batch of answers (a page of them: what libmnl advises, 8 KiB at most). */
#define NL_BUF_BYTES 8192

/* One rtnetlink socket of the namespace the calling thread is in when it is opened. */
typedef struct nl_sock {
        struct mnl_socket *nl;
        uint32_t port, seq;
} nl_sock;

static int nl_open(nl_sock *s, cs_error **err)
{
        s->nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
        if (!s->nl)
                return cs_error_errno(err, errno, "rtnetlink socket");
        if (mnl_socket_bind(s->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
                int e = errno;
                mnl_socket_close(s->nl);
                s->nl = NULL;
                return cs_error_errno(err, e, "rtnetlink bind");
        }
        s->port = mnl_socket_get_portid(s->nl);
        s->seq = (uint32_t)time(NULL);
        return 0;
}

static void nl_close(nl_sock *s)
{
        if (s->nl)
                mnl_socket_close(s->nl);
        s->nl = NULL;
}

/* Sends one request (NLM_F_ACK set here) and reads until its answer: 0, or -errno.
 * cb, when given, sees every data message (dumps). */
static int nl_talk(nl_sock *s, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
        char buf[NL_BUF_BYTES];
        ssize_t n;
        int r;

        nlh->nlmsg_seq = ++s->seq;
        nlh->nlmsg_flags |= NLM_F_ACK;
        if (mnl_socket_sendto(s->nl, nlh, nlh->nlmsg_len) < 0)
                return -errno;
        for (;;) {
                n = mnl_socket_recvfrom(s->nl, buf, sizeof(buf));
                if (n < 0)
                        return -errno;
                r = mnl_cb_run(buf, (size_t)n, s->seq, s->port, cb, data);
                if (r == MNL_CB_ERROR)
                        return -errno;
                if (r == MNL_CB_STOP)
                        return 0;
        }
}

static struct nlmsghdr *msg_start(char *buf, uint16_t type, uint16_t flags)
{
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

        nlh->nlmsg_type = type;
        nlh->nlmsg_flags = NLM_F_REQUEST | flags;
        return nlh;
}

static int link_up(nl_sock *s, int index)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_NEWLINK, 0);
        struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));

        ifm->ifi_family = AF_UNSPEC;
        ifm->ifi_index = index;
        ifm->ifi_flags = IFF_UP;
        ifm->ifi_change = IFF_UP;
        return nl_talk(s, nlh, NULL, NULL);
}

static int addr_add(nl_sock *s, int index, uint32_t addr, uint8_t prefix)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
        struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));

        ifa->ifa_family = AF_INET;
        ifa->ifa_prefixlen = prefix;
        ifa->ifa_scope = RT_SCOPE_UNIVERSE;
        ifa->ifa_index = (uint32_t)index;
        mnl_attr_put_u32(nlh, IFA_LOCAL, addr);
        mnl_attr_put_u32(nlh, IFA_ADDRESS, addr);
        return nl_talk(s, nlh, NULL, NULL);
}

static int default_route_add(nl_sock *s, uint32_t gateway, int index)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
        struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));

        rtm->rtm_family = AF_INET;
        rtm->rtm_dst_len = 0;
        rtm->rtm_table = RT_TABLE_MAIN;
        rtm->rtm_protocol = RTPROT_STATIC;
        rtm->rtm_scope = RT_SCOPE_UNIVERSE;
        rtm->rtm_type = RTN_UNICAST;
        mnl_attr_put_u32(nlh, RTA_GATEWAY, gateway);
        mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)index);
        return nl_talk(s, nlh, NULL, NULL);
}

/* Writes a sysctl file of the namespace the calling thread is in. */
static int sysctl_write(const char *path, const char *value, cs_error **err)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);

        if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value))
                return cs_error_errno(err, errno, "cannot write %s", path);
        return 0;
}

int nl_forwarding_on(const char *ifname, cs_error **err)
{
        _cleanup_free_ char *path = cs_xasprintf("/proc/sys/net/ipv4/conf/%s/forwarding", ifname);

        return sysctl_write(path, "1", err);
}

/* Enters the namespace of file path on the calling thread; *ret_home is the thread's own,
 * for ns_leave. */
static int ns_enter(const char *path, int *ret_home, cs_error **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);

        if (home < 0)
                return cs_error_errno(err, errno, "cannot open this thread's network namespace");
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
                int e = errno;
                close(home);
                return cs_error_errno(err, e, "cannot enter the sandbox's network namespace");
        }
        *ret_home = home;
        return 0;
}

/* Back to the thread's own namespace. Failing that, the thread would go on in a sandbox's
 * namespace: nothing safe is left to do. */
static void ns_leave(int home)
{
        if (setns(home, CLONE_NEWNET) < 0)
                abort();
        close(home);
}

/* In the namespace being set up: lo up, IPv6 off. */
static int netns_init(cs_error **err)
{
        nl_sock s = { 0 };
        int r;

        if (nl_open(&s, err) < 0)
                return -1;
        r = link_up(&s, (int)if_nametoindex("lo"));
        nl_close(&s);
        if (r < 0)
                return cs_error_errno(err, -r, "cannot bring lo up in the sandbox's namespace");
        if (sysctl_write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1", err) < 0 ||
            sysctl_write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err) < 0)
                return -1;
        return 0;
}

int nl_netns_create(const char *path, cs_error **err)
{
        int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), fd, r = 0;

        if (home < 0)
                return cs_error_errno(err, errno, "cannot open this thread's network namespace");
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
        if (fd < 0) {
                close(home);
                return cs_error_errno(err, errno, "cannot create the network namespace's file");
        }
        close(fd);
        if (unshare(CLONE_NEWNET) < 0) {
                r = cs_error_errno(err, errno, "cannot make a network namespace");
        } else {
                if (mount("/proc/thread-self/ns/net", path, NULL, MS_BIND, NULL) < 0)
                        r = cs_error_errno(err, errno, "cannot bind the network namespace");
                else if (netns_init(err) < 0)
                        r = -1;
                ns_leave(home);
                home = -1;
        }
        if (home >= 0)
                close(home);
        if (r < 0) {
                umount2(path, MNT_DETACH);
                unlink(path);
        }
        return r;
}

int nl_netns_remove(const char *path, cs_error **err)
{
        if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
                return cs_error_errno(err, errno, "cannot unmount the network namespace's file");
        if (unlink(path) < 0 && errno != ENOENT)
                return cs_error_errno(err, errno, "cannot remove the network namespace's file");
        return 0;
}

static int veth_add(nl_sock *s, const nl_veth *v, int ns_fd)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
        struct nlattr *info, *data, *peer;
        struct ifinfomsg *pifm;

        ifm->ifi_family = AF_UNSPEC;
        mnl_attr_put_strz(nlh, IFLA_IFNAME, v->host_if);
        info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
        mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
        data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
        peer = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
        /* The peer's attributes follow its own ifinfomsg, inside the nest. */
        pifm = (struct ifinfomsg *)((char *)nlh + nlh->nlmsg_len);
        memset(pifm, 0, MNL_ALIGN(sizeof(*pifm)));
        pifm->ifi_family = AF_UNSPEC;
        nlh->nlmsg_len += MNL_ALIGN(sizeof(*pifm));
        mnl_attr_put_strz(nlh, IFLA_IFNAME, v->inner_if);
        mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t)ns_fd);
        mnl_attr_nest_end(nlh, peer);
        mnl_attr_nest_end(nlh, data);
        mnl_attr_nest_end(nlh, info);
        return nl_talk(s, nlh, NULL, NULL);
}

static int link_del(nl_sock *s, int index)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_DELLINK, 0);
        struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));

        ifm->ifi_family = AF_UNSPEC;
        ifm->ifi_index = index;
        return nl_talk(s, nlh, NULL, NULL);
}

bool nl_link_exists(const char *ifname)
{
        return if_nametoindex(ifname) != 0;
}

int nl_link_delete(const char *ifname, cs_error **err)
{
        unsigned index = if_nametoindex(ifname);
        nl_sock s = { 0 };
        int r;

        if (!index)
                return 0;
        if (nl_open(&s, err) < 0)
                return -1;
        r = link_del(&s, (int)index);
        nl_close(&s);
        if (r < 0 && r != -ENODEV)
                return cs_error_errno(err, -r, "cannot delete link %s", ifname);
        return 0;
}

/* The sandbox's end, in its namespace: address, up, default route. */
static int veth_inner(const nl_veth *v, cs_error **err)
{
        nl_sock s = { 0 };
        int home = -1, r, index;

        if (ns_enter(v->netns, &home, err) < 0)
                return -1;
        r = nl_open(&s, err);
        if (r == 0) {
                index = (int)if_nametoindex(v->inner_if);
                if (!index)
                        r = cs_error_errno(err, ENODEV, "no %s in the sandbox's namespace",
                                           v->inner_if);
                else if ((r = addr_add(&s, index, v->inner_addr, v->prefix)) < 0 ||
                         (r = link_up(&s, index)) < 0 ||
                         (r = default_route_add(&s, v->host_addr, index)) < 0)
                        r = cs_error_errno(err, -r, "cannot set up %s in the sandbox's namespace",
                                           v->inner_if);
                nl_close(&s);
        }
        ns_leave(home);
        return r < 0 ? -1 : 0;
}

int nl_veth_create(const nl_veth *v, cs_error **err)
{
        _cleanup_close_ int ns_fd = open(v->netns, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *v6 = NULL;
        nl_sock s = { 0 };
        int r, index;

        if (ns_fd < 0)
                return cs_error_errno(err, errno, "cannot open the sandbox's network namespace");
        if (strlen(v->host_if) >= IFNAMSIZ)
                return cs_error_set(err, GRPC_STATUS_INTERNAL, "link name %s too long", v->host_if);
        if (nl_open(&s, err) < 0)
                return -1;
        r = veth_add(&s, v, ns_fd);
        if (r == -EEXIST) {
                index = (int)if_nametoindex(v->host_if);
                if (index)
                        link_del(&s, index);
                r = veth_add(&s, v, ns_fd);
        }
        if (r < 0) {
                nl_close(&s);
                return cs_error_errno(err, -r, "cannot create the veth pair %s", v->host_if);
        }
        index = (int)if_nametoindex(v->host_if);
        v6 = cs_xasprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", v->host_if);
        if (!index) {
                r = cs_error_errno(err, ENODEV, "no link %s after its creation", v->host_if);
        } else if (sysctl_write(v6, "1", err) < 0 || nl_forwarding_on(v->host_if, err) < 0) {
                r = -1;
        } else {
                int e = addr_add(&s, index, v->host_addr, v->prefix);
                if (e == 0)
                        e = link_up(&s, index);
                r = e < 0 ? cs_error_errno(err, -e, "cannot set up %s", v->host_if) : 0;
        }
        if (r == 0)
                r = veth_inner(v, err);
        if (r < 0 && index)
                link_del(&s, index);
        nl_close(&s);
        return r < 0 ? -1 : 0;
}

/* --- the host's routes ----------------------------------------------------------------- */

typedef struct route_walk {
        /* What is looked for. */
        const cs_cidr *pool;
        const char *skip_prefix;
        /* Found. */
        bool found;
        char desc[96];
        char default_if[IF_NAMESIZE];
        uint32_t default_metric;
        bool have_default;
} route_walk;

static int route_cb(const struct nlmsghdr *nlh, void *data)
{
        route_walk *w = data;
        const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
        const struct nlattr *attr;
        uint32_t dst = 0, oif = 0, metric = 0;
        char ifname[IF_NAMESIZE] = "";
        bool have_dst = false;

        if (rtm->rtm_family != AF_INET || rtm->rtm_table != RT_TABLE_MAIN ||
            rtm->rtm_type != RTN_UNICAST)
                return MNL_CB_OK;
        mnl_attr_for_each(attr, nlh, sizeof(*rtm))
        {
                switch (mnl_attr_get_type(attr)) {
                case RTA_DST:
                        if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
                                dst = mnl_attr_get_u32(attr);
                                have_dst = true;
                        }
                        break;
                case RTA_OIF:
                        if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
                                oif = mnl_attr_get_u32(attr);
                        break;
                case RTA_PRIORITY:
                        if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
                                metric = mnl_attr_get_u32(attr);
                        break;
                }
        }
        if (oif)
                if_indextoname(oif, ifname);
        if (rtm->rtm_dst_len == 0) {
                if (ifname[0] && (!w->have_default || metric < w->default_metric)) {
                        snprintf(w->default_if, sizeof(w->default_if), "%s", ifname);
                        w->default_metric = metric;
                        w->have_default = true;
                }
                return MNL_CB_OK;
        }
        if (w->pool && !w->found && have_dst &&
            !(w->skip_prefix && strncmp(ifname, w->skip_prefix, strlen(w->skip_prefix)) == 0)) {
                cs_cidr route = { .family = AF_INET, .prefix = rtm->rtm_dst_len };
                char text[INET_ADDRSTRLEN];
                memcpy(route.addr, &dst, 4);
                if (cs_cidr_overlap(&route, w->pool)) {
                        inet_ntop(AF_INET, &dst, text, sizeof(text));
                        snprintf(w->desc, sizeof(w->desc), "%s/%u dev %s", text, rtm->rtm_dst_len,
                                 ifname[0] ? ifname : "?");
                        w->found = true;
                }
        }
        return MNL_CB_OK;
}

static int routes_walk(route_walk *w, cs_error **err)
{
        char buf[NL_BUF_BYTES];
        struct nlmsghdr *nlh = msg_start(buf, RTM_GETROUTE, NLM_F_DUMP);
        struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
        nl_sock s = { 0 };
        int r;

        rtm->rtm_family = AF_INET;
        if (nl_open(&s, err) < 0)
                return -1;
        r = nl_talk(&s, nlh, route_cb, w);
        nl_close(&s);
        if (r < 0)
                return cs_error_errno(err, -r, "cannot read the host's routes");
        return 0;
}

int nl_default_route_if(char *buf, size_t len, cs_error **err)
{
        route_walk w = { 0 };

        if (routes_walk(&w, err) < 0)
                return -1;
        if (!w.have_default)
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "the host has no default route");
        snprintf(buf, len, "%s", w.default_if);
        return 0;
}

int nl_route_overlap(const cs_cidr *pool, const char *skip_prefix, bool *ret, char *desc,
                     size_t desc_len, cs_error **err)
{
        route_walk w = { .pool = pool, .skip_prefix = skip_prefix };

        if (routes_walk(&w, err) < 0)
                return -1;
        *ret = w.found;
        if (desc_len)
                snprintf(desc, desc_len, "%s", w.desc);
        return 0;
}
