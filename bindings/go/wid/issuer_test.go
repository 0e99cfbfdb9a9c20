package wid

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

const (
	spiffeTD  = "example.org"
	spiffeISS = "https://nomad.example.com"
	// extraPolicy: two required claims and two optional ones in "default".
	extraPolicy = `{"namespaces":{"default":{
		"required_extra_claims":{"unique_id":"${job.namespace}:${job.id}","owner":"${job.meta.owner}"},
		"optional_extra_claims":{"dc":"dc:${node.datacenter}","pool":"${job.node_pool}"}}}}`
)

// esKeyring returns a keyring with an active EdDSA key ("key-1") and an
// active ES256 key ("es-1").
func esKeyring(t testing.TB) *Keyring {
	t.Helper()
	kr := newKeyring(t)
	if err := kr.InsertAlg(AlgES256, "es-1", material(9), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg(ES256): %v", err)
	}
	return kr
}

func newIssuer(t testing.TB, kr *Keyring, opts IssuerOptions) *Issuer {
	t.Helper()
	iss, err := NewIssuer(kr, opts)
	if err != nil {
		t.Fatalf("NewIssuer(%+v): %v", opts, err)
	}
	t.Cleanup(iss.Close)
	return iss
}

// extraRequest is request() with the Nomad 2.0.3 fields: the job's Meta and
// NodePool, the Node, and the identity asking for the optional claim "dc".
func extraRequest() *IssueRequest {
	req := request(allocID, aud, "consul.io")
	req.Allocation.Job = &Job{ID: "web", Meta: map[string]string{"owner": "team-a"}, NodePool: "gpu"}
	req.Node = &Node{Datacenter: "dc1", ID: "9d1e6a44-1111-2222-3333-444444444444", Name: "client-gpu-1", NodeClass: "gpu-a100", NodePool: "gpu"}
	req.Identity.ExtraClaims = []string{"dc"}
	return req
}

// tokenHeader returns the alg and typ of a token's JOSE header.
func tokenHeader(t testing.TB, token string) (alg, typ string) {
	alg, typ, _ = tokenHeaderKid(t, token)
	return alg, typ
}

// tokenHeaderKid returns the alg, typ and kid of a token's JOSE header.
func tokenHeaderKid(t testing.TB, token string) (alg, typ, kid string) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.SplitN(token, ".", 2)[0])
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	var h struct{ Alg, Typ, Kid string }
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("header: %v", err)
	}
	return h.Alg, h.Typ, h.Kid
}

// tokenPayload returns a token's payload, the claims JSON as signed.
func tokenPayload(t testing.TB, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("payload: %v", err)
	}
	return string(raw)
}

