//! The library in ten lines, as the README and the book's library chapter
//! print them (a test holds those pages to the lines between the anchors):
//!
//!     cargo run --example quickstart

use std::time::Duration;

use slidegate::{Limit, Limiter, MemoryStore, Policy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: ten_lines
    // In memory here; MemcachedStore::connect(&options).await? to share the counts.
    let limiter = Limiter::new(MemoryStore::new());
    let policy = Policy::new("login", vec![Limit::per(5, Duration::from_secs(60))?])?;

    for attempt in 1..=6 {
        let decision = limiter.check("user@example.com", &policy, 1).await?;
        if decision.allowed {
            println!("attempt {attempt}: allowed, {} left", decision.remaining());
        } else if let Some(ms) = decision.retry_after_ms {
            println!("attempt {attempt}: refused, retry in {ms} ms");
        } // else refused for good: a cost greater than the limit
    }
    // ANCHOR_END: ten_lines
    Ok(())
}
