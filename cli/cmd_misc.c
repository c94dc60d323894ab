/* version and completion: commands that need no server. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* Parses a command that takes no option and at most max_pos arguments. 0, or the exit status
 * when the command is done (help printed, usage error). */
static int parse_plain(const cli_command *cmd, int argc, char **argv, size_t max_pos,
                       char ***ret_pos, size_t *ret_n)
{
        int r = cli_parse(cmd, argc, argv, NULL, NULL, ret_pos, ret_n);

        if (r == 1) {
                cli_print_command_help(cmd, stdout);
                return CLI_EXIT_OK;
        }
        if (r < 0)
                return CLI_EXIT_USAGE;
        if (*ret_n > max_pos) {
                cli_usage_error(cmd, "unexpected argument '%s'", (*ret_pos)[max_pos]);
                return CLI_EXIT_USAGE;
        }
        return -1;
}

/* --- version ------------------------------------------------------------------------------ */

static int run_version(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        _cleanup_cli_json_ cli_json_writer j = { 0 };
        _cleanup_free_ char **pos = NULL;
        size_t n = 0;
        int r = parse_plain(cmd, argc, argv, 0, &pos, &n);

        if (r >= 0)
                return r;
        if (!ctx->json) {
                printf("client: " CLI_NAME " " CLI_VERSION "\n"
                       "server: unknown (compute.v1.ComputeService has no call that tells it)\n");
                return CLI_EXIT_OK;
        }
        cli_json_object_begin(&j);
        cli_json_kv_string(&j, "client_version", CLI_VERSION);
        cli_json_key(&j, "server_version");
        cli_json_null(&j);
        cli_json_object_end(&j);
        return cli_json_print(&j);
}

const cli_command cli_cmd_version = {
        .name = "version",
        .args = "",
        .summary = "Print computectl's version (the API does not tell the server's).",
        .details = "Text: 'client: computectl VERSION' and a 'server:' line saying that the\n"
                   "service has no call that tells its version (none is made).\n"
                   "--json: {\"client_version\", \"server_version\": null}.\n",
        .run = run_version,
};

/* --- completion ----------------------------------------------------------------------------- */

static bool has_option(const cli_command *cmd, const char *name)
{
        for (size_t i = 0; i < cmd->n_options; i++)
                if (strcmp(cmd->options[i].name, name) == 0)
                        return true;
        return false;
}

/* The options of cmd, each as " --name -n": all of them, or only those that take a value;
 * none that `shadow` (a command) has too. */
static void print_options_but(const cli_command *cmd, bool values_only, const cli_command *shadow)
{
        for (size_t i = 0; i < cmd->n_options; i++) {
                const cli_option *o = &cmd->options[i];

                if ((values_only && !o->metavar) || (shadow && has_option(shadow, o->name)))
                        continue;
                printf(" --%s", o->name);
                if (o->short_name)
                        printf(" -%c", o->short_name);
        }
}

static void print_options(const cli_command *cmd, bool values_only)
{
        print_options_but(cmd, values_only, NULL);
}

/* _computectl_command NAME: what the scripts know of a command, in _cc_ variables:
 *   opts   its options and the global ones (but --version)
 *   vals   those of them that take a value (the next word is that value)
 *   first  options stop at the first argument (exec: the rest is the remote command line)
 *   files  the arguments are local paths (cp; a sandbox's ID:PATH is not completed)
 *   words  the first argument's fixed values (completion)
 * Returns 1 for an unknown command. Sandbox IDs are not completed: listing them needs a
 * tenant and a call to the server. */
static void print_command_table(void)
{
        printf("_computectl_command() {\n"
               "    _cc_first= _cc_files= _cc_words=\n"
               "    case $1 in\n");
        for (size_t i = 0; i < cli_n_commands; i++) {
                const cli_command *c = cli_commands[i];

                printf("    %s)\n        _cc_opts='--help -h", c->name);
                print_options(c, false);
                print_options_but(&cli_global, false, c);
                printf("'\n        _cc_vals='");
                print_options(c, true);
                print_options_but(&cli_global, true, c);
                printf(" '\n");
                if (c->options_first)
                        printf("        _cc_first=1\n");
                if (c == &cli_cmd_cp)
                        printf("        _cc_files=1\n");
                if (c == &cli_cmd_completion)
                        printf("        _cc_words='bash zsh'\n");
                printf("        ;;\n");
        }
        printf("    *) return 1 ;;\n"
               "    esac\n"
               "}\n\n");
}

