package wid

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

const (
	nodeID  = "da86421c-7de9-85e4-2f50-3b2bf95102c1"
	nodeAud = "nomadproject.io"
	nodeSub = "node:global:default:" + nodeID + ":default"
)

func nodeRequest(audiences ...string) *NodeIdentityRequest {
	return &NodeIdentityRequest{
		Region: "global",
		Node: &Node{
			ID:         nodeID,
			Name:       "client-1",
			Datacenter: "dc1",
			NodeClass:  "gpu",
			NodePool:   "default",
			Status:     "ready",
		},
		Audience: audiences,
	}
}

func issueNode(t testing.TB, kr *Keyring, alg Alg, req *NodeIdentityRequest, issuer string) string {
	t.Helper()
	tok, err := kr.IssueNode(alg, req, issuer, at(now))
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	return tok
}

// nodeTable is a node lookup over a map, safe for concurrent use, recording
// the lookups it answers as "<node>/<consistency>".
type nodeTable struct {
	mu     sync.Mutex
	stale  map[string]NodeState
	leader map[string]NodeState
	calls  []string
}

func newNodeTable(stale, leader NodeState) *nodeTable {
	return &nodeTable{
		stale:  map[string]NodeState{nodeID: stale},
		leader: map[string]NodeState{nodeID: leader},
	}
}

func (n *nodeTable) lookup(id string, c Consistency) (NodeState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, id+"/"+c.String())
	if c == Stale {
		return n.stale[id], nil
	}
	return n.leader[id], nil
}

func (n *nodeTable) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := append([]string(nil), n.calls...)
	n.calls = nil
	return out
}

func nodeOptions(mode NodeTokens, lookup func(string, Consistency) (NodeState, error)) *VerifierOptions {
	return &VerifierOptions{KeyWait: -1, NodeTokens: mode, NodeLookup: lookup}
}

func TestNodeConstants(t *testing.T) {
	for _, c := range []struct {
		got, want uint32
		name      string
	}{
		{uint32(NodeMissing), 0, NodeMissing.String()},
		{uint32(NodeLive), 1, NodeLive.String()},
		{uint32(NodeDown), 2, NodeDown.String()},
		{uint32(NodeTokensRefuse), 0, NodeTokensRefuse.String()},
		{uint32(NodeTokensAccept), 1, NodeTokensAccept.String()},
		{uint32(NodeTokensOnly), 2, NodeTokensOnly.String()},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if NodeState(9).String() != "NodeState(9)" || NodeTokens(9).String() != "NodeTokens(9)" {
		t.Errorf("unknown values: %v %v", NodeState(9), NodeTokens(9))
	}
}

// A node token from Keyring.IssueNode carries Nomad's node claims, and a
// verifier that accepts node tokens returns them (through the fast claims
// decoder, which must agree with encoding/json).
func TestIssueNodeVerify(t *testing.T) {
	kr := esKeyring(t)
	nodes := newNodeTable(NodeLive, NodeLive)
	store := liveStore()
	v := newVerifier(t, kr, nodeAud, store, nodeOptions(NodeTokensAccept, nodes.lookup))

	tok := issueNode(t, kr, AlgEdDSA, nodeRequest(), "https://nomad.example.com")
	if alg, typ := tokenHeader(t, tok); alg != "EdDSA" || typ != "JWT" {
		t.Errorf("header alg %q typ %q", alg, typ)
	}
	c, err := v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !c.IsNode() || c.NodeID != nodeID || c.NodePool != "default" || c.NodeClass != "gpu" ||
		c.NodeDatacenter != "dc1" || c.Subject != nodeSub || !reflect.DeepEqual(c.Audience, []string{nodeAud}) ||
		c.Expires.Unix() != now+24*3600 || c.IssuedAt.Unix() != now ||
		c.Issuer != "https://nomad.example.com" || len(c.JTI) != 36 {
		t.Errorf("claims %+v", c)
	}
	if c.AllocationID != "" || c.Namespace != "" || c.JobID != "" || c.Task != "" {
		t.Errorf("a node token with allocation claims: %+v", c)
	}
	// The fast path and encoding/json agree on the library's own payload.
	slow, err := decodeClaims([]byte(tokenPayload(t, tok)))
	if err != nil || !reflect.DeepEqual(slow, c) {
		t.Errorf("encoding/json: %v\n%+v\nfast: %+v", err, slow, c)
	}
	if _, ok := fastClaims(tokenPayload(t, tok)); !ok {
		t.Errorf("the fast path refused a node token's claims: %s", tokenPayload(t, tok))
	}
	if got := nodes.Calls(); !reflect.DeepEqual(got, []string{nodeID + "/stale"}) {
		t.Errorf("node lookups %v", got)
	}
	if len(store.Calls()) != 0 {
		t.Errorf("the allocation store was asked about a node token: %v", store.Calls())
	}

	// ES256, the request's audiences and TTL, no iss, no class.
	req := nodeRequest("consul.io", nodeAud)
	req.TTL = time.Hour
	req.Node.NodeClass = ""
	tok = issueNode(t, kr, AlgES256, req, "")
	if alg, _ := tokenHeader(t, tok); alg != "ES256" {
		t.Errorf("alg %q", alg)
	}
	c, err = v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify ES256: %v", err)
	}
	if c.Expires.Unix() != now+3600 || c.Issuer != "" || c.NodeClass != "" || len(c.Audience) != 2 {
		t.Errorf("claims %+v", c)
	}
	if strings.Contains(tokenPayload(t, tok), "nomad_node_class") {
		t.Errorf("an empty class is written: %s", tokenPayload(t, tok))
	}
	if _, err := v.Verify(tok, at(now+3600+61)); !errors.Is(err, ErrExpired) {
		t.Errorf("expired: %v", err)
	}
}

