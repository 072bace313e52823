//! The RLS listener's connections, taken under the server's connection cap
//! ([`Guard::accept`](super::super::guard::Guard)): one cap for the HTTP
//! and the gRPC faces, and an accept error that backs off rather than
//! ending the server (tonic's own listener stream stops serving on errors
//! such as running out of file descriptors).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::super::App;
use super::super::guard::Permit;

/// A connection holding its place under the cap until it is dropped.
pub(super) struct Capped {
    stream: TcpStream,
    _permit: Permit,
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
            let capped = Capped {
                stream,
                _permit: permit,
            };
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
        Pin::new(&mut self.stream).poll_read(cx, buf)
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
