/* Table-driven option parsing: one table per command gives both the parser and --help, so the
 * two never disagree (as shared/config.c does for the daemons). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
        va_list ap;

        if (cmd->name)
                fprintf(stderr, CLI_NAME ": %s: ", cmd->name);
        else
                fprintf(stderr, CLI_NAME ": ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        if (cmd->name)
                fprintf(stderr, "\nTry '" CLI_NAME " %s --help'.\n", cmd->name);
        else
                fprintf(stderr, "\nTry '" CLI_NAME " --help'.\n");
        return -1;
}

static const cli_option *find_long(const cli_command *cmd, const char *name, size_t len)
{
        for (size_t i = 0; i < cmd->n_options; i++) {
                const cli_option *o = &cmd->options[i];
                if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
                        return o;
        }
        return NULL;
}

static const cli_option *find_short(const cli_command *cmd, char c)
{
        for (size_t i = 0; i < cmd->n_options; i++)
                if (cmd->options[i].short_name && cmd->options[i].short_name == c)
                        return &cmd->options[i];
        return NULL;
}

/* The global options, also recognised after the command's name (cli_set_global). */
static struct {
        const cli_command *cmd;
        cli_option_fn fn;
        void *state;
} global;

void cli_set_global(const cli_command *cmd, cli_option_fn fn, void *state)
{
        global.cmd = cmd;
        global.fn = fn;
        global.state = state;
}

/* The command's own option first: one of the same name shadows the global one. */
static bool is_global(const cli_command *cmd)
{
        return global.cmd && cmd != global.cmd;
}

/* One option at argv[*i]; may take the next argument as its value. */
static int parse_one(const cli_command *cmd, int argc, char **argv, int *i, cli_option_fn fn,
                     void *state)
{
        const char *arg = argv[*i];
        const char *value = NULL;
        const cli_option *o;
        bool inline_value;

        if (arg[1] == '-') {
                const char *eq = strchr(arg + 2, '=');
                size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);

                o = find_long(cmd, arg + 2, len);
                if (!o && is_global(cmd) && (o = find_long(global.cmd, arg + 2, len))) {
                        fn = global.fn;
                        state = global.state;
                }
                if (!o)
                        return cli_usage_error(cmd, "unknown option '%.*s'", (int)len + 2, arg);
                inline_value = eq != NULL;
                value = eq ? eq + 1 : NULL;
        } else {
                o = find_short(cmd, arg[1]);
                if (!o && is_global(cmd) && (o = find_short(global.cmd, arg[1]))) {
                        fn = global.fn;
                        state = global.state;
                }
                if (!o)
                        return cli_usage_error(cmd, "unknown option '%s'", arg);
                inline_value = arg[2] != '\0';
                value = inline_value ? arg + 2 : NULL;
                if (inline_value && !o->metavar && find_short(cmd, arg[1]) == o) {
                        /* The command's flags bundled as with getopt: -it is -i -t. */
                        for (const char *c = arg + 1; *c; c++) {
                                const cli_option *b = find_short(cmd, *c);
                                int r;

                                if (!b || b->metavar)
                                        return cli_usage_error(cmd, "unknown option '%s'", arg);
                                r = fn(state, b->id, NULL);
                                if (r != 0)
                                        return r;
                        }
                        return 0;
                }
                if (inline_value && !o->metavar)
                        return cli_usage_error(cmd, "unknown option '%s'", arg);
        }
        if (!o->metavar) {
                if (inline_value)
                        return cli_usage_error(cmd, "--%s takes no value", o->name);
                return fn(state, o->id, NULL);
        }
        if (!inline_value) {
                if (*i + 1 >= argc)
                        return cli_usage_error(cmd, "--%s needs a value (%s)", o->name, o->metavar);
                value = argv[++*i];
        }
        return fn(state, o->id, value);
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_option_fn fn, void *state,
              char ***ret_pos, size_t *ret_n_pos)
{
        _cleanup_free_ char **pos = cs_xcalloc((size_t)argc + 1, sizeof(char *));
        bool options_done = false;
        size_t n = 0;

        for (int i = 1; i < argc; i++) {
                char *arg = argv[i];

                if (options_done || arg[0] != '-' || arg[1] == '\0') {
                        /* "-" is a positional argument (stdin/stdout for cp). */
                        pos[n++] = arg;
                        if (cmd->options_first)
                                options_done = true;
                        continue;
                }
                if (strcmp(arg, "--") == 0) {
                        options_done = true;
                        continue;
                }
                if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
                        return 1;
                if (!cmd->name && strcmp(arg, "--version") == 0)
                        return 2;
                if (parse_one(cmd, argc, argv, &i, fn, state) < 0)
                        return -1;
        }
        *ret_pos = TAKE_PTR(pos);
        *ret_n_pos = n;
        return 0;
}

void cli_print_wrapped(FILE *out, int indent, const char *text)
{
        const int width = 79 - indent;
        const char *p = text;

        while (*p) {
                int len = (int)strlen(p), cut = len;

                if (len > width) {
                        /* Break at the last space that fits; a longer word goes whole. */
                        for (cut = width; cut > 0 && p[cut] != ' '; cut--)
                                ;
                        if (cut == 0)
                                for (cut = width; p[cut] && p[cut] != ' '; cut++)
                                        ;
                }
                fprintf(out, "%*s%.*s\n", indent, "", cut, p);
                p += cut;
                while (*p == ' ')
                        p++;
        }
}