func TestIssuerSpiffeJWTSVID(t *testing.T) {
	kr := esKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{KeyWait: -1, Issuer: spiffeISS})
	iss := newIssuer(t, kr, IssuerOptions{Issuer: spiffeISS, Alg: AlgES256, SpiffeTrustDomain: spiffeTD})

	tok, err := iss.Issue(request(allocID, aud), at(now))
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	if alg, typ := tokenHeader(t, tok); alg != "ES256" || typ != "JWT" {
		t.Errorf("header alg %q typ %q", alg, typ)
	}
	c, err := v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Subject != "spiffe://example.org/global/default/web/frontend/server/default" ||
		c.Issuer != spiffeISS || c.AllocationID != allocID || c.Expires.Unix() != now+ttl {
		t.Errorf("claims %+v", c)
	}
	if c.ExtraClaims != nil {
		t.Errorf("extra claims without a policy: %v", c.ExtraClaims)
	}

	// A path template over the Job and the Node.
	custom := newIssuer(t, kr, IssuerOptions{Alg: AlgES256, SpiffeTrustDomain: spiffeTD,
		SpiffePath: "/ns/${job.namespace}/pool/${node.pool}/${workload.name}"})
	req := extraRequest()
	req.Identity.ExtraClaims = nil
	tok, err = custom.Issue(req, at(now))
	if err != nil {
		t.Fatalf("Issue (custom path): %v", err)
	}
	if c, err := v.Verify(tok, at(now)); !errors.Is(err, ErrIssuerMismatch) {
		t.Errorf("a token without iss for a verifier requiring one: %+v %v", c, err)
	}
	v2 := newVerifier(t, kr, aud, liveStore(), noWait)
	if c, err := v2.Verify(tok, at(now)); err != nil || c.Subject != "spiffe://example.org/ns/default/pool/gpu/server" {
		t.Errorf("custom path: %+v %v", c, err)
	}
	// Without the Node, ${node.pool} has no value.
	_, err = custom.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "Node.NodePool") {
		t.Errorf("missing node: %v", err)
	}

	// JWT-SVID rules: ES256 or RS256, an audience and a TTL.
	eddsa := newIssuer(t, kr, IssuerOptions{SpiffeTrustDomain: spiffeTD})
	_, err = eddsa.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "ES256 or RS256") {
		t.Errorf("EdDSA JWT-SVID: %v", err)
	}
	_, err = iss.Issue(request(allocID), at(now))
	wantCode(t, err, ErrInvalidArgument)
	noTTL := request(allocID, aud)
	noTTL.Identity.TTL = 0
	_, err = iss.Issue(noTTL, at(now))
	wantCode(t, err, ErrInvalidArgument)
	rs := newIssuer(t, kr, IssuerOptions{Alg: AlgRS256, SpiffeTrustDomain: spiffeTD})
	_, err = rs.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrNoActiveKey)

	// The issuer shares the keyring: a rotation is used at once, and it
	// outlives the Keyring handle.
	newKid, err := kr.RotateAlg(AlgES256, at(now))
	if err != nil {
		t.Fatal(err)
	}
	kr.Close()
	tok, err = iss.Issue(request(allocID, aud), at(now))
	if err != nil {
		t.Fatalf("Issue after the keyring was closed: %v", err)
	}
	if alg, _, k := tokenHeaderKid(t, tok); alg != "ES256" || k != newKid {
		t.Errorf("alg %q kid %q, want ES256 and the rotated key %q", alg, k, newKid)
	}
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Errorf("Verify after rotation: %v", err)
	}
}

