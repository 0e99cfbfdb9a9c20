package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"time"
)

// sourceSetters are the setters of a remote key source's builder
// (wid_remote_jwks_builder_set_* or wid_spiffe_bundle_source_builder_set_*,
// bound to one builder), for applyRemoteOptions.
type sourceSetters struct {
	caBundlePEM          func(p *C.uint8_t, n C.size_t) C.wid_result
	allowHTTPLoopback    func() C.wid_result
	timeoutMs            func(ms C.uint64_t) C.wid_result
	refreshBoundsMs      func(lo, hi C.uint64_t) C.wid_result
	defaultRefreshMs     func(ms C.uint64_t) C.wid_result
	unknownKidCooldownMs func(ms C.uint64_t) C.wid_result
	maxBodyBytes         func(n C.size_t) C.wid_result
	maxKeys              func(n C.size_t) C.wid_result
}

// applyRemoteOptions checks opts as RemoteJWKSOptions documents them and
// calls the setters of the options set, in order, stopping at the first
// refusal.
func applyRemoteOptions(opts *RemoteJWKSOptions, set sourceSetters) error {
	if opts == nil {
		return nil
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"Timeout", opts.Timeout}, {"MinRefresh", opts.MinRefresh}, {"MaxRefresh", opts.MaxRefresh},
		{"DefaultRefresh", opts.DefaultRefresh}} {
		if d.d < 0 {
			return errNegative("RemoteJWKSOptions."+d.name, d.d)
		}
	}
	switch {
	case opts.MaxBodyBytes < 0 || opts.MaxKeys < 0:
		return &Error{Code: ResultInvalidArgument,
			Message: "wid: RemoteJWKSOptions: MaxBodyBytes and MaxKeys must be >= 0"}
	case (opts.MinRefresh == 0) != (opts.MaxRefresh == 0):
		return &Error{Code: ResultInvalidArgument,
			Message: "wid: RemoteJWKSOptions: set both MinRefresh and MaxRefresh, or neither"}
	}
	var steps []func() C.wid_result
	if len(opts.CABundlePEM) > 0 {
		steps = append(steps, func() C.wid_result {
			p, n := bytesIn(opts.CABundlePEM)
			return set.caBundlePEM((*C.uint8_t)(ptr(p)), n)
		})
	}
	if opts.AllowHTTPLoopback {
		steps = append(steps, set.allowHTTPLoopback)
	}
	if opts.Timeout > 0 {
		ms := millisCeil(opts.Timeout)
		steps = append(steps, func() C.wid_result { return set.timeoutMs(ms) })
	}
	if opts.MinRefresh > 0 {
		lo, hi := millisCeil(opts.MinRefresh), millisCeil(opts.MaxRefresh)
		steps = append(steps, func() C.wid_result { return set.refreshBoundsMs(lo, hi) })
	}
	if opts.DefaultRefresh > 0 {
		ms := millisCeil(opts.DefaultRefresh)
		steps = append(steps, func() C.wid_result { return set.defaultRefreshMs(ms) })
	}
	if opts.UnknownKidCooldown != 0 {
		ms := C.uint64_t(0) // negative: no cooldown
		if opts.UnknownKidCooldown > 0 {
			ms = millisCeil(opts.UnknownKidCooldown)
		}
		steps = append(steps, func() C.wid_result { return set.unknownKidCooldownMs(ms) })
	}
	if opts.MaxBodyBytes > 0 {
		n := C.size_t(opts.MaxBodyBytes)
		steps = append(steps, func() C.wid_result { return set.maxBodyBytes(n) })
	}
	if opts.MaxKeys > 0 {
		n := C.size_t(opts.MaxKeys)
		steps = append(steps, func() C.wid_result { return set.maxKeys(n) })
	}
	for _, step := range steps {
		if err := call(step); err != nil {
			return err
		}
	}
	return nil
}

