/* The node agent's defaults that its subcommands (`image`, `cleanup`) must read the same way
 * as the agent itself: one place, so a changed default cannot leave them apart. */
#pragma once

#define NA_STATE_DIR_DEFAULT     "/var/lib/compute"
#define NA_CGROUP_ROOT_DEFAULT   "/sys/fs/cgroup"
#define NA_CGROUP_PARENT_DEFAULT "/compute"
