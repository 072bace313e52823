//! The gRPC faces' protobuf codec: prost's, except that bytes which do not
//! decode as the request are the caller's error (INVALID_ARGUMENT), not
//! the server's (tonic-prost answers INTERNAL). Named in `build.rs` as the
//! generated service's codec.

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

pub struct CallerCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for CallerCodec<T, U> {
    fn default() -> Self {
        CallerCodec(ProstCodec::default())
    }
}

impl<T, U> Codec for CallerCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CallerDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        self.0.encoder()
    }

    fn decoder(&mut self) -> CallerDecoder<U> {
        CallerDecoder(self.0.decoder())
    }
}

pub struct CallerDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for CallerDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!(
                "request: not a valid protobuf message: {}",
                status.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
