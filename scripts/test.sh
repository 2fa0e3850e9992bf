#!/usr/bin/env bash
# The test command (README): format and lint checks, then every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
