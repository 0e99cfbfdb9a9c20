package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"sync"
	"time"
)

// NodeIdentityManager keeps a client node's own identity token
// (wid_node_identity_manager): signed by an Issuer, renewed at two thirds of
// its life (less up to 5 % of it as jitter), retried with a backoff (1 s
// doubling to 60 s) when a renewal fails while the current token is kept,
// saved in a state directory and taken back by Restore after a restart.
// Times are kept to the millisecond; the zero time.Time is refused
// (ErrInvalidArgument). Safe for concurrent use; Close releases it
// (a finalizer does too), leaving the saved state in its directory.
type NodeIdentityManager struct {
	mu sync.RWMutex // held for reading by calls, for writing by Close
	m  *C.wid_node_identity_manager
}

// NodeIdentityHealth is what NodeIdentityManager.Health reports; zero
// times are absent values (no token yet, nothing scheduled).
type NodeIdentityHealth struct {
	// ExpiresIn is how long the token has left at the time asked about
	// (negative once expired; zero without a token, when ExpiresAt is
	// zero).
	ExpiresIn time.Duration
	// RenewalOverdue is how late the next attempt is (0 when not due).
	RenewalOverdue time.Duration
	// AtRisk: renewals are failing, a renewal is more than a minute
	// overdue (nothing calls Tick), or there is no valid token.
	AtRisk bool
	// Signed counts tokens signed (the first included).
	Signed uint64
	// Failures counts failed signing attempts.
	Failures uint64
	// ConsecutiveFailures counts failures since the last success.
	ConsecutiveFailures uint32
	// ExpiresAt is the token's exp (zero without a token).
	ExpiresAt time.Time
	// NextAttempt is when Tick next has work (zero: nothing scheduled).
	NextAttempt time.Time
	// ExpiresBeforeNextAttempt: renewals are failing and the token expires
	// before the next attempt.
	ExpiresBeforeNextAttempt bool
	// LastError is the last failure's message ("" after a success).
	LastError string
}

// nodeHealthJSON is wid_node_identity_manager_health_json's document.
type nodeHealthJSON struct {
	ExpiresInMs              *int64  `json:"expires_in_ms"`
	RenewalOverdueMs         int64   `json:"renewal_overdue_ms"`
	AtRisk                   bool    `json:"at_risk"`
	Signed                   uint64  `json:"signed"`
	Failures                 uint64  `json:"failures"`
	ConsecutiveFailures      uint32  `json:"consecutive_failures"`
	ExpiresAt                *int64  `json:"expires_at"`
	NextAttemptMs            *int64  `json:"next_attempt_ms"`
	ExpiresBeforeNextAttempt bool    `json:"expires_before_next_attempt"`
	LastError                *string `json:"last_error"`
}

// NewNodeIdentityManager makes a manager for req's node: tokens signed by
// iss (its algorithm and iss claim), checked against kr, saved in stateDir
// (which must exist: ErrIOError otherwise). An invalid request is
// ErrInvalidArgument. Nothing is signed until Start or Restore. The manager
// keeps its own references: iss and kr may be closed afterwards.
func NewNodeIdentityManager(iss *Issuer, kr *Keyring, req *NodeIdentityRequest, stateDir string) (*NodeIdentityManager, error) {
	if iss == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *Issuer"}
	}
	if kr == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *Keyring"}
	}
	b, err := encodeNodeRequest(req)
	if err != nil {
		return nil, err
	}
	iss.mu.RLock()
	defer iss.mu.RUnlock()
	if iss.iss == nil {
		return nil, errClosed("Issuer")
	}
	var m *C.wid_node_identity_manager
	if err := kr.with(func(k *C.wid_keyring) C.wid_result {
		r, rLen := bytesIn(b)
		d, dLen := strIn(stateDir)
		return C.wid_node_identity_manager_new(iss.iss, k, (*C.uint8_t)(ptr(r)), rLen, d, dLen, &m)
	}); err != nil {
		return nil, err
	}
	nm := &NodeIdentityManager{m: m}
	runtime.SetFinalizer(nm, (*NodeIdentityManager).Close)
	return nm, nil
}

