#!/usr/bin/env bash
# alg-candidates.sh -- ES256 and RS256 (2048) from three crypto stacks side by
# side, for the algorithm choice (issue 14): ring 0.17, aws-lc-rs 1, and the
# RustCrypto crates (p256 0.13, rsa 0.9). For each: the build time of a fresh
# release build (dependencies already downloaded), the stripped binary size of
# a program that signs and verifies both, and sign/verify time per operation.
# Keys are made here by openssl (a fresh P-256 and RSA-2048 PKCS#8 key).
# Results are recorded in BENCHMARKS.md ("Signing algorithm candidates").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
openssl ecparam -genkey -name prime256v1 -noout -out "$work/ec.pem" 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$work/ec.pem" -outform DER -out "$work/p256.p8"
openssl genrsa -out "$work/rsa.pem" 2048 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$work/rsa.pem" -outform DER -out "$work/rsa.p8"
export WID_P256_P8="$work/p256.p8" WID_RSA_P8="$work/rsa.p8"
for c in ring awslc rustcrypto; do
    dir="$root/benches/candidates/$c"
    (cd "$dir" && cargo fetch --locked -q)
    start=$SECONDS
    (cd "$dir" && CARGO_TARGET_DIR="$work/target-$c" cargo build --release --locked -q)
    built=$((SECONDS - start))
    bin="$work/target-$c/release/candidate-$c"
    strip -o "$work/$c.stripped" "$bin"
    size=$(wc -c < "$work/$c.stripped" | tr -d ' ')
    echo "$c: fresh release build ${built} s, stripped binary ${size} bytes"
    "$bin"
done
