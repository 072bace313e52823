//! Which rule decides a descriptor, matched as envoyproxy/ratelimit matches
//! them: key and value before key alone, a limit at the last entry only;
//! shadow, unlimited, refused, replaced and wildcard rules; limits Envoy
//! overrides; statuses in request order; and the shipped example's rules.

use std::time::Duration;

use super::{CONFIG, Code, TestRls, ask, codes, descriptor, memory, request};

#[tokio::test]
async fn key_value_is_tried_before_key_and_each_descriptor_counts_apart() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    for client_id in ["a", "b"] {
        for expected in [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit] {
            let response = ask(
                &mut client,
                request("test", vec![descriptor(&[("client", client_id)])]),
            )
            .await;
            assert_eq!(response.overall_code(), expected, "client {client_id}");
            let status = &response.statuses[0];
            let limit = status.current_limit.as_ref().unwrap();
            assert_eq!(
                (limit.requests_per_unit, limit.unit),
                (3, 2),
                "3 per MINUTE"
            );
        }
    }
    let vip = ask(
        &mut client,
        request("test", vec![descriptor(&[("client", "vip")])]),
    )
    .await;
    let status = &vip.statuses[0];
    assert_eq!(status.code(), Code::Ok);
    assert_eq!(status.limit_remaining, 9);
    assert_eq!(status.current_limit.as_ref().unwrap().name, "vip");
    assert!(status.duration_until_reset.is_some());

    // Whitelisted: a key + value entry without rate_limit.
    for _ in 0..5 {
        let response = ask(
            &mut client,
            request("test", vec![descriptor(&[("client", "trusted")])]),
        )
        .await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].current_limit, None);
    }
}

#[tokio::test]
async fn a_limit_applies_at_the_last_entry_only() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let nested = || {
        request(
            "test",
            vec![descriptor(&[("path", "/a"), ("method", "GET")])],
        )
    };
    assert_eq!(codes(&mut client, nested()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, nested()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, nested()).await.0, Code::OverLimit);
    // The path alone has no rule; a deeper descriptor than the config has none either.
    for entries in [
        vec![("path", "/a")],
        vec![("path", "/a"), ("method", "GET"), ("extra", "x")],
        vec![("nothing", "here")],
    ] {
        let response = ask(&mut client, request("test", vec![descriptor(&entries)])).await;
        assert_eq!(response.overall_code(), Code::Ok, "{entries:?}");
        assert_eq!(response.statuses[0].current_limit, None, "{entries:?}");
    }
    // An unknown domain is OK with no limit.
    let response = ask(
        &mut client,
        request("elsewhere", vec![descriptor(&[("client", "a")])]),
    )
    .await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(response.statuses[0].current_limit, None);
}

#[tokio::test]
async fn shadow_unlimited_refused_and_replaced_rules() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    // Shadow mode: over the limit, still OK, remaining 0.
    ask(
        &mut client,
        request("test", vec![descriptor(&[("shadowed", "x")])]),
    )
    .await;
    let response = ask(
        &mut client,
        request("test", vec![descriptor(&[("shadowed", "x")])]),
    )
    .await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(response.statuses[0].code(), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 0);

    let response = ask(
        &mut client,
        request("test", vec![descriptor(&[("free", "x")])]),
    )
    .await;
    assert_eq!(response.statuses[0].code(), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, u32::MAX);

    let banned = || descriptor(&[("banned", "x")]);
    assert_eq!(
        codes(&mut client, request("test", vec![banned()])).await,
        (Code::OverLimit, vec![Code::OverLimit])
    );
    // `unban` replaces banned_rule: it neither decides nor counts.
    let both = || request("test", vec![banned(), descriptor(&[("unban", "x")])]);
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok])
    );
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok])
    );
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
}

