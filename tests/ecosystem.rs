//! What teams adopt slidegate through, checked against the real thing:
//! the axum example running, the Docker compose file, and the book's
//! configuration table (docs/src/guide/configuration.md). (`/metrics`, the dashboard and shadow mode:
//! tests/served.rs.)

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::http;
use common::process::{self, Daemon};
use common::wait::{PATIENCE, until};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// `examples/axum_middleware.rs`, built by `cargo test`, run for real on
/// the shared memcached.
#[tokio::test]
async fn the_axum_example_limits_by_api_key() {
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/axum_middleware");
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test` builds the examples (or: cargo build --example axum_middleware)",
        binary.display()
    );
    let dir = process::temp_dir("slidegate-axum");
    let mut command = Command::new(&binary);
    command
        .arg(common::shared_memcached().addr())
        .env("SLIDEGATE_EXAMPLE_LISTEN", "127.0.0.1:0")
        .env("SLIDEGATE_EXAMPLE_NAMESPACE", common::unique_namespace());
    let daemon = Daemon::start("axum example", command, &dir.join("axum.log"));
    let addr: SocketAddr = until("the example's address in its log", PATIENCE, || {
        let address = daemon.log().lines().find_map(|line| {
            line.strip_prefix("listening on http://")?
                .trim()
                .parse()
                .ok()
        });
        std::future::ready(address)
    })
    .await;
    let hello = |key: &'static str| async move {
        http::send(addr, "GET", "/hello", &[("x-api-key", key)], Vec::new()).await
    };
    for remaining in [2, 1, 0] {
        let response = hello("k1").await;
        assert_eq!((response.status, response.body.as_str()), (200, "hello\n"));
        assert_eq!(
            response.header("ratelimit-policy"),
            Some("\"hello\";q=3;w=60")
        );
        let state = response.header("ratelimit").unwrap_or_default();
        assert!(
            state.starts_with(&format!("\"hello\";r={remaining};")),
            "{state}"
        );
    }
    let refused = hello("k1").await;
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    assert_eq!(hello("k2").await.status, 200, "another key, its own limit");
    let by_address = http::get_from("127.0.0.5".parse().unwrap(), addr, "/hello", &[]).await;
    assert_eq!(by_address.status, 200);
    assert!(
        by_address.header("ratelimit").is_some(),
        "no key: limited by address"
    );
}

#[test]
fn the_compose_file_names_only_what_exists() {
    let path = repo("docker/compose.yaml");
    let compose: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read("docker/compose.yaml")).expect("the compose file parses");
    let dir = path.parent().unwrap();
    let services = compose["services"].as_mapping().expect("services");
    let names: BTreeSet<&str> = services.keys().filter_map(|key| key.as_str()).collect();
    for wanted in ["memcached", "slidegate-1", "slidegate-2", "nginx"] {
        assert!(names.contains(wanted), "service {wanted}");
    }
    let dockerfile = read("docker/Dockerfile");
    for (name, service) in services {
        let name = name.as_str().unwrap();
        for dependency in service["depends_on"].as_sequence().into_iter().flatten() {
            let dependency = dependency.as_str().unwrap();
            assert!(names.contains(dependency), "{name} depends on {dependency}");
        }
        if let Some(build) = service.get("build") {
            let context = dir.join(build["context"].as_str().unwrap());
            assert!(context.is_dir(), "{name}: build context");
            let file = context.join(build["dockerfile"].as_str().unwrap());
            assert!(file.is_file(), "{name}: {}", file.display());
        }
        for volume in service["volumes"].as_sequence().into_iter().flatten() {
            let host = volume.as_str().unwrap().split(':').next().unwrap();
            assert!(dir.join(host).exists(), "{name}: volume {host}");
        }
        // Every published port is one the service listens on.
        let text = serde_yaml_ng::to_string(service).unwrap();
        for port in service["ports"].as_sequence().into_iter().flatten() {
            let container = port.as_str().unwrap().rsplit(':').next().unwrap();
            let listens = text.contains(&format!(":{container}"))
                || text.contains(&format!("listen {container}"))
                || (service.get("build").is_some()
                    && dockerfile.contains(&format!("EXPOSE {container}")));
            assert!(
                listens,
                "{name} publishes {container} but does not listen on it"
            );
        }
        // Every slidegate instance reaches memcached by a service name.
        if let Some(servers) = service["environment"]["SLIDEGATE_MEMCACHED"].as_str() {
            let host = servers.split(':').next().unwrap();
            assert!(names.contains(host), "{name}: memcached at {host}");
        }
    }
    // nginx runs the shipped file: each address its command rewrites is
    // one that file has.
    let nginx = serde_yaml_ng::to_string(&services["nginx"]["command"]).unwrap();
    let shipped = read("examples/proxies/nginx.conf");
    let mut rewrites = 0;
    for pattern in nginx.split("'s/").skip(1) {
        let from = pattern.split('/').next().unwrap();
        assert!(shipped.contains(from), "nginx.conf has no {from:?}");
        rewrites += 1;
    }
    assert_eq!(rewrites, 3, "{nginx}");
    // Small, non-root, with a health check on /healthz.
    assert!(dockerfile.contains("USER "), "non-root user");
    assert!(dockerfile.contains("HEALTHCHECK") && dockerfile.contains("/healthz"));
    assert!(dockerfile.matches("FROM ").count() >= 2, "multi-stage");
}

/// Every key the configuration file accepts, read from the code itself:
/// each section refuses an unknown key by listing the ones it knows.
fn accepted_keys() -> BTreeSet<String> {
    use slidegate::config::{Config, Overrides};
    let expected = |toml: &str| -> Vec<String> {
        let error = Config::resolve(Some((Path::new("k.toml"), toml)), &Overrides::default())
            .expect_err("an unknown key is refused")
            .to_string();
        // `expected one of `a`, `b`` or `expected `a` or `b``.
        let list = error
            .split_once("unknown field")
            .and_then(|(_, rest)| rest.split_once("expected"))
            .unwrap_or_else(|| panic!("{toml}: {error}"))
            .1;
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut keys = BTreeSet::new();
    for top in expected("not_a_key = 1") {
        let inner = if top == "policies" {
            expected("[policies.x]\nnot_a_key = 1")
                .into_iter()
                .chain(
                    expected("[policies.x]\nlimits = [{ not_a_key = 1 }]")
                        .into_iter()
                        .map(|key| format!("limits[].{key}")),
                )
                .map(|key| format!("policies.NAME.{key}"))
                .collect()
        } else {
            let error = Config::resolve(
                Some((Path::new("k.toml"), &format!("[{top}]\nnot_a_key = 1"))),
                &Overrides::default(),
            )
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
            if error.contains("unknown field") {
                expected(&format!("[{top}]\nnot_a_key = 1"))
                    .into_iter()
                    .map(|key| format!("{top}.{key}"))
                    .collect()
            } else {
                vec![top.clone()]
            }
        };
        keys.extend(inner);
    }
    keys
}

#[test]
fn the_configuration_reference_lists_every_key_the_file_accepts() {
    // The keys as serde's own refusals name them, beside the page the
    // table of keys generates: the two ways of knowing the keys agree.
    let page = read("docs/src/reference/configuration.md");
    let table: BTreeSet<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix("| [`"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect();
    let keys = accepted_keys();
    assert!(keys.contains("memcached.servers") && keys.contains("policies.NAME.shadow"));
    let missing: Vec<&String> = keys.iter().filter(|key| !table.contains(*key)).collect();
    assert!(
        missing.is_empty(),
        "the configuration reference's table lacks {missing:?} (it has {table:?})"
    );
}

