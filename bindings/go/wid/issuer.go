package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime"
	"sync"
	"time"
)

// IssuerOptions configure an Issuer (NewIssuer). The zero value signs as
// Keyring.Issue does: EdDSA, no iss, Nomad's sub, no extra claims.
type IssuerOptions struct {
	// Issuer is the iss claim of every token; "" for none.
	Issuer string
	// Alg is the signing algorithm; 0 means AlgEdDSA. A SPIFFE issuer
	// needs AlgES256 or AlgRS256 (JWT-SVIDs cannot be EdDSA).
	Alg Alg
	// SpiffeTrustDomain, when set, makes every token a SPIFFE SVID: sub is
	// spiffe://<SpiffeTrustDomain><path>. Lower-case letters, digits, '.',
	// '-' and '_' (1 to 255 bytes). A JWT-SVID also needs an audience and a
	// TTL; a request with a ProofKey gets a WIT-SVID.
	SpiffeTrustDomain string
	// SpiffePath is the SPIFFE ID path template ("" for the default,
	// /${job.region}/${job.namespace}/${job.id}/${group.name}/${workload.name}/${identity.name}):
	// it starts with '/', its segments hold letters, digits, '.', '-', '_'
	// and variables over the request (bindings/go/README.md, "Token
	// profiles", lists them). Needs SpiffeTrustDomain.
	SpiffePath string
	// WimseTrustDomain is the WIMSE trust domain (e.g. "nomad.example.com")
	// of the WIT issued for a request with a ProofKey (as Keyring.IssueWIT's
	// trustDomain); "" for none: such requests then need SpiffeTrustDomain.
	WimseTrustDomain string
	// ExtraClaimsPolicyJSON is an extra claims policy (Nomad 2.0.3's
	// required and optional extra claims per namespace):
	// {"namespaces": {"<ns>": {"required_extra_claims": {"<name>":
	// "<template>"}, "optional_extra_claims": {...}}}}. "" for none: an
	// identity naming extra claims (WorkloadIdentity.ExtraClaims) is then
	// refused. Tokens carry the claims as "extra_claims" (Claims.ExtraClaims).
	ExtraClaimsPolicyJSON string
}

// Issuer signs identities with a keyring's keys as IssuerOptions configure
// it (a wid_issuer handle): an iss, an algorithm, SPIFFE JWT-SVIDs, WIMSE
// WITs and extra claims. It shares the keyring (keys rotated later are
// used) and keeps it alive after the Keyring is closed. Safe for concurrent
// use.
type Issuer struct {
	mu  sync.RWMutex // held for reading by calls, for writing by Close
	iss *C.wid_issuer
}

// NewIssuer checks opts and makes an Issuer over kr. A bad option (a trust
// domain with upper-case letters, a path with a ".." segment or an unknown
// variable, a policy that is not JSON or names a reserved claim such as
// "sub", an unknown Alg, SpiffePath without SpiffeTrustDomain) fails with
// ErrInvalidArgument, the message naming the problem.
func NewIssuer(kr *Keyring, opts IssuerOptions) (*Issuer, error) {
	if kr == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *Keyring"}
	}
	if opts.SpiffePath != "" && opts.SpiffeTrustDomain == "" {
		return nil, &Error{Code: ResultInvalidArgument,
			Message: "wid: IssuerOptions.SpiffePath is set without SpiffeTrustDomain"}
	}
	var b *C.wid_issuer_builder
	if err := kr.with(func(k *C.wid_keyring) C.wid_result {
		return C.wid_issuer_builder_new(k, &b)
	}); err != nil {
		return nil, err
	}
	defer C.wid_issuer_builder_free(b)

	var steps []func() C.wid_result
	if opts.Issuer != "" {
		steps = append(steps, func() C.wid_result {
			p, n := strIn(opts.Issuer)
			return C.wid_issuer_builder_set_issuer(b, p, n)
		})
	}
	if opts.Alg != 0 {
		steps = append(steps, func() C.wid_result {
			return C.wid_issuer_builder_set_algorithm(b, C.wid_alg(opts.Alg))
		})
	}
	if opts.SpiffeTrustDomain != "" {
		steps = append(steps, func() C.wid_result {
			td, tdLen := strIn(opts.SpiffeTrustDomain)
			path, pathLen := strIn(opts.SpiffePath) // (NULL, 0): the default path
			return C.wid_issuer_builder_set_spiffe(b, td, tdLen, path, pathLen)
		})
	}
	if opts.WimseTrustDomain != "" {
		steps = append(steps, func() C.wid_result {
			td, n := strIn(opts.WimseTrustDomain)
			return C.wid_issuer_builder_set_wimse_trust_domain(b, td, n)
		})
	}
	if opts.ExtraClaimsPolicyJSON != "" {
		steps = append(steps, func() C.wid_result {
			p, n := strIn(opts.ExtraClaimsPolicyJSON)
			return C.wid_issuer_builder_set_extra_claims_policy(b, p, n)
		})
	}
	for _, step := range steps {
		if err := call(step); err != nil {
			return nil, err
		}
	}
	var iss *C.wid_issuer
	if err := call(func() C.wid_result { return C.wid_issuer_builder_build(b, &iss) }); err != nil {
		return nil, err
	}
	i := &Issuer{iss: iss}
	runtime.SetFinalizer(i, (*Issuer).Close)
	return i, nil
}

