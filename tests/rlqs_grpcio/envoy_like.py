"""RLQS with a gRPC client that is not ours: python grpcio, stubs generated
from the vendored protos, against the real slidegate binary. It plays two
Envoys as the rate-limit-quota filter behaves (first report at once with
time_elapsed 0, then every second in whole seconds; token buckets enforced
locally; TTL expiry), in real time, plus the protocol's corner cases.

Usage: envoy_like.py STUBS_DIR RLQS_ADDR LIMIT WINDOW_S
Prints one line per check and "N passed, 0 failed" at the end.
"""
import math
import queue
import random
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc  # noqa: E402
from envoy.type.v3.ratelimit_strategy_pb2 import RateLimitStrategy  # noqa: E402

ADDR, LIMIT, WINDOW_S = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)


class Stream:
    """One RLQS stream: send reports, read answers."""

    def __init__(self, channel):
        self.outbox = queue.Queue()
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        self.answers = stub.StreamRateLimitQuotas(iter(self.outbox.get, None), timeout=60)

    def send(self, domain, usages):
        self.outbox.put(rlqs_pb2.RateLimitQuotaUsageReports(domain=domain, bucket_quota_usages=usages))

    def next(self):
        return next(self.answers)

    def close(self):
        self.outbox.put(None)


def usage(labels, allowed, denied, elapsed_s, with_elapsed=True):
    u = rlqs_pb2.RateLimitQuotaUsageReports.BucketQuotaUsage(
        bucket_id=rlqs_pb2.BucketId(bucket=labels),
        num_requests_allowed=allowed,
        num_requests_denied=denied,
    )
    if with_elapsed:
        u.time_elapsed.seconds = elapsed_s
    return u


API = {"name": "api", "tenant": "py"}


def corner_cases(channel):
    s = Stream(channel)
    s.send("envoy", [usage(API, 1, 0, 0)])
    action = s.next().bucket_action[0]
    assignment = action.quota_assignment_action
    bucket = assignment.rate_limit_strategy.token_bucket
    check("a first report (time_elapsed 0) gets a token bucket",
          assignment.rate_limit_strategy.WhichOneof("strategy") == "token_bucket", action)
    check("tokens_per_fill is sent, at least 1", bucket.HasField("tokens_per_fill") and bucket.tokens_per_fill.value >= 1, bucket)
    check("the fill interval is 1 s", bucket.fill_interval.seconds == 1 and bucket.fill_interval.nanos == 0, bucket)
    ttl = assignment.assignment_time_to_live
    check("the TTL is whole seconds, at least 1", ttl.seconds >= 1 and ttl.nanos == 0, ttl)
    s.send("", [usage({"name": "web"}, 1, 0, 0)])
    rule = s.next().bucket_action[0].quota_assignment_action.rate_limit_strategy.blanket_rule
    check("an unmatched bucket is ALLOW_ALL, and a later message may leave the domain empty",
          rule == RateLimitStrategy.ALLOW_ALL, rule)

    for name, domain, u, field in [
        ("an empty domain in the first message", "", usage(API, 1, 0, 0), "domain:"),
        ("a bucket id without labels", "envoy", usage({}, 1, 0, 0), "bucket_quota_usages[0].bucket_id.bucket:"),
        ("a report without time_elapsed", "envoy", usage(API, 1, 0, 0, with_elapsed=False), "bucket_quota_usages[0].time_elapsed:"),
    ]:
        bad = Stream(channel)
        bad.send(domain, [u])
        try:
            bad.next()
            check(name + " is INVALID_ARGUMENT", False, "answered")
        except grpc.RpcError as error:
            check(name + " is INVALID_ARGUMENT naming " + field,
                  error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith(field),
                  (error.code(), error.details()))
    # One bucket with the largest id the label bounds allow, named 1,000
    # times: a report of 4.6 MB, past rlqs.max_report_bytes.
    largest = {f"{i}" + "k" * 63: f"{i}" + "v" * 511 for i in range(8)}
    bad = Stream(channel)
    bad.send("envoy", [usage(largest, 1, 0, 1)] * 1000)
    try:
        bad.next()
        check("a report past the bound is RESOURCE_EXHAUSTED", False, "answered")
    except StopIteration:
        check("a report past the bound is RESOURCE_EXHAUSTED", False, "the stream ended with OK")
    except grpc.RpcError as error:
        check("a report past the bound is RESOURCE_EXHAUSTED naming rlqs.max_report_bytes",
              error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "rlqs.max_report_bytes" in error.details(),
              (error.code(), error.details()))
    s.send("envoy", [usage(API, 0, 0, 1)])
    check("the good stream is still answered", len(s.next().bucket_action) == 1)
    s.close()


