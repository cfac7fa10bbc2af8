#!/usr/bin/env bash
# The Java binding's gate: Maven builds the JNI library with cargo (in the workspace's target
# directory, CARGO_TARGET_DIR honoured), packs it into the core jar, compiles every module with
# its Javadoc checked, and runs the JUnit tests. Maven is installed from the distribution's
# packages when missing; it resolves the plugins and test dependencies from Maven Central.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mvn >/dev/null 2>&1; then
    echo "== installing maven"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y maven
fi

echo "== mvn verify (bindings/java)"
mvn -B -f pom.xml verify
