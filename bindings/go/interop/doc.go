// Package interop checks package wid (the library's C ABI) against the Go
// relying parties people run, as a module of its own so that the binding's
// module graph never names them:
//
//   - go-jose v4: tokens minted through package wid (EdDSA, ES256, RS256;
//     workload, node, SPIFFE, WIT and WPT) verify with the keys of the
//     exported JWKS, with only the algorithm each relying party expects
//     allowed, and tokens signed by go-jose verify with package wid. A
//     Nomad-shaped RS256 JWKS and token built with crypto/rsa alone verify
//     through package wid, and algorithm-confusion forgeries (HS256 keyed
//     with the public key, alg none) are refused by both.
//   - go-oidc v3: discovery, verification and key rotation against a running
//     `wid serve` (the CLI, $WID_BIN).
//   - go-spiffe v2: our JWT-SVIDs through jwtsvid.ParseAndValidate, and `wid
//     serve`'s SPIFFE bundle endpoint through federation.FetchBundle over
//     HTTPS. The other direction, a bundle go-spiffe writes for our Rust
//     SpiffeBundleSource to read, is cmd/gospiffebundle (run by
//     scripts/spiffe-bundle-interop.sh).
//
// Package k8ssigner (its own directory) calls `wid k8s-signer` over its Unix
// socket with k8s.io/externaljwt's gRPC stubs, as kube-apiserver calls an
// external JWT signer; it runs the wid binary only.
//
// It also holds the Verify and Issue benchmarks of package wid against
// go-jose. Everything is in the tests: go test ./... in this directory, with
// the cgo flags of the C library and WID_BIN (scripts/go-tests.sh).
package interop