func TestIssuerExtraClaims(t *testing.T) {
	kr := esKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	iss := newIssuer(t, kr, IssuerOptions{ExtraClaimsPolicyJSON: extraPolicy})

	tok, err := iss.Issue(extraRequest(), at(now))
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	c, err := v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := map[string]string{"dc": "dc:dc1", "owner": "team-a", "unique_id": "default:web"}
	if !reflect.DeepEqual(c.ExtraClaims, want) {
		t.Errorf("ExtraClaims %v, want %v", c.ExtraClaims, want)
	}
	if c.Subject != "global:default:web:frontend:server:default" {
		t.Errorf("sub %q", c.Subject)
	}
	// The claims JSON as the library writes it takes the fast path, and
	// both decoders agree on it.
	payload := tokenPayload(t, tok)
	if !strings.Contains(payload, `"extra_claims":{"dc":"dc:dc1","owner":"team-a","unique_id":"default:web"}`) {
		t.Errorf("payload %s", payload)
	}
	fast, ok := fastClaims(payload)
	if !ok {
		t.Fatalf("the fast path refused the library's claims: %s", payload)
	}
	slow, err := decodeClaims([]byte(payload))
	if err != nil || !reflect.DeepEqual(fast, slow) || !reflect.DeepEqual(fast.ExtraClaims, want) {
		t.Errorf("fast %+v, encoding/json %+v (%v)", fast, slow, err)
	}

	// Both optional claims; none; one the namespace does not offer.
	req := extraRequest()
	req.Identity.ExtraClaims = []string{"pool", "dc"}
	if c, err := v.Verify(mustIssue(t, iss, req), at(now)); err != nil || c.ExtraClaims["pool"] != "gpu" || len(c.ExtraClaims) != 4 {
		t.Errorf("two optional claims: %+v %v", c, err)
	}
	req.Identity.ExtraClaims = nil
	if c, err := v.Verify(mustIssue(t, iss, req), at(now)); err != nil || len(c.ExtraClaims) != 2 {
		t.Errorf("required claims only: %+v %v", c, err)
	}
	req.Identity.ExtraClaims = []string{"nope"}
	_, err = iss.Issue(req, at(now))
	wantCode(t, err, ErrInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown claim: %v", err)
	}
	// A required claim whose field is missing (no Job.Meta).
	req = extraRequest()
	req.Allocation.Job.Meta = nil
	_, err = iss.Issue(req, at(now))
	wantCode(t, err, ErrInvalidArgument)
	// Another namespace has none.
	req = extraRequest()
	req.Allocation.Namespace = "other"
	req.Identity.ExtraClaims = nil
	if c, err := v.Verify(mustIssue(t, iss, req), at(now)); err != nil || c.ExtraClaims != nil {
		t.Errorf("another namespace: %+v %v", c, err)
	}
	// Without a policy (an Issuer or Keyring.Issue), naming claims is refused.
	plain := newIssuer(t, kr, IssuerOptions{})
	_, err = plain.Issue(extraRequest(), at(now))
	wantCode(t, err, ErrInvalidArgument)
	_, err = kr.Issue(extraRequest(), at(now))
	wantCode(t, err, ErrInvalidArgument)

	// SPIFFE and extra claims together.
	both := newIssuer(t, kr, IssuerOptions{Alg: AlgES256, SpiffeTrustDomain: spiffeTD,
		SpiffePath: "/dc/${node.datacenter}/${task.name}", ExtraClaimsPolicyJSON: extraPolicy})
	c, err = v.Verify(mustIssue(t, both, extraRequest()), at(now))
	if err != nil || c.Subject != "spiffe://example.org/dc/dc1/server" || !reflect.DeepEqual(c.ExtraClaims, want) {
		t.Errorf("SPIFFE + extra claims: %+v %v", c, err)
	}
}

func mustIssue(t testing.TB, iss *Issuer, req *IssueRequest) string {
	t.Helper()
	tok, err := iss.Issue(req, at(now))
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return tok
}

func TestIssuerOptionsAreChecked(t *testing.T) {
	kr := esKeyring(t)
	for name, opts := range map[string]IssuerOptions{
		"upper-case trust domain": {Alg: AlgES256, SpiffeTrustDomain: "Bad.Domain"},
		"dot-dot path":            {Alg: AlgES256, SpiffeTrustDomain: spiffeTD, SpiffePath: "/a/../b"},
		"relative path":           {Alg: AlgES256, SpiffeTrustDomain: spiffeTD, SpiffePath: "a/b"},
		"unknown variable":        {Alg: AlgES256, SpiffeTrustDomain: spiffeTD, SpiffePath: "/${nope}"},
		"path without a domain":   {Alg: AlgES256, SpiffePath: "/a"},
		"reserved claim":          {ExtraClaimsPolicyJSON: `{"namespaces":{"default":{"required_extra_claims":{"sub":"x"}}}}`},
		"malformed policy":        {ExtraClaimsPolicyJSON: `{"namespaces":`},
		"unknown policy member":   {ExtraClaimsPolicyJSON: `{"namespace":{}}`},
		"unknown alg":             {Alg: Alg(99)},
		"bad WIMSE trust domain":  {WimseTrustDomain: "Bad.Domain"},
		"issuer not UTF-8":        {Issuer: "\xff"},
	} {
		iss, err := NewIssuer(kr, opts)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, %v; want ErrInvalidArgument", name, iss, err)
		}
		var e *Error
		if errors.As(err, &e) && e.Message == "" {
			t.Errorf("%s: no message", name)
		}
	}
	_, err := NewIssuer(kr, IssuerOptions{ExtraClaimsPolicyJSON: `{"namespaces":{"default":{"required_extra_claims":{"sub":"x"}}}}`})
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("reserved claim: %v", err)
	}
	if _, err := NewIssuer(nil, IssuerOptions{}); !errors.Is(err, ErrNullArgument) {
		t.Errorf("nil keyring: %v", err)
	}
	closed, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if _, err := NewIssuer(closed, IssuerOptions{}); !errors.Is(err, ErrNullArgument) {
		t.Errorf("closed keyring: %v", err)
	}

	// Close is idempotent; a closed Issuer fails with ErrNullArgument.
	iss := newIssuer(t, kr, IssuerOptions{})
	iss.Close()
	iss.Close()
	if _, err := iss.Issue(request(allocID, aud), at(now)); !errors.Is(err, ErrNullArgument) {
		t.Errorf("closed issuer: %v", err)
	}
	// Bytes that are not a request.
	live := newIssuer(t, kr, IssuerOptions{})
	if _, err := live.IssueMsgpack([]byte{0xc1}, at(now)); !errors.Is(err, ErrDecodeError) {
		t.Errorf("garbage: %v", err)
	}
	if _, err := live.Issue(nil, at(now)); !errors.Is(err, ErrNullArgument) {
		t.Errorf("nil request: %v", err)
	}
}

