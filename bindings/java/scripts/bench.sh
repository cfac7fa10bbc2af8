#!/usr/bin/env bash
# What a Java caller pays per call (dev.portcullis.rego.Bench): a DSL rule, the approved-tools
# bundle and ten Java allow policies through the engine, in ns per call, and the ratio to the
# ten Java policies called directly; then the bundle beside the same bundle on opa-java-wasm
# (a pure-Java OPA WebAssembly runtime), and the ratio of the two. Builds the native library
# optimised (cargo's release profile, CARGO_TARGET_DIR honoured) and the modules without their
# tests, then runs the class.
# Usage: bindings/java/scripts/bench.sh [calls per run]
set -euo pipefail
cd "$(dirname "$0")/.."
# The rego module's other test dependencies (opa-java-wasm and what it needs) are listed by
# Maven into rego/target/bench.classpath.
PORTCULLIS_CARGO_PROFILE=release mvn -B -q -f pom.xml -DskipTests -pl core,dsl,rego -am package \
    dependency:build-classpath -DincludeScope=test -DexcludeGroupIds=dev.portcullis \
    -Dmdep.outputFile=target/bench.classpath
classes="core/target/classes:core/target/test-classes:dsl/target/classes:rego/target/classes:rego/target/test-classes"
cd rego
exec java -cp "$(sed 's#\([a-z-]*\)/target#../\1/target#g' <<<"$classes"):$(cat target/bench.classpath)" \
    dev.portcullis.rego.Bench "$@"
