# Shared by scripts/run and scripts/test: install what is missing, build.
# Sourced, not run. Everything here is idempotent and non-interactive.

CS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian 12 packages the build and the test suite need.
CS_PACKAGES=(
        build-essential cmake pkg-config
        libgrpc-dev libprotobuf-dev protobuf-compiler
        protobuf-c-compiler libprotobuf-c-dev
        libcmocka-dev libjansson-dev libseccomp-dev libcurl4-openssl-dev libyaml-dev libssl-dev libarchive-dev
        libmicrohttpd-dev libcgroup-dev libmnl-dev libnftables-dev libldns-dev
        openssl mmdebstrap busybox-static e2fsprogs
        python3 python3-grpcio python3-protobuf python3-yaml
        help2man
)
# The fuzz targets' libFuzzer build (tests/fuzz/, a ctest fixture of its own): test-only, not
# part of the build the Dockerfile makes.
CS_FUZZ_PACKAGES=(clang libclang-rt-14-dev)
# A real Prometheus server (and promtool) for integration.metrics and the deploy/ rule checks:
# test-only too.
# pip, setuptools and wheel: clients.python_sdk installs the Python SDK offline
# (pip install --no-build-isolation ./clients/python).
# zsh and man-db: integration.computectl checks `computectl completion zsh` with zsh and
# renders the man page with `man -l`; tmux: it drives `computectl exec -it` as a person would.
# nftables (nft) and iproute2 (ip): the sandbox networking tests build their own "internet"
# (tests/e2e/test_internet.py: a namespace, a veth, routes, a guard table on the uplink).
CS_TEST_PACKAGES=(prometheus python3-pip python3-setuptools python3-wheel zsh man-db tmux
                  nftables iproute2)

# runsc comes from Debian 13 (trixie): Debian 12's (2022-12) fails statx inside the sandbox
# (`ls -l` gets EINVAL) and runs on the slow ptrace platform. Debian 13's is one static binary
# with no package dependencies; an apt pin takes only it from trixie, everything else stays
# Debian 12 (docs/nodeagent.md, "runsc").
CS_RUNSC_MIN_VERSION=0.0~20240729
CS_APT_TRIXIE_SOURCE=/etc/apt/sources.list.d/compute-trixie-runsc.sources
CS_APT_RUNSC_PIN=/etc/apt/preferences.d/compute-trixie-runsc

# The default sandbox image: a small Debian root built from Debian packages by mmdebstrap,
# stored as IMAGES_DIR/$CS_DEFAULT_IMAGE (scripts/run, scripts/test, scripts/bench).
CS_DEFAULT_IMAGE=debian:bookworm-compute
CS_DEFAULT_IMAGE_PACKAGES=bash,coreutils,python3,ca-certificates,git,curl,procps,findutils,grep,sed,tar,gzip,less,diffutils,attr
# Beyond its packages, the image has the C.UTF-8 locale (the commands' LANG) also in a locale
# archive, so that a command's setlocale() maps one file instead of opening twelve, each a
# gofer round trip in gVisor: 6 to 8 ms less per command (docs/performance.md, "The resident
# exec path"). An image without the archive is built anew.
CS_DEFAULT_IMAGE_ARCHIVE=usr/lib/locale/locale-archive