/* _computectl_analyse CWORD WORD...: the words of the command line ($2 is "computectl") and
 * the index among them of the one being completed; sets _cc_kind to what that word is:
 * command, global-option, option, words, files, or none (a value, the remote command line,
 * a sandbox ID), and _cc_cur to the word. Plain sh that bash and zsh both run. */
static void print_analyse(void)
{
        printf("_computectl_analyse() {\n"
               "    local cword=$1 i=0 w cmd= npos=0 dd= skip= unknown=\n"
               "    local gvals='");
        print_options(&cli_global, true);
        printf(" '\n"
               "    shift\n"
               "    _cc_cur= _cc_opts= _cc_vals= _cc_first= _cc_files= _cc_words=\n"
               "    while [ $# -gt 0 ] && [ $i -lt $cword ]; do\n"
               "        w=$1\n"
               "        shift\n"
               "        if [ $i -eq 0 ]; then\n"
               "            :\n"
               "        elif [ -n \"$skip\" ]; then\n"
               "            skip=\n"
               "        elif [ -z \"$cmd\" ]; then\n"
               "            case $w in\n"
               "            --*=*) ;;\n"
               "            -*) case \"$gvals\" in *\" $w \"*) skip=1 ;; esac ;;\n"
               "            *) cmd=$w\n"
               "               _computectl_command \"$w\" || unknown=1 ;;\n"
               "            esac\n"
               "        elif [ -n \"$dd\" ] || { [ -n \"$_cc_first\" ] && [ $npos -gt 0 ]; }; "
               "then\n"
               "            npos=$((npos + 1))\n"
               "        elif [ \"$w\" = -- ]; then\n"
               "            dd=1\n"
               "        else\n"
               "            case $w in\n"
               "            --*=*) ;;\n"
               "            -?*) case \"$_cc_vals\" in *\" $w \"*) skip=1 ;; esac ;;\n"
               "            *) npos=$((npos + 1)) ;;\n"
               "            esac\n"
               "        fi\n"
               "        i=$((i + 1))\n"
               "    done\n"
               "    [ $# -gt 0 ] && _cc_cur=$1\n"
               "    if [ -n \"$skip\" ] || [ -n \"$unknown\" ]; then\n"
               "        _cc_kind=none\n"
               "    elif [ -z \"$cmd\" ]; then\n"
               "        case $_cc_cur in\n"
               "        --*=*) _cc_kind=none ;;\n"
               "        -*) _cc_kind=global-option ;;\n"
               "        *) _cc_kind=command ;;\n"
               "        esac\n"
               "    elif [ -n \"$_cc_first\" ] && [ $npos -gt 0 ]; then\n"
               "        _cc_kind=none\n"
               "    elif [ -z \"$dd\" ] && case $_cc_cur in --*=*) false ;; -*) true ;; *) false "
               ";; esac; then\n"
               "        _cc_kind=option\n"
               "    elif [ -n \"$_cc_files\" ]; then\n"
               "        _cc_kind=files\n"
               "    elif [ -n \"$_cc_words\" ] && [ $npos -eq 0 ]; then\n"
               "        _cc_kind=words\n"
               "    else\n"
               "        _cc_kind=none\n"
               "    fi\n"
               "}\n\n");
}

static void print_commands_and_globals(void)
{
        printf("_cc_commands='");
        for (size_t i = 0; i < cli_n_commands; i++)
                printf("%s%s", i ? " " : "", cli_commands[i]->name);
        printf("'\n_cc_gopts='--help -h --version");
        print_options(&cli_global, false);
        printf("'\n\n");
}

