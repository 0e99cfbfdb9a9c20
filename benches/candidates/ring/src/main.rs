#[path = "../../common.rs"]
mod common;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair, UnparsedPublicKey};

fn main() {
    let rng = SystemRandom::new();
    let msg = vec![7u8; common::MSG_LEN];
    let ec = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &std::fs::read(std::env::var("WID_P256_P8").unwrap()).unwrap(), &rng).unwrap();
    let ec_pub = UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, ec.public_key().as_ref().to_vec());
    let sig = ec.sign(&rng, &msg).unwrap();
    let es_sign = common::time(2000, || { std::hint::black_box(ec.sign(&rng, &msg).unwrap()); });
    let es_verify = common::time(2000, || { ec_pub.verify(&msg, sig.as_ref()).unwrap(); });
    let rsa = RsaKeyPair::from_pkcs8(&std::fs::read(std::env::var("WID_RSA_P8").unwrap()).unwrap()).unwrap();
    let rsa_pub = UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, rsa.public_key().as_ref().to_vec());
    let mut rsig = vec![0u8; rsa.public().modulus_len()];
    rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, &msg, &mut rsig).unwrap();
    let rs_sign = common::time(300, || { let mut s = vec![0u8; rsa.public().modulus_len()]; rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, &msg, &mut s).unwrap(); std::hint::black_box(s); });
    let rs_verify = common::time(3000, || { rsa_pub.verify(&msg, &rsig).unwrap(); });
    println!("ring ES256 sign {es_sign:.1} us, verify {es_verify:.1} us; RS256-2048 sign {rs_sign:.1} us, verify {rs_verify:.1} us");
}
