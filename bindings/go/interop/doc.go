// Package interop checks that tokens minted through package wid (the
// library's C ABI) are standard JWTs, for EdDSA, ES256 and RS256: go-jose v2
// verifies them with the keys of the exported JWKS, and tokens signed by
// go-jose verify with package wid. A Nomad-shaped RS256 JWKS and token built
// with crypto/rsa alone verify through package wid, and algorithm-confusion
// forgeries (HS256 keyed with the public key, alg none) are refused. It also
// holds the Verify and Issue benchmarks of package wid against go-jose.
//
// Everything is in the tests: go test workload-identity/interop.
package interop