// Issuer.IssueNode signs with the issuer's algorithm and iss.
func TestIssuerIssueNode(t *testing.T) {
	kr := esKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{Alg: AlgES256, Issuer: "https://nomad.example.com", SpiffeTrustDomain: "example.org"})
	tok, err := iss.IssueNode(nodeRequest(), at(now))
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	if alg, _, kid := tokenHeaderKid(t, tok); alg != "ES256" || kid != "es-1" {
		t.Errorf("alg %q kid %q", alg, kid)
	}
	v := newVerifier(t, kr, nodeAud, liveStore(), nodeOptions(NodeTokensOnly, newNodeTable(NodeLive, NodeLive).lookup))
	c, err := v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Issuer != "https://nomad.example.com" || c.Subject != nodeSub || c.NodeID != nodeID {
		t.Errorf("claims %+v", c)
	}
	b, err := EncodeNodeIdentityRequest(nodeRequest())
	if err != nil {
		t.Fatal(err)
	}
	if tok2, err := iss.IssueNodeMsgpack(b, at(now)); err != nil || tok2 == tok {
		t.Errorf("IssueNodeMsgpack: %v", err)
	}
	// No active RS256 key.
	rs := newIssuer(t, kr, IssuerOptions{Alg: AlgRS256})
	if _, err := rs.IssueNode(nodeRequest(), at(now)); !errors.Is(err, ErrNoActiveKey) {
		t.Errorf("RS256: %v", err)
	}
	iss.Close()
	if _, err := iss.IssueNode(nodeRequest(), at(now)); !errors.Is(err, ErrNullArgument) {
		t.Errorf("closed: %v", err)
	}
}

func TestIssueNodeErrors(t *testing.T) {
	kr := newKeyring(t)
	if _, err := kr.IssueNode(AlgEdDSA, nil, "", at(now)); !errors.Is(err, ErrNullArgument) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := kr.IssueNode(AlgEdDSA, &NodeIdentityRequest{Region: "global"}, "", at(now)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil Node: %v", err)
	}
	bad := &NodeIdentityRequest{Region: "a:b", Node: &Node{}, Audience: []string{""}, TTL: 3600}
	_, err := kr.IssueNode(AlgEdDSA, bad, "", at(now))
	e := wantCode(t, err, ErrInvalidArgument)
	for _, f := range []string{"Node.ID", "Node.Datacenter", "Node.NodePool", "Region", "Audience[0]", "TTL"} {
		if !strings.Contains(e.Message, f) {
			t.Errorf("message lacks %s: %s", f, e.Message)
		}
	}
	if _, err := kr.IssueNode(Alg(9), nodeRequest(), "", at(now)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown alg: %v", err)
	}
	if _, err := kr.IssueNode(AlgRS256, nodeRequest(), "", at(now)); !errors.Is(err, ErrNoActiveKey) {
		t.Errorf("no RS256 key: %v", err)
	}
	if _, err := kr.IssueNodeMsgpack(AlgEdDSA, []byte{0x93, 1, 2, 3}, "", at(now)); !errors.Is(err, ErrDecodeError) {
		t.Errorf("not a map: %v", err)
	}
	// An allocation request is no node request.
	b, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.IssueNodeMsgpack(AlgEdDSA, b, "", at(now)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("an IssueRequest: %v", err)
	}
}

