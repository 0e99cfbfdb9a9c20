// The Go binding as a module, for module-mode users: require it and point a
// replace directive at this directory (it is not published):
//
//	require workload-identity v0.0.0
//	replace workload-identity => /path/to/workload-identity/bindings/go
//
// and import "workload-identity/wid". GOPATH mode (GO111MODULE=off, what CI and
// scripts/go-env.sh use) ignores this file and finds the same import path.
module workload-identity

go 1.19

require github.com/hashicorp/go-msgpack v0.5.5

// Only the interop checks (package workload-identity/interop) use go-jose
// and x/crypto (HKDF, to derive the ES256 key as the library does).
require (
	golang.org/x/crypto v0.4.0
	gopkg.in/square/go-jose.v2 v2.6.0
)
