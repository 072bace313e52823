//! A TCP proxy in front of memcached that counts round trips: a round trip
//! starts when a client sends after its last answer (or first sends at all).
//! Bytes sent while an answer is still awaited (a pipelined batch arriving in
//! pieces) belong to the same round trip. This measures from outside what
//! the store claims, without trusting its own counters.
//!
//! It can also hold requests on the way in, as a slow network would, so a
//! test can decide what another client does while a request is in flight;
//! delay every reply on the way out, as a stalling node would; cut every
//! connection and let new ones in one at a time, as a node that comes back
//! while a client's connections redial would; and it counts the
//! connections its clients hold open, and the meta no-ops (`mn`) they send.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

pub struct CountingProxy {
    pub addr: String,
    round_trips: Arc<AtomicU64>,
    noops: Arc<AtomicU64>,
    hold: Arc<Hold>,
    gate: Arc<Gate>,
    links: Arc<Links>,
    task: tokio::task::JoinHandle<()>,
}

/// The connections clients hold open through the proxy, and how late each
/// reply is sent on.
#[derive(Default)]
struct Links {
    open: AtomicUsize,
    most_open: AtomicUsize,
    reply_delay_ms: AtomicU64,
}

/// One client connection's place in [`Links::open`], given back when the
/// client closes it (or the proxy cuts it).
struct OpenLink(Arc<Links>);

impl OpenLink {
    fn new(links: Arc<Links>) -> OpenLink {
        let open = links.open.fetch_add(1, Ordering::SeqCst) + 1;
        links.most_open.fetch_max(open, Ordering::SeqCst);
        OpenLink(links)
    }
}

