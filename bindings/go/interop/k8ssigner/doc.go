// Package k8ssigner checks `wid k8s-signer` as kube-apiserver meets it: an
// external JWT signer (KEP-740) on a Unix socket, called through the
// generated gRPC stubs of k8s.io/externaljwt/apis/v1 over insecure
// credentials with authority localhost, the way the apiserver's
// externaljwt plugin dials it. The tests hold the apiserver's own checks
// of Metadata, FetchKeys and Sign's header, verify every token with go-jose
// v4 against the keys FetchKeys lists and against the JWKS `wid serve`
// publishes, and follow the signer through key rotation, SIGKILL and
// restart, socket ownership and two signers sharing one keyring in etcd.
//
// Everything is in the tests (go test ./... with WID_BIN naming the `wid`
// binary, as scripts/go-tests.sh sets it; etcd on PATH). The package runs
// the binary only: no cgo, no binding.
package k8ssigner
