/* Kubernetes quantities as byte counts ("10Gi", "500M", "1.5Ti"): the one parser both daemons
 * use for a workspace size. Pure: owns nothing, touches nothing. */
#pragma once

#include <stdint.h>

/* Longest quantity accepted, in characters. */
#define CS_QUANTITY_MAX 32

/* Parses s: digits, an optional decimal fraction, an optional binary (Ki Mi Gi Ti Pi Ei) or
 * decimal (k M G T P E) suffix. A fraction of a byte rounds up, as Kubernetes rounds a
 * quantity's value. Returns 0 and sets *ret_bytes; -1 for garbage, signs, exponents, the
 * milli suffix, more than CS_QUANTITY_MAX characters or 18 fraction digits, or a value
 * above UINT64_MAX. */
int cs_quantity_parse(const char *s, uint64_t *ret_bytes);
