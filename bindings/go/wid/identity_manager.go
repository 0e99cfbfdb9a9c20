package wid

// #include "wid_helpers.h"
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"time"
)

// IdentityID names one identity of an allocation: the task or service it
// belongs to (Workload) and its identity block's name (Name).
type IdentityID struct {
	Workload string // the task or service name
	Name     string // the identity's name (WorkloadIdentity.Name)
}

// String is "<workload>/<name>".
func (id IdentityID) String() string { return id.Workload + "/" + id.Name }

// IdentityOf is the IdentityID of the identity req asks for: its Task (or
// Service) and its Identity's name.
func IdentityOf(req *IssueRequest) IdentityID {
	if req == nil {
		return IdentityID{}
	}
	id := IdentityID{Workload: req.Task}
	if id.Workload == "" {
		id.Workload = req.Service
	}
	if req.Identity != nil {
		id.Name = req.Identity.Name
	}
	return id
}

// Managed says what a ManagedEvent carries (wid_managed).
type Managed uint32

// What a ManagedEvent carries.
const (
	ManagedIdentity Managed = C.WID_MANAGED_IDENTITY // a new identity token
	ManagedSecret   Managed = C.WID_MANAGED_SECRET   // a secret an exchange delivered
)

// String is "identity" or "secret".
func (w Managed) String() string {
	switch w {
	case ManagedIdentity:
		return "identity"
	case ManagedSecret:
		return "secret"
	}
	return fmt.Sprintf("Managed(%d)", uint32(w))
}

// EventKind says why a token or secret is new (wid_event).
type EventKind uint32

// Why a token or secret is new.
const (
	EventInitial  EventKind = C.WID_EVENT_INITIAL  // first signed (or derived) for a new allocation
	EventRenewed  EventKind = C.WID_EVENT_RENEWED  // renewed (re-signed, or a new secret)
	EventRestored EventKind = C.WID_EVENT_RESTORED // after a restart, reused or re-signed
)

// String is "initial", "renewed" or "restored".
func (k EventKind) String() string {
	switch k {
	case EventInitial:
		return "initial"
	case EventRenewed:
		return "renewed"
	case EventRestored:
		return "restored"
	}
	return fmt.Sprintf("EventKind(%d)", uint32(k))
}

// RefreshReason says why Exchange.Refresh is called (wid_refresh_reason).
type RefreshReason uint32

// Why Exchange.Refresh is called.
const (
	// ReasonDue: the refresh time the exchange asked for has come, or a
	// failed call is retried.
	ReasonDue RefreshReason = C.WID_REFRESH_REASON_DUE
	// ReasonResigned: the identity was re-signed; token is the new one.
	ReasonResigned RefreshReason = C.WID_REFRESH_REASON_RESIGNED
	// ReasonRestored: after a restart, confirm the saved secret. Answer
	// SecretKept only when it was checked and still works.
	ReasonRestored RefreshReason = C.WID_REFRESH_REASON_RESTORED
)

// String is "due", "resigned" or "restored".
func (r RefreshReason) String() string {
	switch r {
	case ReasonDue:
		return "due"
	case ReasonResigned:
		return "resigned"
	case ReasonRestored:
		return "restored"
	}
	return fmt.Sprintf("RefreshReason(%d)", uint32(r))
}

// RefreshOutcome is what Exchange.Refresh did (wid_refreshed).
type RefreshOutcome uint32

// What Exchange.Refresh did.
const (
	SecretKept     RefreshOutcome = C.WID_REFRESHED_KEPT     // the secret stays in use
	SecretRenewed  RefreshOutcome = C.WID_REFRESHED_RENEWED  // renewed with the newest token, same value
	SecretReplaced RefreshOutcome = C.WID_REFRESHED_REPLACED // a new secret (RefreshResult.Secret) replaces it
)

// String is "kept", "renewed" or "replaced".
func (o RefreshOutcome) String() string {
	switch o {
	case SecretKept:
		return "kept"
	case SecretRenewed:
		return "renewed"
	case SecretReplaced:
		return "replaced"
	}
	return fmt.Sprintf("RefreshOutcome(%d)", uint32(o))
}

