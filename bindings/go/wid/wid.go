// Package wid is the Go binding of the workload-identity library's C ABI
// (the workload-identity-ffi crate, include/workload_identity.h in the
// repository; installed as include/workload_identity.h and
// libworkload_identity.so/.a): it mints and verifies JWT workload
// identities bound to live allocations, compatible with Nomad's, signed with
// EdDSA (Ed25519, the default), ES256 (ECDSA P-256) or RS256 (RSA PKCS#1
// v1.5).
//
// A Keyring holds the signing and verification keys, at most one active key
// per algorithm; Keyring.Issue signs the identity an IssueRequest (Nomad's
// structs, msgpack-encoded with go-msgpack exactly as Nomad does) asks for
// with the active EdDSA key, Keyring.IssueAlg with the active key of another
// algorithm. An Issuer (NewIssuer) signs with a configuration checked once:
// an iss, an algorithm, SPIFFE JWT-SVIDs, WIMSE WITs and Nomad 2.0.3 extra
// claims. A Verifier checks tokens of every algorithm against a Keyring,
// an audience and a StateStore that says whether the token's allocation is
// still live; a token's alg must be the algorithm of the key its kid names.
// Verifier.Explain says step by step why a token is accepted or refused, and
// Verifier.Stats what a verifier has done. A RemoteJWKS keeps a keyring in
// step with an issuer's remote JWKS (or OIDC discovery document), for
// verifying tokens this process did not issue.
//
// An IdentityManager (NewIdentityManager) keeps one allocation's identities
// signed, renewed, saved and restored after a restart, signed by an Issuer
// (IssuerSigner) or the host's own Signer, and runs the token exchanges
// that consume them (VaultLogin, or a host Exchange), telling every new
// token and secret on the channels of Watch.
//
// Every failure is an *Error carrying the library's result code and detail
// message; compare with errors.Is against the sentinels (ErrExpired,
// ErrUnknownKey, ErrAllocationTerminal, ...).
//
// Concurrency: Keyrings, Issuers and Verifiers are safe for concurrent use. A
// Verifier calls its StateStore from whichever goroutine (and OS thread)
// calls Verify, possibly from several at once, so a StateStore must be safe
// for concurrent use. Close waits for calls in flight and may be called more
// than once.
//
// Building: cgo needs the header and the library, given through CGO_CFLAGS
// and CGO_LDFLAGS (from a checkout: -I<repo>/include and
// <cargo target dir>/release/libworkload_identity_ffi.a, after cargo build
// --release -p workload-identity-ffi), or, with the build tag wid_pkgconfig,
// from the installed library's workload_identity.pc (scripts/install.sh; see
// bindings/go/README.md); this package
// adds -lpthread -ldl -lm itself. Without either, the build stops with a
// message saying so (wid_header.h).
//
// Times are time.Time and spans time.Duration throughout; a zero time.Time
// is refused with ErrInvalidArgument naming the argument. Errors of the Go
// callbacks (StateStore, NodeLookup, Signer, Exchange) come back as the
// *Error's Cause, for errors.Is and errors.As.
package wid

// #cgo LDFLAGS: -lpthread -ldl -lm
// #include "wid_helpers.h"
import "C"

import "strconv"

// ABIVersion is the C ABI version this binding was written against
// (WID_ABI_VERSION in the header it was compiled with).
const ABIVersion = uint32(C.WID_ABI_VERSION)

// LibraryABIVersion is the ABI version of the linked library
// (wid_abi_version); it must equal ABIVersion.
func LibraryABIVersion() uint32 { return uint32(C.wid_abi_version()) }

// Version is the linked library's version, such as "0.1.0".
func Version() string { return C.GoString(C.wid_version()) }

// Alg is a signing algorithm (wid_alg). Every key has exactly one,
// fixed when the key is made.
//
// Which to use: AlgEdDSA where the relying party accepts it (Vault, Consul):
// the smallest tokens and keys, fast signing. AlgES256 for AWS STS and
// GCP workload identity federation (and SPIFFE JWT-SVID validators): its
// keys derive from 32 bytes of material like EdDSA's. AlgRS256 where only
// RSA is accepted (Azure federated credentials), and for verifying the
// RS256 tokens Nomad 1.7+ issues.
type Alg uint32

// Signing algorithms.
const (
	AlgEdDSA Alg = C.WID_ALG_EDDSA // EdDSA over Ed25519 (RFC 8037); the default
	AlgES256 Alg = C.WID_ALG_ES256 // ECDSA over P-256 with SHA-256 (RFC 7518 3.4)
	AlgRS256 Alg = C.WID_ALG_RS256 // RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 3.3)
)

// KeyPurpose is what a key signs, fixed when the key is made: bearer tokens
// (published in the JWKS relying parties trust) or WIMSE workload identity
// tokens (WITs, published only in the WIT key set). A WIT is shown to every
// service its workload calls, so a key that signs WITs must never verify
// where bearer tokens are accepted.
type KeyPurpose uint32

