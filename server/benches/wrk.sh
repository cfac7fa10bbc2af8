#!/usr/bin/env bash
# The decision service against nginx, as an operator would measure it: `wrk -t2 -c64`
# (keep-alive) against `portcullis serve` (three DSL input rules, a 1 KB input context) and
# against nginx answering a fixed JSON body, in the same run, two interleaved rounds.
#
#   server/benches/wrk.sh [--seconds 10] [--rounds 2] [--connections 64] [--binary PATH]
#
# nginx answers the same request two ways: `nginx` with the outcome document portcullis
# answers, byte for byte (the two servers move the same bytes, so the ratio is the cost of
# deciding and serving), and `nginx-short` with an 81-byte document (cheaper for wrk too, on
# the same two cores). Prints, per endpoint, the requests/s and p99 latency of each round, their
# medians, and the ratios to both. Needs nginx and wrk (installed from the distribution's packages when
# missing) and builds `portcullis` in release mode (`--binary` runs a given build instead).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=10
rounds=2
connections=64
binary=
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --connections) connections="$2"; shift 2 ;;
        --binary) binary="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 1 ;;
    esac
done

for tool in nginx wrk; do
    if ! command -v "$tool" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$tool" ]; then
        echo "== installing $tool" >&2
        apt-get update >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$([ "$tool" = nginx ] && echo nginx-light || echo wrk)" >/dev/null
    fi
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

if [ -n "$binary" ]; then
    PORTCULLIS=$(realpath "$binary")
else
    echo "== cargo build --release -p portcullis-cli" >&2
    cargo build --release -p portcullis-cli -j 2 >&2
    target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    PORTCULLIS="$target/release/portcullis"
fi

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# The set: the three DSL input rules of a typical deployment.
mkdir -p "$work/rules"
cat > "$work/rules/no_secrets.json" <<'JSON'
{"condition": {"field": "messages.0.content", "contains": ["secret", "password"]}, "action": "deny", "reason": "no secrets"}
JSON
cat > "$work/rules/mask_cards.json" <<'JSON'
{"condition": {"field": "messages.0.content", "contains": ["card"]}, "action": "redact",
 "redactions": [{"field": "messages.0.content", "strategy": "replace", "pattern": "[0-9]{4}"}]}
JSON
cat > "$work/rules/short_only.json" <<'JSON'
{"condition": {"field": "messages.length", "greater_than": 20}, "action": "deny", "reason": "too long"}
JSON
printf 'input:\n  - dsl: rules/\n' > "$work/portcullis.yaml"

# A 1 KB input context, and the one-policy request of /engine/evaluate.
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
text = ("What is the weather like in Paris today? I would like to plan a walk along the river "
        "and visit a museum in the afternoon. ")
content = (text * 10)[:900]
context = {"messages": [{"role": "user", "content": content}],
           "metadata": {"agent_id": "bench", "session_id": "s1", "timestamp": "2026-01-01T00:00:00Z"}}
single = {"policy_id": "no_secrets", "interception_point": "input", "context": context}
for name, body in [("context", context), ("single", single)]:
    with open(f"{work}/{name}.json", "w") as f:
        json.dump(body, f)
for name in ["context", "single"]:
    body = open(f"{work}/{name}.json").read()
    with open(f"{work}/{name}.lua", "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        f.write("wrk.body = " + json.dumps(body) + "\n")
print(len(open(f"{work}/context.json").read()), "bytes of context", file=sys.stderr)
PY

serve_port=$(free_port)
"$PORTCULLIS" serve "$work/portcullis.yaml" --listen "127.0.0.1:$serve_port" 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do
    curl -s "http://127.0.0.1:$serve_port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done

# nginx answers what portcullis answers to the same request.
answer=$(curl -s -X POST -H 'Content-Type: application/json' --data-binary "@$work/context.json" \
    "http://127.0.0.1:$serve_port/v1/evaluate/input")
case "$answer" in
    *\'*|*\$*|*\\*) echo "the answer cannot be written in nginx.conf as it is" >&2; exit 1 ;;
    '{"outcome":"allowed"'*) ;;
    *) echo "unexpected answer: $answer" >&2; exit 1 ;;
esac
echo "${#answer} bytes of answer" >&2
nginx_port=$(free_port)
short_port=$(free_port)
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$nginx_port;
        location / {
            default_type application/json;
            return 200 '$answer';
        }
    }
    server {
        listen 127.0.0.1:$short_port;
        location / {
            default_type application/json;
            return 200 '{"outcome":"allowed","decisions":[{"policy_id":"no_secrets","decision":"allow"}]}';
        }
    }
}
CONF
"$NGINX" -c "$work/nginx.conf" -p "$work" >&2

# Runs wrk; prints "requests/s p99-ms".
measure() {
    local url="$1" script="${2:-}"
    local args=(-t2 "-c$connections" "-d${seconds}s" --latency)
    [ -n "$script" ] && args+=(-s "$script")
    wrk "${args[@]}" "$url" | python3 -c '
import re, sys
text = sys.stdin.read()
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"{rate:.0f} {float(p99.group(1)) * scale:.2f} {errors.group(1) if errors else 0}")'
}

declare -A rate p99
cases=(nginx nginx-short portcullis-evaluate portcullis-engine portcullis-healthz)
for round in $(seq "$rounds"); do
    for case in "${cases[@]}"; do
        case "$case" in
            nginx) result=$(measure "http://127.0.0.1:$nginx_port/v1/evaluate/input" "$work/context.lua") ;;
            nginx-short) result=$(measure "http://127.0.0.1:$short_port/v1/evaluate/input" "$work/context.lua") ;;
            portcullis-evaluate) result=$(measure "http://127.0.0.1:$serve_port/v1/evaluate/input" "$work/context.lua") ;;
            portcullis-engine) result=$(measure "http://127.0.0.1:$serve_port/engine/evaluate" "$work/single.lua") ;;
            portcullis-healthz) result=$(measure "http://127.0.0.1:$serve_port/healthz") ;;
        esac
        read -r r p e <<<"$result"
        rate[$case]+="$r "
        p99[$case]+="$p "
        printf 'round %s %-22s %8s req/s  p99 %6s ms  non-2xx %s\n' "$round" "$case" "$r" "$p" "$e"
    done
done

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
nginx_rate=$(median ${rate[nginx]})
short_rate=$(median ${rate[nginx-short]})
echo
printf '%-22s %10s %8s %14s %10s\n' case "req/s" "x nginx" "x nginx-short" "p99 ms"
for case in "${cases[@]}"; do
    r=$(median ${rate[$case]})
    p=$(median ${p99[$case]})
    printf '%-22s %10.0f %8.2f %14.2f %10.2f\n' "$case" "$r" "$(python3 -c "print($r / $nginx_rate)")" \
        "$(python3 -c "print($r / $short_rate)")" "$p"
done
engine=$(median ${rate[portcullis-engine]})
evaluate=$(median ${rate[portcullis-evaluate]})
printf '\n/engine/evaluate is %.2fx /v1/evaluate/input\n' "$(python3 -c "print($engine / $evaluate)")"
