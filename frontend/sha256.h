/* SHA-256 (FIPS 180-4) of a short buffer: the kube scheduler names a session's pod after the
 * hash of its tenant and session ids. Not for secrets (not constant-time). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_BYTES 32

void sha256(const void *data, size_t len, uint8_t out[static SHA256_DIGEST_BYTES]);
