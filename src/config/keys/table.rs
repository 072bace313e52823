//! Every key of the configuration file, one row each, in the order the
//! reference lists them.
//!
//! Adding a key:
//! 1. its field in the section's serde struct (`memcached.rs`, ...);
//! 2. its row here: type, default, bounds, flag and variable, reload,
//!    what it is for;
//! 3. its flag, if it has one, in `flags.rs`, named from the row:
//!    `#[arg(long = const { Key::flag_of("a.b") }, env = const { Key::env_of("a.b") })]`;
//! 4. its resolution in the section's file, bounds from the row:
//!    `origin.bounded(key!("a.b"), overrides.a_b, file.b)?`;
//! 5. if it needs a restart, its comparison in
//!    `reload/restart_only.rs` (the reload's lists come from the rows);
//! 6. the book's page written again:
//!    `SLIDEGATE_BLESS=1 cargo test --test configuration_reference`.
//!
//! The tests in `keys/tests.rs` and `reload/tests.rs` say what is missing.

use super::Bounds::{Any, Between, Rule, ZeroOr};
use super::Reload::{Live, Restart};
use super::Type::{Boolean, Duration, Integer, List, OneOf, Table};
use super::{Bounds, Key, Reload, Type, Value};
use crate::config::rlqs::bounds as rlqs;
use crate::config::{
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_RLS_MAX_DESCRIPTORS, DEFAULT_WATCH,
};

/// A day: the longest RLQS assignment TTL or abandon time.
const DAY_MS: u64 = 86_400_000;

const fn ms(duration: std::time::Duration) -> u64 {
    duration.as_millis() as u64
}

