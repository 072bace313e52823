use super::*;
use crate::policy::Window;
use crate::store::KeyDigest;

fn counter() -> CounterKey {
    CounterKey {
        digest: KeyDigest::of("api", "client-42"),
        window: Window::new(60_000, 10).unwrap(),
        bucket: 2_950_000,
    }
}

#[test]
fn commands_are_written_as_the_meta_protocol_says() {
    let mut buffer = Vec::new();
    encode(&Command::Read(counter()), "sg", 7, &mut buffer);
    encode(
        &Command::Add {
            counter: counter(),
            amount: 3,
            ttl: 122,
        },
        "sg",
        8,
        &mut buffer,
    );
    encode(
        &Command::Subtract {
            counter: counter(),
            amount: 3,
        },
        "sg",
        9,
        &mut buffer,
    );
    encode(&Command::Noop, "sg", 10, &mut buffer);
    encode(&Command::Remove(counter()), "sg", 12, &mut buffer);
    encode(
        &Command::ClockProbe {
            expires: 1_800_090_000,
        },
        "sg",
        11,
        &mut buffer,
    );
    let key = "sg:edce31df96748419b36acbefd989743c:60000.10:2950000";
    assert_eq!(
        String::from_utf8(buffer).unwrap(),
        format!(
            "mg {key} v O7\r\nma {key} N122 J3 D3 v O8\r\nma {key} MD D3 v O9\r\nmn\r\nmd {key} k O12\r\n\
                 ma sg:clock:1800090000 N1800090000 J0 D0 t O11\r\n"
        )
    );
    assert_eq!(key_string("sg", &counter()), key);
}

#[test]
fn replies_parse_one_at_a_time_and_wait_for_the_rest() {
    let stream = b"VA 2 O7\r\n15\r\nEN O8\r\nNF O9\r\nMN\r\nVA 3 O10\r\n0  \r\n";
    let mut offset = 0;
    let mut replies = Vec::new();
    while let Some(parsed) = parse(&stream[offset..]).unwrap() {
        offset += parsed.len;
        replies.push((parsed.reply, parsed.opaque));
    }
    assert_eq!(offset, stream.len());
    assert_eq!(
        replies,
        [
            (Reply::Value(15), Some(7)),
            (Reply::Missing, Some(8)),
            (Reply::Missing, Some(9)),
            (Reply::Noop, None),
            (Reply::Value(0), Some(10)),
        ]
    );
    // Every prefix of a reply is "not yet", never an error.
    let whole = b"VA 2 O7\r\n15\r\n";
    for cut in 0..whole.len() {
        assert_eq!(parse(&whole[..cut]), Ok(None), "cut at {cut}");
    }
}

#[test]
fn a_failed_command_keeps_the_stream_in_step() {
    let parsed = parse(b"SERVER_ERROR out of memory\r\nEN O3\r\n")
        .unwrap()
        .unwrap();
    assert!(matches!(parsed.reply, Reply::Failed(ref m) if m.contains("out of memory")));
    assert_eq!(parsed.len, 28);
    assert!(matches!(
        parse(b"NS O4\r\n").unwrap().unwrap().reply,
        Reply::Failed(_)
    ));
    assert!(matches!(
        parse(b"HD O4\r\n").unwrap().unwrap().reply,
        Reply::Failed(_)
    ));
    assert!(matches!(
        parse(b"HD t-1 O4\r\n").unwrap().unwrap().reply,
        Reply::Failed(_)
    ));
    let deleted = parse(b"HD ksg:abc:60000.1:7 O4\r\n").unwrap().unwrap();
    assert_eq!((deleted.reply, deleted.opaque), (Reply::Value(0), Some(4)));
    let gone = parse(b"NF ksg:abc:60000.1:7 O5\r\n").unwrap().unwrap();
    assert_eq!((gone.reply, gone.opaque), (Reply::Missing, Some(5)));
    let probe = parse(b"HD t86399 O4\r\n").unwrap().unwrap();
    assert_eq!((probe.reply, probe.opaque), (Reply::Value(86_399), Some(4)));
}

