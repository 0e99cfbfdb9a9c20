package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"time"
)

// Explanation is why a Verifier accepts or rejects a token, step by step
// (wid_explain): the same steps and verdict `wid inspect --json` prints.
type Explanation struct {
	// Accepted is whether Verify would accept the token.
	Accepted bool `json:"accepted"`
	// Code is the result Verify returns for it (ResultOK when accepted).
	Code Result `json:"result"`
	// Steps are the checks run, in order (length, structure, key,
	// algorithm, signature, claims, times, audience, issuer, allocation, or node for a node token);
	// the first that failed is the last.
	Steps []VerificationStep `json:"steps"`

	// failure is the StateStore's (or NodeLookup's) failure behind a
	// ResultStoreUnavailable verdict, for Err.
	failure *callbackFailure
}

// VerificationStep is one check of an Explanation.
type VerificationStep struct {
	Name   string `json:"name"`   // "length", "structure", "key", ...
	Passed bool   `json:"passed"` // whether it passed
	Detail string `json:"detail"` // what was found; on failure, the error's message
}

// Failed is the step that failed, or nil when the token was accepted.
func (x *Explanation) Failed() *VerificationStep {
	for i := range x.Steps {
		if !x.Steps[i].Passed {
			return &x.Steps[i]
		}
	}
	return nil
}

// Err is the error Verify would return for the token (nil when accepted):
// an *Error with the code and the failed step's detail.
func (x *Explanation) Err() error {
	if x.Accepted {
		return nil
	}
	if x.failure != nil {
		return x.failure.asError(x.Code)
	}
	e := &Error{Code: x.Code}
	if f := x.Failed(); f != nil {
		e.Message = f.Detail
	}
	return e
}

// Explain verifies token at now (whole seconds) as Verify would, recording
// every check, and returns the steps and the verdict. The error is nil
// whenever an explanation was made, whatever the verdict (see
// Explanation.Err); it is an *Error only when the call itself failed (a
// closed Verifier, a token that is not UTF-8, the zero time.Time). Explain neither reads nor
// fills the verified-token cache, and Stats do not count its verdict; an
// unknown kid is waited for and the StateStore asked, as Verify would.
func (v *Verifier) Explain(token string, now time.Time) (*Explanation, error) {
	secs, err := unixSecs("Verifier.Explain: now", now)
	if err != nil {
		return nil, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.v == nil {
		return nil, errClosed("Verifier")
	}
	var out C.wid_bytes
	runtime.LockOSThread()
	tok, tokLen := strIn(token)
	rc := C.wid_explain(v.v, tok, tokLen, secs, &out)
	if rc != C.WID_RESULT_OK {
		err = &Error{Code: Result(rc), Message: lastErrorMessage()}
	}
	// A StateStore failure: its step tells it in Go's words, and Err
	// returns it with the store's error as the Cause.
	fs := v.state.log.claim()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	x, jerr := decodeExplanation(takeBytes(&out))
	if jerr != nil {
		return nil, jerr
	}
	if x.Code == ResultStoreUnavailable && len(fs) > 0 {
		f := fs[len(fs)-1]
		x.failure = &f
		if step := x.Failed(); step != nil {
			step.Detail = f.what + ": " + f.err.Error()
		}
	}
	return x, nil
}

// VerifierStats are what a Verifier has done so far (wid_verifier_stats).
// Counters only grow.
type VerifierStats struct {
	Accepted            uint64 `json:"accepted"`             // tokens accepted
	Rejected            uint64 `json:"rejected"`             // tokens rejected, for any reason
	ConsistentFallbacks uint64 `json:"consistent_fallbacks"` // stale "missing" answers asked again consistently
	KeyWaits            uint64 `json:"key_waits"`            // unknown kids waited for (Explain's included)
	CacheHits           uint64 `json:"cache_hits"`           // verifications answered by the token cache
	CacheEntries        uint64 `json:"cache_entries"`        // tokens in the cache now
}

// Stats returns what the verifier has done so far: tokens accepted and
// rejected by Verify, VerifyBatch and VerifyProof (not Explain), and the
// fallbacks, waits and cache use behind them.
func (v *Verifier) Stats() (VerifierStats, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.v == nil {
		return VerifierStats{}, errClosed("Verifier")
	}
	var out C.wid_bytes
	if err := call(func() C.wid_result { return C.wid_verifier_stats(v.v, &out) }); err != nil {
		return VerifierStats{}, err
	}
	var s VerifierStats
	if err := json.Unmarshal([]byte(takeString(&out)), &s); err != nil {
		return VerifierStats{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the stats: " + err.Error()}
	}
	return s, nil
}
