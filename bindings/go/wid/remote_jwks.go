package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"time"
)

// RemoteJWKSOptions configure a RemoteJWKS. The zero value means the
// library's defaults: Mozilla's root certificates, https only, a 5 s
// timeout per request, refreshes between 1 minute and 1 day apart (1 hour
// when a response has no Cache-Control max-age), 15 s between fetches
// started by unknown kids, bodies up to 512 KiB, at most 100 keys.
type RemoteJWKSOptions struct {
	// CABundlePEM, when set, holds the only certificates trusted (one or
	// more PEM CERTIFICATE blocks): for an issuer behind a private CA.
	CABundlePEM []byte
	// AllowHTTPLoopback allows plain http URLs whose host is a loopback
	// address (127.0.0.0/8, ::1, localhost): tests, a sidecar. Other http
	// URLs are always refused.
	AllowHTTPLoopback bool
	// Timeout is the whole time one request may take (0: 5 s; at most a
	// week). Rounded up to whole milliseconds.
	Timeout time.Duration
	// MinRefresh and MaxRefresh bound the time between successful fetches,
	// whatever the server's max-age says (0, 0: a minute and a day; set
	// both or neither; at most a week). MinRefresh is also the wait before
	// retrying after a failure.
	MinRefresh, MaxRefresh time.Duration
	// DefaultRefresh is the time between fetches when a response has no
	// max-age (0: an hour; clamped to the refresh bounds).
	DefaultRefresh time.Duration
	// UnknownKidCooldown is the least time between two fetches started by
	// unknown kids (0: 15 s; negative: none, only one fetch at a time).
	UnknownKidCooldown time.Duration
	// MaxBodyBytes is the largest response body read (0: 512 KiB; at most
	// 16 MiB).
	MaxBodyBytes int
	// MaxKeys is the most entries a JWKS may list (0: 100).
	MaxKeys int
}

// RemoteJWKS is a verify-only keyring that follows a remote JWKS (a
// wid_remote_jwks handle): fetched from its URL, or from the jwks_uri of an
// OIDC issuer's discovery document. Verifiers made over its Keyring see
// every successful fetch; a token whose kid the keyring does not hold
// starts a fetch while the verifier waits for the key (its KeyWait), at
// most one per UnknownKidCooldown. A failed fetch keeps the last good set.
// Safe for concurrent use.
//
// The C library must be built with the cargo feature remote-jwks (a default
// of the workload-identity-ffi crate, as scripts/go-tests.sh builds it);
// without it every constructor fails with ErrInvalidArgument saying so.
type RemoteJWKS struct {
	h owned[*C.wid_remote_jwks]
}

// NewRemoteJWKS makes a source for the JWKS at jwksURL (https, or http to
// loopback with AllowHTTPLoopback). Nothing is fetched yet: call Refresh at
// startup, StartRefresher, or let the first unknown kid fetch. A URL or an
// option the library refuses fails with ErrInvalidArgument naming it (the
// URL's query, which may carry a secret, is never quoted).
func NewRemoteJWKS(jwksURL string, opts *RemoteJWKSOptions) (*RemoteJWKS, error) {
	return newRemoteJWKS(jwksURL, false, opts)
}

// DiscoverRemoteJWKS is NewRemoteJWKS for an OIDC issuer: the source reads
// <issuer>/.well-known/openid-configuration, whose issuer must equal
// issuer exactly, and fetches its jwks_uri.
func DiscoverRemoteJWKS(issuer string, opts *RemoteJWKSOptions) (*RemoteJWKS, error) {
	return newRemoteJWKS(issuer, true, opts)
}

// millisCeil is d in whole milliseconds, rounded up.
func millisCeil(d time.Duration) C.uint64_t {
	return C.uint64_t((d + time.Millisecond - 1) / time.Millisecond)
}

