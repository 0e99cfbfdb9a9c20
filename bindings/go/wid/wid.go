// Package wid is the Go binding of the workload-identity library's C ABI
// (include/workload_identity.h): it mints and verifies Ed25519-signed JWT
// workload identities bound to live allocations, compatible with Nomad's.
//
// A Keyring holds the signing and verification keys; Keyring.Issue signs the
// identity an IssueRequest (Nomad's structs, msgpack-encoded with go-msgpack
// exactly as Nomad does) asks for. A Verifier checks tokens against a
// Keyring, an audience and a StateStore that says whether the token's
// allocation is still live.
//
// Every failure is an *Error carrying the library's result code and detail
// message; compare with errors.Is against the sentinels (ErrExpired,
// ErrUnknownKey, ErrAllocationTerminal, ...).
//
// Concurrency: Keyrings and Verifiers are safe for concurrent use. A
// Verifier calls its StateStore from whichever goroutine (and OS thread)
// calls Verify, possibly from several at once, so a StateStore must be safe
// for concurrent use. Close waits for calls in flight and may be called more
// than once.
//
// Building: cgo needs the header and the library, given through CGO_CFLAGS
// and CGO_LDFLAGS (see bindings/go/README.md); this package adds
// -lpthread -ldl -lm itself.
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

// Derivation says how a key's 32 bytes of material become an Ed25519 key.
type Derivation uint32

// Key derivations.
const (
	// DerivationHKDFV1 derives the key with HKDF-SHA256 v1 (the default).
	DerivationHKDFV1 Derivation = C.WID_KEY_DERIVATION_HKDF_V1
	// DerivationNomadRawSeed uses the material as the Ed25519 seed (Nomad
	// compatibility).
	DerivationNomadRawSeed Derivation = C.WID_KEY_DERIVATION_NOMAD_RAW_SEED
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
