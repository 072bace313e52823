#!/usr/bin/env bash
# Instructions per check, counted by callgrind: a figure the machine's load
# does not move, for comparing two builds where checks per second are too
# noisy to tell 10% apart. Each case runs examples/instructions twice, with
# N checks and with 0 (its set-up), and divides the difference by N.
#   bench/instructions.sh [target dir, default target]   (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-target}
command -v valgrind >/dev/null || apt-get install -y -q valgrind
command -v memcached >/dev/null || apt-get install -y -q memcached
[ "$target" = target ] && cargo build --release --example instructions
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
memcached -l 127.0.0.1 -p "$port" -U 0 -m 256 -u root &
memcached_pid=$!
trap 'kill $memcached_pid 2>/dev/null || true' EXIT
sleep 0.5
count() { # checks callers [--hot]
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out.cg" \
    "$target/release/examples/instructions" --memcached "127.0.0.1:$port" \
    --checks "$1" --callers "$2" ${3:-} >/dev/null 2>"$out"
  grep -o 'Collected : [0-9]*' "$out" | grep -o '[0-9]*'
  rm -f "$out" "$out.cg"
}
checks=${CHECKS:-20000}
for case in "1" "64" "256" "256 --hot"; do
  set -- $case
  base=$(count 0 "$1")
  total=$(count "$checks" "$@")
  echo "$* callers: $(( (total - base) / checks )) instructions per check"
done
