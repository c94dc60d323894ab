/* Kubernetes quantities as sizes in bytes ("10Gi", "500M", "1.5Ti", "1048576"): one parser
 * for the frontend's workspace checks and the kube mode's PVC sizes. Pure: no allocation, no
 * logging. */
#pragma once

#include <stdint.h>

/* The longest quantity accepted, in characters. */
#define CS_QUANTITY_MAX 32

/* Parses s: decimal digits, an optional fraction, an optional suffix (binary Ki Mi Gi Ti Pi
 * Ei, decimal k M G T P E); no sign, exponent or spaces. A fraction rounds up to a whole byte,
 * as Kubernetes does. 0 and *ret set; -1 (ret untouched) for anything else, a value above
 * UINT64_MAX included. */
int cs_quantity_bytes(const char *s, uint64_t *ret);