/// The tower layer's own promises, outside any framework: a request whose
/// key function gives `None` is not limited, a key over 1024 bytes is a
/// 400, and under failure mode `deny` an unreachable store is a 503; none
/// of them reaches the service except the unlimited ones.
mod tower_layer {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use axum::http::{Request, Response};
    use slidegate::store::Store;
    use slidegate::tower::{Layer, RateLimitLayer, Service};
    use slidegate::{FailureMode, Limit, Limiter, MemcachedStore, MemoryStore, Policy};

    /// The service behind the layer: answers "hello" and counts its calls.
    #[derive(Clone, Default)]
    struct Hello(Arc<AtomicUsize>);

    impl Service<Request<()>> for Hello {
        type Response = Response<String>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<String>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(Response::new("hello".to_owned())))
        }
    }

    /// The key is the `x-key` header; without one, no limit.
    fn by_header(request: &Request<()>) -> Option<String> {
        request
            .headers()
            .get("x-key")?
            .to_str()
            .ok()
            .map(str::to_owned)
    }

    fn one_a_minute() -> Policy {
        Policy::new("api", vec![Limit::new(1, 60_000, 1).unwrap()]).unwrap()
    }

    /// A limited `Hello`, and its call counter.
    fn limited<S: Store>(
        limiter: Limiter<S>,
    ) -> (
        impl Service<Request<()>, Response = Response<String>, Error = Infallible>,
        Arc<AtomicUsize>,
    ) {
        let hello = Hello::default();
        let calls = hello.0.clone();
        let layer = RateLimitLayer::new(Arc::new(limiter), one_a_minute(), by_header).unwrap();
        (layer.layer(hello), calls)
    }

    async fn status_of(
        service: &mut impl Service<Request<()>, Response = Response<String>, Error = Infallible>,
        key: Option<&str>,
    ) -> u16 {
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        let mut request = Request::builder();
        if let Some(key) = key {
            request = request.header("x-key", key);
        }
        let response = service.call(request.body(()).unwrap()).await.unwrap();
        response.status().as_u16()
    }

    /// A policy that needs more counters than the limiter's
    /// `max_counters` would be refused on every request (400): the layer is
    /// refused when it is built instead, naming why.
    #[test]
    fn a_policy_over_the_limiters_counter_bound_is_refused_when_the_layer_is_built() {
        let limiter = Arc::new(Limiter::builder(MemoryStore::new()).max_counters(4).build());
        let wide = Policy::new("wide", vec![Limit::new(1, 60_000, 8).unwrap()]).unwrap();
        let error = RateLimitLayer::new(limiter.clone(), wide, by_header)
            .err()
            .expect("refused when built");
        assert!(error.to_string().contains("max_counters = 4"), "{error}");
        assert!(RateLimitLayer::new(limiter, one_a_minute(), by_header).is_ok());
    }

    #[tokio::test]
    async fn no_key_is_no_limit_and_a_key_over_1024_bytes_is_a_400() {
        let (mut service, calls) =
            limited(super::common::patient_limiter(MemoryStore::new()).build());
        for _ in 0..5 {
            assert_eq!(status_of(&mut service, None).await, 200);
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            5,
            "unlimited requests reach the service"
        );
        assert_eq!(status_of(&mut service, Some("k")).await, 200);
        assert_eq!(status_of(&mut service, Some("k")).await, 429);
        let longest = "x".repeat(1024);
        assert_eq!(status_of(&mut service, Some(&longest)).await, 200);
        let too_long = "x".repeat(1025);
        assert_eq!(status_of(&mut service, Some(&too_long)).await, 400);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            7,
            "refused requests never reach it"
        );
    }

    #[tokio::test]
    async fn under_deny_an_unreachable_store_is_a_503() {
        // A loopback port nobody listens on: every dial is refused.
        let nowhere = super::common::process::free_addr().to_string();
        let store = MemcachedStore::connect(&super::common::memcached_options(vec![nowhere]))
            .await
            .unwrap();
        let limiter = super::common::patient_limiter(store)
            .failure_mode(FailureMode::Deny)
            .build();
        let (mut service, calls) = limited(limiter);
        assert_eq!(status_of(&mut service, Some("k")).await, 503);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert_eq!(status_of(&mut service, None).await, 200, "no key, no store");
    }
}