// ManagedEvent is one new identity token or delivered secret, as the
// channels of IdentityManager.Watch carry them. A token is always sent
// before the secrets derived from it.
type ManagedEvent struct {
	What Managed   // ManagedIdentity (a token) or ManagedSecret
	Kind EventKind // why it is new
	// Identity is the identity: the token's, or for a secret the one its
	// exchange consumes.
	Identity IdentityID
	// Exchange is the exchange's name for a ManagedSecret, "" for a token.
	Exchange string
	// Value is the token or the secret. String and fmt's %v leave it out.
	Value string
}

// String describes the event without its value, so that logging an event
// never logs a token or a secret.
func (e ManagedEvent) String() string {
	if e.What == ManagedSecret {
		return fmt.Sprintf("secret of exchange %q (identity %s), %s, %d bytes", e.Exchange, e.Identity, e.Kind, len(e.Value))
	}
	return fmt.Sprintf("%s of %s, %s, %d bytes", e.What, e.Identity, e.Kind, len(e.Value))
}

// GoString is String, for %#v.
func (e ManagedEvent) GoString() string { return "wid.ManagedEvent{" + e.String() + "}" }

// Signer signs an allocation's identities for an IdentityManager: a
// scheduler's client asks its servers (over its RPC) and returns the token
// they signed. Sign is called once per identity with the request (with the
// ProofKey the manager made, for a proof-bound identity) and the time; every
// token it returns is verified against the manager's keyring and compared
// with its request before it is used: a token of another identity, or one
// that does not verify, fails the signing.
//
// An error (or a panic, or an empty token) fails the whole signing, closed:
// nothing is used, the manager keeps its current tokens and retries after a
// backoff, and Health shows the error's message (so it must not hold a
// secret). Sign runs on the goroutine calling Start, Restore, Tick or Run,
// never two at once for one manager; it must not call that manager's
// methods.
type Signer interface {
	Sign(req *IssueRequest, now time.Time) (token string, err error)
}

// SignerFunc adapts a function to a Signer.
type SignerFunc func(req *IssueRequest, now time.Time) (string, error)

// Sign calls f.
func (f SignerFunc) Sign(req *IssueRequest, now time.Time) (string, error) { return f(req, now) }

// IssuerSigner signs with iss in this process: the manager gives the
// library's wid_issuer to the manager directly, so signing makes no Go
// call. (Its Sign method, for use elsewhere, is iss.Issue.) The manager
// keeps its own reference: iss may be closed after NewIdentityManager.
func IssuerSigner(iss *Issuer) Signer { return issuerSigner{iss} }

type issuerSigner struct{ iss *Issuer }

func (s issuerSigner) Sign(req *IssueRequest, now time.Time) (string, error) {
	if s.iss == nil {
		return "", &Error{Code: ResultNullArgument, Message: "wid: IssuerSigner(nil)"}
	}
	return s.iss.Issue(req, now)
}

// Exchange is a host's own token exchange: it trades one identity's token
// for a secret (a Consul or cloud token, a session), keeps the secret
// usable, and revokes the ones replaced. The manager saves each secret with
// its tokens, delivers it (Watch, Secret) after the token it came from, and
// after a restart asks Refresh(ReasonRestored) to confirm it before handing
// it out again.
//
// Every method runs on the goroutine calling Start, Restore, Tick or Run,
// one call at a time per manager; none may call the manager's methods. An
// error, or a panic, fails closed: nothing is delivered, the exchange is
// retried after a backoff, and Health shows the error's message (which must
// therefore never hold a secret).
type Exchange interface {
	// Name names the exchange (unique in a manager: its secret is saved
	// under it). Read once, by NewIdentityManager.
	Name() string
	// Identity is the identity whose token it consumes. Read once.
	Identity() IdentityID
	// Derive trades token for a secret (non-empty) at now. refreshAt is
	// when Refresh(ReasonDue) should be called; the zero time means only
	// when the identity is re-signed.
	Derive(token string, now time.Time) (secret string, refreshAt time.Time, err error)
	// Refresh keeps secret (derived earlier from this identity) usable,
	// token being the identity's newest token; see RefreshReason and
	// RefreshResult.
	Refresh(secret, token string, reason RefreshReason, now time.Time) (RefreshResult, error)
	// Release revokes secret, replaced by a successor that was saved and
	// delivered before; best effort (nothing reads an error).
	Release(secret string)
}

