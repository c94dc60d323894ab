/* Capability sets by name and the limit a daemon puts on itself (shared/privs.h). */
#include "privs.h"

#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

/* Indexed by capability number (linux/capability.h), up to CAP_CHECKPOINT_RESTORE. */
static const char *const cap_names[] = {
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
        "lease",
        "audit_write",
        "audit_control",
        "setfcap",
        "mac_override",
        "mac_admin",
        "syslog",
        "wake_alarm",
        "block_suspend",
        "audit_read",
        "perfmon",
        "bpf",
        "checkpoint_restore",
};

uint64_t cs_caps_all(void)
{
        uint64_t all = 0;

        for (int cap = 0; cap < 64 && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
                all |= 1ull << cap;
        return all;
}

static int cap_by_name(const char *name, size_t len)
{
        if (len > 4 && strncasecmp(name, "cap_", 4) == 0) {
                name += 4;
                len -= 4;
        }
        for (size_t i = 0; i < ARRAY_SIZE(cap_names); i++) {
                if (strlen(cap_names[i]) == len && strncasecmp(cap_names[i], name, len) == 0)
                        return (int)i;
        }
        return -1;
}

int cs_caps_parse(const char *list, uint64_t *ret_mask, cs_error **err)
{
        uint64_t mask = 0;
        const char *p = list;

        if (strcasecmp(list, "all") == 0) {
                *ret_mask = cs_caps_all();
                return 0;
        }
        while (*list) { /* "": none */
                size_t len = strcspn(p, ",");
                int cap = cap_by_name(p, len);

                if (cap < 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "'%.*s' is not a capability name (e.g. sys_admin)",
                                            (int)len, p);
                mask |= 1ull << cap;
                if (!p[len])
                        break;
                p += len + 1;
        }
        *ret_mask = mask;
        return 0;
}

char *cs_caps_format(uint64_t mask)
{
        char *out = cs_xstrdup("");

        for (int cap = 0; cap < 64; cap++) {
                char *next;

                if (!(mask & (1ull << cap)))
                        continue;
                if (cap < (int)ARRAY_SIZE(cap_names))
                        next = cs_xasprintf("%s%s%s", out, out[0] ? "," : "", cap_names[cap]);
                else
                        next = cs_xasprintf("%s%s%d", out, out[0] ? "," : "", cap);
                free(out);
                out = next;
        }
        return out;
}

int cs_caps_bound(uint64_t keep, cs_error **err)
{
        for (int cap = 0; cap < 64; cap++) {
                int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);

                if (in < 0)
                        break;
                if (in == 1 && !(keep & (1ull << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                        return cs_error_errno(err, errno, "cannot drop capability %d", cap);
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return cs_error_errno(err, errno, "cannot clear the ambient capabilities");
        return 0;
}

int cs_caps_limit(uint64_t keep, uint64_t *ret_kept, cs_error **err)
{
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct data[2] = { 0 };

        if (cs_caps_bound(keep, err) < 0)
                return -1;
        if (syscall(SYS_capget, &hdr, data) < 0)
                return cs_error_errno(err, errno, "capget");
        for (int i = 0; i < 2; i++) {
                uint32_t k = (uint32_t)(keep >> (32 * i));

                data[i].permitted &= k;
                data[i].effective &= k;
                data[i].inheritable = 0;
        }
        if (syscall(SYS_capset, &hdr, data) < 0)
                return cs_error_errno(err, errno, "capset");
        *ret_kept = (uint64_t)data[1].permitted << 32 | data[0].permitted;
        return 0;
}
