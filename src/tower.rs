//! A tower [`Layer`] that limits any tower, axum or hyper service: a key is
//! taken from each request by a closure, checked against a policy with the
//! same [`Limiter`] the library and the server use, and the request is
//! either passed on (its response gains the `RateLimit-Policy` and
//! `RateLimit` headers) or answered `429 Too Many Requests` with
//! `Retry-After` and those headers, without reaching the service.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use slidegate::tower::{Layer, RateLimitLayer, Service};
//! use slidegate::{Limit, Limiter, MemoryStore, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Arc::new(Limiter::new(MemoryStore::new()));
//! let policy = Policy::new("api", vec![Limit::per(2, Duration::from_secs(60))?])?;
//! // Limit by API key; a request without one is not limited.
//! let layer = RateLimitLayer::new(limiter, policy, |request: &http::Request<()>| {
//!     request.headers().get("x-api-key")?.to_str().ok().map(str::to_owned)
//! })?;
//! let mut service = layer.layer(tower_service_fn(|_request| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
//! }));
//!
//! let request = || http::Request::builder().header("x-api-key", "k1").body(()).unwrap();
//! assert_eq!(service.call(request()).await?.status(), 200);
//! let second = service.call(request()).await?;
//! assert!(second.headers()["ratelimit"].to_str()?.starts_with("\"api\";r=0;"));
//! let third = service.call(request()).await?;
//! assert_eq!(third.status(), 429);
//! assert!(third.headers().contains_key("retry-after"));
//! # Ok(())
//! # }
//! # // A stand-in for `tower::service_fn`, so the example needs only tower-service.
//! # fn tower_service_fn<F>(f: F) -> ServiceFn<F> { ServiceFn(f) }
//! # #[derive(Clone)] struct ServiceFn<F>(F);
//! # impl<F, Fut, R> Service<http::Request<()>> for ServiceFn<F>
//! # where F: FnMut(http::Request<()>) -> Fut, Fut: std::future::Future<Output = Result<R, std::convert::Infallible>> {
//! #     type Response = R; type Error = std::convert::Infallible; type Future = Fut;
//! #     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> { std::task::Poll::Ready(Ok(())) }
//! #     fn call(&mut self, request: http::Request<()>) -> Fut { (self.0)(request) }
//! # }
//! ```
//!
//! A store that fails is decided by the limiter's failure mode; with
//! [`crate::FailureMode::Deny`] the layer answers 503. A key the limiter
//! refuses (longer than 1024 bytes) gets 400. A policy the limiter would
//! refuse for every request (more counters than its `max_counters`) is
//! refused when the layer is built.
//!
//! The headers are written as the server writes them (IETF httpapi
//! RateLimit draft); the server builds its own on its hot path.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
pub use tower_layer::Layer;
pub use tower_service::Service;

use crate::headers::{PolicyHeaders, rate_limit_headers};
use crate::limiter::{CheckError, Limiter};
use crate::policy::{Policy, PolicyError};
use crate::store::Store;

/// Limits the wrapped service by `key(&request)` under `policy`; `None`
/// from the closure lets the request through unlimited.
pub struct RateLimitLayer<S, K> {
    shared: Arc<Shared<S, K>>,
}

struct Shared<S, K> {
    limiter: Arc<Limiter<S>>,
    policy: Policy,
    key: K,
    /// What the rate-limit headers repeat, computed once.
    headers: PolicyHeaders,
}

impl<S, K> Clone for RateLimitLayer<S, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Store, K> RateLimitLayer<S, K> {
    /// A layer limiting by `key` under `policy`; refused when the limiter
    /// would refuse `policy` on every check (it needs more counters than
    /// the limiter's [`max_counters`](Limiter::max_counters)).
    pub fn new(
        limiter: Arc<Limiter<S>>,
        policy: Policy,
        key: K,
    ) -> Result<RateLimitLayer<S, K>, PolicyError> {
        policy.within(limiter.max_counters())?;
        let headers = PolicyHeaders::of(&policy);
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                limiter,
                policy,
                key,
                headers,
            }),
        })
    }
}

impl<Inner, S, K> Layer<Inner> for RateLimitLayer<S, K> {
    type Service = RateLimit<Inner, S, K>;

    fn layer(&self, inner: Inner) -> Self::Service {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
pub struct RateLimit<Inner, S, K> {
    inner: Inner,
    shared: Arc<Shared<S, K>>,
}

impl<Inner: Clone, S, K> Clone for RateLimit<Inner, S, K> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<Inner, S, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<Inner, S, K>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
    S: Store,
    K: Fn(&Request<ReqBody>) -> Option<String> + Send + Sync + 'static,
{
    type Response = Response<ResBody>;
    type Error = Inner::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready is the one to call; a clone
        // stays behind for the next request (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let key = (shared.key)(&request);
        Box::pin(async move {
            let Some(key) = key else {
                return inner.call(request).await;
            };
            let decision = match shared.limiter.check(&key, &shared.policy, 1).await {
                Ok(decision) => decision,
                Err(error) => {
                    let status = match error {
                        CheckError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                        CheckError::InvalidKey(_)
                        | CheckError::InvalidCost(_)
                        | CheckError::InvalidPolicy(_) => StatusCode::BAD_REQUEST,
                    };
                    let mut response = Response::new(ResBody::default());
                    *response.status_mut() = status;
                    return Ok(response);
                }
            };
            let mut response = if decision.allowed {
                inner.call(request).await?
            } else {
                let mut refused = Response::new(ResBody::default());
                *refused.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                refused
            };
            rate_limit_headers(&decision, &shared.headers, response.headers_mut());
            Ok(response)
        })
    }
}
