use super::*;
use crate::config::Overrides;

/// The configuration in `text`, loaded as a start loads it.
fn config(name: &str, text: &str) -> Config {
    let dir = std::env::temp_dir().join(format!("slidegate-build-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("slidegate.toml");
    std::fs::write(&file, text).unwrap();
    let overrides = Overrides {
        config: Some(file),
        ..Overrides::default()
    };
    Config::load(&overrides).unwrap()
}

/// How many times `/metrics` declares `family`.
fn declared(app: &App, family: &str) -> usize {
    let text = metrics::exposition(app).unwrap();
    let line = format!("# TYPE {family} ");
    text.lines().filter(|l| l.starts_with(&line)).count()
}

/// The rules of `rls.config` are loaded by the build, served and counted;
/// rules given afterwards replace them, still counted once.
#[tokio::test]
async fn the_build_loads_the_rls_rules_and_counts_them_once() {
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/envoyproxy-ratelimit");
    let text = format!(
        "[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"{}\"\n",
        rules.join("example.yaml").display()
    );
    let app = build(&config("rules", &text)).await.unwrap();
    let domains: Vec<String> = app
        .envoy
        .rls()
        .expect("the rules of rls.config")
        .rules()
        .domains()
        .map(str::to_owned)
        .collect();
    assert_eq!(domains, ["rl"]);
    assert_eq!(declared(&app, "slidegate_rls_hits"), 1);

    let again = crate::server::rls::Rls::load(&rules.join("config.yaml")).unwrap();
    let app = app.with_rls(again);
    assert_eq!(declared(&app, "slidegate_rls_hits"), 1);
    assert_eq!(declared(&app, "slidegate_rlqs_streams"), 1);
}

/// Without RLS rules no RLS family is served; a bad rules file stops the
/// build, naming the file.
#[tokio::test]
async fn without_rules_no_rls_family_and_a_bad_file_stops_the_build() {
    let app = build(&config("no-rules", "")).await.unwrap();
    assert!(app.envoy.rls().is_none());
    assert_eq!(declared(&app, "slidegate_rls_hits"), 0);
    assert_eq!(declared(&app, "slidegate_rlqs_streams"), 1);

    let dir = std::env::temp_dir().join(format!("slidegate-build-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "domain: [not a domain\n").unwrap();
    let text = format!(
        "[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"{}\"\n",
        bad.display()
    );
    match build(&config("bad-rules", &text)).await {
        Err(BuildError::Rules(message)) => assert!(message.contains("bad.yaml"), "{message}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a bad rules file was built"),
    }
}
