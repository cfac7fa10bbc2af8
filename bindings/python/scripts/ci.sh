#!/usr/bin/env bash
# The Python binding's gate: a virtual environment under the cargo target directory, maturin
# and the test dependencies installed there with pip (pinned), the extension built once into
# a wheel (in the workspace's one target directory) and installed, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
here="$(pwd)"
target="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
venv="$target/python-venv"
wheels="$target/python-wheels"

echo "== the virtual environment ($venv)"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin==1.16.0" "pytest==9.2.0" "openai-agents==0.24.0" \
    "opentelemetry-api==1.45.2" "opentelemetry-sdk==1.45.2"

echo "== the wheel (maturin build)"
rm -rf "$wheels"
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" "$venv/bin/maturin" build \
    --manifest-path "$here/Cargo.toml" --interpreter "$venv/bin/python" --out "$wheels"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
    --no-deps "$wheels"/portcullis-*.whl

echo "== pytest (bindings/python)"
cd "$here/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$here/tests" .
