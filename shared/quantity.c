/* Kubernetes quantities as byte counts: see quantity.h. Pure. */
#include "quantity.h"

#include <string.h>

/* More fraction digits than a byte count can use (1 Ei is 1.15e18 bytes). */
#define FRAC_DIGITS_MAX 18

typedef struct {
        const char *name;
        uint64_t mult;
} suffix;

static const suffix suffixes[] = {
        { "", 1ull },
        { "Ki", 1ull << 10 },
        { "Mi", 1ull << 20 },
        { "Gi", 1ull << 30 },
        { "Ti", 1ull << 40 },
        { "Pi", 1ull << 50 },
        { "Ei", 1ull << 60 },
        { "k", 1000ull },
        { "M", 1000000ull },
        { "G", 1000000000ull },
        { "T", 1000000000000ull },
        { "P", 1000000000000000ull },
        { "E", 1000000000000000000ull },
};

static int is_digit(char c)
{
        return c >= '0' && c <= '9';
}

int cs_quantity_parse(const char *s, uint64_t *ret_bytes)
{
        unsigned __int128 whole = 0, frac = 0, scale = 1, v;
        const char *p = s;
        uint64_t mult = 0;

        if (!s || strlen(s) > CS_QUANTITY_MAX || !is_digit(*p))
                return -1;
        for (; is_digit(*p); p++)
                whole = whole * 10 + (unsigned)(*p - '0');
        if (*p == '.') {
                p++;
                if (!is_digit(*p))
                        return -1;
                for (int n = 0; is_digit(*p); p++) {
                        if (++n > FRAC_DIGITS_MAX)
                                return -1;
                        frac = frac * 10 + (unsigned)(*p - '0');
                        scale *= 10;
                }
        }
        for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
                if (strcmp(p, suffixes[i].name) == 0) {
                        mult = suffixes[i].mult;
                        break;
                }
        }
        if (mult == 0 || whole > UINT64_MAX)
                return -1;
        /* whole <= 2^64 and mult <= 2^60; frac < scale <= 10^18 (FRAC_DIGITS_MAX): every
         * product below fits in 128 bits. */
        v = whole * mult + (frac * mult + scale - 1) / scale;
        if (v > UINT64_MAX)
                return -1;
        *ret_bytes = (uint64_t)v;
        return 0;
}
