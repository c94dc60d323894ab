/* Configuration by flags and environment variables, from one table per program.
 *
 * Every option has a long flag (--listen), an environment variable (COMPUTE_LISTEN) and a
 * default; a flag beats the environment, which beats the default. `--help` prints the table,
 * so the help text and the accepted options can never disagree. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

typedef enum cs_option_type {
        CS_OPT_STRING, /* dst: char ** (owned by the config; freed by cs_config_free) */
        CS_OPT_INT,    /* dst: int64_t *, bounded by min/max */
        CS_OPT_BOOL,   /* dst: bool *; "1/true/yes/on" or "0/false/no/off"; a bare flag is true */
} cs_option_type;

typedef struct cs_option {
        const char *flag; /* without the leading "--" */
        const char *env;  /* NULL: no environment variable */
        cs_option_type type;
        const char *def; /* default, as text; NULL: empty (strings) */
        const char *help;
        void *dst;
        int64_t min, max; /* CS_OPT_INT only */
} cs_option;

typedef struct cs_program {
        const char *name;
        const char *summary; /* one paragraph printed above the options */
        const cs_option *options;
        int n_options;
} cs_program;

/* Parses defaults, then the environment, then argv. Returns 0 on success, 1 when --help or
 * --version was printed (the caller exits 0), -1 with *err on bad input. Positional
 * arguments are refused unless ret_rest is given, which then receives the first one's index. */
int cs_config_parse(const cs_program *prog, int argc, char **argv, int *ret_rest, cs_error **err);

/* Frees the strings the parse stored into the options' destinations. */
void cs_config_free(const cs_program *prog);

void cs_config_print_help(const cs_program *prog, FILE *out);
