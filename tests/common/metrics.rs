//! `/metrics` read as what it is: an OpenMetrics exposition, parsed and
//! checked line by line, then read series by series. Never by substring:
//! `"... 1"` also matches `10`, and a name matches its longer cousins.

use std::collections::HashMap;
use std::net::SocketAddr;

/// One scraped page: every series (`name{labels}` exactly as served) and
/// its value.
pub struct Exposition {
    pub page: String,
    series: HashMap<String, f64>,
}

impl Exposition {
    /// Parse `page`, panicking at the first line that is not well-formed
    /// OpenMetrics: every sample belongs to a family declared by `# TYPE`,
    /// names and labels are well formed, values are numbers, and `# EOF`
    /// ends it.
    pub fn parse(page: &str) -> Exposition {
        let mut families: HashMap<String, String> = HashMap::new();
        let mut series = HashMap::new();
        let lines: Vec<&str> = page.lines().collect();
        assert_eq!(lines.last(), Some(&"# EOF"), "ends with # EOF:\n{page}");
        for line in &lines[..lines.len() - 1] {
            if let Some(rest) = line.strip_prefix("# ") {
                declare(rest, line, &mut families);
                continue;
            }
            let (key, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                other => other
                    .parse()
                    .unwrap_or_else(|_| panic!("value of {line:?}")),
            };
            let name = key.split('{').next().unwrap_or_default();
            assert!(name_ok(name), "bad sample name in {line:?}");
            check_labels(&key[name.len()..], line);
            let declared = [
                "_total", "_bucket", "_count", "_sum", "_created", "_info", "",
            ]
            .iter()
            .any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|family| !family.is_empty() && families.contains_key(family))
            });
            assert!(declared, "{line:?} has no # TYPE");
            assert!(
                series.insert(key.to_owned(), value).is_none(),
                "{key} served twice"
            );
        }
        Exposition {
            page: page.to_owned(),
            series,
        }
    }

    /// The value of one series, e.g. `slidegate_store_calls_total` or
    /// `slidegate_decisions_total{policy="api",outcome="allowed"}`.
    pub fn get(&self, series: &str) -> Option<f64> {
        self.series.get(series).copied()
    }

    /// The value of a series that must be served.
    pub fn value(&self, series: &str) -> f64 {
        self.get(series)
            .unwrap_or_else(|| panic!("no {series} in\n{}", self.page))
    }

    /// Every series served, with its value.
    pub fn series(&self) -> impl Iterator<Item = (&str, f64)> {
        self.series
            .iter()
            .map(|(key, value)| (key.as_str(), *value))
    }
}

/// `GET /metrics` on `addr`: a 200 of OpenMetrics text, parsed.
pub async fn scrape(addr: SocketAddr) -> Exposition {
    let page = super::http::get(addr, "/metrics").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.header("content-type")
            .unwrap_or_default()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        page.headers
    );
    Exposition::parse(&page.body)
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        })
}

/// A `# TYPE`, `# HELP` or `# UNIT` line.
fn declare(rest: &str, line: &str, families: &mut HashMap<String, String>) {
    let mut words = rest.splitn(3, ' ');
    let (keyword, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    assert!(name_ok(name), "bad family name in {line:?}");
    match keyword {
        "TYPE" => {
            let kind = words.next().unwrap_or("");
            assert!(
                ["counter", "gauge", "histogram", "info", "unknown"].contains(&kind),
                "{line:?}"
            );
            families.insert(name.to_owned(), kind.to_owned());
        }
        "HELP" | "UNIT" => {}
        other => panic!("unknown comment {other:?} in {line:?}"),
    }
}

/// `{a="x",b="y"}`, or nothing.
fn check_labels(labels: &str, line: &str) {
    if labels.is_empty() {
        return;
    }
    let inner = labels
        .strip_prefix('{')
        .and_then(|l| l.strip_suffix('}'))
        .unwrap_or_else(|| panic!("labels of {line:?}"));
    for pair in inner.split("\",").filter(|p| !p.is_empty()) {
        let (label, quoted) = pair.split_once("=\"").unwrap_or_else(|| panic!("{line:?}"));
        assert!(name_ok(label), "label {label:?} in {line:?}");
        assert!(!quoted.trim_end_matches('"').contains('\n'));
    }
}
