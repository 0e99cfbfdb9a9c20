package wid

// #include "wid_helpers.h"
import "C"

import (
	"fmt"
	"runtime"
)

// Result is a library result code (wid_result). The values are stable.
type Result uint32

// Result codes, one for every WID_RESULT_* of the C ABI.
const (
	ResultOK                   Result = C.WID_RESULT_OK                    // success
	ResultNullArgument         Result = C.WID_RESULT_NULL_ARGUMENT         // a required pointer was NULL (or a handle was closed)
	ResultInvalidArgument      Result = C.WID_RESULT_INVALID_ARGUMENT      // an argument was not acceptable
	ResultDecodeError          Result = C.WID_RESULT_DECODE_ERROR          // bytes could not be decoded
	ResultIOError              Result = C.WID_RESULT_IO_ERROR              // a file or OS operation failed
	ResultPanic                Result = C.WID_RESULT_PANIC                 // a panic was contained in the library
	ResultMalformedToken       Result = C.WID_RESULT_MALFORMED_TOKEN       // not a well-formed compact JWS
	ResultUnsupportedAlgorithm Result = C.WID_RESULT_UNSUPPORTED_ALGORITHM // alg is not the algorithm of the kid's key
	ResultUnknownKey           Result = C.WID_RESULT_UNKNOWN_KEY           // kid names no usable key
	ResultBadSignature         Result = C.WID_RESULT_BAD_SIGNATURE         // the signature does not verify
	ResultExpired              Result = C.WID_RESULT_EXPIRED               // the token expired
	ResultNotYetValid          Result = C.WID_RESULT_NOT_YET_VALID         // the token is not valid yet
	ResultAudienceMismatch     Result = C.WID_RESULT_AUDIENCE_MISMATCH     // the token is not for this audience
	ResultIssuerMismatch       Result = C.WID_RESULT_ISSUER_MISMATCH       // the token's iss is not the required issuer
	ResultTokenKindRefused     Result = C.WID_RESULT_TOKEN_KIND_REFUSED    // a node token where allocation tokens are accepted, or the reverse
	ResultAllocationNotFound   Result = C.WID_RESULT_ALLOCATION_NOT_FOUND  // the allocation does not exist
	ResultAllocationTerminal   Result = C.WID_RESULT_ALLOCATION_TERMINAL   // the allocation is terminal
	ResultStoreUnavailable     Result = C.WID_RESULT_STORE_UNAVAILABLE     // the state store could not answer (failed closed)
	ResultNodeNotFound         Result = C.WID_RESULT_NODE_NOT_FOUND        // the node a node token names does not exist
	ResultNodeDown             Result = C.WID_RESULT_NODE_DOWN             // the node a node token names is down
	ResultNoActiveKey          Result = C.WID_RESULT_NO_ACTIVE_KEY         // no key is active
	ResultDuplicateKey         Result = C.WID_RESULT_DUPLICATE_KEY         // a key with this ID already exists
	ResultKeyringConflict      Result = C.WID_RESULT_KEYRING_CONFLICT      // a replicated keyring changed under the plan (plan again)
	ResultKeyringUnavailable   Result = C.WID_RESULT_KEYRING_UNAVAILABLE   // a replicated keyring's etcd could not answer
	ResultTokenExchangeFailed  Result = C.WID_RESULT_TOKEN_EXCHANGE_FAILED // a token-exchange hook failed (Rust manager only)
	ResultProofRequired        Result = C.WID_RESULT_PROOF_REQUIRED        // a WIT was presented as a bearer token (see VerifyProof)
	ResultProofInvalid         Result = C.WID_RESULT_PROOF_INVALID         // a proof of possession (WPT) failed a check
	ResultProofReplayed        Result = C.WID_RESULT_PROOF_REPLAYED        // a proof of possession was used before
	ResultKeyCustodyFailed     Result = C.WID_RESULT_KEY_CUSTODY_FAILED    // a KEK or a KMS signer failed (key custody)
)

// resultNames is the library's own table (wid_result_name), read once: the
// codes and their names live in one place, the Rust enum behind the C header.
var resultNames = func() map[Result]string {
	names := make(map[Result]string)
	// Codes are small numbers (the header's largest is 60); 256 leaves room for
	// codes added later without touching this file.
	for r := Result(0); r < 256; r++ {
		if n := libraryResultName(r); n != "WID_RESULT_UNKNOWN" {
			names[r] = n
		}
	}
	return names
}()

// Results lists every result code the library knows, in increasing order.
func Results() []Result {
	rs := make([]Result, 0, len(resultNames))
	for r := Result(0); r < 256; r++ {
		if _, ok := resultNames[r]; ok {
			rs = append(rs, r)
		}
	}
	return rs
}

// String returns the code's C name, e.g. "WID_RESULT_EXPIRED"
// ("WID_RESULT_UNKNOWN(<n>)" for a code the library does not know).
func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("WID_RESULT_UNKNOWN(%d)", uint32(r))
}