// RefreshResult is what Exchange.Refresh returns.
type RefreshResult struct {
	// Outcome is SecretKept, SecretRenewed or SecretReplaced; anything
	// else (the zero value too) fails closed.
	Outcome RefreshOutcome
	// Secret is the new secret, with SecretReplaced (required then);
	// ignored otherwise.
	Secret string
	// RefreshAt is when Refresh(ReasonDue) should be called next; the zero
	// time means only when the identity is re-signed.
	RefreshAt time.Time
}

// ManagerOption configures NewIdentityManager: WithExchange, VaultLogin,
// WithProofOfPossession, WithEventBuffer.
type ManagerOption interface {
	applyManager(c *managerConfig) error
}

// managerConfig is what the options set.
type managerConfig struct {
	exchanges   []exchangeOption
	proof       []proofOption
	eventBuffer int
}

// exchangeOption is an exchange the manager runs: a host Exchange, or one
// of the library's own logins (VaultLogin). Each adds itself to the C
// builder.
type exchangeOption interface {
	// exchangeName is its name (for the duplicate check and events).
	exchangeName() string
	// exchangeIdentity is the identity it consumes.
	exchangeIdentity() IdentityID
	// addTo adds it to b; handles it makes go to keep (deleted on Close).
	addTo(b *C.wid_identity_manager_builder, keep *[]cgo.Handle) error
}

type optionFunc func(c *managerConfig) error

func (f optionFunc) applyManager(c *managerConfig) error { return f(c) }

// WithExchange adds a host exchange (see Exchange).
func WithExchange(x Exchange) ManagerOption {
	return optionFunc(func(c *managerConfig) error {
		if x == nil {
			return &Error{Code: ResultNullArgument, Message: "wid: WithExchange(nil)"}
		}
		c.exchanges = append(c.exchanges, &hostExchange{x: x, name: x.Name(), identity: x.Identity()})
		return nil
	})
}

// WithProofOfPossession makes identity id proof-bound: the manager makes a
// workload key of alg (AlgEdDSA or AlgES256) and asks for a WIT bound to
// it (the signer must sign WITs: an Issuer with a WIMSE trust domain).
func WithProofOfPossession(id IdentityID, alg Alg) ManagerOption {
	return optionFunc(func(c *managerConfig) error {
		c.proof = append(c.proof, proofOption{id: id, alg: alg})
		return nil
	})
}

// WithEventBuffer sets the room in each channel Watch returns (default 64,
// at least 1).
func WithEventBuffer(n int) ManagerOption {
	return optionFunc(func(c *managerConfig) error {
		if n < 1 {
			return &Error{Code: ResultInvalidArgument, Message: fmt.Sprintf("wid: WithEventBuffer(%d): the buffer must hold at least 1 event", n)}
		}
		c.eventBuffer = n
		return nil
	})
}

type proofOption struct {
	id  IdentityID
	alg Alg
}

// DefaultEventBuffer is the room in each channel Watch returns unless
// WithEventBuffer says otherwise.
const DefaultEventBuffer = 64

// IdentityManager keeps one allocation's identities signed, renewed, saved
// in a state directory and restored after a restart, and runs the token
// exchanges that consume them (a wid_identity_manager): the Rust
// IdentityManager for Go hosts. After a restart a new manager on the same
// directory takes the saved tokens back (Restore) and has every exchange
// confirm its saved secret, or derive a new one, before anything is handed
// out: an empty or unconfirmed secret never is.
//
// Safe for concurrent use: Current, Secret, Health and Watch may be called
// from any goroutine, also while Start, Restore or Tick runs (those three
// wait for each other). Close releases it after the calls in flight (a
// finalizer does too, but only once the Signer and Exchanges no longer
// reach the manager); the saved state stays in its directory.
type IdentityManager struct {
	mu      sync.RWMutex // held for reading by calls, for writing by Close
	m       *C.wid_identity_manager
	handles []cgo.Handle // the callbacks' userdata, deleted after the free
	hub     *eventHub
	log     *failureLog   // the Signer's and Exchanges' failures, per calling thread
	closed  chan struct{} // closed by Close: wakes Run at once
}