impl Drop for OpenLink {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Which connections may pass: new ones while `admissions` lasts, old ones
/// until the next cut.
struct Gate {
    /// New connections still let through (`usize::MAX`: all of them).
    admissions: AtomicUsize,
    /// Bumped by each cut; a relay ends when it changes.
    cuts: watch::Sender<u64>,
}

/// Whether requests are held, and a signal each time one is.
struct Hold {
    holding: watch::Sender<bool>,
    arrived: Notify,
    /// The round trip from which requests are held (`u64::MAX`: none).
    from_round_trip: AtomicU64,
}

impl CountingProxy {
    pub async fn start(upstream: String) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let round_trips = Arc::new(AtomicU64::new(0));
        let counter = round_trips.clone();
        let noops = Arc::new(AtomicU64::new(0));
        let noop_counter = noops.clone();
        let hold = Arc::new(Hold {
            holding: watch::Sender::new(false),
            arrived: Notify::new(),
            from_round_trip: AtomicU64::new(u64::MAX),
        });
        let held = hold.clone();
        let gate = Arc::new(Gate {
            admissions: AtomicUsize::new(usize::MAX),
            cuts: watch::Sender::new(0),
        });
        let gated = gate.clone();
        let links = Arc::new(Links::default());
        let linked = links.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // Before admission: a cut while this one dials upstream ends it.
                let cut = gated.cuts.subscribe();
                let admitted = gated
                    .admissions
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
                        usize::MAX => Some(usize::MAX),
                        0 => None,
                        left => Some(left - 1),
                    })
                    .is_ok();
                if !admitted {
                    // Accepted and closed at once: the client sees EOF.
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let link = OpenLink::new(linked.clone());
                tokio::spawn(relay(
                    client,
                    server,
                    Counters {
                        round_trips: counter.clone(),
                        noops: noop_counter.clone(),
                    },
                    held.clone(),
                    cut,
                    link,
                ));
            }
        });
        CountingProxy {
            addr,
            round_trips,
            noops,
            hold,
            gate,
            links,
            task,
        }
    }

    /// Send every reply on `ms` milliseconds late (0: at once). Each chunk
    /// read from memcached waits in turn, so replies queue up behind a
    /// delay as they would behind a stalled node.
    pub fn delay_replies(&self, ms: u64) {
        self.links.reply_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Client connections open through the proxy now.
    pub fn open_connections(&self) -> usize {
        self.links.open.load(Ordering::SeqCst)
    }

    /// The most client connections that were open at once.
    pub fn most_open_connections(&self) -> usize {
        self.links.most_open.load(Ordering::SeqCst)
    }

    /// Close every connection now, and refuse new ones (accepted and closed
    /// at once) until [`let_in`](Self::let_in) or [`open`](Self::open).
    pub fn cut(&self) {
        self.gate.admissions.store(0, Ordering::SeqCst);
        self.gate.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// Let the next `connections` new connections through, and refuse the
    /// ones after them.
    pub fn let_in(&self, connections: usize) {
        self.gate.admissions.store(connections, Ordering::SeqCst);
    }

    /// Let every new connection through again.
    pub fn open(&self) {
        self.gate.admissions.store(usize::MAX, Ordering::SeqCst);
    }

    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }

    /// Meta no-ops (`mn`, what a readiness probe sends) clients sent.
    pub fn noops(&self) -> u64 {
        self.noops.load(Ordering::SeqCst)
    }

    /// From now on, keep what clients send until [`release`](Self::release).
    pub fn hold(&self) {
        self.hold.holding.send_replace(true);
    }

    /// Hold what clients send from round trip `round_trip` on (counted as
    /// [`round_trips`](Self::round_trips) counts them), as [`hold`](Self::hold)
    /// would: a test can let a request through and hold the one its answer
    /// causes (a take-back), which no sleep could time.
    pub fn hold_from_round_trip(&self, round_trip: u64) {
        self.hold
            .from_round_trip
            .store(round_trip, Ordering::SeqCst);
    }

    /// Forward what was held, and everything after it.
    pub fn release(&self) {
        self.hold.holding.send_replace(false);
    }

    /// Wait until a request is being held.
    pub async fn holding_a_request(&self) {
        self.hold.arrived.notified().await;
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a relay counts, for the whole proxy.
struct Counters {
    round_trips: Arc<AtomicU64>,
    noops: Arc<AtomicU64>,
}

/// The meta no-ops (`mn\r\n`) in a stream read in pieces: the last bytes
/// of a piece are kept, so one cut across two pieces is counted once.
#[derive(Default)]
struct NoopsSeen {
    tail: Vec<u8>,
}

impl NoopsSeen {
    const NOOP: &[u8] = b"mn\r\n";

    fn count(&mut self, piece: &[u8]) -> u64 {
        let mut joined = std::mem::take(&mut self.tail);
        joined.extend_from_slice(piece);
        let found = joined
            .windows(Self::NOOP.len())
            .filter(|window| *window == Self::NOOP)
            .count();
        let keep = joined.len().saturating_sub(Self::NOOP.len() - 1);
        self.tail = joined.split_off(keep);
        found as u64
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    counters: Counters,
    hold: Arc<Hold>,
    mut cut: watch::Receiver<u64>,
    link: OpenLink,
) {
    let Counters { round_trips, noops } = counters;
    let links = link.0.clone();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let awaiting = Arc::new(AtomicBool::new(false));
    let awaiting_answer = awaiting.clone();
    let upstream = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        let mut noops_seen = NoopsSeen::default();
        loop {
            let read = match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            noops.fetch_add(noops_seen.count(&buffer[..read]), Ordering::SeqCst);
            if !awaiting.swap(true, Ordering::SeqCst) {
                round_trips.fetch_add(1, Ordering::SeqCst);
            }
            if round_trips.load(Ordering::SeqCst) >= hold.from_round_trip.load(Ordering::SeqCst) {
                hold.from_round_trip.store(u64::MAX, Ordering::SeqCst);
                hold.holding.send_replace(true);
            }
            if *hold.holding.borrow() {
                // A stored permit: the waiter may start waiting after this.
                hold.arrived.notify_one();
                let mut holding = hold.holding.subscribe();
                let _ = holding.wait_for(|holding| !holding).await;
            }
            if server_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        // The client closed: its connection is no longer open, whatever
        // memcached still sends back.
        drop(link);
        let _ = server_write.shutdown().await;
    };
    let downstream = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let delay = links.reply_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            // Cleared before the client can see the answer, so its next
            // request always starts a new round trip.
            awaiting_answer.store(false, Ordering::SeqCst);
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    // Dropping both halves closes both sockets.
    tokio::select! {
        _ = async { tokio::join!(upstream, downstream) } => {}
        _ = cut.changed() => {}
    }
}