func newRemoteJWKS(url string, discover bool, opts *RemoteJWKSOptions) (*RemoteJWKS, error) {
	if opts == nil {
		opts = &RemoteJWKSOptions{}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"Timeout", opts.Timeout}, {"MinRefresh", opts.MinRefresh}, {"MaxRefresh", opts.MaxRefresh},
		{"DefaultRefresh", opts.DefaultRefresh}} {
		if d.d < 0 {
			return nil, errNegative("RemoteJWKSOptions."+d.name, d.d)
		}
	}
	switch {
	case opts.MaxBodyBytes < 0 || opts.MaxKeys < 0:
		return nil, &Error{Code: ResultInvalidArgument,
			Message: "wid: RemoteJWKSOptions: MaxBodyBytes and MaxKeys must be >= 0"}
	case (opts.MinRefresh == 0) != (opts.MaxRefresh == 0):
		return nil, &Error{Code: ResultInvalidArgument,
			Message: "wid: RemoteJWKSOptions: set both MinRefresh and MaxRefresh, or neither"}
	}
	var b *C.wid_remote_jwks_builder
	if err := call(func() C.wid_result {
		u, n := strIn(url)
		if discover {
			return C.wid_remote_jwks_builder_new_discover(u, n, &b)
		}
		return C.wid_remote_jwks_builder_new(u, n, &b)
	}); err != nil {
		return nil, err
	}
	defer C.wid_remote_jwks_builder_free(b)

	var steps []func() C.wid_result
	if len(opts.CABundlePEM) > 0 {
		steps = append(steps, func() C.wid_result {
			p, n := bytesIn(opts.CABundlePEM)
			return C.wid_remote_jwks_builder_set_ca_bundle_pem(b, (*C.uint8_t)(ptr(p)), n)
		})
	}
	if opts.AllowHTTPLoopback {
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_allow_http_loopback(b, 1) })
	}
	if opts.Timeout > 0 {
		ms := millisCeil(opts.Timeout)
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_timeout_ms(b, ms) })
	}
	if opts.MinRefresh > 0 {
		lo, hi := millisCeil(opts.MinRefresh), millisCeil(opts.MaxRefresh)
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_refresh_bounds_ms(b, lo, hi) })
	}
	if opts.DefaultRefresh > 0 {
		ms := millisCeil(opts.DefaultRefresh)
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_default_refresh_ms(b, ms) })
	}
	if opts.UnknownKidCooldown != 0 {
		ms := C.uint64_t(0) // negative: no cooldown
		if opts.UnknownKidCooldown > 0 {
			ms = millisCeil(opts.UnknownKidCooldown)
		}
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(b, ms) })
	}
	if opts.MaxBodyBytes > 0 {
		n := C.size_t(opts.MaxBodyBytes)
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_max_body_bytes(b, n) })
	}
	if opts.MaxKeys > 0 {
		n := C.size_t(opts.MaxKeys)
		steps = append(steps, func() C.wid_result { return C.wid_remote_jwks_builder_set_max_keys(b, n) })
	}
	for _, step := range steps {
		if err := call(step); err != nil {
			return nil, err
		}
	}
	var r *C.wid_remote_jwks
	if err := call(func() C.wid_result { return C.wid_remote_jwks_builder_build(b, &r) }); err != nil {
		return nil, err
	}
	rj := &RemoteJWKS{}
	rj.h.p = r
	runtime.SetFinalizer(rj, (*RemoteJWKS).Close)
	return rj, nil
}

// Close releases the source after the calls in flight, stopping its
// refresher (after a fetch in progress, which the timeout bounds).
// Keyrings from Keyring keep their last keys but are no longer refreshed.
// Close is idempotent (a finalizer closes a forgotten source); other
// methods fail with ErrNullArgument afterwards.
func (r *RemoteJWKS) Close() {
	r.h.close(r, func(p *C.wid_remote_jwks) { C.wid_remote_jwks_free(p) })
}

func (r *RemoteJWKS) with(f func(rp *C.wid_remote_jwks) C.wid_result) error {
	return r.h.with("RemoteJWKS", f)
}

// Keyring returns the source's keyring, to give to NewVerifier: shared
// with the source, not a copy (each successful fetch replaces its keys).
// It belongs to the source: do not insert, rotate or import keys into it.
// Close the returned Keyring when done with it (its verifiers keep it
// alive); keep the RemoteJWKS open as long as it should be refreshed.
func (r *RemoteJWKS) Keyring() (*Keyring, error) {
	return r.h.keyring("RemoteJWKS", r, func(p *C.wid_remote_jwks, out **C.wid_keyring) C.wid_result {
		return C.wid_remote_jwks_keyring(p, out)
	})
}

// RefreshReport is what one successful fetch did.
type RefreshReport struct {
	// JWKSURI is the JWKS URL fetched (without its query).
	JWKSURI string `json:"jwks_uri"`
	// Keys are the kids of the remote set, now in the keyring.
	Keys []string `json:"keys"`
	// Added are kids new in this fetch (a kid whose key changed too).
	Added []string `json:"added"`
	// Removed are kids gone from the remote set, or replaced.
	Removed []string `json:"removed"`
	// Skipped counts entries that are not signing keys.
	Skipped int `json:"skipped"`
	// MaxAge is the freshness the response declared (Cache-Control
	// max-age), when HasMaxAge.
	MaxAge    time.Duration `json:"-"`
	HasMaxAge bool          `json:"-"`
	// NextRefreshIn is when the next fetch is due, from now.
	NextRefreshIn time.Duration `json:"-"`
}