/// Every key of the file.
pub const KEYS: &[Key] = &[
    key("listen", Type::String("IP address:port"), Restart)
        .default(Value::String("127.0.0.1:8080"))
        .flag("listen", "SLIDEGATE_LISTEN")
        .about("The address the HTTP API listens on. `0.0.0.0:8080` to serve other hosts (in a container, say)."),
    key("memcached.servers", List("host:port strings"), Restart)
        .default(Value::Unset("none: counts in this process's memory"))
        .bounds(Rule("each `host:port`, an IPv6 address in brackets (`[::1]:11211`); at least one when given"))
        .flag("memcached", "SLIDEGATE_MEMCACHED")
        .about("The Memcached nodes every instance counts in; keys are spread over them by a rendezvous hash. Leave it out to count in memory, for one instance or a test; give it, or `memcached.discovery`, for several instances to share the counts."),
    key("memcached.timeout_ms", Integer("ms"), Restart)
        .default(Value::Integer(ms(crate::limiter::DEFAULT_TIMEOUT)))
        .bounds(Between(1, 60_000))
        .flag("timeout-ms", "SLIDEGATE_TIMEOUT_MS")
        .about("A check's deadline for all its store calls together; past it, `failure.mode` decides. Raise it when the store is far (another zone); lower it when a late answer is worse than the failure mode's."),
    key("memcached.namespace", Type::String("name"), Restart)
        .default(Value::String("sg"))
        .bounds(Rule(crate::policy::PLAIN_NAME_RULE))
        .flag("namespace", "SLIDEGATE_NAMESPACE")
        .about("The prefix of every Memcached key. Give two deployments sharing one Memcached their own, so they do not share counts."),
    key("memcached.connections", Integer(""), Restart)
        .default(Value::Integer(crate::store::DEFAULT_CONNECTIONS as u64))
        .bounds(Between(1, 64))
        .about("Multiplexed connections per Memcached server; while all of a node's are overdue, as many extra ones may be dialled. Raise it when one connection a core saturates a node's link."),
    key("memcached.replicas", Integer(" nodes"), Restart)
        .default(Value::Integer(1))
        .bounds(Between(1, 3))
        .flag("memcached-replicas", "SLIDEGATE_MEMCACHED_REPLICAS")
        .about("On how many Memcached nodes each counter lives: the nodes with the highest rendezvous scores for its key. With 2 or 3, a node that dies, restarts empty or is replaced costs no key its count, at 2 (or 3) times the Memcached commands a check; no more than the servers given. See the chapter \"When a node goes away\"."),
    key("memcached.coalesce", Boolean, Restart)
        .default(Value::Boolean(true))
        .flag("no-coalesce", "SLIDEGATE_COALESCE")
        .about("Concurrent checks of one key share one store exchange, so a hot key costs one round trip at a time. `--no-coalesce` (or `SLIDEGATE_COALESCE=false`) turns it off, to compare."),
    key("memcached.discovery", Type::String("host:port"), Restart)
        .default(Value::Unset("none"))
        .bounds(Rule("`host:port`; not with `memcached.servers` in the same layer"))
        .flag("memcached-discovery", "SLIDEGATE_MEMCACHED_DISCOVERY")
        .about("An ElastiCache configuration endpoint, instead of `memcached.servers`: the node list comes from it and follows it. Where the nodes come from is one setting: a flag or variable giving either replaces the file's choice."),
    key("memcached.discovery_interval_ms", Integer("ms"), Restart)
        .default(Value::Integer(ms(crate::store::DEFAULT_DISCOVERY_INTERVAL)))
        .bounds(Between(1_000, 86_400_000))
        .about("How often the configuration endpoint is polled for the node list. Lower it to follow a cluster's scaling sooner."),
    key("memcached.tls", Boolean, Restart)
        .default(Value::Boolean(false))
        .flag("memcached-tls", "SLIDEGATE_MEMCACHED_TLS")
        .about("TLS to every node and to the configuration endpoint (ElastiCache encryption in transit). `--memcached-tls=false` turns off the file's `tls = true`."),
    key("memcached.tls_ca_file", Type::String("path"), Restart)
        .default(Value::Unset("the system's roots"))
        .bounds(Rule("a readable file"))
        .flag("memcached-tls-ca", "SLIDEGATE_MEMCACHED_TLS_CA")
        .about("A PEM file of the CA to trust, relative to the configuration file; giving one turns TLS on."),
    key("memcached.tls_server_name", Type::String("host name"), Restart)
        .default(Value::Unset("each node's host"))
        .bounds(Rule("only with TLS"))
        .about("The name the nodes' certificates must carry, when it is not the host dialled (nodes reached through a tunnel or by address)."),
    key("near_cache.capacity", Integer("keys"), Restart)
        .default(Value::Integer(crate::limiter::DEFAULT_NEAR_CACHE_CAPACITY))
        .bounds(Rule("any; 0 turns the near-cache off"))
        .flag("near-cache-capacity", "SLIDEGATE_NEAR_CACHE_CAPACITY")
        .about("Keys of hot rejects this instance remembers, to refuse them again without a store round trip. Raise it when many distinct keys are refused at once; 0 turns the near-cache off."),
    key("near_cache.max_bytes", Integer("bytes"), Restart)
        .default(Value::Integer(crate::near_cache::DEFAULT_MAX_BYTES))
        .bounds(Rule("any; 0 turns the near-cache off"))
        .about("Bytes the near-cache may hold, each entry weighed by its real size (its counts included); both this and `near_cache.capacity` hold."),
    key("near_cache.revalidate_ms", Integer("ms"), Restart)
        .default(Value::Integer(ms(crate::near_cache::DEFAULT_REVALIDATE)))
        .bounds(Between(10, 3_600_000))
        .flag("near-cache-revalidate-ms", "SLIDEGATE_NEAR_CACHE_REVALIDATE_MS")
        .about("How long a remembered refusal is trusted before one check reads the store again. Lower it so that a reset of a key's counts is seen sooner; raise it to spare the store more."),
    key("limits.max_counters", Integer("counters"), Live)
        .default(Value::Integer(crate::policy::DEFAULT_MAX_COUNTERS as u64))
        .bounds(Between(2, crate::policy::MAX_COUNTERS as u64))
        .about("The most counters one policy may touch: precision + 1, summed over its limits. An inline policy past it is a 400, a configured one a configuration error; at least 11 with `rlqs.listen`."),
    key("failure.mode", OneOf(&["allow", "deny", "local"]), Restart)
        .default(Value::String("allow"))
        .flag("failure-mode", "SLIDEGATE_FAILURE_MODE")
        .about("What decides while the store fails or is late: `allow` admits (fail open), `deny` answers 503 (fail closed), `local` counts in this process alone."),
    key("auth.trusted_proxies", List("addresses or networks"), Live)
        .default(Value::Unset("none"))
        .bounds(Rule("IP addresses, or networks in CIDR form"))
        .about("Peers (`10.0.0.0/8`) whose `X-Forwarded-For` forward-auth (`GET /v1/auth`) believes. Give your proxies' addresses, and no more: a client that is believed chooses its key."),
    key("auth.deny_status", Integer("HTTP status"), Live)
        .default(Value::Integer(429))
        .bounds(Between(400, 599))
        .about("The status of a forward-auth refusal. `403` behind nginx, whose `auth_request` passes on only 2xx, 401 and 403."),
    key("auth.exempt_addresses", List("addresses or networks"), Live)
        .default(Value::Unset("none"))
        .bounds(Rule("IP addresses, or networks in CIDR form"))
        .about("Client networks (`10.0.0.0/8`, `::1`) that forward-auth never limits, matched after `auth.trusted_proxies`."),
    key("policies", Table, Live)
        .default(Value::Unset("none"))
        .about("Named policies, `[policies.NAME]` each, that a check names; `NAME` is `[A-Za-z0-9_.-]`, not `inline`."),
    key("policies.NAME.limits", List("tables"), Live)
        .default(Value::Unset("required"))
        .bounds(Rule("1 to 16 limits, each a distinct window and precision, at most `limits.max_counters` counters"))
        .about("The policy's limits: a check is admitted only if every one admits it, and then counts in every one."),
    key("policies.NAME.limits[].limit", Integer("cost units"), Live)
        .default(Value::Unset("required"))
        .bounds(Rule("1 or more"))
        .about("Requests (cost units) per window."),
    key("policies.NAME.limits[].window", Duration, Live)
        .default(Value::Unset("required, or `window_ms`"))
        .bounds(Rule("1ms to 365d"))
        .about("The window's length: `250ms`, `1s`, `10m`, `1h`, `1d`."),
    key("policies.NAME.limits[].window_ms", Integer("ms"), Live)
        .default(Value::Unset("required, or `window`"))
        .bounds(Rule("1 to 31536000000"))
        .about("The window's length in milliseconds, instead of `window`."),
    key("policies.NAME.limits[].precision", Integer("sub-buckets"), Live)
        .default(Value::Integer(1))
        .bounds(Rule("1 to 1000, dividing the window in ms"))
        .about("Sub-buckets the window is cut into: more read closer to an exact sliding log, at the cost of more counters a check."),
    key("policies.NAME.shadow", Boolean, Live)
        .default(Value::Boolean(false))
        .about("Shadow mode: decide and count, but always admit. Measure a new limit this way before enforcing it."),
    key("policies.NAME.exempt_keys", List("strings"), Live)
        .default(Value::Unset("none"))
        .about("Keys this policy never limits: exact, or a trailing `*` for a prefix (`\"internal-*\"`)."),
    key("rls.listen", Type::String("IP address:port"), Restart)
        .default(Value::Unset("off"))
        .flag("rls-listen", "SLIDEGATE_RLS_LISTEN")
        .about("The address of Envoy's rate-limit service (RLS v3, gRPC); not served unless given."),
    key("rls.config", Type::String("path"), Restart)
        .default(Value::Unset("none"))
        .bounds(Rule("a file, or a directory of `.yaml` and `.yml` files; needs `rls.listen`"))
        .flag("rls-config", "SLIDEGATE_RLS_CONFIG")
        .about("envoyproxy/ratelimit YAML rules: a file or a directory, relative to the configuration file. The path needs a restart; the rules in it reload live (a rule file edited, added or removed)."),
    key("rls.max_descriptors", Integer("descriptors"), Restart)
        .default(Value::Integer(DEFAULT_RLS_MAX_DESCRIPTORS as u64))
        .bounds(Between(1, 100_000))
        .about("The most descriptors one `ShouldRateLimit` request may carry; past it, `INVALID_ARGUMENT` naming `descriptors`."),
    key("rlqs.listen", Type::String("IP address:port"), Restart)
        .default(Value::Unset("off"))
        .flag("rlqs-listen", "SLIDEGATE_RLQS_LISTEN")
        .about("The address of Envoy's rate-limit quota service (RLQS v3, gRPC); not served unless given."),
    key("rlqs.assignment_ttl", Duration, Live)
        .default(Value::String("10s"))
        .bounds(Between(1_000, DAY_MS))
        .about("How long an assignment lives in Envoy without a refresh, in whole seconds (Envoy drops the rest)."),
    key("rlqs.abandon_after", Duration, Live)
        .default(Value::String("60s"))
        .bounds(Between(1_000, DAY_MS))
        .about("A bucket a stream has not reported for this long is abandoned on that stream."),
    key("rlqs.unmatched", OneOf(&["allow", "deny"]), Live)
        .default(Value::String("allow"))
        .about("What a bucket no rule matches gets: `allow` (`ALLOW_ALL`) or `deny` (`DENY_ALL`)."),
    key("rlqs.max_report_bytes", Integer("bytes"), Live)
        .default(Value::Integer(rlqs::DEFAULT_MAX_REPORT_BYTES as u64))
        .bounds(Between(4_096, 64 << 20))
        .about("The largest usage report; past it the stream ends with `RESOURCE_EXHAUSTED` naming it, before the report is read."),
    key("rlqs.max_domain_bytes", Integer("bytes"), Live)
        .default(Value::Integer(rlqs::DEFAULT_MAX_DOMAIN_BYTES as u64))
        .bounds(Between(1, 65_536))
        .about("The longest `domain`; past it, `INVALID_ARGUMENT` naming `domain`. A rule's `domain` longer than it is a configuration error."),
    key("rlqs.max_label_name_bytes", Integer("bytes"), Live)
        .default(Value::Integer(rlqs::DEFAULT_MAX_LABEL_NAME_BYTES as u64))
        .bounds(Between(1, 4_096))
        .about("The longest label name of a `BucketId`; past it, `INVALID_ARGUMENT` naming the bucket."),
    key("rlqs.max_label_value_bytes", Integer("bytes"), Live)
        .default(Value::Integer(rlqs::DEFAULT_MAX_LABEL_VALUE_BYTES as u64))
        .bounds(Between(1, 65_536))
        .about("The longest label value of a `BucketId`; past it, `INVALID_ARGUMENT` naming the bucket."),
    key("rlqs.max_tracked_bytes", Integer("bytes"), Live)
        .default(Value::Integer(rlqs::DEFAULT_MAX_TRACKED_BYTES))
        .bounds(Between(1 << 20, 1 << 40))
        .about("What the buckets all streams keep may weigh together; past it, the stream whose report would keep one more ends with `RESOURCE_EXHAUSTED`. A lowered bound keeps what is kept."),
    key("rlqs.buckets", List("tables"), Live)
        .default(Value::Unset("none"))
        .about("`[[rlqs.buckets]]` rules, in order: the first that matches a bucket decides its limit."),
    key("rlqs.buckets[].domain", Type::String("name"), Live)
        .default(Value::Unset("every domain"))
        .about("The RLQS domain the rule applies to."),
    key("rlqs.buckets[].match", Table, Live)
        .default(Value::Unset("every bucket"))
        .about("Labels a `BucketId` must hold, `{ name = \"api\", tenant = \"*\" }`; `*` is any value."),
    key("rlqs.buckets[].limit", Integer("requests"), Live)
        .default(Value::Unset("required"))
        .bounds(Rule("1 or more"))
        .about("Requests per window, across every Envoy and every slidegate instance."),
    key("rlqs.buckets[].window", Duration, Live)
        .default(Value::Unset("required"))
        .bounds(Rule("1ms to 365d"))
        .about("The window's length: `10s`, `1m`, ..."),
    key("rlqs.buckets[].precision", Integer("sub-buckets"), Live)
        .default(Value::Integer(1))
        .bounds(Rule("1 to 1000, dividing the window in ms"))
        .about("Sub-buckets the window is cut into."),
    key("reload.watch_ms", Integer("ms"), Live)
        .default(Value::Integer(ms(DEFAULT_WATCH)))
        .bounds(ZeroOr(100, 3_600_000))
        .about("How often the configuration file (and the tokens file, and the RLS rules) is read for changes; 0: only SIGHUP reloads."),
    key("memory.capacity", Integer("counters"), Restart)
        .default(Value::Integer(crate::store::DEFAULT_MEMORY_CAPACITY as u64))
        // 32 bytes a counter: 16 GiB at most.
        .bounds(Between(1, 500_000_000))
        .flag("memory-capacity", "SLIDEGATE_MEMORY_CAPACITY")
        .about("Counters the embedded store holds (32 bytes each), and the counters of failure mode `local`; past it the least recently used is evicted. Raise it when one instance counts more keys than that in memory."),
    key("server.max_connections", Integer("connections"), Live)
        .default(Value::Integer(DEFAULT_MAX_CONNECTIONS as u64))
        .bounds(Between(1, 1_000_000))
        .about("Connections (HTTP, RLS and RLQS together) served at once; past it, new ones are closed at once and counted. Size it to what the process's memory and file descriptors allow."),
    key("server.api_tokens", List("strings"), Live)
        .default(Value::Unset("none: the API is open"))
        .bounds(Rule("16 to 4096 printable ASCII bytes each"))
        .env("SLIDEGATE_API_TOKENS")
        .about("Bearer tokens every route but `/healthz`, `/readyz`, `/openapi.json` and `/` requires, and the RLS and RLQS listeners. The variable (comma-separated) replaces the file's tokens; there is no flag, which would show them to anyone who can list processes."),
    key("server.api_tokens_file", Type::String("path"), Live)
        .default(Value::Unset("none"))
        .bounds(Rule("a readable file; each token 16 to 4096 printable ASCII bytes"))
        .about("A file of tokens, one a line (`#` comments), in addition to `server.api_tokens`, watched like the configuration file. Once either is written the guard stays on: an empty list or file refuses every call."),
    key("server.metrics_need_token", Boolean, Live)
        .default(Value::Boolean(false))
        .about("`true`: `/metrics` needs a token too."),
    key("server.shutdown_delay_ms", Integer("ms"), Restart)
        .default(Value::Integer(0))
        .bounds(Between(0, 600_000))
        .flag("shutdown-delay-ms", "SLIDEGATE_SHUTDOWN_DELAY_MS")
        .about("After SIGTERM, every listener keeps answering this long while `/readyz` answers 503, so that load balancers stop sending first. Set it to how long yours take to notice (on Kubernetes, a few seconds)."),
    key("server.drain_timeout_ms", Integer("ms"), Restart)
        .default(Value::Integer(ms(DEFAULT_DRAIN_TIMEOUT)))
        .bounds(Between(1, 600_000))
        .flag("drain-timeout-ms", "SLIDEGATE_DRAIN_TIMEOUT_MS")
        .about("Then what is in flight gets this long to finish before the process exits 0."),
    key("clock.source", OneOf(&["local", "memcached"]), Restart)
        .default(Value::String("local"))
        .about("Where decisions read the time: this host's clock, or `memcached`, the first Memcached node's, shared by every instance. Use `memcached` when the hosts' clocks may disagree by a fair part of a window."),
    key("log.format", OneOf(&["text", "json"]), Restart)
        .default(Value::String("text"))
        .flag("log-format", "SLIDEGATE_LOG_FORMAT")
        .about("`text` for a person, or `json`, one object a line, for a log pipeline: every line the process writes, start errors and `--check` included."),
    key("log.refusals_per_s", Integer("refusals a second"), Live)
        .default(Value::Integer(0))
        .bounds(Between(0, 10_000))
        .flag("log-refusals-per-s", "SLIDEGATE_LOG_REFUSALS_PER_S")
        .about("Refused decisions logged a second, each naming its face, key, policy and the limit that refused; the rest are counted in `slidegate_refusals_not_logged_total`. 0 turns it off; turn it on while looking into who is refused."),
];

/// A row: its name, type and whether a reload applies it; the rest set by
/// the methods below.
const fn key(name: &'static str, kind: Type, reload: Reload) -> Key {
    Key {
        name,
        kind,
        default: Value::Unset("none"),
        bounds: Any,
        flag: None,
        env: None,
        reload,
        about: "",
    }
}

impl Key {
    const fn default(mut self, value: Value) -> Key {
        self.default = value;
        self
    }

    const fn bounds(mut self, bounds: Bounds) -> Key {
        self.bounds = bounds;
        self
    }

    const fn flag(mut self, flag: &'static str, env: &'static str) -> Key {
        self.flag = Some(flag);
        self.env = Some(env);
        self
    }

    const fn env(mut self, env: &'static str) -> Key {
        self.env = Some(env);
        self
    }

    const fn about(mut self, about: &'static str) -> Key {
        self.about = about;
        self
    }
}