// NewIdentityManager makes a manager for identities (the requests of one
// allocation, each identity named once), signed by signer (IssuerSigner
// for an in-process Issuer, or the host's own Signer), checked against kr
// (the keyring the signer's keys are in: a token that does not verify
// against it is never used), saved in stateDir (which must exist:
// ErrIOError otherwise; its state file holds tokens and secrets, mode
// 0600). opts add exchanges (WithExchange, VaultLogin) and more.
//
// Nothing is signed until Start (a new allocation) or Restore (after a
// restart). A bad request or option is ErrInvalidArgument (or
// ErrDecodeError) saying why: no identity, identities of two allocations or
// one named twice, two exchanges with one name, an exchange or proof
// option naming an identity not given, a VaultLogin address that is not
// https (http only to a loopback host with AllowHTTPLoopback).
func NewIdentityManager(kr *Keyring, stateDir string, identities []*IssueRequest, signer Signer, opts ...ManagerOption) (*IdentityManager, error) {
	if kr == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *Keyring"}
	}
	if signer == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil Signer (use IssuerSigner for an Issuer in this process)"}
	}
	if len(identities) == 0 {
		return nil, &Error{Code: ResultInvalidArgument, Message: "wid: NewIdentityManager: no identity to manage"}
	}
	cfg := managerConfig{eventBuffer: DefaultEventBuffer}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyManager(&cfg); err != nil {
			return nil, err
		}
	}
	hub := &eventHub{buffer: cfg.eventBuffer, exchanges: make(map[string]IdentityID)}
	for _, x := range cfg.exchanges {
		name := x.exchangeName()
		if name == "" {
			return nil, &Error{Code: ResultInvalidArgument, Message: "wid: NewIdentityManager: an exchange has an empty name"}
		}
		if _, dup := hub.exchanges[name]; dup {
			return nil, &Error{Code: ResultInvalidArgument, Message: fmt.Sprintf(
				"wid: NewIdentityManager: two exchanges are named %q (each needs its own name: its secret is saved under it)", name)}
		}
		hub.exchanges[name] = x.exchangeIdentity()
	}
	encoded := make([][]byte, len(identities))
	for i, req := range identities {
		b, err := EncodeIssueRequest(req)
		if err != nil {
			return nil, err
		}
		encoded[i] = b
	}

	var b *C.wid_identity_manager_builder
	if err := kr.with(func(k *C.wid_keyring) C.wid_result {
		d, dLen := strIn(stateDir)
		return C.wid_identity_manager_builder_new(k, d, dLen, &b)
	}); err != nil {
		return nil, err
	}
	defer C.wid_identity_manager_builder_free(b)

	var handles []cgo.Handle
	log := newFailureLog()
	m, err := buildManager(b, encoded, signer, &cfg, hub, log, &handles)
	if err != nil {
		for _, h := range handles {
			h.Delete()
		}
		return nil, err
	}
	im := &IdentityManager{m: m, handles: handles, hub: hub, log: log, closed: make(chan struct{})}
	runtime.SetFinalizer(im, (*IdentityManager).Close)
	return im, nil
}

