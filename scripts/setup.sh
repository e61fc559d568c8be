#!/usr/bin/env bash
# Install everything latlab needs on Debian 12 (as root) and build it:
# Debian packages (GStreamer 1.22 and its plugins, iproute2, ...), the Rust
# tracer plugin, and a Python environment in .venv. Safe to run again: it only
# installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
    gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
    gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav libgstreamer1.0-dev
    libgstreamer-plugins-base1.0-dev pkg-config build-essential iproute2 iputils-ping
    python3 python3-venv python3-dev procps  # python3-dev: for Python packages without a wheel
    jackd2 pulseaudio pulseaudio-utils
    ethtool
    espeak-ng  # the quality matrix's speech reference, synthesised offline (latlab.signal.avclip)
    linux-perf  # cost = true: a process's CPU time, switches, syscalls (perf stat)
    janus janus-demos janus-tools  # [sfus.NAME] server = "janus": the videoroom SFU, janus.js
    user-mode-linux kmod  # a kernel with sch_netem for the netem backend's test (tests/test_netem.py)
    default-jre-headless  # latlab query --engine spark: the JVM Spark runs in (Java 17 here)
)
# Browser peers (issue 5): Chromium, and libnice + the GstWebRTC typelib for the webrtcbin
# peer. Installed without recommends: with them apt pulls in about 100 packages (cups,
# avahi, perl...), without them 8.
APT_PACKAGES_NO_RECOMMENDS=(
    chromium gstreamer1.0-nice gir1.2-gst-plugins-bad-1.0
)

MIN_RUST=1.71.1  # gstreamer-rs 0.23's minimum; latlab is built and tested with 1.95

# [sfus.NAME] server = "livekit": LiveKit server from the Go module proxy, the newest 1.9.x
# (1.13 needs a forked module the proxy refuses), and its browser SDK from npm (the
# versions: scripts/livekit-client/package.json and its lock), both into build/livekit/.
LIVEKIT_SERVER_VERSION=v1.9.12
LIVEKIT_DIR=build/livekit
MIN_GO=1.24  # livekit-server 1.9.12's go.mod
MIN_GO_LOADGEN=1.26.8  # loadgen/go.mod (livekit/server-sdk-go v2.19 needs it)
LOADGEN=build/loadgen/latlab-loadgen

log() { printf '\033[1msetup:\033[0m %s (at %d s)\n' "$*" "$SECONDS"; }

missing_packages() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || printf '%s\n' "$pkg"
    done
}

