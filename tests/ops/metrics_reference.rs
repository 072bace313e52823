//! The metrics reference, `docs/src/reference/metrics.md`: written from the
//! tables every part of the server registers its families from, held to
//! them here, and the tables held to what `/metrics` really serves, under
//! every condition that adds families (Memcached, the shared clock, RLS
//! rules, RLQS; the embedded store).
//!
//! After a change to a family, regenerate the page with
//! `SLIDEGATE_BLESS=1 cargo test --test ops metrics_reference`.

#![cfg(all(feature = "memcached", feature = "grpc"))]

use std::collections::BTreeMap;
use std::path::Path;

use slidegate::metrics::catalogue::Described;
use slidegate::server::build::{metric_components, metrics_reference};

use super::{Service, on_memcached};
use crate::common::{self, metrics};

const PAGE: &str = "docs/src/reference/metrics.md";
const REGENERATE: &str = "SLIDEGATE_BLESS=1 cargo test --test ops metrics_reference";

#[test]
fn the_metrics_reference_is_what_the_code_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let generated = metrics_reference();
    if std::env::var_os("SLIDEGATE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        println!("wrote {PAGE}");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let differs = committed
        .lines()
        .zip(generated.lines())
        .enumerate()
        .find(|(_, (was, now))| was != now)
        .map_or_else(
            || {
                format!(
                    "one is longer: {} lines committed, {} generated",
                    committed.lines().count(),
                    generated.lines().count()
                )
            },
            |(at, (was, now))| format!("line {}:\n  committed: {was}\n  generated: {now}", at + 1),
        );
    panic!(
        "{PAGE} is not what the code generates ({differs}).\n\
         The families changed: regenerate the page with\n    {REGENERATE}\n\
         and commit it."
    );
}

/// What a scraped page declares: each family's type and help.
fn declared(page: &str) -> BTreeMap<String, (String, String)> {
    let mut families: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in page.lines() {
        let mut words = line.splitn(4, ' ');
        let (hash, keyword, name, rest) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
        );
        if hash != "#" || name.is_empty() {
            continue;
        }
        let family = families.entry(name.to_owned()).or_default();
        match keyword {
            "TYPE" => family.0 = rest.to_owned(),
            "HELP" => family.1 = rest.to_owned(),
            _ => {}
        }
    }
    families
}

/// The label names of `family`'s samples on `page`.
fn labels_of(page: &str, family: &Described) -> Vec<Vec<String>> {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, _) = line.rsplit_once(' ')?;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let suffix = name.strip_prefix(family.name)?;
            if !["", "_total", "_bucket", "_sum", "_count"].contains(&suffix) {
                return None;
            }
            Some(
                labels
                    .trim_end_matches('}')
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .filter_map(|pair| pair.split_once('=').map(|(label, _)| label.to_owned()))
                    .filter(|label| label != "le")
                    .collect(),
            )
        })
        .collect()
}

/// Every family `/metrics` serves is in the tables with the type, help and
/// labels it is served with, and every family in the tables is served
/// under the condition the reference names: here a service on Memcached
/// with the shared clock, RLS rules and RLQS, then one on the embedded
/// store. (Only the cluster config's version needs Auto Discovery; its
/// family is encoded by the same code as the nodes' count beside it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_are_what_metrics_serves_under_every_condition() {
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/envoyproxy-ratelimit/example.yaml");
    let everything = on_memcached(
        &common::unique_namespace(),
        &format!(
            "[clock]\nsource = \"memcached\"\n\
             [rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"{}\"\n\
             [rlqs]\nlisten = \"127.0.0.1:0\"\n\
             [policies.api]\nlimits = [{{ limit = 1, window = \"1h\" }}]\n",
            rules.display()
        ),
    );
    let embedded = "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n";
    let mut pages = Vec::new();
    for text in [everything.as_str(), embedded] {
        let service = Service::start(text).await;
        // An answer of each usual kind, so that the labelled families have
        // samples to read labels from.
        for _ in 0..3 {
            service
                .post(
                    "/v1/check",
                    serde_json::json!({"key": "k", "policy": "api"}),
                )
                .await;
        }
        pages.push(metrics::scrape(service.addr).await.page);
    }

    let described: Vec<Described> = metric_components()
        .iter()
        .flat_map(|component| component.families.iter().copied())
        .collect();
    let mut served = BTreeMap::new();
    for page in &pages {
        served.extend(declared(page));
    }
    for (name, (kind, help)) in &served {
        let family = described
            .iter()
            .find(|family| family.name == name)
            .unwrap_or_else(|| {
                panic!("{name} is served but in no table of the reference ({REGENERATE})")
            });
        assert_eq!(kind, family.kind.name(), "the type of {name}");
        assert_eq!(help, family.help, "the help of {name}");
        for page in &pages {
            for labels in labels_of(page, family) {
                let names: Vec<&str> = family.labels.iter().map(|label| label.name).collect();
                assert_eq!(labels, names, "the labels of {name}");
            }
        }
    }
    let not_served: Vec<&str> = described
        .iter()
        .map(|family| family.name)
        .filter(|name| !served.contains_key(*name))
        .collect();
    assert_eq!(
        not_served,
        ["slidegate_memcached_config_version"],
        "families in the reference that no condition served"
    );
}
