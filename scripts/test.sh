#!/usr/bin/env bash
# The test command (README): format and lint checks, every test of the workspace, then
# the client-compatibility tests (real Python client libraries against the debug binary
# `cargo test` just built; they install their own pinned packages). Every cargo command
# here selects the whole workspace, so all of them share one feature resolution and
# one build of the dependency tree.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# `cargo test` left target/debug/quiver (the binary the integration tests ran). A
# separate `cargo build --bin quiver` would rebuild the tree with other features
# (dev-dependencies unify differently) for nothing.
./scripts/compat.sh
