//! Requests that are the caller's error, answered INVALID_ARGUMENT naming
//! the field: a bad field, more descriptors than allowed, bytes that are not
//! a request.

use tonic::transport::Channel;

use super::{CONFIG, Code, TestRls, codes, descriptor, memory, request};

#[tokio::test]
async fn bad_requests_are_invalid_argument_naming_the_field() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mut too_many = descriptor(&[("five", "x")]);
    too_many.hits_addend = Some(u64::MAX);
    let mut bad_unit = descriptor(&[("five", "x")]);
    bad_unit.limit = Some(
        slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 99,
        },
    );
    let cases = [
        (request("", vec![descriptor(&[("a", "b")])]), "domain"),
        (request("test", vec![]), "descriptors"),
        (
            request("test", vec![descriptor(&[])]),
            "descriptors[0].entries",
        ),
        (
            request("test", vec![descriptor(&[("a", "b"), ("", "c")])]),
            "descriptors[0].entries[1].key",
        ),
        (
            request("test", vec![descriptor(&[("a", "b")]), too_many]),
            "descriptors[1].hits_addend",
        ),
        (request("test", vec![bad_unit]), "descriptors[0].limit.unit"),
    ];
    for (request, field) in cases {
        let status = client.should_rate_limit(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{field}");
        assert!(
            status.message().starts_with(&format!("{field}: ")),
            "{field}: {}",
            status.message()
        );
    }
    // Any bytes in keys and values are fine: they never reach the store.
    let odd = request(
        "test",
        vec![descriptor(&[
            ("client", "a b\n\u{0}\u{1F600}"),
            ("x", &"v".repeat(10_000)),
        ])],
    );
    assert_eq!(codes(&mut client, odd).await.0, Code::Ok);
}

/// A request is bounded like an HTTP body: more descriptors than
/// `rls.max_descriptors` (64 by default) is the caller's error, decided
/// before anything is read or counted.
#[tokio::test]
async fn more_descriptors_than_max_descriptors_are_invalid_argument() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let many = |count: usize| {
        let descriptors = (0..count)
            .map(|index| descriptor(&[("five", &format!("many-{index}"))]))
            .collect();
        request("test", descriptors)
    };
    let status = client.should_rate_limit(many(65)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("descriptors: at most 64 descriptors, got 65"),
        "{}",
        status.message()
    );
    assert_eq!(codes(&mut client, many(64)).await.0, Code::Ok);
}

/// Bytes that are not a `RateLimitRequest` are the caller's error:
/// INVALID_ARGUMENT, not INTERNAL. Sent as a raw gRPC message through
/// tonic's client with a codec that writes the bytes as they are.
#[tokio::test]
async fn an_undecodable_request_is_invalid_argument() {
    use prost::bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Default)]
    struct Raw;
    impl Encoder for Raw {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
            dst.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for Raw {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Self::Error> {
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Raw;
        type Decoder = Raw;
        fn encoder(&mut self) -> Raw {
            Raw
        }
        fn decoder(&mut self) -> Raw {
            Raw
        }
    }

    let rls = TestRls::start(memory(), CONFIG).await;
    let channel = Channel::from_shared(format!("http://{}", rls.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    // Field 1 (domain) as a string of bytes that are not UTF-8, then a
    // tag of wire type 7, which does not exist.
    for garbage in [vec![0x0a, 0x02, 0xff, 0xfe], vec![0xff; 16]] {
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(tonic::Request::new(garbage.clone()), path.clone(), Raw)
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{garbage:?}: {}",
            status.message()
        );
        assert!(
            status.message().starts_with("request: "),
            "{}",
            status.message()
        );
    }
    // The connection still serves well-formed calls.
    let mut client = rls.client().await;
    assert_eq!(
        codes(
            &mut client,
            request("test", vec![descriptor(&[("five", "raw")])])
        )
        .await
        .0,
        Code::Ok
    );
}
