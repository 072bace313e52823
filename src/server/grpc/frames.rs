//! The messages of a bidirectional gRPC stream, framed here rather than by
//! tonic's `Streaming` and `EncodeBody`, whose buffers grow to the largest
//! message seen and keep that size for the stream's life: a stream that
//! once carried a large message would hold its size for hours.
//!
//! Each message (a 5-byte prefix: a compressed flag, then its length) is
//! gathered in a buffer of its own, never larger than the message, which
//! is dropped once decoded; between messages a stream holds at most the
//! rest of one HTTP/2 data frame. Each answer is encoded in a buffer of
//! exactly its size, dropped once written. Reading is cancel-safe (all
//! state lives in [`Inbound`]), so a stream may `select!` on it.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Buf, Bytes, Frame};
use tokio::sync::mpsc;
use tonic::Status;
use tonic::body::Body;

/// The length prefix of a gRPC message.
const PREFIX_BYTES: usize = 5;
/// The most a message's buffer is given before its bytes arrive: a client
/// that announces a large message and sends nothing holds no more.
const FIRST_CAPACITY: usize = 16 * 1024;

/// Why the next message could not be read.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Its prefix announced more than the bound (`most`) allows; nothing of
    /// it was read.
    TooLarge { bytes: usize, most: usize },
    /// It was compressed: this server accepts no compression (and says so
    /// by sending no `grpc-accept-encoding`).
    Compressed,
    /// The request ended inside a message.
    Truncated,
    /// Its bytes are not the message expected.
    Undecodable(prost::DecodeError),
    /// The request body failed: the client reset the stream, or the
    /// connection went. Nobody is left to tell.
    Gone(Status),
}

/// The request side of a stream.
pub(crate) struct Inbound {
    body: Body,
    /// Received and not yet taken: the rest of one data frame.
    unread: Bytes,
    prefix: [u8; PREFIX_BYTES],
    prefix_read: usize,
    /// The message being gathered, and its announced length.
    gathering: Option<(usize, Vec<u8>)>,
}

impl Inbound {
    pub(crate) fn new(body: Body) -> Inbound {
        Inbound {
            body,
            unread: Bytes::new(),
            prefix: [0; PREFIX_BYTES],
            prefix_read: 0,
            gathering: None,
        }
    }

    /// The next message, of at most `max_bytes()` (asked when its prefix
    /// arrives, so that a bound changed meanwhile holds it); `None` when the
    /// client has closed its side between messages.
    pub(crate) async fn next<M: prost::Message + Default>(
        &mut self,
        max_bytes: impl Fn() -> usize,
    ) -> Result<Option<M>, Unread> {
        loop {
            if let Some(message) = self.take(&max_bytes)? {
                return M::decode(message).map(Some).map_err(Unread::Undecodable);
            }
            // The only await: dropping it loses nothing.
            match self.body.frame().await {
                None if self.prefix_read == 0 && self.gathering.is_none() => return Ok(None),
                None => return Err(Unread::Truncated),
                Some(Err(status)) => return Err(Unread::Gone(status)),
                // Trailers, or an empty frame: nothing to take.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.unread = data;
                    }
                }
            }
        }
    }

    /// A whole message from what has been received, if there is one:
    /// synchronous, so a cancelled read leaves the state whole.
    fn take(&mut self, max_bytes: impl Fn() -> usize) -> Result<Option<Bytes>, Unread> {
        if self.gathering.is_none() {
            let wanted = PREFIX_BYTES - self.prefix_read;
            let taken = wanted.min(self.unread.len());
            self.prefix[self.prefix_read..self.prefix_read + taken]
                .copy_from_slice(&self.unread[..taken]);
            self.unread.advance(taken);
            self.prefix_read += taken;
            if self.prefix_read < PREFIX_BYTES {
                return Ok(None);
            }
            if self.prefix[0] != 0 {
                return Err(Unread::Compressed);
            }
            let [_, length @ ..] = self.prefix;
            let bytes = u32::from_be_bytes(length) as usize;
            let most = max_bytes();
            if bytes > most {
                return Err(Unread::TooLarge { bytes, most });
            }
            self.prefix_read = 0;
            // A message within what is received is read where it lies.
            if self.unread.len() >= bytes {
                return Ok(Some(self.unread.split_to(bytes)));
            }
            self.gathering = Some((bytes, Vec::with_capacity(bytes.min(FIRST_CAPACITY))));
        }
        let Some((bytes, message)) = &mut self.gathering else {
            return Ok(None);
        };
        let taken = (*bytes - message.len()).min(self.unread.len());
        grow_within(message, taken, *bytes);
        message.extend_from_slice(&self.unread[..taken]);
        self.unread.advance(taken);
        if message.len() < *bytes {
            return Ok(None);
        }
        Ok(self
            .gathering
            .take()
            .map(|(_, message)| Bytes::from(message)))
    }
}