// The node lookup's answers decide, stale then consistent, and every
// failure fails closed with the lookup's error as the Cause.
func TestNodeLookupAnswers(t *testing.T) {
	kr := newKeyring(t)
	tok := issueNode(t, kr, AlgEdDSA, nodeRequest(), "")
	errLookup := errors.New("node table unreachable")
	for _, c := range []struct {
		name   string
		lookup func(string, Consistency) (NodeState, error)
		want   *Error // nil: accepted
		calls  int
		cause  bool
	}{
		{"live", newNodeTable(NodeLive, NodeLive).lookup, nil, 1, false},
		{"lagging replica", newNodeTable(NodeMissing, NodeLive).lookup, nil, 2, false},
		{"missing", newNodeTable(NodeMissing, NodeMissing).lookup, ErrNodeNotFound, 2, false},
		{"down", newNodeTable(NodeDown, NodeLive).lookup, ErrNodeDown, 1, false},
		{"error", func(string, Consistency) (NodeState, error) { return NodeLive, errLookup }, ErrStoreUnavailable, 1, true},
		{"panic", func(string, Consistency) (NodeState, error) { panic("lookup exploded") }, ErrStoreUnavailable, 1, true},
		{"bogus state", func(string, Consistency) (NodeState, error) { return NodeState(7), nil }, ErrStoreUnavailable, 1, true},
		{"no lookup", nil, ErrStoreUnavailable, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls int64
			var lookup func(string, Consistency) (NodeState, error)
			if c.lookup != nil {
				lookup = func(id string, cons Consistency) (NodeState, error) {
					atomic.AddInt64(&calls, 1)
					if id != nodeID {
						t.Errorf("asked about %q", id)
					}
					return c.lookup(id, cons)
				}
			}
			v := newVerifier(t, kr, nodeAud, liveStore(), nodeOptions(NodeTokensAccept, lookup))
			claims, err := v.Verify(tok, at(now))
			if c.want == nil {
				if err != nil || claims.NodeID != nodeID {
					t.Fatalf("Verify: %v %+v", err, claims)
				}
			} else {
				e := wantCode(t, err, c.want)
				if (e.Cause != nil) != c.cause {
					t.Errorf("cause %v, want one: %v", e.Cause, c.cause)
				}
				if c.name == "error" && (!errors.Is(err, errLookup) || err.Error() !=
					`wid: the NodeLookup failed for node "`+nodeID+`" (stale): node table unreachable`) {
					t.Errorf("not the lookup's error, in Go's words: %v", err)
				}
				if c.name == "panic" && err.Error() != `wid: the NodeLookup panicked for node "`+nodeID+`" (stale): lookup exploded` {
					t.Errorf("a panicking lookup: %v", err)
				}
				if c.name == "no lookup" && !strings.Contains(e.Message, "node lookup") {
					t.Errorf("message %q", e.Message)
				}
				if claims != nil {
					t.Errorf("claims on failure: %+v", claims)
				}
			}
			if calls != int64(c.calls) {
				t.Errorf("%d lookups, want %d", calls, c.calls)
			}
			// Batches agree, causes included.
			errs := v.VerifyBatch([]string{tok, tok}, at(now))
			for i, err := range errs {
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Errorf("batch[%d]: %v, want %v", i, err, c.want)
				}
			}
		})
	}
}

// Each kind passes only where NodeTokens allows it, and a refused kind is
// refused before any lookup; the default is allocation tokens only.
func TestNodeTokenKinds(t *testing.T) {
	kr := newKeyring(t)
	nodeTok := issueNode(t, kr, AlgEdDSA, nodeRequest(aud), "")
	allocTok := issue(t, kr, request(allocID, aud), now)
	for _, c := range []struct {
		mode             NodeTokens
		nodeErr, allocEr *Error
	}{
		{NodeTokensRefuse, ErrTokenKindRefused, nil},
		{NodeTokensAccept, nil, nil},
		{NodeTokensOnly, nil, ErrTokenKindRefused},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			nodes := newNodeTable(NodeLive, NodeLive)
			store := liveStore()
			v := newVerifier(t, kr, aud, store, nodeOptions(c.mode, nodes.lookup))
			for _, x := range []struct {
				tok  string
				want *Error
			}{{nodeTok, c.nodeErr}, {allocTok, c.allocEr}} {
				_, err := v.Verify(x.tok, at(now))
				if x.want == nil && err != nil || x.want != nil && !errors.Is(err, x.want) {
					t.Errorf("got %v, want %v", err, x.want)
				}
			}
			if c.nodeErr != nil && len(nodes.Calls()) != 0 {
				t.Errorf("a refused node token was looked up")
			}
			if c.allocEr != nil && len(store.Calls()) != 0 {
				t.Errorf("a refused allocation token was looked up")
			}
		})
	}
	// No options at all: allocation tokens only.
	v := newVerifier(t, kr, aud, liveStore(), nil)
	_, err := v.Verify(nodeTok, at(now))
	if e := wantCode(t, err, ErrTokenKindRefused); !strings.Contains(e.Message, nodeID) {
		t.Errorf("message %q", e.Message)
	}
	// An unknown mode is refused when the verifier is made.
	if _, err := NewVerifier(kr, aud, liveStore(), &VerifierOptions{NodeTokens: 3}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("mode 3: %v", err)
	}
}

