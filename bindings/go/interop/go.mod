// The interop checks as a module of their own, so that the binding's module
// (../go.mod) needs Nomad's codec alone: go-jose v4 (both directions, every
// algorithm we sign; HKDF for the ES256 derivation is the standard
// library's crypto/hkdf), go-oidc v3 (discovery and rotation against `wid
// serve`) and go-spiffe v2 (JWT-SVIDs, the bundle endpoint over HTTPS, and
// cmd/gospiffebundle, a bundle for the Rust SpiffeBundleSource), and
// k8s.io/externaljwt's gRPC stubs with grpc-go (k8ssigner: `wid k8s-signer`
// called as kube-apiserver calls its external signer). Module mode only
// (scripts/go-tests.sh, scripts/spiffe-bundle-interop.sh).
module github.com/workload-identity/workload-identity/bindings/go/interop

go 1.26.0

require (
	github.com/coreos/go-oidc/v3 v3.21.0
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/spiffe/go-spiffe/v2 v2.9.0
	github.com/workload-identity/workload-identity/bindings/go v0.0.0
	google.golang.org/grpc v1.82.1
	k8s.io/externaljwt v0.37.2
)

require (
	github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/workload-identity/workload-identity/bindings/go => ../