// Close releases the manager (the saved state stays). Safe to call twice.
func (n *NodeIdentityManager) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m != nil {
		C.wid_node_identity_manager_free(n.m)
		n.m = nil
		runtime.SetFinalizer(n, nil)
	}
}

func (n *NodeIdentityManager) with(f func(m *C.wid_node_identity_manager) C.wid_result) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.m == nil {
		return errClosed("NodeIdentityManager")
	}
	return call(func() C.wid_result { return f(n.m) })
}

// Start signs a first token at now and saves it; a signing failure is
// returned (ErrNoActiveKey, ...) and retried by Tick after a backoff.
func (n *NodeIdentityManager) Start(now time.Time) error {
	ms, err := unixMillis("NodeIdentityManager.Start: now", now)
	if err != nil {
		return err
	}
	return n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_start(m, ms)
	})
}

// Restore, after a restart, takes the saved token back when it still
// verifies, is this node's and has not expired at now (true), else signs
// a new one (false).
func (n *NodeIdentityManager) Restore(now time.Time) (bool, error) {
	ms, err := unixMillis("NodeIdentityManager.Restore: now", now)
	if err != nil {
		return false, err
	}
	var reused C.uint32_t
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_restore(m, ms, &reused)
	}); err != nil {
		return false, err
	}
	return reused != 0, nil
}

// Tick renews when due at now (doing nothing before). A failed renewal is
// returned; the current token is kept and the next attempt backed off.
func (n *NodeIdentityManager) Tick(now time.Time) error {
	ms, err := unixMillis("NodeIdentityManager.Tick: now", now)
	if err != nil {
		return err
	}
	return n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_tick(m, ms)
	})
}

// NextDue is when Tick next has work; ErrInvalidArgument before the first
// Start or Restore.
func (n *NodeIdentityManager) NextDue() (time.Time, error) {
	var due C.int64_t
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_next_due_ms(m, &due)
	}); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(due)), nil
}

// Current is the current token while it has not expired at now; without
// one, ErrInvalidArgument ("no valid node identity").
func (n *NodeIdentityManager) Current(now time.Time) (string, error) {
	ms, err := unixMillis("NodeIdentityManager.Current: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_current(m, ms, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// Health is the manager's counters and what the clock says at now: call
// it from a health check or a metrics scrape.
func (n *NodeIdentityManager) Health(now time.Time) (NodeIdentityHealth, error) {
	ms, err := unixMillis("NodeIdentityManager.Health: now", now)
	if err != nil {
		return NodeIdentityHealth{}, err
	}
	var out C.wid_bytes
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_health_json(m, ms, &out)
	}); err != nil {
		return NodeIdentityHealth{}, err
	}
	var j nodeHealthJSON
	if err := json.Unmarshal([]byte(takeString(&out)), &j); err != nil {
		return NodeIdentityHealth{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the node identity health: " + err.Error()}
	}
	h := NodeIdentityHealth{
		RenewalOverdue:           time.Duration(j.RenewalOverdueMs) * time.Millisecond,
		AtRisk:                   j.AtRisk,
		Signed:                   j.Signed,
		Failures:                 j.Failures,
		ConsecutiveFailures:      j.ConsecutiveFailures,
		NextAttempt:              msTime(j.NextAttemptMs),
		ExpiresBeforeNextAttempt: j.ExpiresBeforeNextAttempt,
		LastError:                str(j.LastError),
	}
	if j.ExpiresInMs != nil {
		h.ExpiresIn = time.Duration(*j.ExpiresInMs) * time.Millisecond
	}
	if j.ExpiresAt != nil {
		h.ExpiresAt = unixTime(*j.ExpiresAt)
	}
	return h, nil
}
