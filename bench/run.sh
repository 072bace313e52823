#!/usr/bin/env bash
# The benchmark in one command: installs what is missing (memcached, wrk,
# python limits + pymemcache), builds in release, starts a memcached on a
# free loopback port, runs examples/bench against it, and stops it.
#   bench/run.sh [extra flags for examples/bench, e.g. --seconds 3]
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v memcached >/dev/null || missing+=(memcached)
command -v wrk >/dev/null || missing+=(wrk)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get install -y -q "${missing[@]}" || { apt-get update -q && apt-get install -y -q "${missing[@]}"; }
fi
# python `limits` goes into a virtual environment of the benchmark's own:
# Debian 12's python refuses a bare `pip install`.
venv=target/bench-venv
if ! "$venv/bin/python" -c 'import limits, pymemcache' 2>/dev/null; then
  python3 -m venv --clear "$venv" 2>/dev/null || {
    apt-get install -y -q python3-venv && python3 -m venv --clear "$venv"
  }
  "$venv/bin/pip" install -q limits pymemcache
fi
export SLIDEGATE_BENCH_PYTHON="$PWD/$venv/bin/python"

cargo build --release --bin slidegate --example bench

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
memcached -l 127.0.0.1 -p "$port" -U 0 -m 1024 -c 4096 -u root &
memcached_pid=$!
trap 'kill $memcached_pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
  sleep 0.1
done

echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), memcached $(memcached -V | cut -d' ' -f2)"
target/release/examples/bench --memcached "127.0.0.1:$port" --memcached-pid "$memcached_pid" "$@"