#[tokio::test]
async fn statuses_come_in_request_order_and_any_over_limit_refuses_the_request() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mixed = || {
        request(
            "test",
            vec![
                descriptor(&[("nothing", "x")]),
                descriptor(&[("one", "x")]),
                descriptor(&[("free", "x")]),
            ],
        )
    };
    assert_eq!(
        codes(&mut client, mixed()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok, Code::Ok])
    );
    let response = ask(&mut client, mixed()).await;
    assert_eq!(response.overall_code(), Code::OverLimit);
    assert_eq!(
        response
            .statuses
            .iter()
            .map(|s| s.code())
            .collect::<Vec<_>>(),
        [Code::Ok, Code::OverLimit, Code::Ok]
    );
    assert_eq!(response.statuses[1].limit_remaining, 0);
    assert_eq!(response.statuses[2].limit_remaining, u32::MAX);
    // OVER_LIMIT's reset is the exact wait: the rest of this minute and the
    // next one's decay (mid-minute, 1 of 1 counted: 30 + 60 s).
    let reset = response.statuses[1].duration_until_reset.unwrap();
    assert_eq!(reset.seconds, 90);
}

#[tokio::test]
async fn extensions_wildcards_and_overrides() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    // 2 per 30 s (unit_multiplier), in 3 sub-buckets of 10 s.
    let every = || request("test", vec![descriptor(&[("every", "x")])]);
    let response = ask(&mut client, every()).await;
    assert_eq!(response.statuses[0].limit_remaining, 1);
    assert_eq!(
        response.statuses[0].duration_until_reset.unwrap().seconds,
        40
    );
    assert_eq!(codes(&mut client, every()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, every()).await.0, Code::OverLimit);
    rls.clock.advance(Duration::from_secs(40));
    assert_eq!(
        codes(&mut client, every()).await.0,
        Code::Ok,
        "the window slid"
    );

    // A wildcard value: each matching value has its own counter.
    for value in ["files/a", "files/b"] {
        let one = || request("test", vec![descriptor(&[("prefix", value)])]);
        assert_eq!(codes(&mut client, one()).await.0, Code::Ok, "{value}");
        assert_eq!(
            codes(&mut client, one()).await.0,
            Code::OverLimit,
            "{value}"
        );
    }
    let other = request("test", vec![descriptor(&[("prefix", "other")])]);
    assert_eq!(
        ask(&mut client, other).await.statuses[0].current_limit,
        None
    );

    // A limit override sent by Envoy replaces the configured limit.
    let mut overridden = descriptor(&[("client", "o")]);
    overridden.limit = Some(
        slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 4,
        },
    );
    let response = ask(&mut client, request("test", vec![overridden.clone()])).await;
    assert_eq!(response.statuses[0].current_limit.as_ref().unwrap().unit, 4);
    assert_eq!(
        codes(&mut client, request("test", vec![overridden]))
            .await
            .0,
        Code::OverLimit
    );
}

/// The rules shipped in `examples/envoy/ratelimit/config.yaml` load as
/// they are, and decide as their comments say: 5 a minute per API key
/// under `/api`, 1000 per 5 minutes for the partner key, 100 a second per
/// client address, and loopback not limited.
#[tokio::test]
async fn the_shipped_envoy_example_rules_load_and_limit() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/envoy/ratelimit/config.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    let rls = TestRls::start(memory(), &config).await;
    let mut client = rls.client().await;
    let ask_as = |entries: &[(&str, &str)]| request("edge", vec![descriptor(entries)]);

    // (descriptor, admitted, then refused?)
    type Entries<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Entries, usize, bool); 4] = [
        // 5 a minute per API key.
        (&[("path", "/api"), ("api_key", "k1")], 5, true),
        // The partner key's own 1000 per 5 minutes.
        (&[("path", "/api"), ("api_key", "partner")], 6, false),
        // 100 a second per client address.
        (&[("remote_address", "203.0.113.9")], 100, true),
        // Loopback is not limited.
        (&[("remote_address", "127.0.0.1")], 150, false),
    ];
    for (entries, admitted, then_refused) in cases {
        for call in 0..admitted {
            let response = ask(&mut client, ask_as(entries)).await;
            assert_eq!(
                response.overall_code(),
                Code::Ok,
                "{entries:?}: call {call}"
            );
        }
        if then_refused {
            let response = ask(&mut client, ask_as(entries)).await;
            assert_eq!(response.overall_code(), Code::OverLimit, "{entries:?}");
        }
    }
}
