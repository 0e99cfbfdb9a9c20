// The Go binding of workload-identity (package wid, over the C ABI with cgo).
// This line is where the module path is said once; every doc and example
// imports github.com/workload-identity/workload-identity/bindings/go/wid.
// Until the repository is published, a plugin's go.mod points the path at a
// checkout with a replace directive (bindings/go/README.md).
//
// The binding needs Nomad's codec alone (go-msgpack/v2, as Nomad 1.7+ and
// 2.x use it); the interop checks are modules of their own (interop/go.mod,
// ../../tests/go.mod), so a plugin's module graph never names go-jose,
// go-oidc or go-spiffe.
module github.com/workload-identity/workload-identity/bindings/go

go 1.26.0

require github.com/hashicorp/go-msgpack/v2 v2.1.5