// refreshReportJSON is wid_remote_jwks_refresh's document.
type refreshReportJSON struct {
	RefreshReport
	// Unsigned, as the library writes them: a max-age of more than
	// 2^63 ms (a server may send any) saturates at u64::MAX there.
	MaxAgeMs        *uint64 `json:"max_age_ms"`
	NextRefreshInMs uint64  `json:"next_refresh_in_ms"`
}

// Refresh fetches now (after a fetch in flight, if any: one at a time). On
// failure the keyring keeps its last good keys: a network or HTTP failure
// is ErrIOError, a body that is not an acceptable JWKS ErrDecodeError, a
// set the keyring refuses its code.
func (r *RemoteJWKS) Refresh() (*RefreshReport, error) {
	var out C.wid_bytes
	if err := r.with(func(rp *C.wid_remote_jwks) C.wid_result {
		return C.wid_remote_jwks_refresh(rp, &out)
	}); err != nil {
		return nil, err
	}
	var j refreshReportJSON
	if err := json.Unmarshal([]byte(takeString(&out)), &j); err != nil {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the refresh report: " + err.Error()}
	}
	rep := j.RefreshReport
	if j.MaxAgeMs != nil {
		rep.MaxAge, rep.HasMaxAge = durationMillis(*j.MaxAgeMs), true
	}
	rep.NextRefreshIn = durationMillis(j.NextRefreshInMs)
	return &rep, nil
}

// StartRefresher starts a background thread (in the library) that fetches
// whenever a fetch is due, until Close. Starting it again does nothing.
func (r *RemoteJWKS) StartRefresher() error {
	return r.with(func(rp *C.wid_remote_jwks) C.wid_result {
		return C.wid_remote_jwks_start_refresher(rp)
	})
}

// RemoteJWKSStats are what a RemoteJWKS has done so far.
type RemoteJWKSStats struct {
	Fetches              uint64    `json:"fetches"`                // fetches attempted
	Failures             uint64    `json:"failures"`               // fetches failed (the keys were kept)
	UnknownKidFetches    uint64    `json:"unknown_kid_fetches"`    // fetches started by unknown kids
	UnknownKidSuppressed uint64    `json:"unknown_kid_suppressed"` // unknown kids that started none
	Stale                bool      `json:"stale"`                  // the last fetch failed
	LastError            string    `json:"last_error"`             // the last failure ("" if none)
	LastAttempt          time.Time `json:"-"`                      // when the last fetch started (zero: none yet)
	LastSuccess          time.Time `json:"-"`                      // when the last success finished (zero: none yet)
	NextRefresh          time.Time `json:"-"`                      // when the next fetch is due (zero before the first)
	JWKSURI              *string   `json:"jwks_uri"`               // the JWKS URL in use, without its query (nil before discovery)
	Keys                 int       `json:"keys"`                   // keys held now
}

// remoteJWKSStatsJSON is wid_remote_jwks_stats's document.
type remoteJWKSStatsJSON struct {
	RemoteJWKSStats
	LastAttemptMs *int64 `json:"last_attempt_ms"`
	LastSuccessMs *int64 `json:"last_success_ms"`
	NextRefreshMs int64  `json:"next_refresh_ms"`
}

// Stats returns what the source has done so far.
func (r *RemoteJWKS) Stats() (RemoteJWKSStats, error) {
	var out C.wid_bytes
	if err := r.with(func(rp *C.wid_remote_jwks) C.wid_result {
		return C.wid_remote_jwks_stats(rp, &out)
	}); err != nil {
		return RemoteJWKSStats{}, err
	}
	var j remoteJWKSStatsJSON
	if err := json.Unmarshal([]byte(takeString(&out)), &j); err != nil {
		return RemoteJWKSStats{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the stats: " + err.Error()}
	}
	s := j.RemoteJWKSStats
	s.LastAttempt, s.LastSuccess = msTime(j.LastAttemptMs), msTime(j.LastSuccessMs)
	if j.NextRefreshMs != 0 {
		s.NextRefresh = time.UnixMilli(j.NextRefreshMs)
	}
	return s, nil
}
