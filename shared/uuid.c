#include "uuid.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

bool cs_uuid_valid(const char *s)
{
        if (!s || strlen(s) != CS_UUID_STRLEN)
                return false;
        for (int i = 0; i < CS_UUID_STRLEN; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
                        return false;
        }
        return true;
}

void cs_uuid_generate(char buf[static CS_UUID_STRLEN + 1])
{
        unsigned char b[16];
        size_t got = 0;

        while (got < sizeof(b)) {
                ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        abort(); /* ENOSYS: kernels before 3.17 are not supported */
                got += (size_t)n;
        }
        b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
        b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
        snprintf(buf, CS_UUID_STRLEN + 1,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                 b[15]);
}
