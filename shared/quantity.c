/* Kubernetes quantities as sizes in bytes (quantity.h). */
#include <stdbool.h>
#include <string.h>

#include "quantity.h"
#include "util.h"

#define FRACTION_DIGITS_MAX 9 /* 10^9 * the largest multiplier (2^60) still fits in 128 bits */

static bool suffix_multiplier(const char *s, uint64_t *ret)
{
        static const struct {
                const char *suffix;
                uint64_t mult;
        } table[] = {
                { "", 1ull },
                { "Ki", 1ull << 10 },
                { "Mi", 1ull << 20 },
                { "Gi", 1ull << 30 },
                { "Ti", 1ull << 40 },
                { "Pi", 1ull << 50 },
                { "Ei", 1ull << 60 },
                { "k", 1000ull },
                { "M", 1000ull * 1000 },
                { "G", 1000ull * 1000 * 1000 },
                { "T", 1000ull * 1000 * 1000 * 1000 },
                { "P", 1000ull * 1000 * 1000 * 1000 * 1000 },
                { "E", 1000ull * 1000 * 1000 * 1000 * 1000 * 1000 },
        };

        for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
                if (strcmp(s, table[i].suffix) == 0) {
                        *ret = table[i].mult;
                        return true;
                }
        }
        return false;
}

int cs_quantity_bytes(const char *s, uint64_t *ret)
{
        unsigned __int128 whole = 0, frac = 0, scale = 1, total;
        uint64_t mult;
        const char *p = s;
        size_t n_frac = 0;

        if (strnlen(s, CS_QUANTITY_MAX + 1) > CS_QUANTITY_MAX || *p < '0' || *p > '9')
                return -1;
        for (; *p >= '0' && *p <= '9'; p++) {
                whole = whole * 10 + (unsigned)(*p - '0');
                if (whole > UINT64_MAX)
                        return -1;
        }
        if (*p == '.') {
                p++;
                if (*p < '0' || *p > '9')
                        return -1;
                for (; *p >= '0' && *p <= '9'; p++) {
                        if (++n_frac > FRACTION_DIGITS_MAX)
                                return -1;
                        frac = frac * 10 + (unsigned)(*p - '0');
                        scale *= 10;
                }
        }
        if (!suffix_multiplier(p, &mult))
                return -1;
        total = whole * mult + (frac * mult + scale - 1) / scale;
        if (total > UINT64_MAX)
                return -1;
        *ret = (uint64_t)total;
        return 0;
}
