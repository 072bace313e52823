//! `StreamRateLimitQuotas` as an HTTP/2 service of its own, over the
//! framing of `grpc::frames` rather than tonic's generated server, whose
//! `Streaming` keeps a receive buffer the size of the largest report for
//! the stream's life: here what a stream keeps is what it tracks.

use std::convert::Infallible;
use std::future::{Ready, ready};

use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{Context, Poll, Service, http};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;

use super::service::RlqsService;
use crate::server::grpc::frames::Inbound;

/// The service's one method.
const METHOD: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

#[derive(Clone)]
pub(super) struct RlqsRoute(pub RlqsService);

impl NamedService for RlqsRoute {
    const NAME: &'static str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
}

impl Service<http::Request<Body>> for RlqsRoute {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        ready(Ok(self.open(request)))
    }
}

impl RlqsRoute {
    /// The response to a new stream: its answers as they come, or a
    /// refusal at once.
    fn open(&self, request: http::Request<Body>) -> http::Response<Body> {
        if request.uri().path() != METHOD {
            return refused(Status::unimplemented(""));
        }
        let encoding = request.headers().get("grpc-encoding");
        if let Some(encoding) = encoding.filter(|encoding| encoding.as_bytes() != b"identity") {
            return refused(Status::unimplemented(format!(
                "grpc-encoding: {encoding:?}: this server accepts no compressed reports"
            )));
        }
        let (parts, body) = request.into_parts();
        let metadata = MetadataMap::from_headers(parts.headers);
        match self.0.open(&metadata, Inbound::new(body)) {
            Ok(answers) => {
                let mut response = http::Response::new(Body::new(answers));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                response
            }
            Err(status) => refused(status),
        }
    }
}

/// A stream ended before it started, with `status` (a gRPC trailers-only
/// response).
fn refused(status: Status) -> http::Response<Body> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    http::Response::from_parts(parts, Body::empty())
}