// SpiffeBundleSource follows a peer SPIFFE trust domain's bundle through
// its bundle endpoint (SPIFFE Federation, https_web; a
// wid_spiffe_bundle_source handle): its jwt-svid authorities become the
// keys of a verify-only Keyring (give it to a TrustedIssuer with the
// TrustDomain, or to NewVerifier), its wit-svid authorities WIT keys, and
// its x509-svid entries are skipped. The bundle's spiffe_refresh_hint
// schedules the next fetch, within the refresh bounds. Once a bundle with
// a spiffe_sequence was taken, a bundle with a lower one, or with none, is
// a rollback: refused (ErrDecodeError; counted in
// SpiffeBundleSourceStats.SequenceRefusals) with the held keys kept, until
// ResetSequence. A failed fetch keeps the last good bundle; a token whose
// kid the keyring does not hold starts a fetch, as for a RemoteJWKS. Safe
// for concurrent use.
//
// The C library must be built with the cargo feature remote-jwks (a
// default); without it NewSpiffeBundleSource fails with ErrInvalidArgument
// saying so.
type SpiffeBundleSource struct {
	h           owned[*C.wid_spiffe_bundle_source]
	trustDomain string
}

// NewSpiffeBundleSource makes a source for the trust domain trustDomain
// (without spiffe://: lower-case letters, digits, '.', '-', '_') whose
// bundle endpoint is bundleURL (https, or http to loopback with
// AllowHTTPLoopback; no redirect is followed). opts (nil: the defaults)
// are RemoteJWKSOptions' settings, with the same defaults and limits;
// MaxKeys counts the bundle's entries, skipped ones included. Nothing is
// fetched yet: call Refresh at startup, StartRefresher, or let the first
// unknown kid fetch. A bad trust domain, URL or option fails with
// ErrInvalidArgument naming it (the URL's query is never quoted).
func NewSpiffeBundleSource(trustDomain, bundleURL string, opts *RemoteJWKSOptions) (*SpiffeBundleSource, error) {
	var b *C.wid_spiffe_bundle_source_builder
	if err := call(func() C.wid_result {
		t, tn := strIn(trustDomain)
		u, un := strIn(bundleURL)
		return C.wid_spiffe_bundle_source_builder_new(t, tn, u, un, &b)
	}); err != nil {
		return nil, err
	}
	defer C.wid_spiffe_bundle_source_builder_free(b)
	err := applyRemoteOptions(opts, sourceSetters{
		caBundlePEM: func(p *C.uint8_t, n C.size_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_ca_bundle_pem(b, p, n)
		},
		allowHTTPLoopback: func() C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_allow_http_loopback(b, 1)
		},
		timeoutMs: func(ms C.uint64_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_timeout_ms(b, ms)
		},
		refreshBoundsMs: func(lo, hi C.uint64_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_refresh_bounds_ms(b, lo, hi)
		},
		defaultRefreshMs: func(ms C.uint64_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_default_refresh_ms(b, ms)
		},
		unknownKidCooldownMs: func(ms C.uint64_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_unknown_kid_cooldown_ms(b, ms)
		},
		maxBodyBytes: func(n C.size_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_max_body_bytes(b, n)
		},
		maxKeys: func(n C.size_t) C.wid_result {
			return C.wid_spiffe_bundle_source_builder_set_max_keys(b, n)
		},
	})
	if err != nil {
		return nil, err
	}
	var s *C.wid_spiffe_bundle_source
	if err := call(func() C.wid_result { return C.wid_spiffe_bundle_source_builder_build(b, &s) }); err != nil {
		return nil, err
	}
	src := &SpiffeBundleSource{trustDomain: trustDomain}
	src.h.p = s
	runtime.SetFinalizer(src, (*SpiffeBundleSource).Close)
	return src, nil
}

// TrustDomain is the peer's trust domain, as given.
func (s *SpiffeBundleSource) TrustDomain() string { return s.trustDomain }

