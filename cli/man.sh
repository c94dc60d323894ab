#!/bin/sh
# man.sh COMPUTECTL OUTPUT: computectl's man page, made by help2man from `computectl --help` and
# `--version`, with every command's own --help in its COMMANDS section and the examples of
# `--help` kept one a line. Run by the build (cli/CMakeLists.txt); the page is
# build/man/computectl.1.
set -eu
ctl=$1
out=$2
inc=$(mktemp)
trap 'rm -f "$inc"' EXIT
{
        echo "[COMMANDS]"
        for c in $("$ctl" --help | sed -n '/^Commands:$/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p'); do
                echo ".SS $c"
                echo ".nf"
                # roff: backslashes escaped, a line starting with '.' or "'" kept as text.
                "$ctl" "$c" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
                echo ".fi"
        done
        # The examples one a line, as in --help (help2man would fill them into a paragraph).
        echo "[=EXAMPLES]"
        echo ".nf"
        "$ctl" --help | sed -n '/^Examples:$/,/^$/s/^  //p' | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
        echo ".fi"
} >"$inc"
help2man --no-info --section=1 --source="compute-service" \
        --name="command-line client for the compute service" \
        --include="$inc" --output="$out" "$ctl"
