//! Leaving without losing a request: what happens between SIGTERM and the
//! exit.
//!
//! 1. **Leaving** (at the first SIGTERM or SIGINT, for
//!    `server.shutdown_delay_ms`): `/readyz` answers 503 at once, so that
//!    Kubernetes takes the pod out of its endpoints and load balancers stop
//!    sending here; meanwhile every listener keeps accepting and answering,
//!    since those that have not noticed yet still send here. An HTTP/1
//!    answer carries `Connection: close`, so a kept-alive client opens its
//!    next connection where the balancer now sends it, instead of meeting
//!    a connection closed under it at the end. A second SIGTERM or SIGINT
//!    ends the delay at once.
//! 2. **Draining** (up to `server.drain_timeout_ms`): the listeners stop
//!    accepting; HTTP/1 connections answer what they are answering with
//!    `Connection: close` (an idle one closes), HTTP/2 ones get GOAWAY; an
//!    RLQS stream, never done by itself, ends with UNAVAILABLE (`grpc`'s
//!    `ends_streams`), which Envoy retries on another instance. What is
//!    still open at the bound is closed, and the process exits 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::App;
use crate::config::DEFAULT_DRAIN_TIMEOUT;

/// What the faces read of a shutdown under way.
#[derive(Debug)]
pub(crate) struct Leaving {
    begun: AtomicBool,
    /// How long `serve` waits for its connections once stopped.
    drain_timeout: Duration,
}

impl Default for Leaving {
    fn default() -> Leaving {
        Leaving {
            begun: AtomicBool::new(false),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

impl Leaving {
    pub(crate) fn with_drain_timeout(drain_timeout: Duration) -> Leaving {
        Leaving {
            drain_timeout,
            ..Leaving::default()
        }
    }

    /// Whether the process is leaving: `/readyz` answers 503, HTTP/1
    /// answers close their connection.
    pub(crate) fn begun(&self) -> bool {
        // Relaxed: a flag read once a request; a request that misses it by
        // an instant is answered as before, which is right as well.
        self.begun.load(Ordering::Relaxed)
    }

    pub(crate) fn begin(&self) {
        self.begun.store(true, Ordering::Relaxed);
    }

    pub(crate) fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }
}

/// The signals that end the process: SIGTERM (an orchestrator) and SIGINT
/// (Ctrl-C).
pub struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

impl Signals {
    /// Call before listening: a SIGTERM that comes as soon as the process
    /// listens must meet these handlers, not the default action (which
    /// kills it).
    pub fn register() -> Signals {
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for {name}");
                None
            }
        };
        Signals {
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// The next SIGTERM or SIGINT, by name.
    async fn next(&mut self) -> &'static str {
        async fn on(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = on(&mut self.terminate) => "SIGTERM",
            () = on(&mut self.interrupt) => "SIGINT",
        }
    }
}

/// Waits for the first signal, then leaves for `delay` (see the top of
/// this file): returns when the listeners must stop accepting.
pub async fn leave(app: &App, mut signals: Signals, delay: Duration) {
    let first = signals.next().await;
    app.leaving.begin();
    if delay.is_zero() {
        tracing::info!("{first} received: draining");
        return;
    }
    tracing::info!(
        "{first} received: /readyz answers 503; serving {delay:?} more, then draining \
         (a second SIGTERM or SIGINT drains at once)"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => tracing::info!("shutdown delay over: draining"),
        second = signals.next() => tracing::info!("{second} received again: draining now"),
    }
}

/// A listener served in its own task until stopped, then drained.
pub type Face = JoinHandle<anyhow::Result<()>>;

/// Waits for every face to finish draining, until `drained_by`; a face
/// still open then is closed (its connections with it), so the process
/// exits within the drain bound. An RLQS stream or a slow client does not
/// hold the exit back.
pub async fn drain(faces: Vec<(&'static str, Face)>, drained_by: Instant) -> anyhow::Result<()> {
    for (name, mut face) in faces {
        match tokio::time::timeout_at(drained_by, &mut face).await {
            Ok(Ok(ended)) => ended?,
            Ok(Err(error)) => return Err(anyhow::anyhow!("the {name} face panicked: {error}")),
            Err(_) => {
                face.abort();
                tracing::warn!("{name}: connections still open at the drain bound: closed");
            }
        }
    }
    tracing::info!("drained: exiting");
    Ok(())
}