cs_log() {
        printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

# cs_as_root CMD...: runs CMD as root (directly, or through sudo).
cs_as_root() {
        if [ "$(id -u)" -eq 0 ]; then
                "$@"
        elif command -v sudo >/dev/null; then
                sudo "$@"
        else
                cs_log "not root and no sudo: cannot run $1 (run as root)"
                return 1
        fi
}

cs_apt() {
        cs_as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@"
}

# True when runsc is installed at CS_RUNSC_MIN_VERSION or newer.
cs_runsc_current() {
        local v
        v=$(dpkg-query -W -f='${Version}' runsc 2>/dev/null) || return 1
        dpkg --compare-versions "$v" ge "$CS_RUNSC_MIN_VERSION"
}

# On Debian 12, lets apt see Debian 13 for the runsc package alone (priority 990 for it,
# 1 for everything else there, so no other package ever comes from trixie).
cs_apt_pin_runsc() {
        local codename
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [ "$codename" = bookworm ] || return 0
        [ -f "$CS_APT_TRIXIE_SOURCE" ] && [ -f "$CS_APT_RUNSC_PIN" ] && return 0
        cs_log "apt: adding Debian 13 (trixie), pinned to the runsc package alone"
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: trixie' \
                'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
                cs_as_root tee "$CS_APT_TRIXIE_SOURCE" >/dev/null
        printf '%s\n' 'Package: *' 'Pin: release n=trixie' 'Pin-Priority: 1' '' \
                'Package: runsc' 'Pin: release n=trixie' 'Pin-Priority: 990' |
                cs_as_root tee "$CS_APT_RUNSC_PIN" >/dev/null
}

# Installs whichever of CS_PACKAGES, CS_FUZZ_PACKAGES and CS_TEST_PACKAGES is not installed yet,
# and a current
# runsc.
cs_install_deps() {
        local missing=() p
        for p in "${CS_PACKAGES[@]}" "${CS_FUZZ_PACKAGES[@]}" "${CS_TEST_PACKAGES[@]}"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
                        missing+=("$p")
        done
        cs_runsc_current || missing+=(runsc)
        [ ${#missing[@]} -eq 0 ] && return 0
        case " ${missing[*]} " in *" runsc "*) cs_apt_pin_runsc ;; esac
        cs_log "installing: ${missing[*]}"
        cs_apt update -qq
        cs_apt install -y -qq --no-install-recommends "${missing[@]}"
        cs_runsc_current || {
                cs_log "runsc $(dpkg-query -W -f='${Version}' runsc 2>/dev/null) is older than" \
                        "$CS_RUNSC_MIN_VERSION: the sandboxes need a current gVisor"
                return 1
        }
}

# cs_default_image IMAGES_DIR: builds the default sandbox image into IMAGES_DIR unless it is
# there already (built once, reused). The build goes to a temporary directory renamed into
# place at the end, so an interrupted build leaves no half image. A stamp file records the
# package list: a changed list (or no locale archive) builds the image anew.
cs_default_image() {
        local dir=$1 image="$1/$CS_DEFAULT_IMAGE" tmp start
        local stamp="$1/.$CS_DEFAULT_IMAGE.packages"
        if [ -f "$image/$CS_DEFAULT_IMAGE_ARCHIVE" ] &&
                [ "$(cat "$stamp" 2>/dev/null)" = "$CS_DEFAULT_IMAGE_PACKAGES" ]; then
                return 0
        fi
        # 0700 up from the first directory made (the agent's state directory, when the images
        # directory is in it): image files keep their owners and setuid bits.
        (umask 077 && cs_as_root mkdir -p "$dir")
        cs_as_root chmod 0700 "$dir"
        tmp=$(cs_as_root mktemp -d "$dir/.build-XXXXXX")
        start=$(date +%s)
        cs_log "building the default sandbox image $CS_DEFAULT_IMAGE in $image" \
                "(Debian 12 minbase + $CS_DEFAULT_IMAGE_PACKAGES; once, about a minute)"
        # shellcheck disable=SC2016
        if ! cs_as_root mmdebstrap --quiet --mode=root --variant=minbase --format=directory \
                --include="$CS_DEFAULT_IMAGE_PACKAGES" \
                --customize-hook='chroot "$1" localedef --add-to-archive /usr/lib/locale/C.utf8' \
                --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
                bookworm "$tmp" http://deb.debian.org/debian >&2; then
                cs_as_root rm -rf "$tmp"
                cs_log "building the default image failed"
                return 1
        fi
        cs_as_root rm -rf "$image"
        cs_as_root mv "$tmp" "$image"
        printf '%s\n' "$CS_DEFAULT_IMAGE_PACKAGES" | cs_as_root tee "$stamp" >/dev/null
        cs_log "built $CS_DEFAULT_IMAGE in $(($(date +%s) - start)) s" \
                "($(du -sm "$image" | cut -f1) MiB)"
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
