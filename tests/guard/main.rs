//! What bounds and guards the service, on the real binary: the API token,
//! the connection cap, the embedded store's capacity. No timed assertions:
//! every wait is bounded, and only bounds a hang.
//!
//! This file starts the binary and makes the calls the tests share; the
//! tests are in the modules below, by what guards the service.

#[path = "../common/mod.rs"]
mod common;

mod connection_cap;
mod stores;
mod tokens;

use std::path::Path;
use std::process::Command;

use common::http;
use common::metrics::Exposition;
use common::process;
use common::service::Slidegate;

const TOKEN: &str = "s3cret-token-0123456789abcdef";
const OTHER_TOKEN: &str = "other-token-0123456789abcdef";
const CHECK: &str = r#"{"key": "client-42", "policy": "api"}"#;
const POLICY: &str = "[policies.api]\nlimits = [{ limit = 1000, window = \"1m\" }]\n";

/// The binary on `config` (its `listen` added), logging everything it can
/// (to show that no token is in it); `configure` adds flags, variables or
/// files in its directory.
fn start(name: &str, config: &str, configure: impl FnOnce(&mut Command, &Path)) -> Slidegate {
    let dir = Slidegate::dir(&format!("guard-{name}"));
    let addr = process::free_addr();
    let file = dir.join("slidegate.toml");
    std::fs::write(&file, format!("listen = \"{addr}\"\n{config}")).unwrap();
    let mut command = Slidegate::command();
    command.arg("--config").arg(&file).env("RUST_LOG", "trace");
    configure(&mut command, &dir);
    Slidegate::start_in(dir, command, addr, &[])
}

/// The value of a series in a `/metrics` page, parsed.
fn sample(metrics: &str, series: &str) -> u64 {
    Exposition::parse(metrics).value(series) as u64
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn call(service: &Slidegate, method: &str, path: &str, auth: Option<&str>) -> http::Response {
    let auth = auth.map(bearer);
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    let body = if method == "POST" { CHECK } else { "" };
    http::send(service.addr, method, path, &headers, body.to_owned()).await
}
