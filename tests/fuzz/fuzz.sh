#!/usr/bin/env bash
# Builds and runs the fuzz targets (docs/fuzzing.md); the ctest entries of tests/fuzz/tests.cmake
# call it. Owns nothing outside the build directory it is given: the seed corpus is copied to a
# scratch directory there, never written to.
#
#   fuzz.sh build SOURCE_DIR BUILD_DIR   configure (clang) and build tests/fuzz into BUILD_DIR
#   fuzz.sh run BUILD_DIR NAME SEED_DIR  fuzz fuzz_NAME on a copy of SEED_DIR for
#                                        COMPUTE_FUZZ_SECONDS (default 20) seconds
#
# A crash, a sanitizer report, a leak, a timeout (an input over COMPUTE_FUZZ_TIMEOUT seconds,
# default 10) or running out of memory (over 2 GiB) fails the run; the input that did it is
# kept in BUILD_DIR/work/NAME/artifacts/ and the command that replays it is printed.
set -euo pipefail

fuzz_log() {
        printf 'fuzz.sh: %s\n' "$*" >&2
}

fuzz_build() {
        local src=$1 out=$2 cc=${COMPUTE_FUZZ_CC:-clang}
        if ! command -v "$cc" >/dev/null; then
                fuzz_log "$cc not found: the fuzz targets need clang and libFuzzer" \
                        "(Debian 12: apt-get install clang libclang-rt-14-dev; scripts/lib.sh)"
                return 1
        fi
        if [ ! -f "$out/CMakeCache.txt" ]; then
                cmake -S "$src" -B "$out" -DCMAKE_C_COMPILER="$cc" >/dev/null
        fi
        cmake --build "$out" -j "${COMPUTE_FUZZ_JOBS:-2}"
}

# fuzz_summary LOG CORPUS SEEDS: one line with the figures docs/fuzzing.md reports.
fuzz_summary() {
        local log=$1 corpus=$2 seeds=$3 execs rate secs files bytes
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
        secs=${COMPUTE_FUZZ_SECONDS:-20}
        files=$(find "$corpus" -type f | wc -l)
        bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }')
        printf '%s: %s runs in %s s (%s exec/s), corpus %s -> %s inputs (%s bytes)\n' \
                "$name" "${execs:-?}" "$secs" "${rate:-?}" \
                "$(find "$seeds" -type f | wc -l)" "$files" "$bytes"
}

fuzz_run() {
        local out=$1 name=$2 seeds=$3
        local bin=$out/fuzz_$name work=$out/work/$name secs=${COMPUTE_FUZZ_SECONDS:-20}
        local dict=$seeds/../$name.dict rc=0 args=()
        [ -x "$bin" ] || { fuzz_log "$bin is not built (fixture.fuzz_build)"; return 1; }
        if [ -z "$(find "$seeds" -maxdepth 1 -type f 2>/dev/null | head -1)" ]; then
                fuzz_log "no seed inputs in $seeds"
                return 1
        fi
        rm -rf "$work"
        mkdir -p "$work/corpus" "$work/artifacts"
        cp -- "$seeds"/* "$work/corpus/"
        [ -f "$dict" ] && args+=("-dict=$dict")
        # The sanitizer options are the fuzz run's own, whatever the suite exported; a target's
        # temporary files go to the work directory (left there if it crashes).
        TMPDIR=$work ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                "$bin" -max_total_time="$secs" -timeout="${COMPUTE_FUZZ_TIMEOUT:-10}" \
                -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
                "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
                tail -n 80 "$work/log"
                fuzz_log "$name FAILED (exit $rc); the whole log: $work/log"
                for a in "$work/artifacts"/*; do
                        [ -e "$a" ] && fuzz_log "reproduce: $bin $a"
                done
                return 1
        fi
        fuzz_summary "$work/log" "$work/corpus" "$seeds"
}

case ${1:-} in
build) fuzz_build "$2" "$3" ;;
run) fuzz_run "$2" "$3" "$4" ;;
*)
        fuzz_log "usage: fuzz.sh build SOURCE_DIR BUILD_DIR | run BUILD_DIR NAME SEED_DIR"
        exit 2
        ;;
esac
