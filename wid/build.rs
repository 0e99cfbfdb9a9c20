//! Generates the `v1.ExternalJWTSigner` server (`wid k8s-signer`) from
//! proto/externaljwt_v1.proto with protox, a protobuf compiler in Rust (no
//! `protoc` to install), and tonic's code generator.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/externaljwt_v1.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
