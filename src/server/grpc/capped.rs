//! A gRPC listener's connections, taken under the server's connection cap
//! ([`Guard::accept`](super::super::guard::Guard)): one cap for the HTTP
//! and the gRPC faces, and an accept error that backs off rather than
//! ending the server (tonic's own listener stream stops serving on errors
//! such as running out of file descriptors).
//!
//! A place is given back when the connection ends, so a connection that
//! never ends must not keep one: HTTP/1 connections are closed when no
//! request starts for the quiet timeout (`served`), and here a connection
//! from which nothing has been read for the quiet timeout is closed. The
//! server pings every connection three times as often (`serve`), and a
//! live HTTP/2 peer answers each ping, so an idle Envoy keeps its
//! connections while a peer that never speaks HTTP/2, or has gone, gives
//! its place back.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::super::App;
use super::super::guard::Permit;

/// A connection holding its place under the cap until it is dropped.
pub(super) struct Capped {
    stream: TcpStream,
    /// When the peer last sent something, and how long it may stay quiet.
    heard_at: Instant,
    quiet_timeout: Duration,
    /// Wakes the reader to look at `heard_at`; moved on only when it fires,
    /// so a busy connection costs no timer work per read.
    quiet_check: Pin<Box<Sleep>>,
    _permit: Permit,
}

impl Capped {
    fn new(stream: TcpStream, permit: Permit, quiet_timeout: Duration) -> Capped {
        let now = Instant::now();
        Capped {
            stream,
            heard_at: now,
            quiet_timeout,
            quiet_check: Box::pin(tokio::time::sleep_until(now + quiet_timeout)),
            _permit: permit,
        }
    }
}

/// The accepted connections of `listener`, as tonic takes them. The accept
/// loop ends when tonic drops the stream (at shutdown).
pub(super) fn incoming(
    listener: TcpListener,
    app: Arc<App>,
) -> ReceiverStream<Result<Capped, io::Error>> {
    // No queue to speak of: tonic takes each connection as it comes.
    let (sender, receiver) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let (stream, _peer, permit) = tokio::select! {
                accepted = app.guard.accept(&listener) => accepted,
                () = sender.closed() => break,
            };
            let capped = Capped::new(stream, permit, app.guard.quiet_timeout());
            if sender.send(Ok(capped)).await.is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(receiver)
}

impl Connected for Capped {
    type ConnectInfo = <TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let filled = buf.filled().len();
        if let Poll::Ready(read) = Pin::new(&mut this.stream).poll_read(cx, buf) {
            if buf.filled().len() > filled {
                this.heard_at = Instant::now();
            }
            return Poll::Ready(read);
        }
        // Nothing to read now: has the peer been quiet too long?
        loop {
            ready!(this.quiet_check.as_mut().poll(cx));
            let deadline = this.heard_at + this.quiet_timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the peer sent nothing for {:?}", this.quiet_timeout),
                )));
            }
            this.quiet_check.as_mut().reset(deadline);
        }
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
