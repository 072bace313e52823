//! What every gRPC face (Envoy RLS, Envoy RLQS) shares: its listener's
//! connections under the server's connection cap and quiet timeout, the API
//! token check, and the codec that makes undecodable bytes the caller's
//! error. One module, so the two faces cannot drift apart.
//!
//! | module | owns |
//! |---|---|
//! | `capped` | the listener's connections, under the server's connection cap |
//! | `codec` | prost's codec, with undecodable requests the caller's error |
//! | `frames` | a stream's messages framed by hand, in buffers of their own size |
//! | `ends_streams` | streaming answers ended with UNAVAILABLE when the drain begins |

mod capped;
pub(crate) mod codec;
mod ends_streams;
pub(crate) mod frames;

use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::Status;
use tonic::metadata::MetadataMap;
use tonic::service::Routes;

use super::App;

/// Calls or streams one HTTP/2 connection may have open at once; past it
/// the client waits for one to end (Envoy opens a handful).
pub(crate) const MAX_STREAMS_PER_CONNECTION: u32 = 100;

/// Serve `routes` on `listener` until `shutdown` completes: HTTP/2 without
/// TLS (as Envoy's `envoy_grpc` cluster with `http2_protocol_options`
/// speaks it), connections taken under `app`'s cap and closed after its
/// quiet timeout.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    routes: Routes,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    serve_service(listener, app, routes.prepare(), shutdown).await
}

/// [`serve`] for a face whose calls stream answers for as long as the
/// client keeps them (RLQS): once `shutdown` completes, each such answer
/// ends with UNAVAILABLE at its next pause (`ends_streams`), so the drain
/// does not wait for streams that never end.
pub(crate) async fn serve_streams(
    listener: TcpListener,
    app: Arc<App>,
    routes: Routes,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let (drain, draining) = tokio::sync::watch::channel(false);
    let service = ends_streams::EndsStreams::new(routes.prepare(), draining);
    let shutdown = async move {
        shutdown.await;
        drain.send_replace(true);
    };
    serve_service(listener, app, service, shutdown).await
}

async fn serve_service<S, ResBody>(
    listener: TcpListener,
    app: Arc<App>,
    service: S,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error>
where
    S: tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<ResBody>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
    ResBody: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let incoming = capped::incoming(listener, app.clone());
    // Pings that a live peer answers within its quiet timeout (`capped`).
    let ping_every = app.guard.quiet_timeout() / 3;
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(ping_every))
        // Each connection counts once under the connection cap; what one
        // may carry at once is bounded too (tonic sets no limit).
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .serve_with_incoming_shutdown(service, incoming, shutdown)
        .await
}

/// UNAUTHENTICATED unless the call carries a valid API token (when tokens
/// are set): the tokens guard the gRPC faces as they guard /v1/check. Envoy
/// sends one as `initial_metadata` of its `grpc_service`.
pub(crate) fn authorize(app: &App, metadata: &MetadataMap) -> Result<(), Status> {
    authorize_value(app, metadata.get("authorization"))
}

/// [`authorize`] for an `authorization` value kept from a call's start: a
/// stream checks it again at each message, under the tokens in force then.
pub(crate) fn authorize_value(
    app: &App,
    authorization: Option<&tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
) -> Result<(), Status> {
    let live = app.live();
    match (app.guard).token_refusal(&live.tokens, authorization.map(|value| value.as_bytes())) {
        Some(message) => Err(Status::unauthenticated(message)),
        None => Ok(()),
    }
}