class Envoy(threading.Thread):
    """An Envoy worker: Poisson demand, the filter's token bucket, reports every second."""

    def __init__(self, channel, rate, seed, duration_s, tenant):
        super().__init__(daemon=True)
        self.stream = Stream(channel)
        self.rate, self.rng, self.duration_s = rate, random.Random(seed), duration_s
        self.labels = {"name": "api", "tenant": tenant}
        self.admitted = []
        self.lock = threading.Lock()
        self.bucket = None  # (max, per_fill, tokens, filled_at, expires_at)
        self.allowed = self.denied = 0

    def apply(self, answer, now):
        for action in answer.bucket_action:
            a = action.quota_assignment_action
            tb = a.rate_limit_strategy.token_bucket
            expires = now + a.assignment_time_to_live.seconds
            if a.rate_limit_strategy.WhichOneof("strategy") != "token_bucket":
                deny = a.rate_limit_strategy.blanket_rule == RateLimitStrategy.DENY_ALL
                self.bucket = ("deny" if deny else "allow", expires)
                continue
            old = self.bucket if self.bucket and self.bucket[0] == "tb" else None
            if old and old[1] == tb.max_tokens and old[2] == tb.tokens_per_fill.value:
                self.bucket = old[:5] + (expires,)
            else:
                ratio = old[3] / max(old[1], 1) if old else 1.0
                self.bucket = ("tb", tb.max_tokens, tb.tokens_per_fill.value, tb.max_tokens * ratio, now, expires)

    def admit(self, now):
        b = self.bucket
        if b is None or now >= b[-1]:
            return True  # no assignment: the no-assignment behaviour allows
        if b[0] != "tb":
            return b[0] == "allow"
        kind, mx, per_fill, tokens, filled, expires = b
        tokens = min(mx, tokens + per_fill * (now - filled))
        ok = tokens >= 1
        self.bucket = (kind, mx, per_fill, tokens - 1 if ok else tokens, now, expires)
        return ok

    def run(self):
        start = time.monotonic()
        first = True
        next_arrival = start + self.rng.expovariate(self.rate)
        next_report = start + 1.0
        last_report = start
        while True:
            now = time.monotonic()
            if now - start >= self.duration_s:
                break
            if now >= next_arrival:
                with self.lock:
                    ok = self.admit(now)
                if ok:
                    self.admitted.append(now)
                    self.allowed += 1
                else:
                    self.denied += 1
                if first:
                    first = False
                    self.report(now, 0)
                    last_report = now
                next_arrival += self.rng.expovariate(self.rate)
            if now >= next_report and not first:
                self.report(now, int(now - last_report))
                last_report, next_report = now, next_report + 1.0
            time.sleep(max(0.0, min(next_arrival, next_report) - time.monotonic()))
        self.stream.close()

    def report(self, now, elapsed_s):
        self.stream.send("envoy", [usage(self.labels, self.allowed, self.denied, elapsed_s)])
        self.allowed = self.denied = 0
        answer = self.stream.next()
        with self.lock:
            self.apply(answer, time.monotonic())


def fleet(channel):
    duration_s = 8.0
    rate = 2.7 * LIMIT / WINDOW_S / 2
    # One bucket, two Envoys: the same tenant.
    envoys = [Envoy(channel, rate, seed, duration_s, "fleet") for seed in (1, 2)]
    for e in envoys:
        e.start()
    for e in envoys:
        e.join(timeout=60)
    times = sorted(t for e in envoys for t in e.admitted)
    most, first = 0, 0
    for last in range(len(times)):
        while times[last] - times[first] >= WINDOW_S:
            first += 1
        most = max(most, last - first + 1)
    print(f"FIGURE grpcio: two Envoys at 2.7 x: most admitted in any {WINDOW_S:g} s window {most} (limit {LIMIT}); "
          f"admitted {[len(e.admitted) for e in envoys]} in {duration_s:g} s", flush=True)
    # Real time on a shared machine: looser than tests/rlqs/fleet.rs's bounds.
    check("two Envoys admit about the limit in any window", 0.5 * LIMIT <= most <= 1.3 * LIMIT, most)


def main():
    channel = grpc.insecure_channel(ADDR)
    grpc.channel_ready_future(channel).result(timeout=20)
    corner_cases(channel)
    fleet(channel)
    print(f"{results['passed']} passed, {results['failed']} failed", flush=True)
    sys.exit(0 if results["failed"] == 0 else 1)


main()
