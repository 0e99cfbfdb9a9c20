// Package interop checks that tokens minted through package wid (the
// library's C ABI) are standard JWTs: go-jose v2 verifies them with the keys
// of the exported JWKS, and tokens signed by go-jose verify with package wid.
// It also holds the Verify benchmarks of package wid against go-jose.
//
// Everything is in the tests: go test workload-identity/interop.
package interop
