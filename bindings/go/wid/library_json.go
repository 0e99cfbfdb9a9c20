package wid

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// The decoders of the JSON documents the library writes for the binding
// (the identity manager's health and restore reports, a verification's
// explanation), apart from the calls that fetch them, so that the fuzz
// targets (fuzz_test.go) run exactly this code. A document that is not
// what the library writes is ErrDecodeError, never a zero value taken as
// decoded.

// decodeHealth decodes wid_identity_manager_health_json's document.
func decodeHealth(raw []byte) (IdentityManagerHealth, error) {
	var j healthJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return IdentityManagerHealth{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the identity manager's health: " + err.Error()}
	}
	h := IdentityManagerHealth{
		AllocID:       j.AllocID,
		SignFailures:  j.SignFailures,
		LastSignError: str(j.LastSignError),
		NextSigning:   msTime(j.NextSigningMs),
		AtRisk:        j.AtRisk,
	}
	for _, i := range j.Identities {
		ih := IdentityHealth{Identity: IdentityID{Workload: i.Workload, Name: i.Identity}, Valid: i.Valid}
		if i.ExpiresAt != nil {
			ih.ExpiresAt = time.Unix(*i.ExpiresAt, 0)
		}
		if i.ExpiresInMs != nil {
			ih.ExpiresIn = signedDurationMillis(*i.ExpiresInMs)
		}
		h.Identities = append(h.Identities, ih)
	}
	for _, x := range j.Exchanges {
		h.Exchanges = append(h.Exchanges, ExchangeHealth{
			Name:        x.Name,
			Identity:    IdentityID{Workload: x.Workload, Name: x.Identity},
			HasSecret:   x.HasSecret,
			HeldBack:    x.HeldBack,
			Failures:    x.Failures,
			NextAttempt: msTime(x.NextAttemptMs),
			LastError:   str(x.LastError),
		})
	}
	return h, nil
}

// decodeRestoreReport decodes wid_identity_manager_restore's report.
func decodeRestoreReport(raw []byte) (RestoreReport, error) {
	var r RestoreReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return RestoreReport{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the restore report: " + err.Error()}
	}
	return r, nil
}

// decodeExplanation decodes wid_explain's document. Its verdict must be
// one: accepted exactly when the result is ResultOK (else Err would make
// an error of a success, or nil of a refusal).
func decodeExplanation(raw []byte) (*Explanation, error) {
	var x Explanation
	if err := json.Unmarshal(raw, &x); err != nil {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the explanation: " + err.Error()}
	}
	if x.Accepted != (x.Code == ResultOK) {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the explanation: \"accepted\" " +
			strconv.FormatBool(x.Accepted) + " with result " + x.Code.String() +
			" (accepted means WID_RESULT_OK, and only it)"}
	}
	return &x, nil
}

// durationMillis is ms milliseconds, saturated at the longest Duration
// (about 292 years) instead of wrapping.
func durationMillis(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// signedDurationMillis is durationMillis for a signed count, saturated at
// both ends.
func signedDurationMillis(ms int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > limit:
		return math.MaxInt64
	case ms < -limit:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}
