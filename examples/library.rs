//! Library mode: a `Limiter` inside your own tokio program, no HTTP.
//!
//!     cargo run --example library                      # in-memory store
//!     SLIDEGATE_MEMCACHED=127.0.0.1:11211 cargo run --example library
//!
//! Builds without the server: `cargo run --example library --no-default-features`.

use std::time::Duration;

use slidegate::{Limit, Limiter, MemoryStore, Policy, Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 5 login attempts per minute AND 20 per hour (the hour in 12 sub-buckets
    // of 5 minutes, for a closer estimate).
    let policy = Policy::new(
        "login",
        vec![
            Limit::per(5, Duration::from_secs(60))?,
            Limit::per(20, Duration::from_secs(3600))?.with_precision(12)?,
        ],
    )?;

    #[cfg(feature = "memcached")]
    if let Ok(servers) = std::env::var("SLIDEGATE_MEMCACHED") {
        let options = slidegate::MemcachedOptions {
            servers: servers.split(',').map(str::to_owned).collect(),
            ..slidegate::MemcachedOptions::default()
        };
        let store = slidegate::MemcachedStore::connect(&options).await?;
        return attempt_logins(Limiter::new(store), &policy).await;
    }
    attempt_logins(Limiter::new(MemoryStore::new()), &policy).await
}

async fn attempt_logins<S: Store>(
    limiter: Limiter<S>,
    policy: &Policy,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("counting in the {} store", limiter.store().kind());
    for attempt in 1..=7 {
        let decision = limiter.check("user@example.com", policy, 1).await?;
        if decision.allowed {
            println!("attempt {attempt}: allowed, {} left", decision.remaining());
        } else {
            let wait = decision
                .retry_after_ms
                .map_or("never".to_owned(), |ms| format!("{ms} ms"));
            println!(
                "attempt {attempt}: refused ({:?}), retry in {wait}",
                decision.source
            );
        }
    }
    Ok(())
}
