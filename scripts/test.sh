#!/usr/bin/env bash
# Run every check: lint (ruff, clippy, rustfmt), Rust tests and the whole pytest
# suite, end-to-end tests on real GStreamer pipelines in network namespaces included.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== cargo fmt, clippy, test"
cargo fmt --manifest-path tracer/Cargo.toml -- --check
cargo clippy --release --quiet --manifest-path tracer/Cargo.toml -- -D warnings
cargo test --release --quiet --manifest-path tracer/Cargo.toml
cargo fmt --manifest-path kuprobe/Cargo.toml -- --check
cargo clippy --release --quiet --manifest-path kuprobe/Cargo.toml -- -D warnings
cargo test --release --quiet --manifest-path kuprobe/Cargo.toml
cargo fmt --manifest-path linkemu/Cargo.toml -- --check
cargo clippy --release --quiet --manifest-path linkemu/Cargo.toml -- -D warnings
cargo test --release --quiet --manifest-path linkemu/Cargo.toml
echo "== pytest"
.venv/bin/pytest -q "$@"
