/* UUIDs in their canonical text form (8-4-4-4-12 hexadecimal digits, 36 characters). */
#pragma once

#include <stdbool.h>

#define CS_UUID_STRLEN 36

/* True if s is a canonical UUID (either case). A NULL or empty string is not. */
bool cs_uuid_valid(const char *s);

/* Writes a random (version 4) UUID in lower case into buf, which holds CS_UUID_STRLEN + 1. */
void cs_uuid_generate(char buf[static CS_UUID_STRLEN + 1]);
