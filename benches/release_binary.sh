# Sourced by the benchmark scripts: builds the release binary with the same feature set
# as `cargo bench` and CI release builds (so nothing is rebuilt) and sets BIN to it.
# QUIVER_BIN=<path> skips the build and measures that binary instead.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
if [ -n "${QUIVER_BIN:-}" ]; then
  BIN="$QUIVER_BIN"
else
  cargo build --release --workspace --bins --benches >/dev/null
  BIN="$CARGO_TARGET_DIR/release/quiver"
fi