// Many goroutines verify node and allocation tokens at once (-race).
func TestNodeVerifyConcurrently(t *testing.T) {
	kr := newKeyring(t)
	nodeTok := issueNode(t, kr, AlgEdDSA, nodeRequest(aud), "")
	allocTok := issue(t, kr, request(allocID, aud), now)
	var lookups int64
	down := errors.New("node down for maintenance")
	lookup := func(id string, c Consistency) (NodeState, error) {
		n := atomic.AddInt64(&lookups, 1)
		if n%7 == 0 {
			return NodeMissing, down
		}
		return NodeLive, nil
	}
	v := newVerifier(t, kr, aud, liveStore(), nodeOptions(NodeTokensAccept, lookup))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				c, err := v.Verify(nodeTok, at(now))
				switch {
				case err == nil && c.NodeID == nodeID:
				case err != nil && errors.Is(err, down):
				default:
					errs <- fmt.Errorf("node token: %v %+v", err, c)
					return
				}
				if c, err := v.Verify(allocTok, at(now)); err != nil || c.AllocationID != allocID || c.IsNode() {
					errs <- fmt.Errorf("allocation token: %v %+v", err, c)
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
	if lookups != 800 {
		t.Errorf("%d node lookups, want 800", lookups)
	}
}

func TestEncodeNodeIdentityRequest(t *testing.T) {
	req := nodeRequest("consul.io")
	req.TTL = 2 * time.Hour
	b, err := EncodeNodeIdentityRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeNodeIdentityRequest(b)
	if err != nil || !reflect.DeepEqual(back, req) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back, req)
	}
	if _, err := EncodeNodeIdentityRequest(nil); !errors.Is(err, ErrNullArgument) {
		t.Errorf("nil: %v", err)
	}
	// Node.Status is omitted when empty: an IssueRequest's Node encodes as
	// before.
	r := extraRequest()
	b, err = EncodeIssueRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]interface{}
	if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(&m); err != nil {
		t.Fatal(err)
	}
	node, _ := m["Node"].(map[string]interface{})
	if _, ok := node["Status"]; ok || len(node) != 5 {
		t.Errorf("an empty Status is encoded: %v", node)
	}
	r.Node.Status = "ready"
	if b, err = EncodeIssueRequest(r); err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeIssueRequest(b); err != nil || back.Node.Status != "ready" {
		t.Errorf("Status: %v %+v", err, back)
	}
}

// The committed Go vector of a node request (written by Nomad's codec from
// a fuller struct) decodes into these structs and issues a node token.
func TestGoMsgpackNodeVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), "node_identity_request.msgpack"))
	if os.IsNotExist(err) {
		t.Skip("no node_identity_request.msgpack vector")
	}
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeNodeIdentityRequest(raw)
	if err != nil {
		t.Fatalf("DecodeNodeIdentityRequest: %v", err)
	}
	if req.Region == "" || req.Node == nil || req.Node.ID == "" || req.Node.Status == "" || req.TTL == 0 {
		t.Errorf("decoded %+v / %+v", req, req.Node)
	}
	kr := newKeyring(t)
	tok, err := kr.IssueNodeMsgpack(AlgEdDSA, raw, "", at(now))
	if err != nil {
		t.Fatalf("IssueNodeMsgpack: %v", err)
	}
	var claims map[string]interface{}
	if err := json.Unmarshal([]byte(tokenPayload(t, tok)), &claims); err != nil {
		t.Fatal(err)
	}
	if claims["nomad_node_id"] != req.Node.ID || claims["nomad_node_pool"] != req.Node.NodePool {
		t.Errorf("claims %v", claims)
	}
}
