/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. Pure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (at most n bytes, n > 0), 0 if it is not one. */
size_t cs_utf8_len(const unsigned char *s, size_t n);

/* Whether the n bytes at s are valid UTF-8 as a whole. */
bool cs_utf8_valid(const void *s, size_t n);
