# Sourced by the benchmark scripts: builds the release binary with the same feature set
# as `cargo bench` and CI release builds (so nothing is rebuilt) and sets BIN to it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
cargo build --release --workspace --bins --benches >/dev/null
BIN="$CARGO_TARGET_DIR/release/quiver"
