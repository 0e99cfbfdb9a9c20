// The Go programs CI runs beside the Rust tests: go/msgpack (the wire format
// against Nomad's codec, go-msgpack/v2 and v0.5.5), go/verifyonly (go-jose
// v4 writes the verify-only algorithms' vectors), go/ed25519seed (crypto/
// ed25519 checks the keyring vectors) and seed001/host (a Go host on the
// binding, killed and restored), plus the pinned staticcheck CI runs.
module github.com/workload-identity/workload-identity/tests

go 1.26.0

require (
	github.com/hashicorp/go-msgpack v0.5.5
	github.com/hashicorp/go-msgpack/v2 v2.1.5
	github.com/workload-identity/workload-identity/bindings/go v0.0.0
	gopkg.in/square/go-jose.v2 v2.6.0
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/crypto v0.59.0 // indirect
)

replace github.com/workload-identity/workload-identity/bindings/go => ../bindings/go