// Key purposes (the C ABI's WID_KEY_PURPOSE_* values).
const (
	PurposeBearer KeyPurpose = C.WID_KEY_PURPOSE_BEARER // bearer tokens; every key made before purposes existed
	PurposeWIT    KeyPurpose = C.WID_KEY_PURPOSE_WIT    // workload identity tokens only (IssueWIT, VerifyProof)
	// PurposeKubernetes signs a Kubernetes cluster's service-account tokens
	// (wid k8s-signer) with ES256 or RS256 keys; JWKSPurpose(PurposeKubernetes)
	// is the cluster issuer's key set, never the JWKS.
	PurposeKubernetes KeyPurpose = C.WID_KEY_PURPOSE_KUBERNETES
)

// String returns the JOSE name ("EdDSA", "ES256", "RS256").
func (a Alg) String() string {
	switch a {
	case AlgEdDSA:
		return "EdDSA"
	case AlgES256:
		return "ES256"
	case AlgRS256:
		return "RS256"
	}
	return "Alg(" + strconv.FormatUint(uint64(a), 10) + ")"
}

// Derivation says how a key's material becomes a private key.
type Derivation uint32

// Key derivations.
const (
	// DerivationHKDFV1 derives the key from 32 bytes of material with
	// HKDF-SHA256 v1, the key ID as info (the default; EdDSA and ES256).
	DerivationHKDFV1 Derivation = C.WID_KEY_DERIVATION_HKDF_V1
	// DerivationNomadRawSeed uses the 32 bytes of material as the Ed25519
	// seed (Nomad compatibility; EdDSA only).
	DerivationNomadRawSeed Derivation = C.WID_KEY_DERIVATION_NOMAD_RAW_SEED
	// DerivationPKCS8: the material is a PKCS#8 DER private key, e.g. from
	// x509.MarshalPKCS8PrivateKey (RS256 only).
	DerivationPKCS8 Derivation = C.WID_KEY_DERIVATION_PKCS8
)

// KeyState is a key's place in its life cycle.
type KeyState uint32

// Key states.
const (
	KeyStateActive       KeyState = C.WID_KEY_STATE_ACTIVE       // signs (and verifies)
	KeyStateInactive     KeyState = C.WID_KEY_STATE_INACTIVE     // verifies only
	KeyStatePrepublished KeyState = C.WID_KEY_STATE_PREPUBLISHED // published ahead of signing
	KeyStateDeprecated   KeyState = C.WID_KEY_STATE_DEPRECATED   // neither signs nor verifies
)

// Consistency is how fresh a StateStore answer must be.
type Consistency uint32

// Consistency levels.
const (
	// Stale: the local replica (may lag). Always asked first.
	Stale Consistency = C.WID_CONSISTENCY_STALE
	// Consistent: agreed with the leader. Asked only when the stale answer
	// was Missing.
	Consistent Consistency = C.WID_CONSISTENCY_CONSISTENT
)

// String returns "stale" or "consistent".
func (c Consistency) String() string {
	switch c {
	case Stale:
		return "stale"
	case Consistent:
		return "consistent"
	}
	return "Consistency(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// AllocState is an allocation's state as a StateStore reports it.
type AllocState uint32

// Allocation states.
const (
	Missing  AllocState = C.WID_ALLOC_MISSING  // no such allocation
	Live     AllocState = C.WID_ALLOC_LIVE     // exists, not terminal
	Terminal AllocState = C.WID_ALLOC_TERMINAL // client-terminal
)

// String returns "missing", "live" or "terminal".
func (s AllocState) String() string {
	switch s {
	case Missing:
		return "missing"
	case Live:
		return "live"
	case Terminal:
		return "terminal"
	}
	return "AllocState(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// NodeState is a client node's state as a Verifier's node lookup reports it
// (VerifierOptions.NodeLookup), for node identity tokens.
type NodeState uint32

// Node states.
const (
	NodeMissing NodeState = C.WID_NODE_MISSING // no such node
	NodeLive    NodeState = C.WID_NODE_LIVE    // ready, initializing or disconnected
	NodeDown    NodeState = C.WID_NODE_DOWN    // down (or a status Nomad does not define)
)

// String returns "missing", "live" or "down".
func (s NodeState) String() string {
	switch s {
	case NodeMissing:
		return "missing"
	case NodeLive:
		return "live"
	case NodeDown:
		return "down"
	}
	return "NodeState(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// NodeTokens says which kinds of identity token a Verifier accepts
// (VerifierOptions.NodeTokens). The claims decide a token's kind: a node
// token (Keyring.IssueNode) carries nomad_node_id and none of the allocation
// claims.
type NodeTokens uint32

// Token kinds a Verifier accepts.
const (
	// NodeTokensRefuse: allocation tokens only (the default); a node token
	// fails with ErrTokenKindRefused.
	NodeTokensRefuse NodeTokens = C.WID_NODE_TOKENS_REFUSE
	// NodeTokensAccept: both kinds, node tokens bound to their node through
	// VerifierOptions.NodeLookup.
	NodeTokensAccept NodeTokens = C.WID_NODE_TOKENS_ACCEPT
	// NodeTokensOnly: node tokens only; an allocation token fails with
	// ErrTokenKindRefused.
	NodeTokensOnly NodeTokens = C.WID_NODE_TOKENS_ONLY
)

// String returns "refuse", "accept" or "only".
func (n NodeTokens) String() string {
	switch n {
	case NodeTokensRefuse:
		return "refuse"
	case NodeTokensAccept:
		return "accept"
	case NodeTokensOnly:
		return "only"
	}
	return "NodeTokens(" + strconv.FormatUint(uint64(n), 10) + ")"
}