/// Room for `more` bytes in `message`, growing it as a `Vec` does but
/// never past `most`: a message's buffer is at most its own size.
fn grow_within(message: &mut Vec<u8>, more: usize, most: usize) {
    let needed = message.len() + more;
    if needed > message.capacity() {
        let target = (message.capacity() * 2).clamp(needed, most.max(needed));
        message.reserve_exact(target - message.len());
    }
}

/// One message as a gRPC frame, in a buffer of exactly its size.
pub(crate) fn encode(message: &impl prost::Message) -> Bytes {
    let length = message.encoded_len();
    let mut frame = Vec::with_capacity(PREFIX_BYTES + length);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    // A `Vec` grows for any message: encoding it cannot run out of room.
    let _ = message.encode(&mut frame);
    Bytes::from(frame)
}

/// The response side of a stream: the encoded messages sent on the queue,
/// then the trailers of the status it ends with (OK when the queue's
/// senders are all gone without an error).
pub(crate) struct Outbound {
    answers: mpsc::Receiver<Result<Bytes, Status>>,
    ended: bool,
}

impl Outbound {
    pub(crate) fn new(answers: mpsc::Receiver<Result<Bytes, Status>>) -> Outbound {
        Outbound {
            answers,
            ended: false,
        }
    }
}

impl HttpBody for Outbound {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let status = match ready!(self.answers.poll_recv(cx)) {
            Some(Ok(message)) => return Poll::Ready(Some(Ok(Frame::data(message)))),
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        self.ended = true;
        let mut trailers = http::HeaderMap::new();
        if let Err(unsendable) = status.add_header(&mut trailers) {
            // A message that makes no header: its code, and why not.
            trailers.clear();
            let _ = unsendable.add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that hands out `chunks` one at a time.
    fn body(chunks: Vec<Vec<u8>>) -> Body {
        let frames = chunks
            .into_iter()
            .map(|chunk| Ok::<_, Status>(Frame::data(Bytes::from(chunk))));
        Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames)))
    }

    fn framed(message: &prost_types::Duration) -> Vec<u8> {
        encode(message).to_vec()
    }

    #[tokio::test]
    async fn messages_split_and_joined_across_frames_are_read_whole() {
        let first = prost_types::Duration {
            seconds: 7,
            nanos: 1,
        };
        let second = prost_types::Duration {
            seconds: 300,
            nanos: 0,
        };
        let mut all = framed(&first);
        all.extend(framed(&second));
        // Every split of the two frames' bytes into two chunks.
        for at in 0..=all.len() {
            let chunks = vec![all[..at].to_vec(), all[at..].to_vec()];
            let mut inbound = Inbound::new(body(chunks));
            let read: Option<prost_types::Duration> = inbound.next(|| 64).await.unwrap();
            assert_eq!(read, Some(first), "split at {at}");
            assert_eq!(
                inbound.next(|| 64).await.unwrap(),
                Some(second),
                "split at {at}"
            );
            assert_eq!(
                inbound.next::<prost_types::Duration>(|| 64).await.unwrap(),
                None
            );
        }
    }

    #[tokio::test]
    async fn a_message_past_the_bound_is_refused_from_its_prefix() {
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&(10_000_000u32).to_be_bytes());
        let mut inbound = Inbound::new(body(vec![prefix]));
        let unread = inbound.next::<prost_types::Duration>(|| 1 << 20).await;
        assert!(
            matches!(
                unread,
                Err(Unread::TooLarge {
                    bytes: 10_000_000,
                    most: 1_048_576
                })
            ),
            "{unread:?}"
        );
    }

    #[tokio::test]
    async fn compressed_truncated_and_undecodable_messages_are_refused() {
        let whole = framed(&prost_types::Duration {
            seconds: 1,
            nanos: 0,
        });
        let mut compressed = whole.clone();
        compressed[0] = 1;
        let cut = whole[..whole.len() - 1].to_vec();
        let garbage = vec![0, 0, 0, 0, 2, 0xff, 0xff];
        for (chunks, expected) in [
            (vec![compressed], "Compressed"),
            (vec![cut], "Truncated"),
            (vec![vec![0, 0]], "Truncated"),
            (vec![garbage], "Undecodable"),
        ] {
            let mut inbound = Inbound::new(body(chunks));
            let unread = inbound
                .next::<prost_types::Duration>(|| 64)
                .await
                .unwrap_err();
            assert!(format!("{unread:?}").starts_with(expected), "{unread:?}");
        }
    }

    #[test]
    fn a_message_buffer_never_grows_past_the_message() {
        let mut message = Vec::with_capacity(4);
        for most in [10, 1_000, 100_000] {
            message.clear();
            message.shrink_to(4);
            while message.len() < most {
                let more = 7.min(most - message.len());
                grow_within(&mut message, more, most);
                message.extend(std::iter::repeat_n(0u8, more));
                assert!(
                    message.capacity() <= most,
                    "{} > {most}",
                    message.capacity()
                );
            }
        }
    }
}
