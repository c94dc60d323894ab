/* Strict UTF-8 (utf8.h). */
#include "utf8.h"

size_t cs_utf8_len(const unsigned char *s, size_t n)
{
        unsigned char c = s[0];
        unsigned char lo = 0x80, hi = 0xbf;
        size_t len;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4;
        else
                return 0;
        if (len > n)
                return 0;
        /* The second byte's range excludes overlong forms, surrogates and > U+10FFFF. */
        if (c == 0xe0)
                lo = 0xa0;
        else if (c == 0xed)
                hi = 0x9f;
        else if (c == 0xf0)
                lo = 0x90;
        else if (c == 0xf4)
                hi = 0x8f;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < len; i++)
                if (s[i] < 0x80 || s[i] > 0xbf)
                        return 0;
        return len;
}

bool cs_utf8_valid(const void *s, size_t n)
{
        const unsigned char *p = s;

        while (n > 0) {
                size_t k = cs_utf8_len(p, n);
                if (k == 0)
                        return false;
                p += k;
                n -= k;
        }
        return true;
}
