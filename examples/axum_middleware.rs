//! An axum service limited by slidegate's tower layer: 3 requests a minute
//! per API key (`X-Api-Key`), or per client address without one, counted in
//! Memcached so that every replica of the service shares the limit.
//!
//! ```sh
//! cargo run --example axum_middleware -- 127.0.0.1:11211   # or no argument: in memory
//! curl -i -H 'X-Api-Key: k1' localhost:3000/hello          # the 4th within a minute: 429
//! ```
//!
//! `SLIDEGATE_EXAMPLE_LISTEN` changes the address (the tests use port 0);
//! the address served is printed on stdout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use slidegate::tower::RateLimitLayer;
use slidegate::{AnyStore, Limit, Limiter, MemcachedOptions, MemcachedStore, MemoryStore, Policy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = match std::env::args().nth(1) {
        Some(server) => AnyStore::Memcached(
            MemcachedStore::connect(&MemcachedOptions {
                servers: vec![server],
                namespace: std::env::var("SLIDEGATE_EXAMPLE_NAMESPACE")
                    .unwrap_or_else(|_| "axum-example".to_owned()),
                ..MemcachedOptions::default()
            })
            .await?,
        ),
        None => AnyStore::Memory(MemoryStore::new()),
    };
    let limiter = Arc::new(Limiter::new(store));
    let policy = Policy::new("hello", vec![Limit::per(3, Duration::from_secs(60))?])?;

    // Whose request it is: the API key, else the client's address.
    let key = |request: &axum::http::Request<axum::body::Body>| {
        if let Some(api_key) = request.headers().get("x-api-key") {
            return api_key.to_str().ok().map(|key| format!("key:{key}"));
        }
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>()?;
        Some(format!("addr:{}", peer.0.ip()))
    };
    let app = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(limiter, policy, key)?);

    let listen =
        std::env::var("SLIDEGATE_EXAMPLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