// Close releases the source after the calls in flight, stopping its
// refresher (after a fetch in progress, which the timeout bounds).
// Keyrings from Keyring keep their last keys but are no longer refreshed.
// Close is idempotent (a finalizer closes a forgotten source); other
// methods fail with ErrNullArgument afterwards.
func (s *SpiffeBundleSource) Close() {
	s.h.close(s, func(p *C.wid_spiffe_bundle_source) { C.wid_spiffe_bundle_source_free(p) })
}

func (s *SpiffeBundleSource) with(f func(sp *C.wid_spiffe_bundle_source) C.wid_result) error {
	return s.h.with("SpiffeBundleSource", f)
}

// Keyring returns the source's keyring: shared with the source, not a copy
// (each bundle taken replaces its keys). It belongs to the source: do not
// insert, rotate or import keys into it. Close the returned Keyring when
// done with it (its verifiers and trust sets keep it alive); while it is
// reachable, so is the source (the garbage collector does not close it
// under a keyring in use).
func (s *SpiffeBundleSource) Keyring() (*Keyring, error) {
	return s.h.keyring("SpiffeBundleSource", s, func(p *C.wid_spiffe_bundle_source, out **C.wid_keyring) C.wid_result {
		return C.wid_spiffe_bundle_source_keyring(p, out)
	})
}

// SpiffeBundleReport is what one successful fetch of the bundle did.
type SpiffeBundleReport struct {
	// BundleURL is the URL fetched (without its query).
	BundleURL string `json:"bundle_url"`
	// Keys are the kids of the bundle's authorities, now in the keyring.
	Keys []string `json:"keys"`
	// Added are kids new in this fetch (a kid whose key changed too).
	Added []string `json:"added"`
	// Removed are kids gone from the bundle, or replaced.
	Removed []string `json:"removed"`
	// Skipped counts entries that verify no token (x509-svid ones).
	Skipped int `json:"skipped"`
	// MaxAge is the freshness the response declared, when HasMaxAge.
	MaxAge    time.Duration `json:"-"`
	HasMaxAge bool          `json:"-"`
	// RefreshHint is the bundle's spiffe_refresh_hint, when HasRefreshHint.
	RefreshHint    time.Duration `json:"-"`
	HasRefreshHint bool          `json:"-"`
	// Sequence is the bundle's spiffe_sequence, when HasSequence.
	Sequence    uint64 `json:"-"`
	HasSequence bool   `json:"-"`
	// NextRefreshIn is when the next fetch is due, from now.
	NextRefreshIn time.Duration `json:"-"`
}

// spiffeBundleReportJSON is wid_spiffe_bundle_source_refresh's document.
type spiffeBundleReportJSON struct {
	SpiffeBundleReport
	MaxAgeMs        *uint64 `json:"max_age_ms"`
	RefreshHintMs   *uint64 `json:"refresh_hint_ms"`
	Sequence        *uint64 `json:"sequence"`
	NextRefreshInMs uint64  `json:"next_refresh_in_ms"`
}

// Refresh fetches the bundle now (after a fetch in flight, if any: one at
// a time). On failure the keyring keeps the bundle it holds: a network or
// HTTP failure (a redirect included) is ErrIOError; a body that is no
// acceptable bundle, or a rollback (a spiffe_sequence lower than the one
// held, or none once one was held), ErrDecodeError; a key set the keyring
// refuses its code.
func (s *SpiffeBundleSource) Refresh() (*SpiffeBundleReport, error) {
	var out C.wid_bytes
	if err := s.with(func(sp *C.wid_spiffe_bundle_source) C.wid_result {
		return C.wid_spiffe_bundle_source_refresh(sp, &out)
	}); err != nil {
		return nil, err
	}
	var j spiffeBundleReportJSON
	if err := json.Unmarshal([]byte(takeString(&out)), &j); err != nil {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the refresh report: " + err.Error()}
	}
	rep := j.SpiffeBundleReport
	if j.MaxAgeMs != nil {
		rep.MaxAge, rep.HasMaxAge = durationMillis(*j.MaxAgeMs), true
	}
	if j.RefreshHintMs != nil {
		rep.RefreshHint, rep.HasRefreshHint = durationMillis(*j.RefreshHintMs), true
	}
	if j.Sequence != nil {
		rep.Sequence, rep.HasSequence = *j.Sequence, true
	}
	rep.NextRefreshIn = durationMillis(j.NextRefreshInMs)
	return &rep, nil
}

