#!/usr/bin/env bash
# The Node.js binding's gate: install the packages' dependencies as locked, build the native
# addon once, run the tests with node's test runner.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== npm ci (bindings/node)"
npm ci --no-audit --no-fund

echo "== the native addon"
node scripts/build.mjs

echo "== node --test (bindings/node)"
npm test
