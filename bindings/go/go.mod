// The Go binding as a module, for module-mode users: require it and point a
// replace directive at this directory (it is not published):
//
//	require workload-identity v0.0.0
//	replace workload-identity => /path/to/workload-identity/bindings/go
//
// and import "workload-identity/wid" (bindings/go/README.md, "As a Go
// module", has the whole recipe). Package wid needs go-msgpack alone; the
// interop checks are a module of their own (interop/go.mod), so a plugin's
// module graph never names go-jose or x/crypto. GOPATH mode
// (GO111MODULE=off: scripts/go-env.sh and CI's tests) ignores this file and
// finds the same import paths; CI checks module mode offline as well
// (scripts/go-packaging-check.sh).
module workload-identity

go 1.19

require github.com/hashicorp/go-msgpack v0.5.5
