#!/usr/bin/env bash
# The test command (README): format and lint checks, every test of the workspace, then
# the client-compatibility tests (real Python client libraries against the debug binary
# `cargo test` just built; they install their own pinned packages).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
cargo build --locked --bin quiver
./scripts/compat.sh