func TestIssuerWIT(t *testing.T) {
	kr := esKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	key, err := GenerateWorkloadKey(AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	req := request(allocID, aud)
	if req.ProofKey, err = key.ProofKey(); err != nil {
		t.Fatal(err)
	}
	const target = "https://vault.example.com/v1/auth/jwt/login"

	// No trust domain: a ProofKey request is refused.
	_, err = newIssuer(t, kr, IssuerOptions{Alg: AlgES256}).Issue(req, at(now))
	wantCode(t, err, ErrInvalidArgument)
	// No WIT key: refused, naming the fix (a bearer key never signs a WIT).
	_, err = newIssuer(t, kr, IssuerOptions{Alg: AlgES256, WimseTrustDomain: "nomad.example.com"}).Issue(req, at(now))
	if e := wantCode(t, err, ErrNoActiveKey); !strings.Contains(e.Message, "--purpose wit") {
		t.Errorf("message %q", e.Message)
	}
	if _, err := kr.RotatePurpose(PurposeWIT, AlgES256, at(now-10)); err != nil {
		t.Fatal(err)
	}

	for name, opts := range map[string]IssuerOptions{
		"wimse://":  {Alg: AlgES256, WimseTrustDomain: "nomad.example.com"},
		"spiffe://": {Alg: AlgES256, SpiffeTrustDomain: spiffeTD},
	} {
		wit, err := newIssuer(t, kr, opts).Issue(req, at(now))
		if err != nil {
			t.Fatalf("%s: Issue: %v", name, err)
		}
		if _, typ := tokenHeader(t, wit); typ != "wit+jwt" {
			t.Errorf("%s: typ %q", name, typ)
		}
		wpt, err := key.Prove(wit, target, "", 0, time.Unix(now, 0))
		if err != nil {
			t.Fatal(err)
		}
		c, err := v.VerifyProof(wit, wpt, target, "", time.Unix(now, 0))
		if err != nil {
			t.Fatalf("%s: VerifyProof: %v", name, err)
		}
		if !strings.HasPrefix(c.Subject, name) || c.Confirmation == nil {
			t.Errorf("%s: claims %+v", name, c)
		}
		if _, err := v.Verify(wit, at(now)); !errors.Is(err, ErrProofRequired) {
			t.Errorf("%s: a WIT as a bearer token: %v", name, err)
		}
	}
}

func TestIssuerConcurrentUse(t *testing.T) {
	kr := esKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	iss := newIssuer(t, kr, IssuerOptions{Alg: AlgES256, SpiffeTrustDomain: spiffeTD, ExtraClaimsPolicyJSON: extraPolicy})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				tok, err := iss.Issue(extraRequest(), at(now))
				if err == nil {
					_, err = v.Verify(tok, at(now))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSpiffeBundle(t *testing.T) {
	kr := esKeyring(t)
	raw, err := kr.SpiffeBundle(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var bundle struct {
		Keys []struct {
			Kty, Kid, Use, Alg string
		} `json:"keys"`
		RefreshHint int64 `json:"spiffe_refresh_hint"`
	}
	if err := json.Unmarshal([]byte(raw), &bundle); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if bundle.RefreshHint != 60 || len(bundle.Keys) != 1 || bundle.Keys[0].Kid != "es-1" ||
		bundle.Keys[0].Use != "jwt-svid" || bundle.Keys[0].Kty != "EC" || bundle.Keys[0].Alg != "ES256" {
		t.Errorf("bundle %s", raw)
	}
	for hint, want := range map[time.Duration]string{
		0:                       `"spiffe_refresh_hint":300`,
		1500 * time.Millisecond: `"spiffe_refresh_hint":2`,
		time.Nanosecond:         `"spiffe_refresh_hint":1`,
		time.Hour:               `"spiffe_refresh_hint":3600`,
	} {
		raw, err := kr.SpiffeBundle(hint)
		if err != nil || !strings.Contains(raw, want) {
			t.Errorf("SpiffeBundle(%v): %s %v; want %s", hint, raw, err, want)
		}
	}
	if _, err := kr.SpiffeBundle(-time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative hint: %v", err)
	}
	// An EdDSA-only keyring's bundle is empty.
	if raw, err := newKeyring(t).SpiffeBundle(time.Second); err != nil || raw != `{"keys":[],"spiffe_refresh_hint":1}` {
		t.Errorf("EdDSA-only bundle: %s %v", raw, err)
	}
	kr.Close()
	if _, err := kr.SpiffeBundle(time.Second); !errors.Is(err, ErrNullArgument) {
		t.Errorf("closed keyring: %v", err)
	}
}

// The Nomad 2.0.3 fields travel under their codec names; a request without
// them encodes no Node key (omitempty, like ProofKey).
func TestEncodeIssueRequestExtraFields(t *testing.T) {
	decodeMap := func(b []byte) map[string]interface{} {
		var m map[string]interface{}
		if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	b, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeMap(b)["Node"]; ok {
		t.Errorf("a request without a Node encodes one")
	}

	req := extraRequest()
	b, err = EncodeIssueRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeMap(b)
	node, _ := m["Node"].(map[string]interface{})
	for _, k := range []string{"Datacenter", "ID", "Name", "NodeClass", "NodePool"} {
		if _, ok := node[k]; !ok {
			t.Errorf("Node has no %q: %v", k, m["Node"])
		}
	}
	ident, _ := m["Identity"].(map[string]interface{})
	if _, ok := ident["ExtraClaims"]; !ok {
		t.Errorf("Identity has no ExtraClaims: %v", ident)
	}
	alloc, _ := m["Allocation"].(map[string]interface{})
	job, _ := alloc["Job"].(map[string]interface{})
	if _, ok := job["Meta"]; !ok || job["NodePool"] != "gpu" {
		t.Errorf("Job: %v", job)
	}
	back, err := DecodeIssueRequest(b)
	if err != nil || !reflect.DeepEqual(back, req) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back, req)
	}
}

// The committed Go vector with the Nomad 2.0.3 fields (written by Nomad's
// codec from a fuller struct) decodes into these structs.
func TestGoMsgpackExtraVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), "issue_request_extra.msgpack"))
	if os.IsNotExist(err) {
		t.Skip("no issue_request_extra.msgpack vector")
	}
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeIssueRequest(raw)
	if err != nil {
		t.Fatalf("DecodeIssueRequest: %v", err)
	}
	if req.Node == nil || req.Node.Datacenter == "" || req.Node.ID == "" ||
		req.Allocation == nil || req.Allocation.Job == nil || len(req.Allocation.Job.Meta) == 0 ||
		req.Allocation.Job.NodePool == "" || req.Identity == nil || len(req.Identity.ExtraClaims) == 0 {
		t.Errorf("decoded %+v / %+v / %+v / %+v", req, req.Node, req.Allocation, req.Identity)
	}
}

