package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// StateStore tells a Verifier whether a token's allocation is live.
//
// AllocationState is called from whichever goroutine calls Verify or
// VerifyBatch, possibly from several at once: implementations must be safe
// for concurrent use. It is asked with Stale first and with Consistent only
// when the stale answer was Missing. An error (or a panic, or a state other
// than Missing, Live and Terminal) makes the verification fail closed with
// ErrStoreUnavailable; the error is then the *Error's Cause (errors.Is and
// errors.As reach it), and its message says so in Go's words:
// `wid: the StateStore failed for allocation "<id>" (stale): <your error>`.
//
// AllocationState must not call back into the Verifier it serves.
type StateStore interface {
	AllocationState(allocID string, c Consistency) (AllocState, error)
}

// StateStoreFunc adapts a function to a StateStore.
type StateStoreFunc func(allocID string, c Consistency) (AllocState, error)

// AllocationState calls f.
func (f StateStoreFunc) AllocationState(allocID string, c Consistency) (AllocState, error) {
	return f(allocID, c)
}

// VerifierOptions tunes a Verifier. The zero value (or nil) means the
// library's defaults.
type VerifierOptions struct {
	// Leeway is the clock skew allowed on exp, nbf and iat (0: the
	// default, 60 s; negative: none). It is rounded up to whole seconds.
	Leeway time.Duration
	// KeyWait is how long Verify waits for a token's unknown kid to appear in
	// the keyring (0: the default, 1s; negative: no wait). It is rounded up
	// to whole milliseconds.
	KeyWait time.Duration
	// MaxTokenBytes is the longest token accepted (0: the default, 8192).
	MaxTokenBytes int
	// RequireExp rejects tokens without an exp claim.
	RequireExp bool
	// CacheEntries is the size of the verified-token cache (0: no cache;
	// larger than 1048576: clamped to 1048576). Memory grows with the entries
	// cached, not with this number.
	CacheEntries int
	// Issuer, when set, is the iss claim tokens must carry.
	Issuer string
	// RequireProof makes the verifier require proof of possession: Verify
	// and VerifyBatch refuse every token (ErrProofRequired), and only a WIT
	// with a valid proof passes VerifyProof. (A WIT is never accepted as a
	// bearer token, whatever this says.)
	RequireProof bool
	// MaxProofLifetime is the longest a proof (WPT) may be valid for,
	// counted from now: VerifyProof refuses one whose exp is further ahead
	// (beyond the leeway) with ErrProofInvalid (0: the default, 5 minutes;
	// negative is invalid). It is rounded up to whole seconds.
	MaxProofLifetime time.Duration
	// ProofReplayCapacity is the room in the proof replay cache: the most
	// proofs remembered at once until they expire (0: the default, 100000;
	// else at least 16). When it is full of unexpired proofs new ones are
	// refused (ErrProofReplayed); one workload key may hold 1/64 of it.
	ProofReplayCapacity int
	// NodeTokens says which kinds of identity token the verifier accepts:
	// the zero value, NodeTokensRefuse, allocation tokens only (a node
	// token fails with ErrTokenKindRefused); NodeTokensAccept both;
	// NodeTokensOnly node tokens only. A node token passes only while
	// NodeLookup says its node is live (ErrNodeNotFound, ErrNodeDown).
	NodeTokens NodeTokens
	// NodeLookup tells the verifier whether a node token's node is live, as
	// the StateStore does for allocations: it is asked with Stale first and
	// with Consistent only when the stale answer was NodeMissing, from
	// whichever goroutine verifies, possibly from several at once (it must
	// be safe for concurrent use and must not call back into the
	// Verifier). An error, a panic, or a state other than NodeMissing,
	// NodeLive and NodeDown fails closed with ErrStoreUnavailable, the
	// error being the *Error's Cause. nil: node tokens fail closed with
	// ErrStoreUnavailable.
	NodeLookup func(nodeID string, c Consistency) (NodeState, error)
}

