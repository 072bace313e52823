//! `slidegate --check`: everything a start loads (the configuration, the
//! RLS rule files, the TLS roots), checked the same way, and a one-screen
//! summary of what would run. Nothing is contacted and nothing bound, so
//! a configuration can be checked on a build machine or in CI before it is
//! deployed.

use std::fmt::Write as _;

use super::{Config, LogFormat, Overrides};

/// `slidegate --check`: the summary and 0 (the exit status), or the error
/// a start would stop with and 1; printed plainly, never with a backtrace, since it is
/// for a person or a CI log.
pub fn check_command(overrides: &Overrides, format: LogFormat) -> i32 {
    let checked = Config::load(overrides)
        .map_err(|error| error.to_string())
        .and_then(|config| check(&config));
    // In JSON the summary and the error are log events, so that a log
    // pipeline running the check reads only JSON.
    match (checked, format) {
        (Ok(summary), LogFormat::Text) => print!("{summary}"),
        (Ok(summary), LogFormat::Json) => tracing::info!(summary, "configuration OK"),
        (Err(error), LogFormat::Text) => {
            eprintln!("error: {error}");
            return 1;
        }
        (Err(error), LogFormat::Json) => {
            tracing::error!(error, "configuration refused");
            return 1;
        }
    }
    0
}

/// Load what a start would load beyond the configuration itself and
/// describe what would run; the error is the one a start would stop with.
pub fn check(config: &Config) -> Result<String, String> {
    let rules = rls_summary(config)?;
    check_tls(config)?;
    Ok(summary(config, &rules))
}

/// The RLS rules (`rls.config`), loaded and held to `limits.max_counters`
/// as at start: one line per domain with its rule count.
#[cfg(feature = "grpc")]
fn rls_summary(config: &Config) -> Result<Vec<String>, String> {
    let Some(path) = &config.rls_config else {
        return Ok(Vec::new());
    };
    let rules = crate::server::rls::RuleSet::load_within(path, config.max_counters)?;
    let mut domains: Vec<&str> = rules.domains().collect();
    domains.sort_unstable();
    domains.dedup();
    Ok(domains
        .into_iter()
        .map(|domain| {
            let count = rules
                .rules()
                .iter()
                .filter(|rule| rule.domain == domain)
                .count();
            format!("{domain}: {count} rule{}", plural(count))
        })
        .collect())
}

#[cfg(not(feature = "grpc"))]
fn rls_summary(_config: &Config) -> Result<Vec<String>, String> {
    Ok(Vec::new())
}

/// The TLS client the store would dial with, built: a CA file that does
/// not parse, or a system without roots, fails here as it fails a start.
#[cfg(feature = "memcached")]
fn check_tls(config: &Config) -> Result<(), String> {
    let Some(options) = config.memcached_options() else {
        return Ok(());
    };
    match &options.tls {
        Some(tls) => crate::store::memcached::check_tls(tls)
            .map_err(|error| format!("memcached TLS: {error}")),
        None => Ok(()),
    }
}

#[cfg(not(feature = "memcached"))]
fn check_tls(config: &Config) -> Result<(), String> {
    if config.servers.is_empty() && config.cluster.discovery.is_none() {
        Ok(())
    } else {
        Err("Memcached needs slidegate built with the `memcached` feature".to_owned())
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// What would run, for a person: faces, store, policies, RLS and RLQS.
fn summary(config: &Config, rls_domains: &[String]) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let mut line = |text: String| {
        let _ = writeln!(out, "{text}");
    };
    line("configuration OK; a start would run:".to_owned());
    line(format!("  HTTP API        {}", config.listen));
    if let Some(address) = config.rls_listen {
        line(format!("  Envoy RLS       {address}"));
    }
    if let Some(address) = config.rlqs.listen {
        line(format!("  Envoy RLQS      {address}"));
    }
    let tls = match &config.cluster.tls {
        Some(tls) => match &tls.ca_file {
            Some(path) => format!(", TLS (CA {})", path.display()),
            None => ", TLS (system roots)".to_owned(),
        },
        None => String::new(),
    };
    let store = if let Some(endpoint) = &config.cluster.discovery {
        format!("Memcached via discovery at {endpoint}{tls}")
    } else if config.servers.is_empty() {
        "in this process's memory (not shared, lost on restart)".to_owned()
    } else {
        format!("Memcached {}{tls}", config.servers.join(", "))
    };
    let store = if config.replicas > 1 && !store.starts_with("in this") {
        format!("{store}; each counter on {} nodes", config.replicas)
    } else {
        store
    };
    line(format!("  store           {store}"));
    line(format!(
        "  namespace       {}; failure mode {}; timeout {} ms",
        config.namespace,
        format!("{:?}", config.failure_mode).to_lowercase(),
        config.timeout.as_millis()
    ));
    if config.server.api_tokens.guard_on() {
        let from = match &config.server.api_tokens_file {
            Some(path) => format!(" (tokens from {})", path.display()),
            None => String::new(),
        };
        line(format!("  API tokens      required{from}"));
    }
    line(format!("  policies        {}", config.policies.len()));
    for (name, policy) in &config.policies {
        let limits: Vec<String> = policy
            .limits()
            .iter()
            .map(|limit| format!("{} per {} ms", limit.limit(), limit.window().window_ms()))
            .collect();
        let shadow = if policy.is_shadow() { " (shadow)" } else { "" };
        line(format!("    {name}{shadow}: {}", limits.join(", ")));
    }
    if let Some(path) = &config.rls_config {
        line(format!("  RLS rules       {}", path.display()));
        for domain in rls_domains {
            line(format!("    {domain}"));
        }
    }
    if config.rlqs.listen.is_some() || !config.rlqs.buckets.is_empty() {
        line(format!(
            "  RLQS buckets    {} rule{}; unmatched: {:?}",
            config.rlqs.buckets.len(),
            plural(config.rlqs.buckets.len()),
            config.rlqs.unmatched
        ));
    }
    out
}
