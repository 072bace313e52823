//! slidegate: a sliding-window rate limiter whose counters live in Memcached,
//! usable as a library or as an HTTP service.
//!
//! For each key, time is cut into buckets of the window's length, and the
//! requests of the last window are estimated from two counters, the
//! current bucket's and the previous one's, assuming the previous bucket's
//! requests were spread evenly:
//!
//! ```text
//! estimate = previous * (1 - elapsed fraction of the current bucket) + current
//! ```
//!
//! A request of cost `c` is admitted when `estimate + c <= limit`, and only
//! admitted requests are counted. An admitted check costs one Memcached round
//! trip; rejects of a hot key are answered from a near-cache with none.
//!
//! This page is the library's guide. The service (its HTTP API, the
//! proxies, Envoy, operations) is described in the book, an mdBook in the
//! repository's `docs/` directory (`mdbook build docs`): its chapter on the
//! library and the tower layer goes on from here, and its configuration
//! reference lists every key of the service's file.
//!
//! # A limiter, a policy, a check
//!
//! A [`Limiter`] holds a [`Store`] and decides; a [`Policy`] names one or
//! more [`Limit`]s, and can only be built valid. Being over a limit is a
//! normal [`Decision`] (`allowed: false`), not an error: a
//! [`CheckError`] is for a request that cannot be decided (an empty key, a
//! cost of 0, a store down under [`FailureMode::Deny`]).
//!
//! ```
//! use std::time::Duration;
//! use slidegate::{Limit, Limiter, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 3 requests per minute, counted in this process's memory.
//! let limiter = Limiter::new(MemoryStore::new());
//! let policy = Policy::new("api", vec![Limit::per(3, Duration::from_secs(60))?])?;
//!
//! for _ in 0..3 {
//!     assert!(limiter.check("client-42", &policy, 1).await?.allowed);
//! }
//! let decision = limiter.check("client-42", &policy, 1).await?;
//! assert!(!decision.allowed);
//! assert_eq!(decision.remaining(), 0);
//! // The exact wait until the same request would pass (`None`: it never can).
//! assert!(decision.retry_after_ms.is_some_and(|ms| ms > 0));
//!
//! // Another key has its own counts.
//! assert!(limiter.check("client-7", &policy, 1).await?.allowed);
//! # Ok(())
//! # }
//! ```
//!
//! [`Limiter::peek`] gives the same decision and counts nothing;
//! [`Limiter::report`] counts whatever the limits say (work that happened
//! anyway, bytes sent).
//!
//! # Several limits, one decision
//!
//! A policy of several limits (a burst and a sustained rate, say) admits a
//! request only if every limit does, and then counts it in every one; if
//! any refuses, none counts it. A limit's `precision` cuts its window into
//! sub-buckets, for an estimate closer to an exact sliding log at the cost
//! of more counters a check.
//!
//! ```
//! use std::time::Duration;
//! use slidegate::{Limit, Limiter, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::new(MemoryStore::new());
//! let policy = Policy::new(
//!     "search",
//!     vec![
//!         Limit::per(2, Duration::from_secs(1))?,
//!         Limit::per(100, Duration::from_secs(600))?.with_precision(10)?,
//!     ],
//! )?;
//!
//! assert!(limiter.check("tenant-1", &policy, 2).await?.allowed);
//! let decision = limiter.check("tenant-1", &policy, 1).await?;
//! assert!(!decision.allowed, "the one-second limit refuses");
//! // One state a limit, in order: the second still has room.
//! assert_eq!(decision.limits[0].remaining, 0);
//! assert_eq!(decision.limits[1].remaining, 98);
//! # Ok(())
//! # }
//! ```
//!
//! Several keys can be decided as one request, all counted or none, with
//! [`Limiter::check_all`].
//!
//! # Counting in Memcached
//!
//! With the feature `memcached`, `MemcachedStore` shares the counts
//! between every process that uses the same servers and namespace. Its
//! options also take an ElastiCache configuration endpoint (`discovery`)
//! and TLS. [`Limiter::builder`] sets the deadline of a check's store
//! calls and what decides when the store fails or is late:
//!
//! ```no_run
//! # #[cfg(feature = "memcached")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use slidegate::{FailureMode, Limit, Limiter, MemcachedOptions, MemcachedStore, Policy};
//!
//! let store = MemcachedStore::connect(&MemcachedOptions {
//!     servers: vec!["127.0.0.1:11211".into()],
//!     namespace: "myapp".into(),
//!     ..MemcachedOptions::default()
//! })
//! .await?;
//! let limiter = Limiter::builder(store)
//!     .timeout(Duration::from_millis(50))
//!     .failure_mode(FailureMode::Local)
//!     .build();
//! let policy = Policy::new("login", vec![Limit::per(5, Duration::from_secs(60))?])?;
//! let decision = limiter.check("user@example.com", &policy, 1).await?;
//! println!("{} ({:?})", decision.allowed, decision.source);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "memcached"))]
//! # fn main() {}
//! ```
//!
//! [`FailureMode::Allow`] (the default) admits while the store fails,
//! [`FailureMode::Deny`] refuses, [`FailureMode::Local`] counts in this
//! process alone until the store is back. [`Decision::source`] says what
//! decided: the store, the near-cache, the failure mode, or an exemption.
//! [`AnyStore`] holds either store, for a program that chooses at start.
//!
//! # The tower layer
//!
//! With the feature `tower`, `tower::RateLimitLayer` limits any tower,
//! axum or hyper service by a key a closure takes from each request: a
//! refused request gets 429 with `Retry-After` and the `RateLimit`
//! headers without reaching the service. The module's page has a runnable
//! example, and `examples/axum_middleware.rs` a whole service.
//!
//! # Feature flags
//!
//! | feature | adds | default |
//! |---|---|---|
//! | `memcached` | `MemcachedStore`, the Memcached store (meta protocol, async) | yes |
//! | `tls` | TLS to Memcached (ElastiCache encryption in transit), with rustls | yes |
//! | `tower` | `tower::RateLimitLayer` | yes |
//! | `server` | the HTTP service, its configuration and the `slidegate` binary | yes |
//! | `grpc` | Envoy's RLS and RLQS over gRPC, beside the HTTP API | yes |
//!
//! With `default-features = false` the crate has no HTTP dependencies: the
//! limiter, policies, the in-memory store and the near-cache remain; add
//! `memcached` for the Memcached store, `tower` for the layer.
//!
//! # How a check flows
//!
//! Each face turns its request into keys, policies and costs, and asks the
//! one `Limiter`; none decides on its own. The limiter runs a check through
//! its stages in order; the store behind it is the embedded one or
//! Memcached:
//!
//! ```text
//! faces                    Limiter (src/limiter.rs)                   store
//! HTTP API  ────┐
//! forward-auth ─┤   screen ─► exchange ─► reckon ─► observe          memory
//! Envoy RLS ────┼─►    │          │                                   or
//! Envoy RLQS ───┤      │          └─ failed or late ─► fall back     memcached:
//! tower layer ──┘      └─ refused from the near-cache ─► observe      route ─► connections ─► wire
//! ```
//!
//! - screen (`src/limiter/screen.rs`): the near-cache of hot rejects may
//!   answer first, with no round trip; an entry older than the revalidation
//!   interval lets one check through to read the store again.
//! - exchange (`src/limiter/exchange.rs`): the store's reads and increment,
//!   under the check's deadline; concurrent checks of one key share one
//!   exchange (coalescing). What the store added comes back as a
//!   [`store::Reservation`], held until the caller is told and given back
//!   if it never is: a store counts only what a caller was told was
//!   counted.
//! - reckon (`src/limiter/reckon.rs`): pure, no I/O and no clock: from the
//!   counts read, the costs and the time, what is admitted, what is taken
//!   back (an increment that went over a limit), what the near-cache
//!   remembers. The arithmetic itself is [`window`]'s.
//! - fall back (`src/limiter/fallback.rs`): when the store fails or is
//!   late, the failure mode decides, once for every face.
//! - observe: what the metrics count of each decision ([`metrics`]).
//! - The Memcached store routes each key to its node (or, with
//!   `memcached.replicas`, its N nodes) by a rendezvous hash
//!   (`src/store/memcached/route.rs`, `fanout.rs`), sends the commands of many checks
//!   pipelined on a few multiplexed connections per node
//!   (`src/store/memcached/conn/`), written and read as the meta protocol's
//!   bytes (`src/store/memcached/wire.rs`).
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | [`window`] | the pure arithmetic: estimate, admission, exact retry time |
//! | [`policy`] | limits and policies, which can only be built valid |
//! | [`clock`] | the time source; a manual clock for tests |
//! | [`limiter`] | [`Limiter`]: the stages above, and its builder |
//! | [`near_cache`] | the moka cache of hot rejects, bounded in entries and bytes |
//! | [`store`] | the [`Store`] trait, [`MemoryStore`], `MemcachedStore` (feature `memcached`), and the [`store::Reservation`] of what a store counted until its caller is told |
//! | [`metrics`] | what the limiter counts about itself, as `prometheus-client` metrics; it takes plain outcomes, never the limiter's types |
//! | [`source`] | where a decision came from ([`Source`]): below both the limiter and the metrics |
//! | `tower` | `tower::RateLimitLayer`, a face for any tower/axum/hyper service (feature `tower`) |
//! | `server` | built from the configuration by one function (`src/server/build.rs`: the state, the faces, every part registering its own metrics, the feature switches); the HTTP service and forward-auth, `/metrics`, hot reload; `server::rls` and `server::rlqs`, Envoy RLS and RLQS over gRPC (features `server`, `grpc`) |
//! | `config` | the service's file, environment and flags, one table of keys, validation, reload (feature `server`) |

mod by_name;
pub mod clock;
#[cfg(feature = "server")]
pub mod config;
#[cfg(all(test, feature = "server", feature = "memcached"))]
mod fuzz;
#[cfg(all(feature = "server", feature = "memcached"))]
#[doc(hidden)]
pub mod fuzz_targets;
#[cfg(any(feature = "server", feature = "tower"))]
mod headers;
mod join;
pub mod limiter;
pub mod metrics;
pub mod near_cache;
pub mod policy;
#[cfg(feature = "server")]
pub mod server;
pub mod source;
pub mod store;
#[cfg(feature = "tower")]
pub mod tower;
pub mod window;

pub use clock::{Clock, ManualClock, SystemClock, WatchedClock};
pub use limiter::{CheckError, Decision, FailureMode, Item, Limiter, LimiterBuilder, Source};
pub use policy::{Limit, Policy, Window};
pub use store::{AnyStore, MemoryStore, Store, StoreError};
#[cfg(feature = "memcached")]
pub use store::{MemcachedClock, MemcachedOptions, MemcachedStore, TlsOptions};
