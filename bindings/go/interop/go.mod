// The interop checks (go-jose v2, and x/crypto's HKDF to derive the ES256 key
// as the library does) as a module of their own, so that the binding's module
// (../go.mod) needs Nomad's codec alone. CI runs them in GOPATH mode
// (scripts/go-tests.sh), where this file is ignored.
module workload-identity/interop

go 1.19

require (
	golang.org/x/crypto v0.4.0
	gopkg.in/square/go-jose.v2 v2.6.0
	workload-identity v0.0.0
)

require github.com/hashicorp/go-msgpack v0.5.5 // indirect

replace workload-identity => ../