// Close releases the issuer after the calls in flight. It is idempotent;
// other methods fail with ErrNullArgument afterwards.
func (i *Issuer) Close() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.iss != nil {
		C.wid_issuer_free(i.iss)
		i.iss = nil
		runtime.SetFinalizer(i, nil)
	}
}

// Issue signs the identity req asks for at now (whole seconds; the zero
// time.Time is ErrInvalidArgument): a bearer JWT
// (a JWT-SVID for a SPIFFE issuer), or a WIT when req carries a ProofKey.
// An invalid request, a refused SVID (EdDSA, no audience, no TTL, a field
// that cannot be part of a SPIFFE ID) or an extra claim the policy does not
// offer fails with ErrInvalidArgument naming the field; no active key of
// the algorithm with ErrNoActiveKey.
func (i *Issuer) Issue(req *IssueRequest, now time.Time) (string, error) {
	b, err := EncodeIssueRequest(req)
	if err != nil {
		return "", err
	}
	return i.IssueMsgpack(b, now)
}

// IssueMsgpack is Issue for an IssueRequest already msgpack-encoded (as
// Nomad's go-msgpack writes it).
func (i *Issuer) IssueMsgpack(request []byte, now time.Time) (string, error) {
	secs, err := unixSecs("Issuer.Issue: now", now)
	if err != nil {
		return "", err
	}
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.iss == nil {
		return "", errClosed("Issuer")
	}
	var out C.wid_bytes
	if err := call(func() C.wid_result {
		r, rLen := bytesIn(request)
		return C.wid_issuer_issue(i.iss, (*C.uint8_t)(ptr(r)), rLen, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// IssueNode signs the identity of the client node req names at now (whole
// seconds; the zero time.Time is ErrInvalidArgument) with the issuer's algorithm and iss: the token Keyring.IssueNode
// makes with those. The SPIFFE profile, WIMSE trust domain and extra claims
// policy do not apply to node identities. Errors are Keyring.IssueNode's.
func (i *Issuer) IssueNode(req *NodeIdentityRequest, now time.Time) (string, error) {
	b, err := encodeNodeRequest(req)
	if err != nil {
		return "", err
	}
	return i.IssueNodeMsgpack(b, now)
}

// IssueNodeMsgpack is IssueNode for a NodeIdentityRequest already
// msgpack-encoded.
func (i *Issuer) IssueNodeMsgpack(request []byte, now time.Time) (string, error) {
	secs, err := unixSecs("Issuer.IssueNode: now", now)
	if err != nil {
		return "", err
	}
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.iss == nil {
		return "", errClosed("Issuer")
	}
	var out C.wid_bytes
	if err := call(func() C.wid_result {
		r, rLen := bytesIn(request)
		return C.wid_issuer_issue_node(i.iss, (*C.uint8_t)(ptr(r)), rLen, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// SpiffeBundle returns the keyring's keys as a SPIFFE trust bundle's JWT
// authorities: {"keys":[...],"spiffe_refresh_hint":<seconds>}, the ES256
// and RS256 keys of the JWKS with "use":"jwt-svid" (a JWT-SVID cannot be
// EdDSA, so Ed25519 keys are left out). refreshHint is how often validators
// should fetch it again, rounded up to whole seconds; 0 means the default,
// 5 minutes; a negative one fails with ErrInvalidArgument.
func (k *Keyring) SpiffeBundle(refreshHint time.Duration) (string, error) {
	if refreshHint < 0 {
		return "", errNegative("Keyring.SpiffeBundle: refreshHint", refreshHint)
	}
	secs := uint64(secsCeil(refreshHint))
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_spiffe_bundle(kr, C.uint64_t(secs), &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}