// buildManager configures b and builds; every handle it makes is appended
// to handles (the caller deletes them if it fails).
func buildManager(b *C.wid_identity_manager_builder, requests [][]byte, signer Signer, cfg *managerConfig,
	hub *eventHub, log *failureLog, handles *[]cgo.Handle) (*C.wid_identity_manager, error) {
	for _, r := range requests {
		if err := call(func() C.wid_result {
			p, n := bytesIn(r)
			return C.wid_identity_manager_builder_add_identity(b, (*C.uint8_t)(ptr(p)), n)
		}); err != nil {
			return nil, err
		}
	}
	if err := setSigner(b, signer, log, handles); err != nil {
		return nil, err
	}
	for _, x := range cfg.exchanges {
		if hx, ok := x.(*hostExchange); ok {
			hx.log = log
		}
		if err := x.addTo(b, handles); err != nil {
			return nil, err
		}
	}
	for _, p := range cfg.proof {
		if err := call(func() C.wid_result {
			w, wLen := strIn(p.id.Workload)
			n, nLen := strIn(p.id.Name)
			return C.wid_identity_manager_builder_set_proof_of_possession(b, w, wLen, n, nLen, C.wid_alg(p.alg))
		}); err != nil {
			return nil, err
		}
	}
	h := cgo.NewHandle(hub)
	*handles = append(*handles, h)
	if err := call(func() C.wid_result {
		return C.wid_go_identity_manager_builder_set_watcher(b, C.uintptr_t(h))
	}); err != nil {
		return nil, err
	}
	var m *C.wid_identity_manager
	if err := call(func() C.wid_result { return C.wid_identity_manager_builder_build(b, &m) }); err != nil {
		return nil, err
	}
	return m, nil
}

// setSigner gives b the signer: an Issuer's wid_issuer directly, else the
// Go Signer through its trampoline.
func setSigner(b *C.wid_identity_manager_builder, signer Signer, log *failureLog, handles *[]cgo.Handle) error {
	if s, ok := signer.(issuerSigner); ok {
		if s.iss == nil {
			return &Error{Code: ResultNullArgument, Message: "wid: IssuerSigner(nil)"}
		}
		s.iss.mu.RLock()
		defer s.iss.mu.RUnlock()
		if s.iss.iss == nil {
			return errClosed("Issuer")
		}
		return call(func() C.wid_result { return C.wid_identity_manager_builder_set_issuer(b, s.iss.iss) })
	}
	h := cgo.NewHandle(&signerState{signer: signer, log: log})
	*handles = append(*handles, h)
	return call(func() C.wid_result {
		return C.wid_go_identity_manager_builder_set_signer(b, C.uintptr_t(h))
	})
}

// hostExchange is WithExchange's exchangeOption.
type hostExchange struct {
	x        Exchange
	name     string
	identity IdentityID
	log      *failureLog // the manager's (set by buildManager)
}

func (e *hostExchange) exchangeName() string         { return e.name }
func (e *hostExchange) exchangeIdentity() IdentityID { return e.identity }

func (e *hostExchange) addTo(b *C.wid_identity_manager_builder, keep *[]cgo.Handle) error {
	h := cgo.NewHandle(e)
	*keep = append(*keep, h)
	return call(func() C.wid_result {
		n, nLen := strIn(e.name)
		w, wLen := strIn(e.identity.Workload)
		i, iLen := strIn(e.identity.Name)
		return C.wid_go_identity_manager_builder_add_exchange(b, n, nLen, w, wLen, i, iLen, C.uintptr_t(h))
	})
}

// Close releases the manager after the calls in flight; its saved state
// stays in its directory for a later Restore, and no secret is released (a
// restarted host confirms and reuses it). Every channel Watch returned is
// closed. Safe to call twice; other methods fail with ErrNullArgument
// afterwards. It always returns nil (it is an io.Closer).
func (m *IdentityManager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		return nil
	}
	C.wid_identity_manager_free(m.m)
	m.m = nil
	// The library calls back no more: the userdata may go.
	for _, h := range m.handles {
		h.Delete()
	}
	m.handles = nil
	m.hub.close()
	close(m.closed)
	runtime.SetFinalizer(m, nil)
	return nil
}

// withCallbacks is with for the calls that run the Signer and Exchanges
// (Start, Restore, Tick): a failure a Go callback caused is returned as that
// callback's error (the Cause), in Go's words.
func (m *IdentityManager) withCallbacks(f func(m *C.wid_identity_manager) C.wid_result) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return errClosed("IdentityManager")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rc := f(m.m)
	fs := m.log.claim() // always: a Tick's failures are not kept
	if rc == C.WID_RESULT_OK {
		return nil
	}
	code := Result(rc)
	if fail := pick(fs, code); fail != nil {
		return fail.asError(code)
	}
	return &Error{Code: code, Message: lastErrorMessage()}
}

