//! Operating the service (issue 22), end to end on real servers: a reset
//! reaching a second instance on one memcached through its near-cache, the
//! store reads hot rejects cost, the most limited keys and the sketch's
//! memory under a flood, exemptions (live on reload), the OpenAPI document
//! checked by a real validator against live answers, and the status page
//! rendered by headless Chromium; and the metrics reference, generated
//! from the code and held to what /metrics serves.
//!
//! This file holds the counting allocator and the service the tests start;
//! the tests are in the modules below, one for each of those parts.

#[path = "../common/mod.rs"]
mod common;

mod exemptions;
mod metrics_reference;
mod most_limited;
mod near_cache;
mod on_call;
mod openapi;
mod replicas;
mod status_page;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::http::{self, Response};
use common::in_process;
use slidegate::config::{Config, Overrides};
use slidegate::server::{self, App};
use tokio::sync::oneshot;

/// Counts the bytes this thread holds, so the sketch's memory is measured,
/// not estimated, and other tests' threads do not blur it.
struct CountingAllocator;

thread_local! {
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + layout.size() as isize));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live_bytes() -> isize {
    LIVE_BYTES.with(Cell::get)
}

const TOKEN: &str = "ops-test-token-0123456789";

/// A service built from a configuration file's text, as the binary builds
/// it, serving on a free loopback port.
struct Service {
    addr: SocketAddr,
    app: Arc<App>,
    file: PathBuf,
    _stop: oneshot::Sender<()>,
}

impl Service {
    async fn start(text: &str) -> Service {
        let dir = common::process::temp_dir("slidegate-ops");
        let file = dir.join("slidegate.toml");
        std::fs::write(&file, text).unwrap();
        let config = Config::load(&overrides(&file)).unwrap_or_else(|error| panic!("{error}"));
        let app = Arc::new(App::from_config(&config).await.expect("the store"));
        let served = in_process::serve(server::serve, app.clone()).await;
        Service {
            addr: served.addr,
            app,
            file,
            _stop: served.stop,
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Response {
        let auth = format!("Bearer {TOKEN}");
        let headers = [
            ("content-type", "application/json"),
            ("authorization", auth.as_str()),
        ];
        http::send(self.addr, "POST", path, &headers, body.to_string()).await
    }

    async fn get(&self, path: &str) -> Response {
        self.get_with(path, &[]).await
    }

    /// A GET with the token and these headers too.
    async fn get_with(&self, path: &str, more: &[(&str, &str)]) -> Response {
        let auth = format!("Bearer {TOKEN}");
        let mut headers = vec![("authorization", auth.as_str())];
        headers.extend_from_slice(more);
        http::send(self.addr, "GET", path, &headers, "").await
    }
}

fn overrides(file: &Path) -> Overrides {
    Overrides {
        config: Some(file.to_owned()),
        ..Overrides::default()
    }
}

/// A configuration on the shared memcached, in a namespace of its own
/// unless given one.
fn on_memcached(namespace: &str, rest: &str) -> String {
    format!(
        "[memcached]\nservers = [\"{}\"]\nnamespace = \"{namespace}\"\ntimeout_ms = 2000\n\
         [server]\napi_tokens = [\"{TOKEN}\"]\n{rest}",
        common::shared_memcached().addr()
    )
}

fn check(key: &str, policy: &str) -> serde_json::Value {
    serde_json::json!({ "key": key, "policy": policy })
}
