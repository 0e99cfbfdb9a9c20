package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"sync"
)

// NodeIdentityManager keeps a client node's own identity token
// (wid_node_identity_manager): signed by an Issuer, renewed at two thirds of
// its life (less up to 5 % of it as jitter), retried with a backoff (1 s
// doubling to 60 s) when a renewal fails while the current token is kept,
// saved in a state directory and taken back by Restore after a restart.
// Times are Unix milliseconds. Safe for concurrent use; Close releases it
// (a finalizer does too), leaving the saved state in its directory.
type NodeIdentityManager struct {
	mu sync.RWMutex // held for reading by calls, for writing by Close
	m  *C.wid_node_identity_manager
}

// NodeIdentityHealth is what NodeIdentityManager.Health reports; nil
// pointers are absent values (no token yet, nothing scheduled, no failure).
type NodeIdentityHealth struct {
	// ExpiresInMs is how long the token has left (negative once expired).
	ExpiresInMs *int64 `json:"expires_in_ms"`
	// RenewalOverdueMs is how late the next attempt is (0 when not due).
	RenewalOverdueMs int64 `json:"renewal_overdue_ms"`
	// AtRisk: renewals are failing, a renewal is more than a minute
	// overdue (nothing calls Tick), or there is no valid token.
	AtRisk bool `json:"at_risk"`
	// Signed counts tokens signed (the first included).
	Signed uint64 `json:"signed"`
	// Failures counts failed signing attempts.
	Failures uint64 `json:"failures"`
	// ConsecutiveFailures counts failures since the last success.
	ConsecutiveFailures uint32 `json:"consecutive_failures"`
	// ExpiresAt is the token's exp (Unix seconds).
	ExpiresAt *int64 `json:"expires_at"`
	// NextAttemptMs is when Tick next has work (Unix milliseconds).
	NextAttemptMs *int64 `json:"next_attempt_ms"`
	// ExpiresBeforeNextAttempt: renewals are failing and the token expires
	// before the next attempt.
	ExpiresBeforeNextAttempt bool `json:"expires_before_next_attempt"`
	// LastError is the last failure's message (nil after a success).
	LastError *string `json:"last_error"`
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

// Start signs a first token at nowMs and saves it; a signing failure is
// returned (ErrNoActiveKey, ...) and retried by Tick after a backoff.
func (n *NodeIdentityManager) Start(nowMs int64) error {
	return n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_start(m, C.int64_t(nowMs))
	})
}

// Restore, after a restart, takes the saved token back when it still
// verifies, is this node's and has not expired (true), else signs a new
// one (false).
func (n *NodeIdentityManager) Restore(nowMs int64) (bool, error) {
	var reused C.uint32_t
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_restore(m, C.int64_t(nowMs), &reused)
	}); err != nil {
		return false, err
	}
	return reused != 0, nil
}

// Tick renews when due (doing nothing before). A failed renewal is
// returned; the current token is kept and the next attempt backed off.
func (n *NodeIdentityManager) Tick(nowMs int64) error {
	return n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_tick(m, C.int64_t(nowMs))
	})
}

// NextDue is when Tick next has work (Unix milliseconds);
// ErrInvalidArgument before the first Start or Restore.
func (n *NodeIdentityManager) NextDue() (int64, error) {
	var due C.int64_t
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_next_due_ms(m, &due)
	}); err != nil {
		return 0, err
	}
	return int64(due), nil
}

// Current is the current token while it has not expired at nowMs; without
// one, ErrInvalidArgument ("no valid node identity").
func (n *NodeIdentityManager) Current(nowMs int64) (string, error) {
	var out C.wid_bytes
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_current(m, C.int64_t(nowMs), &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// Health is the manager's counters and what the clock says at nowMs: call
// it from a health check or a metrics scrape.
func (n *NodeIdentityManager) Health(nowMs int64) (NodeIdentityHealth, error) {
	var out C.wid_bytes
	if err := n.with(func(m *C.wid_node_identity_manager) C.wid_result {
		return C.wid_node_identity_manager_health_json(m, C.int64_t(nowMs), &out)
	}); err != nil {
		return NodeIdentityHealth{}, err
	}
	var h NodeIdentityHealth
	if err := json.Unmarshal([]byte(takeString(&out)), &h); err != nil {
		return NodeIdentityHealth{}, &Error{Code: ResultDecodeError, Message: "wid: decoding the node identity health: " + err.Error()}
	}
	return h, nil
}