// StartRefresher starts a background thread (in the library) that fetches
// whenever a fetch is due, until Close. Starting it again does nothing.
func (s *SpiffeBundleSource) StartRefresher() error {
	return s.with(func(sp *C.wid_spiffe_bundle_source) C.wid_result {
		return C.wid_spiffe_bundle_source_start_refresher(sp)
	})
}

// SpiffeBundleSourceStats are what a SpiffeBundleSource has done so far:
// RemoteJWKSStats' counters (JWKSURI is the bundle URL; a rollback refused
// counts as a failure too, its message in LastError), the trust domain,
// the spiffe_sequence of the bundle held and the bundles refused as
// rollbacks.
type SpiffeBundleSourceStats struct {
	RemoteJWKSStats
	TrustDomain      string `json:"trust_domain"`
	BundleURL        string `json:"bundle_url"`        // the bundle URL, without its query
	Sequence         uint64 `json:"-"`                 // the sequence held, when HasSequence
	HasSequence      bool   `json:"-"`                 // false before the first, for a bundle without one, after a reset
	SequenceRefusals uint64 `json:"sequence_refusals"` // bundles refused as rollbacks
}

// spiffeBundleSourceStatsJSON is wid_spiffe_bundle_source_stats's document.
type spiffeBundleSourceStatsJSON struct {
	SpiffeBundleSourceStats
	LastAttemptMs *int64  `json:"last_attempt_ms"`
	LastSuccessMs *int64  `json:"last_success_ms"`
	NextRefreshMs int64   `json:"next_refresh_ms"`
	Sequence      *uint64 `json:"sequence"`
}

// Stats returns what the source has done so far.
func (s *SpiffeBundleSource) Stats() (SpiffeBundleSourceStats, error) {
	var out C.wid_bytes
	if err := s.with(func(sp *C.wid_spiffe_bundle_source) C.wid_result {
		return C.wid_spiffe_bundle_source_stats(sp, &out)
	}); err != nil {
		return SpiffeBundleSourceStats{}, err
	}
	var j spiffeBundleSourceStatsJSON
	if err := json.Unmarshal([]byte(takeString(&out)), &j); err != nil {
		return SpiffeBundleSourceStats{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the stats: " + err.Error()}
	}
	st := j.SpiffeBundleSourceStats
	st.LastAttempt, st.LastSuccess = msTime(j.LastAttemptMs), msTime(j.LastSuccessMs)
	if j.NextRefreshMs != 0 {
		st.NextRefresh = time.UnixMilli(j.NextRefreshMs)
	}
	url := st.BundleURL
	st.JWKSURI = &url
	if j.Sequence != nil {
		st.Sequence, st.HasSequence = *j.Sequence, true
	}
	return st, nil
}

// ResetSequence is the operator's reset of the rollback protection: it
// forgets the spiffe_sequence held, so that the next bundle is taken
// whatever its sequence (or none): for a peer that restarted its sequence
// on purpose. The keys held stay until that fetch. It returns the sequence
// forgotten, and whether one was held (the library logs the reset).
func (s *SpiffeBundleSource) ResetSequence() (previous uint64, had bool, err error) {
	var prev C.uint64_t
	var h C.uint32_t
	if err := s.with(func(sp *C.wid_spiffe_bundle_source) C.wid_result {
		return C.wid_spiffe_bundle_source_reset_sequence(sp, &prev, &h)
	}); err != nil {
		return 0, false, err
	}
	return uint64(prev), h == 1, nil
}
