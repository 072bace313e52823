//! Request bodies: read whole up to [`MAX_BODY_BYTES`], or refused with the
//! answer that says why; a refused body still in flight is drained.

use std::task::Poll;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::EXPECT;
use hyper::{Request, Response, StatusCode};

use super::api::{self, Body};
use super::{MAX_BODY_BYTES, READ_TIMEOUT};

/// How much of a refused body is read and dropped after the answer, and
/// for how long at most, so that the client can finish sending it and read
/// the answer (see [`drain_in_background`]).
const DRAIN_BYTES: usize = 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The whole body, or the response that refuses it: 413 over 64 KiB (told
/// by Content-Length up front, or found while reading), 408 when it does
/// not arrive in time, 400 when the client breaks off.
pub(super) async fn read_body(request: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    let too_large = || {
        api::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body: larger than {MAX_BODY_BYTES} bytes"),
        )
    };
    // The Content-Length hyper parsed and decodes the body by (none for a
    // chunked body): no second look-up and parse of the header.
    let declared = request.body().size_hint().exact();
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        // A client that waits for `100 Continue` has sent nothing to
        // drain, and reading would invite it to send.
        let waits_to_send = request.headers().contains_key(EXPECT);
        let body = request.into_body();
        if !waits_to_send {
            drain_in_background(body);
        }
        return Err(too_large());
    }
    let mut body = request.into_body();
    let read = {
        let reading = whole(&mut body);
        let mut reading = std::pin::pin!(reading);
        // A small body has nearly always arrived with its headers: take it
        // without arming a timer, which would cost every request.
        match std::future::poll_fn(|cx| Poll::Ready(reading.as_mut().poll(cx))).await {
            Poll::Ready(read) => Ok(read),
            Poll::Pending => tokio::time::timeout(READ_TIMEOUT, reading).await,
        }
    };
    match read {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(Unread::TooLarge)) => {
            drain_in_background(body);
            Err(too_large())
        }
        Ok(Err(Unread::Broken(error))) => Err(api::error(
            StatusCode::BAD_REQUEST,
            format!("body: could not be read: {error}"),
        )),
        Err(_) => Err(api::error(
            StatusCode::REQUEST_TIMEOUT,
            "body: not received in time",
        )),
    }
}

/// Why a body was not read whole.
enum Unread {
    TooLarge,
    Broken(hyper::Error),
}

/// The body's bytes, up to [`MAX_BODY_BYTES`]. A body of one frame (a
/// check's, nearly always) is its own bytes, not copied; a longer one is
/// gathered into one buffer. (http-body-util's `Limited` and `collect`
/// did the same through a queue of buffers and a copy out of it, most of
/// what reading a check's body cost in `bench/http_instructions.sh`.)
async fn whole(body: &mut Incoming) -> Result<Bytes, Unread> {
    let mut first = Bytes::new();
    let mut gathered: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Unread::Broken)?;
        // Trailers carry nothing a call reads.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if first.len() + gathered.len() + data.len() > MAX_BODY_BYTES {
            return Err(Unread::TooLarge);
        }
        if first.is_empty() && gathered.is_empty() {
            first = data;
        } else {
            if gathered.is_empty() {
                gathered.extend_from_slice(&first);
                first = Bytes::new();
            }
            gathered.extend_from_slice(&data);
        }
    }
    Ok(if gathered.is_empty() {
        first
    } else {
        Bytes::from(gathered)
    })
}

/// Read and drop the rest of a refused body while the answer goes out, up
/// to [`DRAIN_BYTES`] or [`DRAIN_TIME`], as nginx's lingering close does.
/// Closing a connection with data unread makes the kernel reset it, and a
/// client still writing its body then gets a broken pipe instead of the
/// answer. Past the bounds the connection is closed all the same: a client
/// cannot hold it with an endless body.
fn drain_in_background(mut body: Incoming) {
    tokio::spawn(async move {
        let mut left = DRAIN_BYTES;
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            while let Some(Ok(frame)) = body.frame().await {
                let size = frame.data_ref().map_or(0, Bytes::len);
                match left.checked_sub(size) {
                    Some(rest) => left = rest,
                    None => return,
                }
            }
        })
        .await;
    });
}
