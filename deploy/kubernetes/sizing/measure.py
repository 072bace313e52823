"""Measure what a slidegate pod needs: the figures behind the requests and
limits in deploy/kubernetes/base/deployment.yaml.

usage: python3 deploy/kubernetes/sizing/measure.py BINARY [SECONDS] [CONNECTIONS] [KEYS]

Starts memcached and BINARY (the release build: target/release/slidegate)
on 127.0.0.1 only, reads the idle resident memory, then drives POST
/v1/check for SECONDS (default 20) over CONNECTIONS kept-alive connections
(default 8) with KEYS distinct keys (default 10000) against the `api`
policy (10 a second per key: fewer keys, more refusals), and reads
from /proc/<pid>/status (VmRSS, VmHWM) and /proc/<pid>/stat (utime +
stime) what it held and spent. Prints one JSON object. Everything is
bounded: the load by time and by a request cap, every wait by a deadline.
"""

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

MAX_REQUESTS = 5_000_000
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("port %d did not open within %.0f s" % (port, within))


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s in /proc/%d/status" % (field, pid))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    connections = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    keys = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    work = tempfile.mkdtemp(prefix="slidegate-sizing-")
    mc_port, http_port = free_port(), free_port()
    memcached_cmd = ["memcached", "-l", "127.0.0.1", "-p", str(mc_port), "-U", "0", "-m", "64"]
    if os.geteuid() == 0:
        memcached_cmd += ["-u", "nobody"]
    memcached = subprocess.Popen(memcached_cmd)
    config = os.path.join(work, "slidegate.toml")
    with open(config, "w") as f:
        f.write(
            'listen = "127.0.0.1:%d"\n'
            "[memcached]\nservers = [\"127.0.0.1:%d\"]\n"
            "[policies.api]\n"
            'limits = [{ limit = 10, window = "1s" },\n'
            '          { limit = 3000, window = "10m", precision = 10 }]\n' % (http_port, mc_port)
        )
    slidegate = None
    try:
        wait_for_port(mc_port)
        slidegate = subprocess.Popen(
            [binary, "--config", config],
            env={"PATH": os.environ.get("PATH", ""), "RUST_LOG": "warn"},
        )
        wait_for_port(http_port)
        pid = slidegate.pid
        time.sleep(2.0)
        idle_rss = status_kib(pid, "VmRSS")

        stop = time.monotonic() + seconds
        counts = [0] * connections
        refused = [0] * connections
        errors = [0] * connections
        peak = [idle_rss]

        def drive(index):
            rng = random.Random(index)
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
            while time.monotonic() < stop and sum(counts) < MAX_REQUESTS:
                body = json.dumps({"key": "client-%d" % rng.randrange(keys), "policy": "api"})
                try:
                    conn.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
                    response = conn.getresponse()
                    response.read()
                    if response.status == 429:
                        refused[index] += 1
                    elif response.status != 200:
                        errors[index] += 1
                    counts[index] += 1
                except (OSError, http.client.HTTPException):
                    errors[index] += 1
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)

        cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
        threads = [threading.Thread(target=drive, args=(i,)) for i in range(connections)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak[0] = max(peak[0], status_kib(pid, "VmRSS"))
            time.sleep(0.25)
        for thread in threads:
            thread.join(timeout=10)
        cpu_after, wall_after = cpu_seconds(pid), time.monotonic()
        wall = wall_after - wall_before
        requests = sum(counts)
        cpu = cpu_after - cpu_before
        print(json.dumps({
            "binary": binary,
            "idle_rss_kib": idle_rss,
            "load": "POST /v1/check, %d kept-alive connections, %d keys, %.0f s" % (connections, keys, wall),
            "requests": requests,
            "refused": sum(refused),
            "errors": sum(errors),
            "requests_per_s": round(requests / wall),
            "cpu_cores_used": round(cpu / wall, 3),
            "cpu_ms_per_1000_requests": round(1000 * 1000 * cpu / max(requests, 1), 1),
            "peak_rss_kib_under_load": peak[0],
            "vm_hwm_kib": status_kib(pid, "VmHWM"),
        }, indent=2))
    finally:
        for process in (slidegate, memcached):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