// builderSteps are the wid_verifier_builder setters these options call on
// b: one per option that is not its zero value, so the library's defaults
// stay the defaults. Values the library would read differently from these
// fields' documented meaning are translated or refused here.
func (o *VerifierOptions) builderSteps(b *C.wid_verifier_builder) ([]func() C.wid_result, error) {
	var steps []func() C.wid_result
	if o.Leeway != 0 {
		secs := C.int64_t(0) // negative: none
		if o.Leeway > 0 {
			secs = C.int64_t(secsCeil(o.Leeway))
		}
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_leeway_secs(b, secs) })
	}
	if o.KeyWait != 0 {
		ms := C.int64_t(0) // negative: no wait
		if o.KeyWait > 0 {
			ms = C.int64_t(o.keyWaitMillis())
		}
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_key_wait_ms(b, ms) })
	}
	if o.MaxTokenBytes > 0 {
		n := C.size_t(o.MaxTokenBytes)
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_max_token_bytes(b, n) })
	}
	if o.RequireExp {
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_require_exp(b, 1) })
	}
	if o.CacheEntries > 0 {
		n := C.size_t(o.CacheEntries)
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_cache_entries(b, n) })
	}
	if o.Issuer != "" {
		steps = append(steps, func() C.wid_result {
			p, n := strIn(o.Issuer)
			return C.wid_verifier_builder_set_issuer(b, p, n)
		})
	}
	if o.RequireProof {
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_require_proof(b, 1) })
	}
	if o.MaxProofLifetime < 0 {
		return nil, errNegative("VerifierOptions.MaxProofLifetime", o.MaxProofLifetime)
	}
	if o.MaxProofLifetime > 0 {
		secs := secsCeil(o.MaxProofLifetime)
		steps = append(steps, func() C.wid_result {
			return C.wid_verifier_builder_set_max_proof_lifetime_secs(b, C.int64_t(secs))
		})
	}
	if o.ProofReplayCapacity != 0 {
		if o.ProofReplayCapacity < 0 {
			return nil, &Error{Code: ResultInvalidArgument, Message: fmt.Sprintf(
				"wid: VerifierOptions.ProofReplayCapacity is negative (%d)", o.ProofReplayCapacity)}
		}
		n := C.size_t(o.ProofReplayCapacity)
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_proof_replay_capacity(b, n) })
	}
	if o.NodeTokens != NodeTokensRefuse {
		mode := C.uint32_t(o.NodeTokens)
		steps = append(steps, func() C.wid_result { return C.wid_verifier_builder_set_node_tokens(b, mode) })
	}
	return steps, nil
}

// keyWaitMillis converts KeyWait to the ABI's key_wait_ms.
func (o *VerifierOptions) keyWaitMillis() int64 {
	switch {
	case o.KeyWait < 0:
		return -1
	case o.KeyWait == 0:
		return 0
	}
	ms := int64((o.KeyWait + time.Millisecond - 1) / time.Millisecond)
	return ms
}

// Verifier verifies workload identity tokens for one audience (a
// wid_verifier handle). It is safe for concurrent use.
type Verifier struct {
	mu     sync.RWMutex // held for reading by calls, for writing by Close
	v      *C.wid_verifier
	handle cgo.Handle // -> *lookupState, the callback's userdata
	state  *lookupState
}

// lookupState is what the lookup callback reaches through the cgo.Handle.
type lookupState struct {
	store StateStore
	// nodeLookup answers node lookups (VerifierOptions.NodeLookup); nil
	// when none was given (the library then has no node lookup at all).
	nodeLookup func(nodeID string, c Consistency) (NodeState, error)
	// lastID is the last allocation ID looked up (see allocID).
	lastID atomic.Pointer[string]

	// log holds store failures not yet claimed, per OS thread (the
	// callback runs on the thread of the Verify call that caused it, which
	// holds that thread).
	log *failureLog
}

// NewVerifier creates a verifier over kr (keys inserted, rotated or imported
// into kr later are seen) for audience (required), asking store whether
// allocations are live. opts nil means the defaults. It is built with the
// library's wid_verifier_builder, one setter per option set: a bad value
// fails with ErrInvalidArgument naming it.
func NewVerifier(kr *Keyring, audience string, store StateStore, opts *VerifierOptions) (*Verifier, error) {
	if kr == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *Keyring"}
	}
	if store == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil StateStore"}
	}
	if opts == nil {
		opts = &VerifierOptions{}
	}
	if opts.MaxTokenBytes < 0 || opts.CacheEntries < 0 {
		return nil, &Error{Code: ResultInvalidArgument, Message: "wid: MaxTokenBytes and CacheEntries must be >= 0"}
	}
	state := &lookupState{store: store, nodeLookup: opts.NodeLookup, log: newFailureLog()}
	h := cgo.NewHandle(state)
	v, err := buildVerifier(kr, audience, h, opts)
	if err != nil {
		h.Delete()
		return nil, err
	}
	vf := &Verifier{v: v, handle: h, state: state}
	runtime.SetFinalizer(vf, (*Verifier).Close)
	return vf, nil
}

