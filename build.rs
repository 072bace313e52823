//! Compiles the vendored Envoy RLS and RLQS protos (`proto/`) when the `grpc` feature
//! is on. protox parses them in Rust, so the build needs neither `protoc` nor
//! the network; the library without `grpc` compiles none of it.

fn main() {
    #[cfg(feature = "grpc")]
    if let Err(error) = compile_protos() {
        panic!("cannot compile the RLS and RLQS protos in proto/: {error}");
    }
}

#[cfg(feature = "grpc")]
fn compile_protos() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(
        [
            "envoy/service/ratelimit/v3/rls.proto",
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        // The generic client, for tests and load drivers; `connect` needs
        // tonic's transport, which the service does not otherwise use.
        .build_client(true)
        .build_transport(false)
        // Undecodable bytes are the caller's error (src/server/grpc/codec.rs).
        .codec_path("crate::server::grpc::codec::CallerCodec")
        .compile_fds(files)?;
    Ok(())
}
