#!/usr/bin/env bash
# Run every check: lint (ruff, rustfmt, clippy), the Rust tests, then the tests in two
# tiers: the fast tier (no root, no namespaces, no servers, no browsers: units, synthetic
# traces, parsers) first, then the end-to-end tier on the real stack (GStreamer pipelines
# in network namespaces, audio servers, Chromium).
#
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh --fast     lint and the fast tier only (about two minutes)
#   bash scripts/test.sh -- ARGS    everything, ARGS passed to every pytest run
#
# The end-to-end tier runs in two parts: tests whose figures tolerate a busy machine run
# two at a time (pytest-xdist); tests marked `exclusive` (planted delays measured to a
# fraction of a millisecond, audio servers at 10 ms periods) run alone, one after another.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

fast_only=0
if [ "${1:-}" = "--fast" ]; then
    fast_only=1
    shift
fi
[ "${1:-}" = "--" ] && shift

# each step says how long the run has taken so far (SECONDS: bash's own count)
step() { printf '\n\033[1m== %s\033[0m (at %d s)\n' "$*" "$SECONDS"; }
trap 'printf "\n== ended after %d s\n" "$SECONDS"' EXIT

step "ruff, import layers"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports  # the layers of docs/architecture.md (pyproject.toml)
step "cargo fmt, clippy, test"
cargo fmt --all -- --check
cargo clippy --workspace --release --quiet --all-targets -- -D warnings
cargo test --workspace --release --quiet
step "go vet, gofmt, go test (loadgen/)"
# (gofmt's findings go to stderr by a shell redirect: `tee /dev/stderr` reopened the
# file stderr pointed to and truncated a log that caught both streams)
(cd loadgen && go vet ./... && unformatted="$(gofmt -l .)" &&
    { [ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; false; }; } && go test ./...)

step "fast tier"
.venv/bin/pytest -q -m "not e2e" -n 2 "$@"
[ "$fast_only" = 1 ] && exit 0

# the slowest tests of each tier are listed at its end: where CI's minutes go
slowest=(--durations=15 --durations-min=10)
# both end-to-end parts run whatever the first found: one CI run shows every failure
failed=0
step "end-to-end tier, two at a time"
.venv/bin/pytest -q -m "e2e and not exclusive" -n 2 "${slowest[@]}" "$@" || failed=1
step "end-to-end tier, one at a time"
.venv/bin/pytest -q -m "e2e and exclusive" "${slowest[@]}" "$@" || failed=1
exit "$failed"
