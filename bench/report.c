/* The table on stdout and the JSON file: one list of rows feeds both. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "util.h"

typedef enum row_kind {
        ROW_FIGURE,
        ROW_SECTION,
        ROW_FAILURE,
} row_kind;

typedef struct row {
        row_kind kind;
        char *id, *figure, *unit, *baseline_name; /* a section's title and a failure's
                                                   * message are in figure */
        double service, baseline, ratio;
        bench_goal goal;
        int verdict; /* -1: no goal, 0: not met, 1: met */
} row;

/* The report is the process's one output: a static list, filled by one thread (the phases
 * run one after the other). */
static row *rows;
static size_t n_rows, cap_rows;

static row *row_new(row_kind kind)
{
        if (n_rows == cap_rows) {
                size_t cap = cap_rows ? 2 * cap_rows : 64;
                row *r = realloc(rows, cap * sizeof(*r));

                if (!r)
                        abort();
                rows = r;
                cap_rows = cap;
        }
        memset(&rows[n_rows], 0, sizeof(rows[n_rows]));
        rows[n_rows].kind = kind;
        rows[n_rows].service = rows[n_rows].baseline = rows[n_rows].ratio = NAN;
        rows[n_rows].verdict = -1;
        return &rows[n_rows++];
}

static int goal_verdict(bench_goal g, double service, double ratio)
{
        switch (g.kind) {
        case GOAL_NONE:
                return -1;
        case GOAL_RATIO_LE:
                return !isnan(ratio) && ratio <= g.target;
        case GOAL_RATIO_GE:
                return !isnan(ratio) && ratio >= g.target;
        case GOAL_RATIO_WITHIN:
                return !isnan(ratio) && fabs(ratio - 1.0) <= g.target;
        case GOAL_VALUE_LT:
                return !isnan(service) && service < g.target;
        case GOAL_VALUE_LE:
                return !isnan(service) && service <= g.target;
        }
        return -1;
}

void report_row(bench_ctx *b, const char *id, const char *figure, const char *unit, double service,
                const char *baseline_name, double baseline, bench_goal goal)
{
        row *r = row_new(ROW_FIGURE);

        (void)b;
        r->id = cs_xstrdup(id);
        r->figure = cs_xstrdup(figure);
        r->unit = cs_xstrdup(unit);
        r->baseline_name = baseline_name ? cs_xstrdup(baseline_name) : NULL;
        r->service = service;
        r->baseline = baseline;
        r->ratio = !isnan(baseline) && baseline != 0 ? service / baseline : NAN;
        r->goal = goal;
        r->verdict = goal_verdict(goal, service, r->ratio);
        /* Figures appear as they are measured, so a long run shows progress. */
        fprintf(stderr, BENCH_NAME ": %-44s %12.3f %s", figure, service, unit);
        if (!isnan(baseline))
                fprintf(stderr, "  (baseline %.3f, ratio %.3f)", baseline, r->ratio);
        fputc('\n', stderr);
}

void report_section(bench_ctx *b, const char *title)
{
        (void)b;
        row_new(ROW_SECTION)->figure = cs_xstrdup(title);
        fprintf(stderr, BENCH_NAME ": --- %s\n", title);
}

void report_failure(bench_ctx *b, const char *phase, const cs_error *err)
{
        row *r = row_new(ROW_FAILURE);

        b->failures++;
        r->id = cs_xstrdup(phase);
        r->figure = cs_xasprintf("%s: %s", cs_status_name(err ? err->code : GRPC_STATUS_UNKNOWN),
                                 err && err->msg ? err->msg : "unknown error");
        fprintf(stderr, BENCH_NAME ": %s could not be measured: %s\n", phase, r->figure);
}

/* Three significant-ish decimals whatever the magnitude, in a fixed width. */
static void fmt_num(char *buf, size_t size, double x)
{
        if (isnan(x))
                snprintf(buf, size, "-");
        else if (fabs(x) >= 1000)
                snprintf(buf, size, "%.0f", x);
        else if (fabs(x) >= 100)
                snprintf(buf, size, "%.1f", x);
        else
                snprintf(buf, size, "%.2f", x);
}

static void fmt_goal(char *buf, size_t size, bench_goal g)
{
        switch (g.kind) {
        case GOAL_NONE:
                buf[0] = '\0';
                break;
        case GOAL_RATIO_LE:
                snprintf(buf, size, "<= %.2fx", g.target);
                break;
        case GOAL_RATIO_GE:
                snprintf(buf, size, ">= %.2fx", g.target);
                break;
        case GOAL_RATIO_WITHIN:
                snprintf(buf, size, "1x +-%.0f%%", g.target * 100);
                break;
        case GOAL_VALUE_LT:
                snprintf(buf, size, "< %.0f", g.target);
                break;
        case GOAL_VALUE_LE:
                if (g.target == 0)
                        snprintf(buf, size, "= 0");
                else
                        snprintf(buf, size, "<= %.0f", g.target);
                break;
        }
}

