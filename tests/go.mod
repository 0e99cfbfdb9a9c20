// The Go programs CI runs beside the Rust tests: go/msgpack (the wire format
// against Nomad's codec, go-msgpack/v2 and v0.5.5), go/verifyonly (go-jose
// v4 writes the verify-only algorithms' vectors), go/ed25519seed (crypto/
// ed25519 checks the keyring vectors) and seed001/host (a Go host on the
// binding, killed and restored), plus the pinned staticcheck CI runs.
module github.com/workload-identity/workload-identity/tests

go 1.26.0

require (
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/hashicorp/go-msgpack v0.5.5
	github.com/hashicorp/go-msgpack/v2 v2.1.5
	github.com/workload-identity/workload-identity/bindings/go v0.0.0
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

replace github.com/workload-identity/workload-identity/bindings/go => ../bindings/go

tool honnef.co/go/tools/cmd/staticcheck