#[test]
fn corruption_is_a_desync_not_a_guess() {
    for bad in [
        &b"ERROR\r\n"[..],
        b"XX\r\n",
        b"VA x O1\r\n1\r\n",
        b"VA 99 O1\r\n",
        b"VA 1 O1\r\n12\r\n",
        b"HD Ox\r\n",
        b"EN O99999999999\r\n",
        b"EN O1\nEN O2\r\n",
        b"\nEN O1\r\n",
        b"EN O\r\n",
    ] {
        assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    assert!(parse(&[b'x'; 2000]).is_err(), "an endless line");
    // What went wrong names the line, for the operator's log.
    assert_eq!(
        parse(b"XX 1\r\n"),
        Err(Desync(r#"unexpected reply "XX 1""#.to_owned()))
    );
    assert_eq!(
        parse(b"NS O4\r\n").unwrap().unwrap().reply,
        Reply::Failed(r#"memcached answered "NS O4""#.to_owned())
    );
    // Text where a counter should be is framed like a number: the command
    // failed, the stream is in step.
    assert_eq!(
        parse(b"VA 2 O1\r\nab\r\nEN O2\r\n"),
        Ok(Some(Parsed {
            reply: Reply::Failed(
                r#"a counter that is not a number: "ab" (is another program writing under this namespace?)"#
                    .to_owned()
            ),
            opaque: Some(1),
            len: 13,
        }))
    );
}

#[test]
fn a_reply_line_may_take_max_line_bytes_before_its_end() {
    // Not yet arrived: waited for up to the longest line, then a desync.
    assert_eq!(parse(&[b'x'; MAX_LINE]), Ok(None));
    assert!(parse(&[b'x'; MAX_LINE + 1]).is_err());
}

#[test]
fn a_counter_may_reach_the_largest_u64() {
    let parsed = parse(b"VA 20 O1\r\n18446744073709551615\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(parsed.reply, Reply::Value(u64::MAX));
    // One more is no counter of ours: that command failed, the stream
    // is in step.
    let past = parse(b"VA 20 O1\r\n18446744073709551616\r\n")
        .unwrap()
        .unwrap();
    assert!(matches!(past.reply, Reply::Failed(_)), "{past:?}");
}

#[test]
fn only_commands_that_count_are_not_retried_when_their_reply_is_lost() {
    let add = Command::Add {
        counter: counter(),
        amount: 1,
        ttl: 60,
    };
    let subtract = Command::Subtract {
        counter: counter(),
        amount: 1,
    };
    for changes in [add, subtract, Command::Remove(counter())] {
        assert!(changes.changes_state(), "{changes:?}");
    }
    for reads in [
        Command::Read(counter()),
        Command::Noop,
        Command::ClockProbe { expires: 1 },
    ] {
        assert!(!reads.changes_state(), "{reads:?}");
    }
}

/// A take-back subtracts what an addition added, and only that: a
/// subtraction or a delete is not an addition to take back.
#[test]
fn only_an_addition_has_something_to_take_back() {
    let add = Command::Add {
        counter: counter(),
        amount: 7,
        ttl: 60,
    };
    assert_eq!(add.addition(), Some((counter(), 7)));
    for other in [
        Command::Subtract {
            counter: counter(),
            amount: 7,
        },
        Command::Remove(counter()),
        Command::Read(counter()),
        Command::Noop,
        Command::ClockProbe { expires: 1 },
    ] {
        assert_eq!(other.addition(), None, "{other:?}");
    }
}

#[test]
fn ttls_over_thirty_days_become_absolute_times() {
    let now_ms = 1_800_000_000_000;
    assert_eq!(ttl(122, now_ms), 122);
    assert_eq!(ttl(MAX_RELATIVE_TTL_SECS, now_ms), 2_592_000);
    assert_eq!(
        ttl(MAX_RELATIVE_TTL_SECS + 1, now_ms),
        1_800_000_000 + 2_592_001
    );
}

#[test]
fn numbers_of_every_length_are_written_whole() {
    let mut values = vec![0, 1, 9, u64::from(u32::MAX), u64::MAX - 1, u64::MAX];
    for power in 1..20 {
        let ten = 10u64.pow(power);
        values.extend([ten - 1, ten, ten + 1]);
    }
    for value in values {
        let counter = CounterKey {
            bucket: value,
            ..counter()
        };
        let mut buffer = b"before ".to_vec();
        encode(
            &Command::Subtract {
                counter,
                amount: value,
            },
            "sg",
            (value % (u64::from(u32::MAX) + 1)) as u32,
            &mut buffer,
        );
        let key = format!("sg:edce31df96748419b36acbefd989743c:60000.10:{value}");
        let opaque = value % (u64::from(u32::MAX) + 1);
        assert_eq!(
            String::from_utf8(buffer).unwrap(),
            format!("before ma {key} MD D{value} v O{opaque}\r\n")
        );
        assert_eq!(key_string("sg", &counter), key);
    }
}

#[test]
fn the_longest_command_is_written_whole() {
    let namespace = "n".repeat(64);
    // The longest window that divides by the largest precision.
    let window_ms = crate::policy::MAX_WINDOW_MS;
    let window = Window::new(window_ms, crate::policy::MAX_PRECISION).unwrap();
    let counter = CounterKey {
        bucket: u64::MAX,
        window,
        ..counter()
    };
    let mut buffer = Vec::new();
    encode(
        &Command::Add {
            counter,
            amount: u64::MAX,
            ttl: u32::MAX,
        },
        &namespace,
        u32::MAX,
        &mut buffer,
    );
    let key = key_string(&namespace, &counter);
    assert_eq!(
        key,
        format!(
            "{namespace}:edce31df96748419b36acbefd989743c:{window_ms}.{}:{}",
            crate::policy::MAX_PRECISION,
            u64::MAX
        )
    );
    let max = u64::MAX;
    let line = format!("ma {key} N{} J{max} D{max} v O{}\r\n", u32::MAX, u32::MAX);
    assert_eq!(String::from_utf8(buffer).unwrap(), line);
    // A namespace longer than a plain one (refused at connect time) still
    // gets a whole line, not a panic.
    let long = "n".repeat(1000);
    let mut buffer = Vec::new();
    encode(&Command::Read(counter), &long, 1, &mut buffer);
    assert!(buffer.starts_with(format!("mg {long}:").as_bytes()) && buffer.ends_with(b" v O1\r\n"));
}

/// A write's encoder copies a key's part before the bucket from the key
/// before it when they share it: every sequence of commands (of two keys,
/// two windows and two buckets, of every kind) comes out byte for byte as
/// the commands written one by one, each with its whole key.
#[test]
fn a_batch_encodes_as_its_commands_one_by_one() {
    let windows = [
        Window::new(60_000, 1).unwrap(),
        Window::new(60_000, 10).unwrap(),
    ];
    let mut commands = vec![
        Command::Noop,
        Command::ClockProbe {
            expires: 1_800_000_000,
        },
    ];
    for key in ["client-42", "client-43"] {
        for window in windows {
            for bucket in [2_950_000, 2_950_001] {
                let counter = CounterKey {
                    digest: KeyDigest::of("api", key),
                    window,
                    bucket,
                };
                commands.extend([
                    Command::Read(counter),
                    Command::Add {
                        counter,
                        amount: 2,
                        ttl: 122,
                    },
                    Command::Subtract { counter, amount: 2 },
                    Command::Remove(counter),
                ]);
            }
        }
    }
    let mut sequences = 0;
    for first in &commands {
        for second in &commands {
            for third in &commands {
                let mut batch = Vec::new();
                let mut encoder = Encoder::new("sg", &mut batch);
                let mut one_by_one = Vec::new();
                for (opaque, command) in [first, second, third].into_iter().enumerate() {
                    encoder.encode(command, opaque as u32);
                    let mut alone = Vec::new();
                    encode(command, "sg", opaque as u32, &mut alone);
                    one_by_one.extend(alone);
                }
                assert_eq!(batch, one_by_one, "{first:?}, {second:?}, {third:?}");
                sequences += 1;
            }
        }
    }
    assert_eq!(sequences, commands.len().pow(3));
}

/// The one-pass reading of a check's usual replies reads what the general
/// one does, on those replies and on every near miss: other codes, extra
/// or missing spaces and flags, numbers at and past their bounds, padded
/// values, and every reply cut short.
#[test]
fn the_usual_replies_read_as_any_reply_does() {
    let mut replies: Vec<Vec<u8>> = Vec::new();
    let numbers = [
        "0",
        "1",
        "2",
        "3",
        "7",
        "00",
        "20",
        "21",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901",
        "",
        "x",
        "-1",
    ];
    for code in ["VA", "EN", "NF", "HD", "MN", "va", "VA "] {
        for length in numbers {
            for opaque in numbers {
                for value in ["5", "15", "0  ", " 5", "", "18446744073709551615", "1x"] {
                    replies.push(format!("{code} {length} O{opaque}\r\n{value}\r\n").into_bytes());
                }
                replies.push(format!("{code} O{opaque}\r\n").into_bytes());
                replies.push(format!("{code}  O{opaque}\r\n").into_bytes());
                replies.push(format!("{code} {length} O{opaque} t5\r\n5\r\n").into_bytes());
                replies.push(format!("{code} {length} t5 O{opaque}\r\n5\r\n").into_bytes());
                replies.push(format!("{code} {length} O{opaque}\n5\r\n").into_bytes());
                replies.push(format!("{code} {length} {opaque}\r\n5\r\n").into_bytes());
            }
        }
    }
    let mut usual = 0;
    for reply in &replies {
        for end in 0..=reply.len() {
            let bytes = &reply[..end];
            if let Some(quick) = parse_usual(bytes) {
                assert_eq!(
                    Ok(Some(quick)),
                    parse_any(bytes),
                    "{:?}",
                    String::from_utf8_lossy(bytes)
                );
                usual += 1;
            }
        }
    }
    assert!(
        usual > 100,
        "only {usual} replies took the one-pass reading"
    );
}
