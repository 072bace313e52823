#!/usr/bin/env bash
# Instructions per HTTP request in the server (user space, callgrind): the
# load-independent figure for the server's own work, beside the do-nothing
# hyper server the HTTP ratios divide by. The server runs under callgrind
# against a memcached of its own; four keep-alive clients warm it up (500
# requests each: the near-cache fills), its counters are zeroed, then
# 2,000 requests each are counted.
#   bench/http_instructions.sh [target dir, default target]
# Prints hot rejects (100 keys), admitted (distinct keys), one hot
# admitted key, and the ceiling (examples/bench --echo-server).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-target}
command -v valgrind >/dev/null || apt-get install -y -q valgrind
command -v memcached >/dev/null || apt-get install -y -q memcached
[ "$target" = target ] && cargo build --release --bin slidegate --example bench
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mport=$(free_port)
memcached -l 127.0.0.1 -p "$mport" -U 0 -m 256 -u root &
memcached_pid=$!
work=$(mktemp -d)
trap 'kill $memcached_pid 2>/dev/null || true; rm -rf "$work"' EXIT
count() { # server(slidegate|echo) policy keys
  local hport pid dump
  hport=$(free_port)
  cat > "$work/cfg.toml" <<TOML
listen = "127.0.0.1:$hport"
[memcached]
servers = ["127.0.0.1:$mport"]
namespace = "httpir$$-$hport"
timeout_ms = 5000
[policies.roomy]
limits = [{ limit = 1000000000000, window = "1m" }]
[policies.tight]
limits = [{ limit = 1, window = "1m" }]
TOML
  if [ "$1" = echo ]; then
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$hport" \
      "$target/release/examples/bench" --echo-server "127.0.0.1:$hport" >/dev/null 2>&1 &
  else
    RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/cg.$hport" \
      "$target/release/slidegate" --config "$work/cfg.toml" >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 150); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $hport), 0.1)" 2>/dev/null && break
    sleep 0.2
  done
  python3 bench/keepalive_posts.py "$hport" "$2" "$3" 500 4 >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local requests
  requests=$(python3 bench/keepalive_posts.py "$hport" "$2" "$3" 2000 4)
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 0.5
  dump=$(ls -t "$work"/cg."$hport"* | head -1)
  local total
  total=$(callgrind_annotate "$dump" 2>/dev/null | grep "PROGRAM TOTALS" | awk '{gsub(",","",$1); print $1}')
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo $(( total / requests ))
}
echo "hot reject (100 keys): $(count slidegate tight 100) instructions per request"
echo "admitted, distinct keys: $(count slidegate roomy 100000) instructions per request"
echo "one hot admitted key: $(count slidegate roomy 1) instructions per request"
echo "HTTP ceiling (do-nothing hyper): $(count echo roomy 100000) instructions per request"