func (m *IdentityManager) with(f func(m *C.wid_identity_manager) C.wid_result) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.m == nil {
		return errClosed("IdentityManager")
	}
	return call(func() C.wid_result { return f(m.m) })
}

// Start begins a new allocation: signs every identity at now, saves them,
// then runs every exchange (its secret saved, then delivered). A signing
// failure is returned (the signer's message in it) and retried by Tick
// after a backoff; an exchange's failure is ErrTokenExchangeFailed: the
// identities are signed and in use, the exchange is retried by Tick, and
// its secret is never handed out before it succeeds. Called from inside
// one of this manager's own Exchange or Signer callbacks, it returns
// ErrInvalidArgument and does nothing (it would wait for the call running
// the callback).
func (m *IdentityManager) Start(now time.Time) error {
	ms, err := unixMillis("IdentityManager.Start: now", now)
	if err != nil {
		return err
	}
	return m.withCallbacks(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_start(p, ms)
	})
}

// RestoreReport says what Restore took back.
type RestoreReport struct {
	// Reused: the saved tokens were taken back (else all were re-signed).
	Reused bool `json:"reused"`
	// Reason is why they were not reused ("" when they were).
	Reason string `json:"reason"`
	// Rederived names the exchanges whose secret was derived anew (not
	// confirmed and reused).
	Rederived []string `json:"rederived"`
}

// Restore, after a restart, takes the saved identities back if they still
// verify, are what the requests ask for and are outside their renewal
// window (else signs anew); each exchange's saved secret is confirmed
// (Exchange.Refresh with ReasonRestored; a Vault token with lookup-self)
// and reused, or derived anew. Errors as Start's (from inside a callback,
// too); on an error the report is
// empty. With nothing saved (an empty state directory) everything is
// signed and derived anew, told as EventRestored.
func (m *IdentityManager) Restore(now time.Time) (RestoreReport, error) {
	ms, err := unixMillis("IdentityManager.Restore: now", now)
	if err != nil {
		return RestoreReport{}, err
	}
	var out C.wid_bytes
	if err := m.withCallbacks(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_restore(p, ms, &out)
	}); err != nil {
		return RestoreReport{}, err
	}
	return decodeRestoreReport(takeBytes(&out))
}

// EndAllocation is for when the allocation has ended: it revokes every
// secret the manager's exchanges hold (in use, replaced, or saved by an
// earlier process and not yet revoked), then removes the allocation's file
// from the state directory. It works on a manager that was never started
// or restored, as a host that restarted after the allocation stopped has:
// the saved state is read. Afterwards the manager signs nothing more: Tick
// does nothing (ok false), Start and Restore return ErrInvalidArgument,
// Current and Secret find nothing, and Run keeps waiting until its ctx is
// done or Close is called. Identity tokens already handed out stay valid
// until they expire. A secret saved from another server than its exchange
// talks to now is not sent anywhere. A revocation that fails (its server
// unreachable) is ErrTokenExchangeFailed naming the exchange; the state
// file then keeps exactly the secrets not revoked: call it again to retry.
// From inside one of this manager's own callbacks: ErrInvalidArgument.
func (m *IdentityManager) EndAllocation() error {
	return m.withCallbacks(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_end_allocation(p)
	})
}

// Tick does whatever is due at now (a renewal, an exchange's refresh, a
// retry); failures are retried after a backoff and shown by Health. next
// is when to tick again; ok is false when nothing will ever be due (no
// token expires, no exchange asked for a refresh), the manager is
// closed or now is the zero time.Time. Run calls it for you. From inside
// one of this manager's own Exchange or Signer callbacks it does nothing
// (the running call does what is due) and says when to tick next.
func (m *IdentityManager) Tick(now time.Time) (next time.Time, ok bool) {
	next, ok, _ = m.tick(now)
	return next, ok
}