// Nomad 2.x's claims for the logins: a task's vault_<cluster> identity
// carries its Vault block's Role and Namespace, a consul* identity the
// Consul namespace, other identities neither; ${vault.*} in templates.
func TestIssuerExchangeClaims(t *testing.T) {
	kr := esKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	iss := newIssuer(t, kr, IssuerOptions{ExtraClaimsPolicyJSON: `{"namespaces":{"*":{
		"required_extra_claims":{"vault_target":"${vault.cluster}|${vault.namespace}|${vault.role}"}}}}`})
	withBlocks := func(name string) *IssueRequest {
		req := request(allocID, aud)
		req.Identity.Name = name
		req.Vault = &Vault{Role: "nomad-web", Namespace: "engineering/web", Cluster: "default"}
		req.Consul = &Consul{Namespace: "web-team"}
		return req
	}
	for _, tc := range []struct {
		name                  string
		consul, vaultNS, role string
		target                string
	}{
		{"vault_default", "", "engineering/web", "nomad-web", "default|engineering/web|nomad-web"},
		{"consul_default", "web-team", "", "", "||"},
		{"default", "", "", "", "||"},
	} {
		tok := mustIssue(t, iss, withBlocks(tc.name))
		c, err := v.Verify(tok, at(now))
		if err != nil {
			t.Fatalf("%s: Verify: %v", tc.name, err)
		}
		if c.ConsulNamespace != tc.consul || c.VaultNamespace != tc.vaultNS || c.VaultRole != tc.role ||
			c.ExtraClaims["vault_target"] != tc.target {
			t.Errorf("%s: %+v", tc.name, c)
		}
		payload := tokenPayload(t, tok)
		fast, ok := fastClaims(payload)
		slow, err := decodeClaims([]byte(payload))
		if !ok || err != nil || !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s: fast %+v (%v), encoding/json %+v (%v)", tc.name, fast, ok, slow, err)
		}
	}
	// Without the blocks, the request encodes as before (no Vault or Consul key).
	b, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Vault") || strings.Contains(string(b), "Consul") {
		t.Errorf("a request without the blocks encodes them: %q", b)
	}
	req := withBlocks("vault_default")
	if b, err = EncodeIssueRequest(req); err != nil {
		t.Fatal(err)
	}
	back, err := DecodeIssueRequest(b)
	if err != nil || !reflect.DeepEqual(back, req) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back, req)
	}
	// Over-long fields are refused by name.
	req.Vault.Role = strings.Repeat("r", 257)
	_, err = iss.Issue(req, at(now))
	wantCode(t, err, ErrInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "Vault.Role") {
		t.Errorf("long role: %v", err)
	}
}

// The committed Go vector with Nomad's whole Vault and Consul blocks decodes
// into these structs (their other fields dropped).
func TestGoMsgpackExchangeVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), "issue_request_exchange.msgpack"))
	if os.IsNotExist(err) {
		t.Skip("no issue_request_exchange.msgpack vector")
	}
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeIssueRequest(raw)
	if err != nil {
		t.Fatalf("DecodeIssueRequest: %v", err)
	}
	want := &Vault{Role: "nomad-web", Namespace: "engineering/web", Cluster: "default"}
	if !reflect.DeepEqual(req.Vault, want) || req.Consul == nil || req.Consul.Namespace != "web-team" {
		t.Errorf("decoded Vault %+v, Consul %+v", req.Vault, req.Consul)
	}
}