void cli_print_command_help(const cli_command *cmd, FILE *out)
{
        fprintf(out, "Usage: " CLI_NAME " [GLOBAL OPTION]... %s [OPTION]...%s%s\n\n%s\n", cmd->name,
                *cmd->args ? " " : "", cmd->args, cmd->summary);
        fprintf(out, "\nOptions:\n");
        for (size_t i = 0; i < cmd->n_options; i++) {
                const cli_option *o = &cmd->options[i];
                char head[64];

                if (o->short_name)
                        snprintf(head, sizeof(head), "-%c, --%s%s%s", o->short_name, o->name,
                                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
                else
                        snprintf(head, sizeof(head), "    --%s%s%s", o->name, o->metavar ? " " : "",
                                 o->metavar ? o->metavar : "");
                fprintf(out, "  %s\n", head);
                cli_print_wrapped(out, 10, o->help);
        }
        fprintf(out, "  -h, --help\n          Print this help and exit.\n");
        if (cmd->details)
                fprintf(out, "\n%s", cmd->details);
        if (global.cmd) {
                _cleanup_free_ char *list = cs_xstrdup(""), *all = NULL;

                fprintf(out, "\nGlobal options, before or after the command name%s:\n",
                        cmd->options_first ? " (here: before its ID)" : "");
                for (size_t i = 0; i < global.cmd->n_options; i++) {
                        const cli_option *o = &global.cmd->options[i];
                        char *more = cs_xasprintf("%s%s--%s%s", list, i ? ", " : "", o->name,
                                                  find_long(cmd, o->name, strlen(o->name))
                                                          ? " (before the command only)"
                                                          : "");

                        free(list);
                        list = more;
                }
                all = cs_xasprintf("%s: see '" CLI_NAME " --help'.", list);
                cli_print_wrapped(out, 2, all);
        }
}

/* --- values ------------------------------------------------------------------------------ */

/* Leading digits of text as a number; *ret_end points after them. -1 if there are none or
 * the number does not fit. */
static int leading_u64(const char *text, uint64_t *ret, const char **ret_end)
{
        char *end = NULL;
        unsigned long long v;

        if (text[0] < '0' || text[0] > '9') /* strtoull would take "-1" and " 1" */
                return -1;
        errno = 0;
        v = strtoull(text, &end, 10);
        if (errno || end == text)
                return -1;
        *ret = v;
        *ret_end = end;
        return 0;
}

int cli_parse_u64(const cli_command *cmd, const char *opt, const char *text, uint64_t max,
                  uint64_t *ret)
{
        const char *end;
        uint64_t v;

        if (leading_u64(text, &v, &end) < 0 || *end)
                return cli_usage_error(cmd, "%s: '%s' is not a whole number", opt, text);
        if (v > max)
                return cli_usage_error(cmd, "%s: %s is more than %" PRIu64, opt, text, max);
        *ret = v;
        return 0;
}

int cli_parse_bytes(const cli_command *cmd, const char *opt, const char *text, uint64_t *ret)
{
        static const struct {
                const char *suffix;
                uint64_t mult;
        } units[] = {
                { "", 1 },
                { "B", 1 },
                { "k", 1000ULL },
                { "K", 1000ULL },
                { "M", 1000ULL * 1000 },
                { "G", 1000ULL * 1000 * 1000 },
                { "T", 1000ULL * 1000 * 1000 * 1000 },
                { "Ki", 1ULL << 10 },
                { "Mi", 1ULL << 20 },
                { "Gi", 1ULL << 30 },
                { "Ti", 1ULL << 40 },
        };
        const char *end;
        uint64_t v;

        if (leading_u64(text, &v, &end) < 0)
                return cli_usage_error(cmd, "%s: '%s' is not a size (e.g. 536870912, 512Mi, 1Gi)",
                                       opt, text);
        for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
                if (strcmp(end, units[i].suffix) != 0)
                        continue;
                if (v > UINT64_MAX / units[i].mult)
                        return cli_usage_error(cmd, "%s: '%s' is too large", opt, text);
                *ret = v * units[i].mult;
                return 0;
        }
        return cli_usage_error(cmd, "%s: '%s': unknown unit (use k, M, G, T, Ki, Mi, Gi or Ti)",
                               opt, text);
}

int cli_parse_seconds(const cli_command *cmd, const char *opt, const char *text, uint64_t max,
                      uint64_t *ret)
{
        const char *end;
        uint64_t v, mult;

        if (leading_u64(text, &v, &end) < 0)
                return cli_usage_error(cmd, "%s: '%s' is not a number of seconds", opt, text);
        if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
                mult = 1;
        else if (strcmp(end, "m") == 0)
                mult = 60;
        else if (strcmp(end, "h") == 0)
                mult = 3600;
        else
                return cli_usage_error(cmd, "%s: '%s': unknown unit (use s, m or h)", opt, text);
        if (v > max / mult)
                return cli_usage_error(cmd, "%s: '%s' is more than %" PRIu64 " seconds", opt, text,
                                       max);
        *ret = v * mult;
        return 0;
}
