//! The OpenAPI document: served as it is in docs/, valid by a real
//! validator, with the live answers for every documented status checked
//! against it, and a client generated from it used as generated.

use std::path::Path;
use std::process::Command;

use super::{Service, TOKEN, check, on_call, on_memcached};
use crate::common::http::{self, Response};
use crate::common::{self, tools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_validates_and_so_do_live_answers() {
    let document = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json");
    let text = on_memcached(
        &common::unique_namespace(),
        "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n",
    );
    let service = Service::start(&text).await;

    let served = http::get(service.addr, "/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, std::fs::read_to_string(&document).unwrap());

    let mut answers = Vec::new();
    let mut keep = |method: &str, path: &str, template: &str, answer: Response| {
        answers.push(serde_json::json!({
            "method": method,
            "path": path,
            "template": template,
            "status": answer.status,
            "content_type": answer.header("content-type").unwrap_or_default().split(';').next().unwrap_or_default(),
            "body": answer.body,
        }));
    };
    let statuses = |answers: &Vec<serde_json::Value>| -> Vec<(String, u64)> {
        answers
            .iter()
            .map(|a| {
                (
                    a["template"].as_str().unwrap().to_owned(),
                    a["status"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "nope")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        http::post(service.addr, "/v1/check", "{}").await,
    );
    keep(
        "POST",
        "/v1/peek",
        "/v1/peek",
        service.post("/v1/peek", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/report",
        "/v1/report",
        service.post("/v1/report", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/reset",
        "/v1/reset",
        service.post("/v1/reset", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/reset",
        "/v1/reset",
        service.post("/v1/reset", check("k", "nope")).await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        service.get("/v1/limited").await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        service.get("/v1/limited?top=0").await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        http::get(service.addr, "/v1/limited").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=api").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=api").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=nope").await,
    );
    keep(
        "GET",
        "/v1/auth/api",
        "/v1/auth/{policy}",
        service.get("/v1/auth/api/x").await,
    );
    keep(
        "GET",
        "/v1/status",
        "/v1/status",
        service.get("/v1/status").await,
    );
    // With the store down: the failure mode in words and the last error.
    let (mut memcached, store_down) = on_call::on_own_memcached("deny").await;
    on_call::status_with_the_store_down(&mut memcached, &store_down).await;
    keep(
        "GET",
        "/v1/status",
        "/v1/status",
        store_down.get("/v1/status").await,
    );
    keep(
        "GET",
        "/healthz",
        "/healthz",
        http::get(service.addr, "/healthz").await,
    );
    keep(
        "GET",
        "/readyz",
        "/readyz",
        http::get(service.addr, "/readyz").await,
    );
    // A refusal with any `deny_status`, the service's own statuses
    // included: its body is the decision, which the document must allow.
    let bearer = format!("Bearer {TOKEN}");
    for deny in [503, 400, 401, 403] {
        let key = format!("deny-{deny}");
        let path = format!("/v1/auth?policy=api&deny_status={deny}");
        let headers = [
            ("authorization", bearer.as_str()),
            ("x-ratelimit-key", key.as_str()),
        ];
        for _ in 0..2 {
            let answer = http::send(service.addr, "GET", &path, &headers, "").await;
            keep("GET", &path, "/v1/auth", answer);
        }
    }
    // A method a route does not take (405, with `Allow`), on each route.
    for (method, path) in [
        ("GET", "/v1/check"),
        ("GET", "/v1/peek"),
        ("GET", "/v1/report"),
        ("GET", "/v1/reset"),
        ("POST", "/v1/limited"),
        ("POST", "/v1/status"),
        ("POST", "/healthz"),
        ("POST", "/readyz"),
        ("POST", "/metrics"),
        ("POST", "/openapi.json"),
        ("POST", "/"),
    ] {
        let answer = http::send(
            service.addr,
            method,
            path,
            &[("authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(answer.status, 405, "{method} {path}");
        keep(method, path, path, answer);
    }
    // A body that never comes: 408 when the read gives up.
    let mut stream = tokio::net::TcpStream::connect(service.addr).await.unwrap();
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nhost: slidegate\r\nauthorization: {bearer}\r\n\
         connection: close\r\ncontent-length: 40\r\n\r\n{{\"key\""
    );
    let raw = http::raw_exchange(
        &mut stream,
        head.as_bytes(),
        std::time::Duration::from_secs(30),
    )
    .await;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status: u64 = head[9..12].parse().unwrap();
    answers.push(serde_json::json!({
        "method": "POST",
        "path": "/v1/check",
        "template": "/v1/check",
        "status": status,
        "content_type": if head.to_ascii_lowercase().contains("content-type: application/json") { "application/json" } else { "" },
        "body": body,
    }));
    // Request bodies the document and the server must judge alike: what
    // the document refuses the server answers 400, and what it accepts
    // the server does not refuse as malformed. (A key's bound is in UTF-8
    // bytes, which no JSON Schema keyword counts: the document says so in
    // words, and it is not among these.)
    for (path, body) in [
        (
            "/v1/reset",
            serde_json::json!({"key": "r", "policy": "api", "cost": 5}),
        ),
        (
            "/v1/reset",
            serde_json::json!({"key": "r", "policy": "api", "cost": 0}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c1", "policy": "api", "cost": 1_000_000_000_000u64}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c2", "policy": "api", "cost": 1_000_000_000_001u64}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c3", "limits": [{"limit": 1_000_000_000_001u64, "window": "1s"}]}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c4", "limits": [{"limit": 1, "window_ms": 365u64 * 86_400_000}]}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c5", "limits": [{"limit": 1, "window_ms": 366u64 * 86_400_000}]}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c6", "policy": "api", "cost": null}),
        ),
        (
            "/v1/check",
            serde_json::json!({"key": "c7", "policy": null, "limits": [{"limit": 1, "window": "1s"}]}),
        ),
        ("/v1/check", serde_json::json!({"key": "", "policy": "api"})),
        (
            "/v1/check",
            serde_json::json!({"key": "c8", "policy": "api", "extra": 1}),
        ),
    ] {
        let answer = service.post(path, body.clone()).await;
        let mut kept = serde_json::json!({
            "method": "POST",
            "path": path,
            "template": path,
            "status": answer.status,
            "content_type": answer.header("content-type").unwrap_or_default().split(';').next().unwrap_or_default(),
            "body": answer.body,
        });
        kept["request"] = body;
        answers.push(kept);
    }
    let seen = statuses(&answers);
    for expected in [
        ("/v1/check", 200),
        ("/v1/check", 429),
        ("/v1/check", 400),
        ("/v1/check", 401),
        ("/v1/reset", 200),
        ("/v1/reset", 400),
        ("/v1/limited", 200),
        ("/v1/limited", 400),
        ("/v1/limited", 401),
        ("/v1/auth", 200),
        ("/v1/auth", 429),
        ("/v1/auth", 400),
        ("/v1/auth", 503),
        ("/v1/auth", 403),
        ("/v1/check", 405),
        ("/v1/check", 408),
    ] {
        assert!(
            seen.contains(&(expected.0.to_owned(), expected.1)),
            "{expected:?} not among {seen:?}"
        );
    }

    let found = tools::python_with(
        &[
            "openapi-spec-validator==0.7.1",
            "jsonschema==4.23.0",
            "openapi-python-client==0.29.1",
        ],
        "openapi_spec_validator, jsonschema, openapi_python_client",
    );
    let Some(python) = tools::require(
        "the_openapi_document_validates_and_so_do_live_answers",
        "python openapi-spec-validator, jsonschema, openapi-python-client (pip)",
        found,
    ) else {
        return;
    };
    let answers_file = common::process::temp_dir("slidegate-openapi").join("answers.json");
    std::fs::write(&answers_file, serde_json::to_string(&answers).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ops/openapi_check.py");
    let output = Command::new(&python)
        .arg(script)
        .arg(&document)
        .arg(&answers_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{report}");
    assert!(
        report.contains("the document is valid OpenAPI 3.1.0"),
        "{report}"
    );

    // A client generated from the document, used as generated.
    let generated = common::process::temp_dir("slidegate-client");
    let generator = python.with_file_name("openapi-python-client");
    let made = Command::new(generator)
        .args(["generate", "--meta", "none", "--path"])
        .arg(&document)
        .current_dir(&generated)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}{}",
        String::from_utf8_lossy(&made.stdout),
        String::from_utf8_lossy(&made.stderr)
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ops/generated_client.py");
    let used = Command::new(&python)
        .arg(script)
        .arg(&generated)
        .arg(format!("http://{}", service.addr))
        .arg(TOKEN)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&used.stdout),
        String::from_utf8_lossy(&used.stderr)
    );
    println!("{said}");
    assert!(used.status.success(), "{said}");
}
