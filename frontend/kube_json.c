/* The JSON and time helpers of the kube client: reading fields of API objects, escaping
 * query values, RFC 3339 times. See kube_client.h.
 *
 * Owns: nothing but these pure functions (no state, no locks, no curl). Touches: only their
 * arguments. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kube_client.h"
#include "util.h"

char *kube_escape(const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        char *out = cs_xmalloc(strlen(s) * 3 + 1), *o = out;

        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
                        *o++ = (char)*p;
                } else {
                        *o++ = '%';
                        *o++ = hex[*p >> 4];
                        *o++ = hex[*p & 15];
                }
        }
        *o = '\0';
        return out;
}

const char *kube_get_str(json_t *obj, const char *dotted)
{
        const char *p = dotted;

        for (;;) {
                const char *dot = strchr(p, '.');

                if (!json_is_object(obj))
                        return NULL;
                obj = json_object_getn(obj, p, dot ? (size_t)(dot - p) : strlen(p));
                if (!dot)
                        return json_string_value(obj);
                p = dot + 1;
        }
}

json_t *kube_get_key(json_t *obj, ...)
{
        const char *key;
        va_list ap;

        va_start(ap, obj);
        while (obj && (key = va_arg(ap, const char *)))
                obj = json_is_object(obj) ? json_object_get(obj, key) : NULL;
        va_end(ap);
        return obj;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), after Howard Hinnant's algorithm. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
        int64_t era, yoe, doy, doe;

        y -= m <= 2;
        era = (y >= 0 ? y : y - 399) / 400;
        yoe = y - era * 400;
        doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
}

static int parse_digits(const char **p, int n)
{
        int v = 0;

        for (int i = 0; i < n; i++, (*p)++) {
                if (**p < '0' || **p > '9')
                        return -1;
                v = v * 10 + (**p - '0');
        }
        return v;
}

static bool expect_char(const char **p, const char *set)
{
        if (!**p || !strchr(set, **p))
                return false;
        (*p)++;
        return true;
}

int64_t kube_time_parse(const char *s)
{
        static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
        int y, mo, d, h, mi, sec, ms = 0, off = 0;
        const char *p = s;
        int64_t t;

        if (!s)
                return -1;
        y = parse_digits(&p, 4);
        if (y < 0 || !expect_char(&p, "-") || (mo = parse_digits(&p, 2)) < 0 ||
            !expect_char(&p, "-") || (d = parse_digits(&p, 2)) < 0 || !expect_char(&p, "Tt") ||
            (h = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
            (mi = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
            (sec = parse_digits(&p, 2)) < 0)
                return -1;
        if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59)
                return -1;
        if (d > mdays[mo - 1] + (mo == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))))
                return -1;
        if (*p == '.') {
                int digits = 0;

                for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                        if (digits < 3)
                                ms = ms * 10 + (*p - '0');
                if (digits == 0 || digits > 9)
                        return -1;
                for (; digits < 3; digits++)
                        ms *= 10;
        }
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                int sign = *p++ == '-' ? -1 : 1, oh, om;

                if ((oh = parse_digits(&p, 2)) < 0 || !expect_char(&p, ":") ||
                    (om = parse_digits(&p, 2)) < 0 || oh > 23 || om > 59)
                        return -1;
                off = sign * (oh * 60 + om);
        } else {
                return -1;
        }
        if (*p)
                return -1;
        t = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi - off) * 60 + sec;
        if (t < 0)
                return -1;
        return t * 1000 + ms;
}

const char *kube_time_format(int64_t ms, char buf[static 32])
{
        time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
        struct tm tm;

        if (!gmtime_r(&secs, &tm)) {
                snprintf(buf, 32, "1970-01-01T00:00:00Z");
                return buf;
        }
        if (strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                snprintf(buf, 32, "1970-01-01T00:00:00Z");
        return buf;
}