/// "With `default-features = false` the crate has no HTTP dependencies",
/// as the book's library chapter says, with or without the `memcached`
/// feature: checked in the dependency tree cargo resolves for it.
#[test]
fn the_library_without_default_features_has_no_http_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    for features in ["", "memcached"] {
        let output = Command::new(&cargo)
            .args([
                "tree",
                "--offline",
                "--no-default-features",
                "--features",
                features,
            ])
            .args(["-e", "normal", "--prefix", "none", "--format", "{p}"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let tree = String::from_utf8_lossy(&output.stdout);
        let crates: BTreeSet<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        assert!(crates.contains("tokio"), "the tree was read: {crates:?}");
        let http: Vec<&&str> = crates
            .iter()
            .filter(|name| {
                [
                    "hyper",
                    "hyper-util",
                    "http",
                    "http-body",
                    "h2",
                    "tonic",
                    "axum",
                    "tower",
                ]
                .contains(name)
            })
            .collect();
        assert!(http.is_empty(), "features {features:?}: {http:?}");
    }
}

/// The image's promises (the book's Kubernetes chapter, on Docker): it runs as a user
/// of its own, not root, and its HEALTHCHECK, run as written against the
/// binary, passes while the service answers and fails once it is gone.
#[test]
fn the_image_runs_as_a_user_and_its_healthcheck_asks_the_service() {
    let dockerfile = read("docker/Dockerfile");
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    let user = last_stage
        .lines()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("the final stage names its USER");
    assert!(!["root", "0"].contains(&user.trim()), "USER {user}");

    // The HEALTHCHECK's command, its JSON form read as JSON.
    let healthcheck = last_stage
        .split("HEALTHCHECK")
        .nth(1)
        .expect("a HEALTHCHECK");
    let command = healthcheck
        .split("CMD ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .expect("its CMD");
    let argv: Vec<String> = serde_json::from_str(command).expect("CMD in JSON form");
    let service =
        common::service::Slidegate::start("healthcheck", common::service::Slidegate::command());
    let port = service.addr.port().to_string();
    let run = |argv: &[String]| {
        let argv: Vec<String> = argv
            .iter()
            .map(|arg| arg.replace("127.0.0.1/8080", &format!("127.0.0.1/{port}")))
            .collect();
        Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .expect("the HEALTHCHECK's command runs")
            .success()
    };
    assert!(run(&argv), "healthy while the service answers");
    drop(service);
    assert!(!run(&argv), "unhealthy once it is gone");
}

/// The image's runtime stage carries the CA certificates (installed alone,
/// apt's lists removed), so TLS with the system's roots works in it.
#[test]
fn the_image_carries_ca_certificates() {
    let dockerfile = read("docker/Dockerfile");
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    // The RUN instruction, its continuation lines joined.
    let install = last_stage
        .replace("\\\n", " ")
        .lines()
        .find(|line| line.starts_with("RUN ") && line.contains("apt-get install"))
        .map(str::to_owned)
        .expect("the runtime stage installs packages");
    for part in [
        "apt-get update",
        "--no-install-recommends",
        "ca-certificates",
        "rm -rf /var/lib/apt/lists/*",
    ] {
        assert!(install.contains(part), "{part:?} not in {install:?}");
    }
    assert!(
        dockerfile.contains("Read-only root filesystem"),
        "the Dockerfile says the image runs with a read-only root filesystem"
    );
}

/// What the certificates are for: the binary finds the system's roots
/// (rustls-native-certs) where `/etc/ssl/certs` has them, as in the image.
/// `--check` builds the TLS client a start would; a start with TLS and no
/// CA file gets past its TLS set-up and listens. Without roots (the slim
/// base before this change, here an empty certificate directory) the
/// check fails naming the cure.
#[test]
fn tls_with_the_system_roots_starts_where_certificates_exist() {
    if !Path::new("/etc/ssl/certs").is_dir() {
        eprintln!("SKIPPED: no /etc/ssl/certs on this machine (install ca-certificates)");
        return;
    }
    let memcached = process::free_addr().to_string();
    let tls_args = ["--memcached", memcached.as_str(), "--memcached-tls"];
    let mut check = common::service::Slidegate::command();
    check.arg("--check").args(tls_args);
    let output = process::output_within(check, PATIENCE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("TLS (system roots)"), "{stdout}");

    let empty = process::temp_dir("no-roots");
    let mut without_roots = common::service::Slidegate::command();
    without_roots
        .arg("--check")
        .args(tls_args)
        .env("SSL_CERT_FILE", empty.join("none.pem"))
        .env("SSL_CERT_DIR", &empty);
    let output = process::output_within(without_roots, PATIENCE);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no system CA certificates found"),
        "{stderr}"
    );

    // A real start on the system's roots: it listens (the store, absent,
    // is the failure mode's to decide).
    let mut start = common::service::Slidegate::command();
    start.args(tls_args);
    let service = common::service::Slidegate::start("system-roots", start);
    drop(service);
}
