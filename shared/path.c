/* Container paths the API takes from clients: one check, for the frontend (kube mode builds
 * the pod's volumeMount from it) and the node agent (both modes). */
#include <string.h>

#include "path.h"
#include "util.h"

static bool mount_path_ok(const char *p)
{
        static const char *const reserved[] = { "/proc", "/dev", "/sys" };
        size_t len = strlen(p);

        if (p[0] != '/' || len < 2 || len > CS_MOUNT_PATH_MAX || p[len - 1] == '/')
                return false;
        if (strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
                return false;
        if (strcmp(p + len - 2, "/.") == 0 || (len >= 3 && strcmp(p + len - 3, "/..") == 0))
                return false;
        for (const char *q = p; *q; q++) {
                if ((unsigned char)*q < 0x21 || *q == 0x7f || *q == ':')
                        return false;
        }
        for (size_t i = 0; i < ARRAY_SIZE(reserved); i++) {
                size_t n = strlen(reserved[i]);
                if (strncmp(p, reserved[i], n) == 0 && (p[n] == '\0' || p[n] == '/'))
                        return false;
        }
        return true;
}

int cs_mount_path_check(const char *p, cs_error **err)
{
        if (mount_path_ok(p))
                return 0;
        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                            "mount_path must be a clean absolute path other than /, /proc, /dev "
                            "and /sys, without spaces or ':', at most %d bytes",
                            CS_MOUNT_PATH_MAX);
}
