#[path = "../../common.rs"]
mod common;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::pkcs8::DecodePrivateKey;
use rsa::pkcs1v15::{SigningKey as RsaSigningKey, VerifyingKey as RsaVerifyingKey};
use rsa::signature::SignatureEncoding;
use sha2::Sha256;

fn main() {
    let msg = vec![7u8; common::MSG_LEN];
    let ec = p256::ecdsa::SigningKey::from_pkcs8_der(&std::fs::read(std::env::var("WID_P256_P8").unwrap()).unwrap()).unwrap();
    let ec_pub = p256::ecdsa::VerifyingKey::from(&ec);
    let sig: p256::ecdsa::Signature = ec.sign(&msg);
    let es_sign = common::time(2000, || { let s: p256::ecdsa::Signature = ec.sign(&msg); std::hint::black_box(s); });
    let es_verify = common::time(2000, || { ec_pub.verify(&msg, &sig).unwrap(); });
    let rsa_key = rsa::RsaPrivateKey::from_pkcs8_der(&std::fs::read(std::env::var("WID_RSA_P8").unwrap()).unwrap()).unwrap();
    let rs = RsaSigningKey::<Sha256>::new(rsa_key);
    let rv = RsaVerifyingKey::<Sha256>::new(rs.as_ref().to_public_key());
    let rsig = rs.sign(&msg);
    let rs_sign = common::time(300, || { std::hint::black_box(rs.sign(&msg).to_bytes()); });
    let rs_verify = common::time(3000, || { rv.verify(&msg, &rsig).unwrap(); });
    println!("rustcrypto ES256 sign {es_sign:.1} us, verify {es_verify:.1} us; RS256-2048 sign {rs_sign:.1} us, verify {rs_verify:.1} us");
}
