#!/usr/bin/env bash
# What `memcached.replicas = 2` costs against 1, in one run: builds the
# example in release, starts three memcached nodes on free loopback ports,
# runs examples/replicas.rs against them (both settings, alternated), and
# stops them.
#   bench/replicas.sh [--seconds S] [--tasks N] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."

command -v memcached >/dev/null || {
  apt-get install -y -q memcached || { apt-get update -q && apt-get install -y -q memcached; }
}
cargo build --release --example replicas

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
nodes=()
for _ in 1 2 3; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  memcached -l 127.0.0.1 -p "$port" -U 0 -m 256 -c 4096 -u root &
  pids+=($!)
  nodes+=("127.0.0.1:$port")
  for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
    sleep 0.1
  done
done

echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, memcached $(memcached -V | cut -d' ' -f2)"
target/release/examples/replicas --memcached "$(IFS=,; echo "${nodes[*]}")" "$@"