// buildVerifier makes the wid_verifier through a wid_verifier_builder: the
// audience, the lookup trampoline with h as userdata, then one setter per
// option.
func buildVerifier(kr *Keyring, audience string, h cgo.Handle, opts *VerifierOptions) (*C.wid_verifier, error) {
	var b *C.wid_verifier_builder
	if err := kr.with(func(krp *C.wid_keyring) C.wid_result {
		aud, audLen := strIn(audience)
		return C.wid_go_verifier_builder_new(krp, aud, audLen, C.uintptr_t(h), &b)
	}); err != nil {
		return nil, err
	}
	defer C.wid_verifier_builder_free(b)
	steps, err := opts.builderSteps(b)
	if err != nil {
		return nil, err
	}
	if opts.NodeLookup != nil {
		steps = append(steps, func() C.wid_result {
			return C.wid_go_verifier_builder_set_node_lookup(b, C.uintptr_t(h))
		})
	}
	for _, step := range steps {
		if err := call(step); err != nil {
			return nil, err
		}
	}
	var v *C.wid_verifier
	if err := call(func() C.wid_result { return C.wid_verifier_builder_build(b, &v) }); err != nil {
		return nil, err
	}
	return v, nil
}

// Close releases the verifier after the calls in flight. It is idempotent;
// Verify fails with ErrNullArgument afterwards.
func (v *Verifier) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.v != nil {
		C.wid_verifier_free(v.v)
		v.v = nil
		v.handle.Delete()
		runtime.SetFinalizer(v, nil)
	}
}

// Verify checks token at now (whole seconds; the zero time.Time is
// ErrInvalidArgument): signature, key, time window,
// audience (and issuer, exp as configured), the token's kind
// (VerifierOptions.NodeTokens), then the allocation through the StateStore
// (or, for a node token, the node through VerifierOptions.NodeLookup). It
// returns the verified claims, or an *Error.
//
// One cgo crossing on success: the token is passed without copying, the
// library's claims are copied into a pooled buffer by the C glue (which frees
// them), and decodeClaimsString turns them into Claims with two allocations.
func (v *Verifier) Verify(token string, now time.Time) (*Claims, error) {
	if now.IsZero() {
		return nil, errZeroTime("Verifier.Verify: now")
	}
	sc := verifyScratchPool.Get().(*verifyScratch)
	raw, err := v.verifyInto(sc, token, now.Unix())
	verifyScratchPool.Put(sc)
	if err != nil {
		return nil, err
	}
	return decodeClaimsString(raw)
}

// verifyScratch is where wid_go_verify writes: no Go pointers inside, so
// the C side may be handed pointers into it for the length of one call.
type verifyScratch struct {
	n   C.size_t
	big C.wid_bytes
	buf [2048]byte
}

var verifyScratchPool = sync.Pool{New: func() interface{} { return new(verifyScratch) }}

// verifyInto runs wid_verify (through wid_go_verify) and returns the claims
// JSON as a fresh string (its own copy, not sc's memory).
func (v *Verifier) verifyInto(sc *verifyScratch, token string, now int64) (string, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.v == nil {
		return "", errClosed("Verifier")
	}
	tok, tokLen := strIn(token)
	sc.big = C.wid_bytes{}
	runtime.LockOSThread()
	rc := C.wid_go_verify(C.uintptr_t(uintptr(unsafe.Pointer(v.v))), tok, tokLen, C.int64_t(now),
		(*C.char)(unsafe.Pointer(&sc.buf[0])), C.size_t(len(sc.buf)), &sc.n, &sc.big)
	if rc != C.WID_RESULT_OK {
		err := v.failure(rc)
		runtime.UnlockOSThread()
		return "", err
	}
	runtime.UnlockOSThread()
	if sc.big.data != nil {
		return takeString(&sc.big), nil
	}
	return string(sc.buf[:sc.n]), nil
}

