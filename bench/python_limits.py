"""python `limits` on the same memcached, for the benchmark (examples/bench).

usage: python_limits.py HOST:PORT CHECKS
Prints READY before the timed loop, then
RESULT <checks> <seconds> <p50 us> <p99 us> <p99.9 us>.
"""
import sys
import time

from limits import RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

addr, checks = sys.argv[1], int(sys.argv[2])
storage = storage_from_string(f"memcached://{addr}")
limiter = SlidingWindowCounterRateLimiter(storage)
item = RateLimitItemPerMinute(10**12)
limiter.hit(item, "warmup")
print("READY", flush=True)
latencies = []
deadline = time.perf_counter() + 10
started = time.perf_counter()
for index in range(checks):
    before = time.perf_counter()
    if not limiter.hit(item, f"pybench-{index % 10000}"):
        sys.exit("a roomy limit refused a hit")
    latencies.append(time.perf_counter() - before)
    if before > deadline:
        break
elapsed = time.perf_counter() - started
latencies.sort()


def at(q):
    return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e6


print(f"RESULT {len(latencies)} {elapsed:.6f} {at(0.5):.1f} {at(0.99):.1f} {at(0.999):.1f}", flush=True)
