//! Ending streaming answers when the drain begins. An RLQS stream is never
//! done by itself: Envoy keeps it open and reports on it for as long as the
//! server answers, so a drain that waited for it would wait until its bound
//! and then cut the connection, which Envoy takes for a failure. Instead,
//! once the drain begins, an answer still streaming ends at its next pause
//! with the trailers of UNAVAILABLE, the status Envoy retries, elsewhere
//! since the connection got GOAWAY. A unary answer (RLS) is written whole
//! as soon as it is decided, never pauses, and is not touched.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::sync::watch;
use tonic::Status;
use tonic::codegen::Service;

/// Wraps a gRPC service so that its streaming answers end with UNAVAILABLE
/// once `draining` turns true.
#[derive(Clone)]
pub(super) struct EndsStreams<S> {
    inner: S,
    draining: watch::Receiver<bool>,
}

impl<S> EndsStreams<S> {
    pub(super) fn new(inner: S, draining: watch::Receiver<bool>) -> EndsStreams<S> {
        EndsStreams { inner, draining }
    }
}

impl<S, Request> Service<Request> for EndsStreams<S>
where
    S: Service<Request, Response = http::Response<tonic::body::Body>, Error = Infallible>,
{
    type Response = http::Response<EndsOnDrain>;
    type Error = Infallible;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        Answering {
            inner: self.inner.call(request),
            draining: Some(self.draining.clone()),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's answer, its body wrapped.
    pub(super) struct Answering<F> {
        #[pin]
        inner: F,
        draining: Option<watch::Receiver<bool>>,
    }
}

impl<F> Future for Answering<F>
where
    F: Future<Output = Result<http::Response<tonic::body::Body>, Infallible>>,
{
    type Output = Result<http::Response<EndsOnDrain>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(response) = std::task::ready!(this.inner.poll(cx));
        let draining = this.draining.take();
        Poll::Ready(Ok(response.map(|inner| EndsOnDrain {
            inner,
            draining,
            waiting: None,
            ended: false,
        })))
    }
}

/// A gRPC answer's body that ends with UNAVAILABLE when it pauses while
/// the drain is on.
pub(crate) struct EndsOnDrain {
    inner: tonic::body::Body,
    draining: Option<watch::Receiver<bool>>,
    /// Made only once the body pauses: a unary answer never pays for it.
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    ended: bool,
}

impl Body for EndsOnDrain {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        let Some(draining) = &this.draining else {
            return Poll::Pending;
        };
        let waiting = this.waiting.get_or_insert_with(|| {
            let mut draining = draining.clone();
            // A dropped sender means the server is gone: drained as well.
            Box::pin(async move {
                let _ = draining.wait_for(|draining| *draining).await;
            })
        });
        if waiting.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.ended = true;
        let mut trailers = http::HeaderMap::new();
        // Cannot fail: the message is plain ASCII.
        let _ =
            Status::unavailable("slidegate is shutting down: reconnect").add_header(&mut trailers);
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