static void print_bash(void)
{
        printf("# bash completion for " CLI_NAME " " CLI_VERSION " (generated by '" CLI_NAME
               " completion bash').\n"
               "# Load it with: source <(" CLI_NAME " completion bash)\n\n");
        print_commands_and_globals();
        print_command_table();
        print_analyse();
        /* bash splits "--addr=x" at '=' (COMP_WORDBREAKS): glued back first. */
        printf("_computectl() {\n"
               "    local -a ws=()\n"
               "    local i n=-1 cw=0 _cc_cur _cc_kind _cc_opts _cc_vals _cc_first _cc_files "
               "_cc_words\n"
               "    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do\n"
               "        if ((n >= 0)) && [[ ${ws[n]} == --* ]] &&\n"
               "           [[ ${ws[n]} == *= || ( ${COMP_WORDS[i]} == = && ${ws[n]} != *=* ) ]]; "
               "then\n"
               "            ws[n]+=${COMP_WORDS[i]}\n"
               "        else\n"
               "            n=$((n + 1))\n"
               "            ws[n]=${COMP_WORDS[i]}\n"
               "        fi\n"
               "        ((i == COMP_CWORD)) && cw=$n\n"
               "    done\n"
               "    _computectl_analyse \"$cw\" \"${ws[@]}\"\n"
               "    local cur=${COMP_WORDS[COMP_CWORD]}\n"
               "    COMPREPLY=()\n"
               "    case $_cc_kind in\n"
               "    command) COMPREPLY=($(compgen -W \"$_cc_commands\" -- \"$cur\")) ;;\n"
               "    global-option) COMPREPLY=($(compgen -W \"$_cc_gopts\" -- \"$cur\")) ;;\n"
               "    option) COMPREPLY=($(compgen -W \"$_cc_opts\" -- \"$cur\")) ;;\n"
               "    words) COMPREPLY=($(compgen -W \"$_cc_words\" -- \"$cur\")) ;;\n"
               "    files)\n"
               "        compopt -o filenames 2>/dev/null\n"
               "        local IFS=$'\\n'\n"
               "        COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
               "    esac\n"
               "    return 0\n"
               "}\n\n"
               "complete -F _computectl " CLI_NAME "\n");
}

static void print_zsh(void)
{
        printf("#compdef " CLI_NAME "\n"
               "# zsh completion for " CLI_NAME " " CLI_VERSION " (generated by '" CLI_NAME
               " completion zsh').\n"
               "# Load it with: source <(" CLI_NAME " completion zsh) (after compinit), or save\n"
               "# it as _" CLI_NAME " in a directory of $fpath.\n\n");
        print_commands_and_globals();
        print_command_table();
        print_analyse();
        printf("_computectl() {\n"
               "    local _cc_cur _cc_kind _cc_opts _cc_vals _cc_first _cc_files _cc_words\n"
               "    _computectl_analyse $((CURRENT - 1)) \"${words[@]}\"\n"
               "    case $_cc_kind in\n"
               "    command) compadd -- ${=_cc_commands} ;;\n"
               "    global-option) compadd -- ${=_cc_gopts} ;;\n"
               "    option) compadd -- ${=_cc_opts} ;;\n"
               "    words) compadd -- ${=_cc_words} ;;\n"
               "    files) _files ;;\n"
               "    *) return 1 ;;\n"
               "    esac\n"
               "}\n\n"
               "if [ \"${funcstack[1]}\" = _computectl ]; then\n"
               "    _computectl \"$@\"\n"
               "else\n"
               "    compdef _computectl " CLI_NAME "\n"
               "fi\n");
}

static int run_completion(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
        _cleanup_free_ char **pos = NULL;
        size_t n = 0;
        int r = parse_plain(cmd, argc, argv, 1, &pos, &n);

        (void)ctx;
        if (r >= 0)
                return r;
        if (n == 0) {
                cli_usage_error(cmd, "which shell: bash or zsh?");
                return CLI_EXIT_USAGE;
        }
        if (strcmp(pos[0], "bash") == 0) {
                print_bash();
        } else if (strcmp(pos[0], "zsh") == 0) {
                print_zsh();
        } else {
                cli_usage_error(cmd, "'%s': not a shell it knows (bash or zsh)", pos[0]);
                return CLI_EXIT_USAGE;
        }
        return CLI_EXIT_OK;
}

const cli_command cli_cmd_completion = {
        .name = "completion",
        .args = "bash|zsh",
        .summary = "Print a shell completion script for bash or zsh.",
        .details = "bash:  source <(computectl completion bash)   (e.g. in ~/.bashrc)\n"
                   "zsh:   source <(computectl completion zsh)    (after compinit), or save it as\n"
                   "       _computectl in a directory of $fpath.\n"
                   "Completes commands, global and per-command options, 'bash'/'zsh' here and\n"
                   "local paths for cp; not sandbox IDs (listing them needs a tenant) nor\n"
                   "option values.\n",
        .run = run_completion,
};
