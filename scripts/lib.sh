# Shared by scripts/run and scripts/test: install what is missing, build.
# Sourced, not run. Everything here is idempotent and non-interactive.

CS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian 12 packages the build and the test suite need.
CS_PACKAGES=(
        build-essential cmake pkg-config
        libgrpc-dev libprotobuf-dev protobuf-compiler
        protobuf-c-compiler libprotobuf-c-dev
        libcmocka-dev libjansson-dev libcurl4-openssl-dev libyaml-dev libssl-dev
        runsc openssl
        python3 python3-grpcio python3-protobuf python3-yaml
)

cs_log() {
        printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

# Installs whichever of CS_PACKAGES is not installed yet.
cs_install_deps() {
        local missing=() p
        for p in "${CS_PACKAGES[@]}"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
                        missing+=("$p")
        done
        [ ${#missing[@]} -eq 0 ] && return 0
        local sudo=()
        if [ "$(id -u)" -ne 0 ]; then
                command -v sudo >/dev/null || {
                        cs_log "missing packages (${missing[*]}) and not root: run as root"
                        return 1
                }
                sudo=(sudo)
        fi
        cs_log "installing: ${missing[*]}"
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends "${missing[@]}"
}

# cs_build DIR [CMAKE_ARG...]: configures DIR when it is new or when arguments are given,
# then builds it. A configured DIR keeps its options (a sanitizer build stays one).
cs_build() {
        local dir=$1
        shift
        if [ ! -f "$dir/CMakeCache.txt" ] || [ $# -gt 0 ]; then
                cmake -S "$CS_ROOT" -B "$dir" "$@" >/dev/null
        fi
        cmake --build "$dir" -j "$(nproc)"
}
