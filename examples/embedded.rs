//! slidegate as a library, without its server: a login throttle in your own
//! program, counted in Memcached so that every instance of it shares the
//! counts. Builds with `default-features = false, features = ["memcached"]`.
//!
//! ```sh
//! memcached -d -l 127.0.0.1 -p 11211 -U 0
//! cargo run --example embedded -- 127.0.0.1:11211
//! ```

use std::time::Duration;

use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, Policy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:11211".to_owned());
    let store = MemcachedStore::connect(&MemcachedOptions {
        servers: vec![server.clone()],
        namespace: "embedded-example".to_owned(),
        ..MemcachedOptions::default()
    })
    .await?;
    let limiter = Limiter::new(store);
    limiter.ready().await?;

    // 3 attempts a minute and 10 an hour, per account.
    let logins = Policy::new(
        "login",
        vec![
            Limit::per(3, Duration::from_secs(60))?,
            Limit::per(10, Duration::from_secs(3600))?,
        ],
    )?;
    let account = format!("user-{}@example.com", std::process::id());
    for attempt in 1..=4 {
        let decision = limiter.check(&account, &logins, 1).await?;
        if decision.allowed {
            println!("attempt {attempt}: allowed, {} left", decision.remaining());
        } else {
            println!(
                "attempt {attempt}: refused, retry in {} s",
                decision.retry_after_ms.unwrap_or(0).div_ceil(1000)
            );
        }
    }
    println!("counted in Memcached at {server}");
    Ok(())
}
