//! The memory RLQS streams keep, measured on the real binary: its resident
//! set read from /proc/<pid>/status while the streams are open. A stream
//! keeps what it tracks, not the buffers its largest report needed, and
//! the buckets all streams keep are bounded in bytes.
//!
//! The binary counts in its own memory, in a small table, so that only
//! what the streams keep grows; the figures are printed as `FIGURE` lines.

use std::net::SocketAddr;

use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tonic::Streaming;

use super::bounds::largest_id;
use super::envoy::{self, Labels};
use super::reports;
use crate::common::process;
use crate::common::service::Slidegate;

const MIB: f64 = 1024.0 * 1024.0;

/// The resident set of process `pid`, in bytes.
fn rss_bytes(pid: i32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// The binary with one rule every bucket matches, so every bucket reported
/// is kept; its RLQS address.
fn start(name: &str) -> (Slidegate, SocketAddr) {
    let rlqs = process::free_addr();
    let config = format!(
        "[rlqs]\nlisten = \"{rlqs}\"\n\n[[rlqs.buckets]]\nlimit = 1000000\nwindow = \"10s\"\n"
    );
    let flags = ["--memory-capacity", "1024"];
    (
        Slidegate::start_with_file(name, &config, &flags, &[rlqs]),
        rlqs,
    )
}

type Open = (
    mpsc::Sender<RateLimitQuotaUsageReports>,
    Streaming<RateLimitQuotaResponse>,
);

/// A report of every id of `ids`, each with one request.
fn report_of(ids: impl Iterator<Item = Labels>) -> RateLimitQuotaUsageReports {
    reports("envoy", ids.map(|id| envoy::usage(&id, 1, 0, 1)).collect())
}

/// Open a stream and send `report` on it: the stream, and its answer (or
/// the error it ended with).
async fn open_with(
    addr: SocketAddr,
    report: RateLimitQuotaUsageReports,
) -> (Open, Result<Option<RateLimitQuotaResponse>, tonic::Status>) {
    let (sender, mut answers) = envoy::open(addr, None).await.unwrap();
    sender.send(report).await.unwrap();
    let answer = envoy::next(&mut answers).await;
    ((sender, answers), answer)
}

/// Streams after one large report each (one bucket named 200 times, the
/// largest ids the label bounds allow: 0.9 MB, within
/// `rlqs.max_report_bytes`), all kept open. Each used to keep a receive
/// buffer the size of that report until it ended (40 streams after 3.7 MB
/// reports: RSS from 9 to 306 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_keeps_what_it_tracks_not_the_buffers_of_its_largest_report() {
    const STREAMS: u64 = 40;
    let (service, addr) = start("rlqs-buffers");
    let id = largest_id("one");
    let large = || report_of(std::iter::repeat_n(id.clone(), 200));
    // The allocator's arenas grow once to what one report takes.
    for _ in 0..2 {
        let (_closed, answer) = open_with(addr, large()).await;
        assert!(answer.unwrap().is_some());
    }
    let before = rss_bytes(service.pid());
    let mut open = Vec::new();
    for _ in 0..STREAMS {
        let (stream, answer) = open_with(addr, large()).await;
        assert!(
            answer.unwrap().is_some(),
            "a report within the bounds is answered"
        );
        open.push(stream);
    }
    let after = rss_bytes(service.pid());
    let per_stream = after.saturating_sub(before) / STREAMS;
    eprintln!(
        "FIGURE rlqs buffers: {STREAMS} open streams after a report of 0.9 MB each: RSS {:.1} -> {:.1} MiB, {:.0} KiB a stream",
        before as f64 / MIB,
        after as f64 / MIB,
        per_stream as f64 / 1024.0
    );
    assert!(
        per_stream < 256 * 1024,
        "{:.0} KiB kept by each open stream",
        per_stream as f64 / 1024.0
    );
    drop(open);
}

/// Streams that report ever more buckets with the largest ids the bounds
/// allow (200 a report) are refused once the kept buckets weigh
/// `rlqs.max_tracked_bytes` (64 MiB), and the process grows by about
/// that. Such buckets used to weigh about 6.8 KB each, bounded only by
/// their number (100,000: 650 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buckets_all_streams_keep_are_bounded_in_bytes() {
    const STREAMS: usize = 4;
    const REPORTS: usize = 25;
    const PER_REPORT: usize = 200;
    let (service, addr) = start("rlqs-kept");
    let ids = |tag: String| (0..PER_REPORT).map(move |index| largest_id(&format!("{tag}-{index}")));
    // The allocator's arenas grow once to what one report takes; the
    // stream's end frees its buckets.
    let (_closed, answer) = open_with(addr, report_of(ids("warm".to_owned()))).await;
    assert!(answer.unwrap().is_some());
    drop(_closed);
    let before = rss_bytes(service.pid());

    let mut open = Vec::new();
    let mut kept = 0;
    let mut refused = None;
    'streams: for stream in 0..STREAMS {
        let (sender, mut answers) = envoy::open(addr, None).await.unwrap();
        for report in 0..REPORTS {
            sender
                .send(report_of(ids(format!("s{stream}-r{report}"))))
                .await
                .unwrap();
            match envoy::next(&mut answers).await {
                Ok(Some(_)) => kept += PER_REPORT,
                Ok(None) => panic!("the stream ended with OK"),
                Err(status) => {
                    refused = Some(status);
                    break 'streams;
                }
            }
        }
        open.push((sender, answers));
    }
    let after = rss_bytes(service.pid());
    let grown = after.saturating_sub(before);
    eprintln!(
        "FIGURE rlqs kept buckets: {kept} of the largest ids kept before the refusal: RSS {:.1} -> {:.1} MiB, {:.1} KB a bucket",
        before as f64 / MIB,
        after as f64 / MIB,
        grown as f64 / kept.max(1) as f64 / 1000.0
    );
    let refused = refused.expect("refused past rlqs.max_tracked_bytes");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("rlqs.max_tracked_bytes"),
        "{refused:?}"
    );
    assert!(
        grown as f64 <= 96.0 * MIB,
        "RSS grew by {:.1} MiB under a bound of 64 MiB",
        grown as f64 / MIB
    );
    drop(open);
}