install_debian_packages() {
    local missing=() lean=()
    mapfile -t missing < <(missing_packages "${APT_PACKAGES[@]}")
    mapfile -t lean < <(missing_packages "${APT_PACKAGES_NO_RECOMMENDS[@]}")
    if ((${#missing[@]} + ${#lean[@]})); then
        log "installing Debian packages: ${missing[*]} ${lean[*]}"
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: run as root to install Debian packages" >&2
            exit 1
        fi
        apt-get update -qq
    fi
    if ((${#missing[@]})); then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ((${#lean[@]})); then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${lean[@]}" >/dev/null
    fi
}

find_cargo() {
    if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null; then
        log "installing Debian's Rust toolchain"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo rustc >/dev/null
    fi
    local version
    version=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n' "$MIN_RUST" "$version" | sort -V | head -n 1)" != "$MIN_RUST" ]; then
        echo "setup: Rust $version is too old: the tracer (gstreamer-rs 0.23) needs Rust >= $MIN_RUST;" \
            "install a newer toolchain (rustup) and run this again" >&2
        exit 1
    fi
}

build_rust() {
    log "building the Rust workspace (cargo build --release): the GStreamer tracer (tracer/)," \
        "the kernel-to-application probe (kuprobe/), the link emulator (linkemu/)"
    cargo build --release --quiet
}

# livekit-server, built once per version (``go install`` takes the module's own go.sum):
# 3 min 24 s the first time here (2 cores, an empty module cache: the modules from the
# proxy, then the compile; 4.5 s again from Go's caches), nothing once it is there.
build_livekit_server() {
    local binary="$LIVEKIT_DIR/livekit-server" version
    if [ -x "$binary" ] && [ "$("$binary" --version 2>/dev/null)" = \
        "livekit-server version ${LIVEKIT_SERVER_VERSION#v}" ]; then
        return
    fi
    if ! command -v go >/dev/null; then
        echo "setup: LiveKit server not built: needs Go >= $MIN_GO (https://go.dev/dl)" >&2
        return
    fi
    version=$(go env GOVERSION | sed 's/^go//')
    if [ "$(printf '%s\n' "$MIN_GO" "$version" | sort -V | head -n 1)" != "$MIN_GO" ]; then
        echo "setup: LiveKit server not built: Go $version is older than $MIN_GO" >&2
        return
    fi
    log "building LiveKit server $LIVEKIT_SERVER_VERSION from the Go module proxy into" \
        "$binary (about 3.5 minutes the first time)"
    mkdir -p "$LIVEKIT_DIR"
    GOBIN="$PWD/$LIVEKIT_DIR" go install \
        "github.com/livekit/livekit-server/cmd/server@$LIVEKIT_SERVER_VERSION"
    mv "$LIVEKIT_DIR/server" "$binary"
}

# latlab-loadgen (loadgen/, Go, pion/webrtc): light WebRTC participants for [loads.NAME]
# (docs/sfu.md). 1 min 31 s here with an empty module and build cache (2 cores; 82 MB of
# modules from the proxy, then the compile); again only when a source in loadgen/ is
# newer than the binary (then seconds, from Go's caches).
build_loadgen() {
    local version
    if [ -x "$LOADGEN" ] && [ -z "$(find loadgen -type f \( -name '*.go' ! -name '*_test.go' \
        -o -name go.mod -o -name go.sum \) -newer "$LOADGEN" -print -quit)" ]; then
        return
    fi
    version=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
    if [ -z "$version" ] || [ "$(printf '%s\n' "$MIN_GO_LOADGEN" "$version" | sort -V | head -n 1)" \
        != "$MIN_GO_LOADGEN" ]; then
        echo "setup: latlab-loadgen not built: needs Go >= $MIN_GO_LOADGEN (https://go.dev/dl)" >&2
        return
    fi
    log "building the load generator (loadgen/, Go) into $LOADGEN"
    mkdir -p "$(dirname "$LOADGEN")"
    (cd loadgen && GOTOOLCHAIN=local go build -trimpath -o "../$LOADGEN" .)
}

# livekit-client and everything it imports, bundled by esbuild into one script that latlab's
# page server serves beside janus.js (nothing from a CDN): 3.3 s here with an empty npm
# cache, again only when the lock changed.
bundle_livekit_client() {
    local js="$LIVEKIT_DIR/js" lock=scripts/livekit-client/package-lock.json
    if [ -f "$LIVEKIT_DIR/livekit-client.js" ] && cmp -s "$lock" "$js/package-lock.json"; then
        return
    fi
    if ! command -v npm >/dev/null; then
        echo "setup: livekit-client not bundled: needs npm (Debian: npm)" >&2
        return
    fi
    log "bundling livekit-client (npm, esbuild) into $LIVEKIT_DIR/livekit-client.js"
    mkdir -p "$js"
    cp scripts/livekit-client/package.json "$lock" "$js/"
    (cd "$js" && npm ci --quiet --no-audit --no-fund --ignore-scripts)
    "$js/node_modules/.bin/esbuild" "$js/node_modules/livekit-client/dist/livekit-client.esm.mjs" \
        --bundle --format=iife --global-name=LivekitClient --target=chrome120 \
        --legal-comments=eof --log-level=warning --outfile="$LIVEKIT_DIR/livekit-client.js"
}

# The clock lab's planted rate error (docs/clocks.md): an LD_PRELOAD library, one C file.
CLOCKSKEW=build/clockskew/libllclockskew.so
build_clockskew() {
    if [ ! -f "$CLOCKSKEW" ] || [ clockskew/llclockskew.c -nt "$CLOCKSKEW" ]; then
        log "building $CLOCKSKEW"
        mkdir -p "$(dirname "$CLOCKSKEW")"
        gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$CLOCKSKEW" clockskew/llclockskew.c -ldl
    fi
}

python_environment() {
    if [ ! -x .venv/bin/python ]; then
        log "creating the Python environment (.venv)"
        /usr/bin/python3 -m venv .venv
    fi
    if ! .venv/bin/python -c "import latlab, numpy, pyarrow, typer, rich, aiohttp, pytest, duckdb, pyspark, visqol" 2>/dev/null \
        || [ pyproject.toml -nt .venv/.latlab-installed ]; then
        log "installing Python dependencies into .venv"
        .venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev,spark]'
        touch .venv/.latlab-installed
    fi
}

install_debian_packages
find_cargo
# pip mostly waits on the package index and unpacks wheels while cargo compiles: the
# Python environment is made beside the Rust build (30 s of 200 here), and its failure
# still stops the set-up (wait returns its status)
python_environment &
python_pid=$!
build_rust
wait "$python_pid"
build_livekit_server
bundle_livekit_client
build_loadgen
build_clockskew
log "ready: ./latlab --help"
