module github.com/workload-identity/workload-identity/bindings/go/interop

go 1.26.0

require (
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/workload-identity/workload-identity/bindings/go v0.0.0
)

require github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect

replace github.com/workload-identity/workload-identity/bindings/go => ../
