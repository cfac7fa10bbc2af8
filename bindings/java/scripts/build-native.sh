#!/usr/bin/env bash
# Builds the JNI library (the Rust crate portcullis-java) with cargo and copies it to
# <dir>/<os>-<arch>/ (the core module runs it with its classes' native/ directory).
# CARGO_TARGET_DIR is honoured; PORTCULLIS_CARGO_PROFILE=release builds an optimised library
# (the default is cargo's dev profile, quick to rebuild).
set -euo pipefail
dest="$1"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
profile="${PORTCULLIS_CARGO_PROFILE:-debug}"

cd "$root"
if [ "$profile" = release ]; then
    cargo build -p portcullis-java --release -j 2
else
    cargo build -p portcullis-java -j 2
fi

case "$(uname -s)" in
    Linux) os=linux; file=libportcullis_java.so ;;
    Darwin) os=macos; file=libportcullis_java.dylib ;;
    *) echo "build-native.sh: unsupported system $(uname -s)" >&2; exit 1 ;;
esac
arch="$(uname -m)"
case "$arch" in
    arm64) arch=aarch64 ;;
esac
mkdir -p "$dest/$os-$arch"
cp "$target/$profile/$file" "$dest/$os-$arch/$file"