func (m *IdentityManager) tick(now time.Time) (time.Time, bool, error) {
	ms, err := unixMillis("IdentityManager.Tick: now", now)
	if err != nil {
		return time.Time{}, false, err
	}
	var due C.int64_t
	if err := m.withCallbacks(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_tick(p, ms, &due)
	}); err != nil {
		return time.Time{}, false, err
	}
	if due < 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(due)), true, nil
}

// NextDue is when Tick next has work; ok is false when nothing is
// scheduled (before Start or Restore, when nothing expires, or once
// closed).
func (m *IdentityManager) NextDue() (time.Time, bool) {
	var due C.int64_t
	if err := m.with(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_next_due_ms(p, &due)
	}); err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(due)), true
}

// Current is the token of identity id while it is valid at now. An
// identity not managed here, or one without a valid token (never signed,
// or expired while renewals failed), is ErrInvalidArgument.
func (m *IdentityManager) Current(id IdentityID, now time.Time) (string, error) {
	ms, err := unixMillis("IdentityManager.Current: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := m.with(func(p *C.wid_identity_manager) C.wid_result {
		w, wLen := strIn(id.Workload)
		n, nLen := strIn(id.Name)
		return C.wid_identity_manager_current(p, w, wLen, n, nLen, ms, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// Secret is the secret the exchange named name holds: derived, or
// confirmed after a restore; never one held back unconfirmed. None (no
// such exchange, or no secret yet) is ErrInvalidArgument.
func (m *IdentityManager) Secret(name string) (string, error) {
	var out C.wid_bytes
	if err := m.with(func(p *C.wid_identity_manager) C.wid_result {
		n, nLen := strIn(name)
		return C.wid_identity_manager_secret(p, n, nLen, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// Watch returns a channel that receives every token and secret the
// manager delivers from now on (ManagedEvent; a token before the secrets
// derived from it), and is closed by Close. Call it before Start or
// Restore to miss nothing. Each call makes its own channel; all receive
// every event.
//
// The library's callback never waits for a reader: each channel holds
// DefaultEventBuffer events (WithEventBuffer), and when one is full its
// oldest event is dropped for the new one (counted by DroppedEvents). A
// reader that fell behind thus still sees the newest token and secret,
// and Current and Secret always have them.
func (m *IdentityManager) Watch() <-chan ManagedEvent {
	return m.hub.subscribe()
}

// DroppedEvents counts the events dropped from full Watch channels.
func (m *IdentityManager) DroppedEvents() uint64 {
	m.hub.mu.Lock()
	defer m.hub.mu.Unlock()
	return m.hub.dropped
}

// runMaxWait is the longest Run sleeps between ticks, whatever NextDue
// says: a wall clock that jumps is caught up with within it.
const runMaxWait = time.Minute

// Run ticks at NextDue with the wall clock (time.Now) until ctx is done,
// then returns ctx.Err(); it returns ErrNullArgument once the manager is
// closed, at once when Close is called while it waits. Call Start or
// Restore first. It never sleeps longer than a minute between ticks, so a
// clock that jumps is caught up with.
func (m *IdentityManager) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.closed:
			return errClosed("IdentityManager")
		case <-timer.C:
		}
		next, ok, err := m.tick(time.Now())
		if err != nil {
			return err
		}
		wait := runMaxWait
		if ok {
			if d := time.Until(next); d < wait {
				wait = d
			}
		}
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
		timer.Reset(wait)
	}
}

// IdentityManagerHealth is the manager's state at a point in time
// (Health), for a health endpoint or metrics. It holds no token and no
// secret.
type IdentityManagerHealth struct {
	AllocID    string           // the allocation
	Identities []IdentityHealth // every identity, in the order given
	Exchanges  []ExchangeHealth // every exchange, in the order added
	// SignFailures counts signing failures since the last success.
	SignFailures uint64
	// LastSignError is the last signing failure's message ("" after a
	// success).
	LastSignError string
	// NextSigning is when identities are signed next (zero: none
	// scheduled).
	NextSigning time.Time
	// AtRisk: an identity without a valid token, signing failing, or an
	// exchange failing or without a secret.
	AtRisk bool
}

// IdentityHealth is one identity's part of IdentityManagerHealth.
type IdentityHealth struct {
	Identity IdentityID
	// Valid: a token is held that is valid at the time asked about.
	Valid bool
	// ExpiresAt is the token's exp; zero without a token, or for one
	// that does not expire.
	ExpiresAt time.Time
	// ExpiresIn is the time until then (negative once expired; zero when
	// ExpiresAt is).
	ExpiresIn time.Duration
}

// ExchangeHealth is one exchange's part of IdentityManagerHealth.
type ExchangeHealth struct {
	Name     string
	Identity IdentityID // the identity it consumes
	// HasSecret: it holds a secret it may hand out (derived, or confirmed
	// after a restore).
	HasSecret bool
	// HeldBack: a restored secret is held back unconfirmed (never handed
	// out), released once a successor is delivered.
	HeldBack bool
	// Failures counts failures since its last success.
	Failures uint32
	// NextAttempt is when it is refreshed or retried next (zero: not
	// scheduled).
	NextAttempt time.Time
	// LastError is its last failure's message ("" after a success).
	LastError string
}

// healthJSON is wid_identity_manager_health_json's document.
type healthJSON struct {
	AllocID    string `json:"alloc_id"`
	Identities []struct {
		Workload    string `json:"workload"`
		Identity    string `json:"identity"`
		Valid       bool   `json:"valid"`
		ExpiresAt   *int64 `json:"expires_at"`
		ExpiresInMs *int64 `json:"expires_in_ms"`
	} `json:"identities"`
	Exchanges []struct {
		Name          string  `json:"name"`
		Workload      string  `json:"workload"`
		Identity      string  `json:"identity"`
		HasSecret     bool    `json:"has_secret"`
		HeldBack      bool    `json:"held_back"`
		Failures      uint32  `json:"failures"`
		NextAttemptMs *int64  `json:"next_attempt_ms"`
		LastError     *string `json:"last_error"`
	} `json:"exchanges"`
	SignFailures  uint64  `json:"sign_failures"`
	LastSignError *string `json:"last_sign_error"`
	NextSigningMs *int64  `json:"next_signing_ms"`
	AtRisk        bool    `json:"at_risk"`
}

func msTime(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return time.UnixMilli(*ms)
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Health is the manager's state at now: call it from a health check or a
// metrics scrape.
func (m *IdentityManager) Health(now time.Time) (IdentityManagerHealth, error) {
	ms, err := unixMillis("IdentityManager.Health: now", now)
	if err != nil {
		return IdentityManagerHealth{}, err
	}
	var out C.wid_bytes
	if err := m.with(func(p *C.wid_identity_manager) C.wid_result {
		return C.wid_identity_manager_health_json(p, ms, &out)
	}); err != nil {
		return IdentityManagerHealth{}, err
	}
	return decodeHealth(takeBytes(&out))
}

// eventHub fans the watcher callback's events out to the Watch channels,
// never blocking the callback.
type eventHub struct {
	buffer int
	// exchanges maps each exchange's name to the identity it consumes
	// (set before the manager is built, read-only after).
	exchanges map[string]IdentityID

	mu      sync.Mutex
	subs    []chan ManagedEvent
	closed  bool
	dropped uint64
}

func (h *eventHub) subscribe() <-chan ManagedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan ManagedEvent, h.buffer)
	if h.closed {
		close(ch)
		return ch
	}
	h.subs = append(h.subs, ch)
	return ch
}

// publish sends ev to every channel, dropping a full channel's oldest
// event to make room. Senders hold h.mu, so the room made is theirs.
func (h *eventHub) publish(ev ManagedEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for _, ch := range h.subs {
		for sent := false; !sent; {
			select {
			case ch <- ev:
				sent = true
			default:
				select {
				case <-ch:
					h.dropped++
				default: // a reader took one meanwhile
				}
			}
		}
	}
}

func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, ch := range h.subs {
		close(ch)
	}
	h.subs = nil
}
