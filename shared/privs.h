/* Linux capabilities as bit masks (bit n: capability n), by name, and limiting this
 * process to a set of them. Owns nothing; touches only this process's capability sets. */
#pragma once

#include <stdint.h>

#include "error.h"

/* Every capability this kernel knows (the bounding set's possible members). */
uint64_t cs_caps_all(void);

/* Parses "chown,dac_override,sys_admin" (names with or without "cap_", any case,
 * comma-separated; "" is none) or "all" into *ret_mask. INVALID_ARGUMENT naming an
 * unknown name. */
int cs_caps_parse(const char *list, uint64_t *ret_mask, cs_error **err);

/* "chown,dac_override,..." for mask, lowercase without "cap_" ("" for none); free it. */
char *cs_caps_format(uint64_t mask);

/* Drops every capability but `keep` from this thread's bounding set (inherited by the
 * threads and processes it makes later) and empties its ambient set. Call while the process
 * has one thread. What it may do now is unchanged (its permitted and effective sets stay).
 * -1 with *err. */
int cs_caps_bound(uint64_t keep, cs_error **err);

/* Limits this process for good to `keep` (intersected with what it has): every other
 * capability leaves the bounding set (so no program it runs regains it, even as root), the
 * permitted and effective sets (the inheritable and ambient sets are emptied). Call while
 * the process has one thread (the bounding set is per thread and inherited). *ret_kept: the
 * permitted set that remains. -1 with *err. */
int cs_caps_limit(uint64_t keep, uint64_t *ret_kept, cs_error **err);