void report_print(FILE *out)
{
        int goals = 0, met = 0;

        fprintf(out, "%-46s %-5s %10s %10s %8s %-11s %s\n", "figure", "unit", "service", "baseline",
                "ratio", "goal", "verdict");
        for (size_t i = 0; i < n_rows; i++) {
                const row *r = &rows[i];
                char s[32], base[32], ratio[32], goal[32];

                switch (r->kind) {
                case ROW_SECTION:
                        fprintf(out, "%s\n", r->figure);
                        continue;
                case ROW_FAILURE:
                        fprintf(out, "  %-44s FAILED: %s\n", r->id, r->figure);
                        continue;
                case ROW_FIGURE:
                        break;
                }
                fmt_num(s, sizeof(s), r->service);
                fmt_num(base, sizeof(base), r->baseline);
                if (isnan(r->ratio))
                        snprintf(ratio, sizeof(ratio), "-");
                else
                        snprintf(ratio, sizeof(ratio), "%.2fx", r->ratio);
                fmt_goal(goal, sizeof(goal), r->goal);
                fprintf(out, "  %-44s %-5s %10s %10s %8s %-11s %s\n", r->figure, r->unit, s, base,
                        ratio, goal,
                        r->verdict < 0 ? ""
                        : r->verdict   ? "met"
                                       : "NOT MET");
                if (r->verdict >= 0) {
                        goals++;
                        met += r->verdict;
                }
        }
        fprintf(out, "goals met: %d of %d\n", met, goals);
}

static json_t *num(double x)
{
        return isnan(x) || isinf(x) ? json_null() : json_real(x);
}

static json_t *goal_json(bench_goal g)
{
        static const char *const ops[] = {
                [GOAL_RATIO_LE] = "ratio<=",         [GOAL_RATIO_GE] = "ratio>=",
                [GOAL_RATIO_WITHIN] = "|ratio-1|<=", [GOAL_VALUE_LT] = "value<",
                [GOAL_VALUE_LE] = "value<=",
        };

        if (g.kind == GOAL_NONE)
                return json_null();
        return json_pack("{s:s, s:o}", "op", ops[g.kind], "target", num(g.target));
}

static json_t *rows_json(json_t *failures, int *ret_goals, int *ret_met)
{
        json_t *a = json_array();
        const char *section = "";

        for (size_t i = 0; i < n_rows; i++) {
                const row *r = &rows[i];

                if (r->kind == ROW_SECTION) {
                        section = r->figure;
                        continue;
                }
                if (r->kind == ROW_FAILURE) {
                        json_array_append_new(failures, json_pack("{s:s, s:s}", "phase", r->id,
                                                                  "error", r->figure));
                        continue;
                }
                json_array_append_new(
                        a, json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o}", "id",
                                     r->id, "section", section, "figure", r->figure, "unit",
                                     r->unit, "service", num(r->service), "baseline",
                                     num(r->baseline), "baseline_name",
                                     r->baseline_name ? json_string(r->baseline_name) : json_null(),
                                     "ratio", num(r->ratio), "goal", goal_json(r->goal), "met",
                                     r->verdict < 0 ? json_null() : json_boolean(r->verdict)));
                if (r->verdict >= 0) {
                        (*ret_goals)++;
                        *ret_met += r->verdict;
                }
        }
        return a;
}

int report_write_json(bench_ctx *b, cs_error **err)
{
        json_t *doc = json_deep_copy(b->meta);
        json_t *failures = json_array();
        _cleanup_free_ char *tmp = cs_xasprintf("%s.tmp", b->json_path);
        _cleanup_free_ char *dir = cs_xstrdup(b->json_path);
        char *slash = strrchr(dir, '/');
        int goals = 0, met = 0, r;

        /* bench/results/ is not in git: made on the first run. */
        if (slash && slash != dir) {
                *slash = '\0';
                if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                        json_decref(doc);
                        json_decref(failures);
                        return cs_error_errno(err, errno, "cannot create %s", dir);
                }
        }
        json_object_set_new(doc, "rows", rows_json(failures, &goals, &met));
        json_object_set_new(doc, "failures", failures);
        json_object_set_new(doc, "goals", json_pack("{s:i, s:i}", "total", goals, "met", met));
        json_object_set(doc, "details", b->details);
        r = json_dump_file(doc, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(doc);
        if (r < 0)
                return cs_error_errno(err, errno ? errno : EIO, "cannot write %s", tmp);
        if (rename(tmp, b->json_path) < 0) {
                int e = errno;
                unlink(tmp);
                return cs_error_errno(err, e, "cannot rename %s", tmp);
        }
        return 0;
}

void report_free(void)
{
        for (size_t i = 0; i < n_rows; i++) {
                free(rows[i].id);
                free(rows[i].figure);
                free(rows[i].unit);
                free(rows[i].baseline_name);
        }
        free(rows);
        rows = NULL;
        n_rows = cap_rows = 0;
}
