//! The OpenAPI document: served as it is in docs/, valid by a real
//! validator, with the live answers for every documented status checked
//! against it, and a client generated from it used as generated.

use std::path::Path;
use std::process::Command;

use super::{Service, TOKEN, check, on_memcached};
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
