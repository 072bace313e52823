use super::*;

/// AWS's documented example, with the byte count of its data (the
/// documentation's 147 is for another cluster name).
const AWS_EXAMPLE: &str = "CONFIG cluster 0 136\r\n12\nmyCluster.pc4ldq.0001.use1.cache.amazonaws.com|10.82.235.120|11211 myCluster.pc4ldq.0002.use1.cache.amazonaws.com|10.80.249.27|11211\n\r\nEND\r\n";

#[test]
fn parses_the_documented_reply() {
    let Some(Answer::Config(config)) = parse_reply(AWS_EXAMPLE.as_bytes()).unwrap() else {
        panic!("not a config");
    };
    assert_eq!(config.version, 12);
    assert_eq!(config.nodes.len(), 2);
    assert_eq!(config.nodes[0].dial_addr(), "10.82.235.120:11211");
    assert_eq!(
        config.nodes[0].name(),
        "myCluster.pc4ldq.0001.use1.cache.amazonaws.com:11211"
    );
    assert_eq!(
        config.nodes[1].server_name(),
        "myCluster.pc4ldq.0002.use1.cache.amazonaws.com"
    );
}

#[test]
fn the_legacy_reply_and_partial_input() {
    let legacy = AWS_EXAMPLE.replace("CONFIG cluster", "VALUE AmazonElastiCache:cluster");
    assert!(matches!(
        parse_reply(legacy.as_bytes()),
        Ok(Some(Answer::Config(_)))
    ));
    let counting_crlf = AWS_EXAMPLE.replace(" 136\r\n", " 138\r\n");
    assert!(matches!(
        parse_reply(counting_crlf.as_bytes()),
        Ok(Some(Answer::Config(_)))
    ));
    for cut in 0..AWS_EXAMPLE.len() {
        assert_eq!(
            parse_reply(&AWS_EXAMPLE.as_bytes()[..cut]),
            Ok(None),
            "{cut}"
        );
    }
    assert_eq!(parse_reply(b"ERROR\r\n"), Ok(Some(Answer::UnknownCommand)));
}

#[test]
fn an_empty_ip_dials_the_host() {
    let config = parse_body(b"3\nnode-a||11211 |::1|11212\n").unwrap();
    assert_eq!(config.nodes[0].dial_addr(), "node-a:11211");
    assert_eq!(config.nodes[1].dial_addr(), "[::1]:11212");
    assert_eq!(config.nodes[1].name(), "[::1]:11212");
}

#[test]
fn malformed_configs_say_what_is_wrong() {
    for (body, expected) in [
        ("x\nh|1.2.3.4|1\n", "bad config version"),
        ("1\nh|1.2.3.4\n", "is not host|ip|port"),
        ("1\nh|1.2.3.4|0\n", "bad port"),
        ("1\nh|1.2.3.4|99999\n", "bad port"),
        ("1\n||11211\n", "neither host nor ip"),
        ("1\nh|1.2.3.4|1\nmore\n", "unexpected line"),
    ] {
        let error = parse_body(body.as_bytes()).unwrap_err();
        assert!(error.contains(expected), "{body:?}: {error}");
    }
    assert!(parse_reply(b"CONFIG cluster 0 2\r\n1\n\r\nEND\r\n").is_ok());
    assert!(
        parse_reply(b"CONFIG cluster 0 2\r\n1\nXX\r\nEND\r\n")
            .unwrap_err()
            .contains("END")
    );
    assert!(
        parse_reply(b"HELLO\r\n")
            .unwrap_err()
            .contains("unexpected header")
    );
    assert!(
        parse_reply(b"END\r\n")
            .unwrap_err()
            .contains("no cluster config")
    );
}

/// A length in the header past what a reply may hold is malformed, said
/// at once: it used to overflow when added to where the body starts (a
/// panic in a debug build, killing the discovery task; in a release build
/// a wait for bytes that never come, every poll).
#[test]
fn a_length_past_the_reply_bound_is_malformed() {
    for header in [
        "CONFIG cluster 0 18446744073709551615",
        "VALUE AmazonElastiCache:cluster 0 18446744073709551615",
        "CONFIG cluster 0 1048577",
    ] {
        let reply = format!("{header}\r\n12\nh|10.0.0.1|11211\n\r\nEND\r\n");
        let error = parse_reply(reply.as_bytes()).unwrap_err();
        assert!(error.contains("length"), "{header}: {error}");
    }
}