// verifyCall runs one verification call with the live handle on a locked OS
// thread and turns a failure into an *Error carrying the library's message
// and, for ResultStoreUnavailable, the StateStore error behind it (the
// lookup callback ran on this thread).
func (v *Verifier) verifyCall(f func(vp *C.wid_verifier) C.wid_result) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.v == nil {
		return errClosed("Verifier")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rc := f(v.v)
	if rc == C.WID_RESULT_OK {
		return nil
	}
	return v.failure(rc)
}

// failure is the *Error for a failed verification call rc: the library's
// message, or, when a StateStore or NodeLookup failed, which and its error
// (the Cause). The caller still holds the OS thread the call ran on.
func (v *Verifier) failure(rc C.wid_result) error {
	code := Result(rc)
	fs := v.state.log.claim()
	if code == ResultStoreUnavailable && len(fs) > 0 {
		return fs[len(fs)-1].asError(code)
	}
	return &Error{Code: code, Message: lastErrorMessage()}
}

// decodeClaims decodes the verified claims the library wrote as JSON.
func decodeClaims(raw []byte) (*Claims, error) {
	var c Claims
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the verified claims: " + err.Error()}
	}
	return &c, nil
}

// maxBatch is the library's largest batch; longer ones are split.
const maxBatch = 1 << 16

