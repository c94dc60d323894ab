#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int parse_bool(const char *s, bool *ret)
{
        static const char *const yes[] = { "1", "true", "yes", "on" };
        static const char *const no[] = { "0", "false", "no", "off" };

        for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
                if (strcmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return -1;
}

/* Stores text into the option's destination. `source` names where the text came from. */
static int option_store(const cs_option *o, const char *text, const char *source, cs_error **err)
{
        switch (o->type) {
        case CS_OPT_STRING: {
                char **dst = o->dst;
                free(*dst);
                *dst = cs_xstrdup(text ? text : "");
                return 0;
        }
        case CS_OPT_INT: {
                char *end = NULL;
                long long v;

                errno = 0;
                v = strtoll(text, &end, 10);
                if (errno || !end || end == text || *end)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: '%s' is not a whole number", source, text);
                if (v < o->min || v > o->max)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: %lld is outside %" PRId64 "..%" PRId64, source, v,
                                            o->min, o->max);
                *(int64_t *)o->dst = v;
                return 0;
        }
        case CS_OPT_BOOL:
                if (parse_bool(text, o->dst) < 0)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "%s: '%s' is not a boolean (true/false)", source, text);
                return 0;
        }
        return cs_error_set(err, GRPC_STATUS_INTERNAL, "%s: unknown option type", source);
}

static const cs_option *find_flag(const cs_program *prog, const char *name, size_t len)
{
        for (int i = 0; i < prog->n_options; i++) {
                const cs_option *o = &prog->options[i];
                if (strlen(o->flag) == len && strncmp(o->flag, name, len) == 0)
                        return o;
        }
        return NULL;
}

static int parse_defaults_and_env(const cs_program *prog, cs_error **err)
{
        for (int i = 0; i < prog->n_options; i++) {
                const cs_option *o = &prog->options[i];
                const char *env = o->env ? getenv(o->env) : NULL;
                char source[128];

                if (o->def || o->type == CS_OPT_STRING) {
                        snprintf(source, sizeof(source), "default of --%s", o->flag);
                        if (option_store(o, o->def, source, err) < 0)
                                return -1;
                }
                if (env && *env) {
                        snprintf(source, sizeof(source), "%s", o->env);
                        if (option_store(o, env, source, err) < 0)
                                return -1;
                }
        }
        return 0;
}

int cs_config_parse(const cs_program *prog, int argc, char **argv, int *ret_rest, cs_error **err)
{
        if (parse_defaults_and_env(prog, err) < 0)
                return -1;

        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                const char *value, *eq;
                const cs_option *o;
                char source[128];

                if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
                        cs_config_print_help(prog, stdout);
                        return 1;
                }
                if (strcmp(arg, "--version") == 0) {
                        printf("%s %s\n", prog->name, CS_VERSION);
                        return 1;
                }
                if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
                        if (ret_rest && strcmp(arg, "--") != 0) {
                                *ret_rest = i;
                                return 0;
                        }
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "unexpected argument '%s' (see --help)", arg);
                }
                arg += 2;
                eq = strchr(arg, '=');
                o = find_flag(prog, arg, eq ? (size_t)(eq - arg) : strlen(arg));
                if (!o)
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                            "unknown option '--%s' (see --help)", arg);
                snprintf(source, sizeof(source), "--%s", o->flag);
                if (eq)
                        value = eq + 1;
                else if (o->type == CS_OPT_BOOL)
                        value = "true";
                else if (i + 1 < argc)
                        value = argv[++i];
                else
                        return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT, "%s needs a value",
                                            source);
                if (option_store(o, value, source, err) < 0)
                        return -1;
        }
        if (ret_rest)
                *ret_rest = argc;
        return 0;
}

void cs_config_free(const cs_program *prog)
{
        for (int i = 0; i < prog->n_options; i++) {
                const cs_option *o = &prog->options[i];
                if (o->type == CS_OPT_STRING) {
                        char **dst = o->dst;
                        free(*dst);
                        *dst = NULL;
                }
        }
}

void cs_config_print_help(const cs_program *prog, FILE *out)
{
        fprintf(out,
                "Usage: %s [OPTION]...\n\n%s\n\nOptions (a flag beats its environment variable, "
                "which beats the default):\n",
                prog->name, prog->summary);
        for (int i = 0; i < prog->n_options; i++) {
                const cs_option *o = &prog->options[i];
                const char *arg = o->type == CS_OPT_INT    ? "=N"
                                  : o->type == CS_OPT_BOOL ? "[=BOOL]"
                                                           : "=VALUE";

                fprintf(out, "  --%s%s\n      %s\n", o->flag, arg, o->help);
                if (o->env)
                        fprintf(out, "      env: %s", o->env);
                else
                        fprintf(out, "      env: (none)");
                fprintf(out, "; default: %s\n", o->def && *o->def ? o->def : "(empty)");
        }
        fprintf(out, "  --version\n      Print \"%s %s\" and exit.\n", prog->name, CS_VERSION);
        fprintf(out, "  --help\n      Print this help and exit.\n");
}
