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
//! # Layout
//!
//! Data flows one way: policy → limiter → store → window → decision.
//!
//! | module | owns |
//! |---|---|
//! | [`window`] | the pure arithmetic: estimate, admission, exact retry time |
//! | [`policy`] | limits and policies, which can only be built valid |
//! | [`clock`] | the time source; a manual clock for tests |
//! | [`limiter`] | [`Limiter`]: near-cache, then store, then window; failure modes |
//! | [`near_cache`] | the moka cache of hot rejects |
//! | [`store`] | the [`Store`] trait, [`MemoryStore`], `MemcachedStore` (feature `memcached`) |
//! | [`metrics`] | what the limiter counts about itself, as `prometheus-client` metrics; it takes plain outcomes, never the limiter's types |
//! | [`source`] | where a decision came from ([`Source`]): below both the limiter and the metrics |
//! | `tower` | [`tower::RateLimitLayer`], limiting any tower/axum/hyper service (feature `tower`) |
//! | `server` | the HTTP service (feature `server`): routes, `/metrics`, hot reload; `server::rls` and `server::rlqs`, Envoy RLS and RLQS over gRPC (feature `grpc`) |
//! | `config` | file, environment and flags, validation, reload (feature `server`) |
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use slidegate::{Limit, Limiter, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 3 requests per minute; with Memcached, use `MemcachedStore::connect`.
//! let limiter = Limiter::new(MemoryStore::new());
//! let policy = Policy::new("api", vec![Limit::per(3, Duration::from_secs(60))?])?;
//!
//! for _ in 0..3 {
//!     assert!(limiter.check("client-42", &policy, 1).await?.allowed);
//! }
//! let decision = limiter.check("client-42", &policy, 1).await?;
//! assert!(!decision.allowed);
//! println!("retry in {:?} ms", decision.retry_after_ms);
//! # Ok(())
//! # }
//! ```
//!
//! With `default-features = false` the crate has no HTTP dependencies: the
//! limiter, policies, the in-memory store and the near-cache remain, and
//! the feature `memcached` adds the Memcached store.

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
