#!/usr/bin/env bash
# The test command (README): format and lint checks, every test of the workspace, then
# the client-compatibility tests (real Python client libraries against the debug binary
# `cargo test` just built; they install their own pinned packages). Every cargo command
# here selects the whole workspace, so all of them share one feature resolution and
# one build of the dependency tree.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
# rust-toolchain.toml pins the toolchain by version. A machine whose rustup holds that
# version only as its `stable` toolchain (and cannot download another) gets a link to
# it, so cargo finds the pinned one instead of trying to fetch it.
pinned="$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)"
if command -v rustup >/dev/null && ! rustup toolchain list | grep -q "^${pinned}-"; then
    if rustc +stable --version 2>/dev/null | grep -q "^rustc ${pinned} "; then
        rustup toolchain link "$pinned" "$(rustc +stable --print sysroot)"
    fi
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# `cargo test` left target/debug/quiver (the binary the integration tests ran). A
# separate `cargo build --bin quiver` would rebuild the tree with other features
# (dev-dependencies unify differently) for nothing.
./scripts/compat.sh