// VerifyBatch verifies many tokens at once (sharing work between them) and
// returns one error per token, nil for a token that verifies. It accepts
// exactly what Verify accepts (a zero now fails every token with
// ErrInvalidArgument). The errors carry codes but no messages (the
// library does not keep per-token details), except store failures, which
// carry the store's error as their Cause and a message naming the store.
func (v *Verifier) VerifyBatch(tokens []string, now time.Time) []error {
	errs := make([]error, len(tokens))
	if now.IsZero() {
		err := errZeroTime("Verifier.VerifyBatch: now")
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for start := 0; start < len(tokens); start += maxBatch {
		end := start + maxBatch
		if end > len(tokens) {
			end = len(tokens)
		}
		v.verifyBatch(tokens[start:end], now.Unix(), errs[start:end])
	}
	return errs
}

func (v *Verifier) verifyBatch(tokens []string, now int64, errs []error) {
	total := 0
	for _, t := range tokens {
		total += len(t)
	}
	buf := make([]byte, 0, total)
	lens := make([]C.size_t, len(tokens))
	for i, t := range tokens {
		buf = append(buf, t...)
		lens[i] = C.size_t(len(t))
	}
	results := make([]C.wid_result, len(tokens))
	var lensPtr *C.size_t
	var resultsPtr *C.wid_result
	if len(tokens) > 0 {
		lensPtr, resultsPtr = &lens[0], &results[0]
	}

	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.v == nil {
		for i := range errs {
			errs[i] = errClosed("Verifier")
		}
		return
	}
	runtime.LockOSThread()
	b, _ := bytesIn(buf)
	rc := C.wid_go_verify_batch(v.v, b, lensPtr, C.size_t(len(tokens)), C.int64_t(now), resultsPtr)
	var callErr error
	if rc != C.WID_RESULT_OK {
		callErr = &Error{Code: Result(rc), Message: lastErrorMessage()}
	}
	causes := v.state.log.claim()
	runtime.UnlockOSThread()

	if callErr != nil {
		for i := range errs {
			errs[i] = callErr
		}
		return
	}
	// Each store failure ends one token's lookups, in token order; attach
	// causes only when they match the failing tokens one to one.
	unavailable := 0
	for _, r := range results {
		if Result(r) == ResultStoreUnavailable {
			unavailable++
		}
	}
	if unavailable != len(causes) {
		causes = nil
	}
	for i, r := range results {
		if r == C.WID_RESULT_OK {
			continue
		}
		e := &Error{Code: Result(r)}
		if e.Code == ResultStoreUnavailable && len(causes) > 0 {
			e, causes = causes[0].asError(e.Code), causes[1:]
		}
		errs[i] = e
	}
}

// Claims are a verified token's claims (Nomad's claim names).
type Claims struct {
	Namespace    string `json:"nomad_namespace"`
	JobID        string `json:"nomad_job_id"` // the parent job's ID for child jobs
	AllocationID string `json:"nomad_allocation_id"`
	Task         string `json:"nomad_task,omitempty"`    // for a task identity
	Service      string `json:"nomad_service,omitempty"` // for a service identity
	// Nomad 2.x's claims for the logins (IssueRequest.Vault and Consul):
	// empty when the token has none.
	ConsulNamespace string   `json:"consul_namespace,omitempty"`
	VaultNamespace  string   `json:"vault_namespace,omitempty"`
	VaultRole       string   `json:"vault_role,omitempty"`
	Subject         string   `json:"sub"`           // region:namespace:job:group:task-or-service:identity
	Audience        []string `json:"aud,omitempty"` // a string on the wire when there is one
	// IssuedAt, NotBefore and Expires are iat, nbf and exp (whole
	// seconds); the zero time.Time when the token has none (Expires: a
	// token that does not expire). In JSON they are NumericDates.
	IssuedAt  time.Time `json:"-"`
	NotBefore time.Time `json:"-"`
	Expires   time.Time `json:"-"`
	JTI       string    `json:"jti"`
	Issuer    string    `json:"iss,omitempty"`
	// Confirmation is a WIT's cnf: the workload key its proofs must be made
	// with (VerifyProof); nil in a bearer token.
	Confirmation *Confirmation `json:"cnf,omitempty"`
	// ExtraClaims are the operator's templated claims (an extra claims
	// policy, IssuerOptions.ExtraClaimsPolicyJSON), the JSON claim
	// extra_claims; nil when the token has none.
	ExtraClaims map[string]string `json:"extra_claims,omitempty"`

	// The claims of a node identity token (Keyring.IssueNode), empty in an
	// allocation token; a node token has none of the allocation claims
	// above (Namespace, JobID, AllocationID, Task, Service). See IsNode.
	NodeID         string `json:"nomad_node_id,omitempty"`
	NodePool       string `json:"nomad_node_pool,omitempty"`
	NodeClass      string `json:"nomad_node_class,omitempty"` // empty when the node has none
	NodeDatacenter string `json:"nomad_node_datacenter,omitempty"`
}

// IsNode reports whether these are a node identity token's claims (it
// names a node: nomad_node_id), not an allocation's.
func (c *Claims) IsNode() bool { return c.NodeID != "" }

// Confirmation is the cnf claim of a workload identity token.
type Confirmation struct {
	JWK *ProofKey `json:"jwk"` // the workload's public key, with its alg
}

// claimsTimes are the NumericDate claims as JSON has them.
type claimsTimes struct {
	IssuedAt  *int64 `json:"iat,omitempty"`
	NotBefore *int64 `json:"nbf,omitempty"`
	Expires   *int64 `json:"exp,omitempty"`
}

// numericDate is t as a NumericDate, nil for the zero time.
func numericDate(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.Unix()
	return &n
}

// timeOf is the time of a NumericDate, the zero time for nil.
func timeOf(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return unixTime(*n)
}

// MarshalJSON writes the claims as the token carries them: iat, nbf and
// exp as NumericDates (left out when zero).
func (c Claims) MarshalJSON() ([]byte, error) {
	type plain Claims
	return json.Marshal(struct {
		plain
		claimsTimes
	}{plain(c), claimsTimes{numericDate(c.IssuedAt), numericDate(c.NotBefore), numericDate(c.Expires)}})
}

// UnmarshalJSON accepts aud as a string or an array of strings, and iat,
// nbf and exp as NumericDates (integers).
func (c *Claims) UnmarshalJSON(b []byte) error {
	type plain Claims
	var aux struct {
		plain
		claimsTimes
		Audience json.RawMessage `json:"aud,omitempty"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*c = Claims(aux.plain)
	t := aux.claimsTimes
	c.IssuedAt, c.NotBefore, c.Expires = timeOf(t.IssuedAt), timeOf(t.NotBefore), timeOf(t.Expires)
	c.Audience = nil
	if len(aux.Audience) == 0 || string(aux.Audience) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(aux.Audience, &one); err == nil {
		c.Audience = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(aux.Audience, &many); err != nil {
		return fmt.Errorf("claim \"aud\" must be a string or an array of strings: %w", err)
	}
	c.Audience = many
	return nil
}