// Error is a failed library call: its result code and the library's detail
// message (read from the calling thread right after the call).
//
// Errors compare by code: errors.Is(err, wid.ErrExpired) holds for every
// *Error whose Code is ResultExpired, whatever its message.
type Error struct {
	// Code is the library's result code (never ResultOK).
	Code Result
	// Message is the library's detail (wid_last_error_message), or, when a
	// Go callback failed (Cause), which callback and for what in Go's
	// words; empty for the sentinel values and for per-token VerifyBatch
	// results the library gave no detail for.
	Message string
	// Cause is the error of the Go callback that made the call fail: the
	// StateStore's or NodeLookup's (Code ResultStoreUnavailable), the
	// Signer's or an Exchange's (IdentityManager.Start, Restore); a
	// callback's panic value as an error. nil otherwise. Unwrap returns it,
	// so errors.Is and errors.As reach it.
	Cause error
}

// Error returns "<code name>: <message>", or the code name alone. When a Go
// callback's error is the Cause, it is a Go error's text instead:
// "<message>: <cause>", such as `wid: the StateStore failed for allocation
// "a1" (stale): raft: no leader`.
func (e *Error) Error() string {
	if e.Cause != nil && e.Message != "" {
		return e.Message + ": " + e.Cause.Error()
	}
	s := e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// Unwrap returns the Go callback's error behind the failure, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Sentinel errors, one per failure code, for errors.Is.
var (
	ErrNullArgument         = &Error{Code: ResultNullArgument}
	ErrInvalidArgument      = &Error{Code: ResultInvalidArgument}
	ErrDecodeError          = &Error{Code: ResultDecodeError}
	ErrIOError              = &Error{Code: ResultIOError}
	ErrPanic                = &Error{Code: ResultPanic}
	ErrMalformedToken       = &Error{Code: ResultMalformedToken}
	ErrUnsupportedAlgorithm = &Error{Code: ResultUnsupportedAlgorithm}
	ErrUnknownKey           = &Error{Code: ResultUnknownKey}
	ErrBadSignature         = &Error{Code: ResultBadSignature}
	ErrExpired              = &Error{Code: ResultExpired}
	ErrNotYetValid          = &Error{Code: ResultNotYetValid}
	ErrAudienceMismatch     = &Error{Code: ResultAudienceMismatch}
	ErrIssuerMismatch       = &Error{Code: ResultIssuerMismatch}
	ErrTokenKindRefused     = &Error{Code: ResultTokenKindRefused}
	ErrAllocationNotFound   = &Error{Code: ResultAllocationNotFound}
	ErrAllocationTerminal   = &Error{Code: ResultAllocationTerminal}
	ErrStoreUnavailable     = &Error{Code: ResultStoreUnavailable}
	ErrNodeNotFound         = &Error{Code: ResultNodeNotFound}
	ErrNodeDown             = &Error{Code: ResultNodeDown}
	ErrNoActiveKey          = &Error{Code: ResultNoActiveKey}
	ErrDuplicateKey         = &Error{Code: ResultDuplicateKey}
	ErrKeyringConflict      = &Error{Code: ResultKeyringConflict}
	ErrKeyringUnavailable   = &Error{Code: ResultKeyringUnavailable}
	ErrTokenExchangeFailed  = &Error{Code: ResultTokenExchangeFailed}
	ErrProofRequired        = &Error{Code: ResultProofRequired}
	ErrProofInvalid         = &Error{Code: ResultProofInvalid}
	ErrProofReplayed        = &Error{Code: ResultProofReplayed}
	ErrKeyCustodyFailed     = &Error{Code: ResultKeyCustodyFailed}
)

// errClosed is what methods of a closed Keyring or Verifier return: the
// library would see a NULL handle.
func errClosed(what string) error {
	return &Error{Code: ResultNullArgument, Message: "wid: use of a closed " + what}
}

// lastErrorMessage reads this thread's last error detail. The caller must
// hold the OS thread (runtime.LockOSThread) since the failing call.
func lastErrorMessage() string {
	var buf [256]byte
	n := C.wid_last_error_message((*C.char)(bytePtr(buf[:])), C.size_t(len(buf)))
	if n == 0 {
		return ""
	}
	if int(n) < len(buf) {
		return string(buf[:n])
	}
	big := make([]byte, int(n)+1)
	m := C.wid_last_error_message((*C.char)(bytePtr(big)), C.size_t(len(big)))
	if int(m) > len(big)-1 {
		m = C.size_t(len(big) - 1)
	}
	return string(big[:m])
}

// call runs one library call on a locked OS thread and turns a failure into
// an *Error carrying that thread's last error message.
func call(f func() C.wid_result) error {
	runtime.LockOSThread()
	rc := f()
	var err error
	if rc != C.WID_RESULT_OK {
		err = &Error{Code: Result(rc), Message: lastErrorMessage()}
	}
	runtime.UnlockOSThread()
	return err
}

// libraryResultName is wid_result_name(r): the library names its codes.
func libraryResultName(r Result) string {
	return C.GoString(C.wid_result_name(C.wid_result(r)))
}
