package wid

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The binding encodes with go-msgpack/v2 as Nomad 1.7+ does; plugins and
// clusters older than that send v0.5.5's bytes. Both generations of every
// request vector (tests/vectors/msgpack/ from v0.5.5, msgpack-v2/ from v2)
// decode into the binding's structs to equal values, re-encode to bytes
// that decode back to them, and sign in the library.
func TestRequestsOfBothCodecGenerations(t *testing.T) {
	v2Dir := filepath.Join(filepath.Dir(vectorsDir()), "msgpack-v2")
	read := func(dir, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("committed vector: %v", err)
		}
		return b
	}
	kr := newKeyring(t)
	for _, name := range []string{
		"issue_request_task.msgpack",
		"issue_request_service.msgpack",
		"issue_request_proof_key.msgpack",
		"issue_request_extra.msgpack",
		"issue_request_exchange.msgpack",
	} {
		old, err := DecodeIssueRequest(read(vectorsDir(), name))
		if err != nil {
			t.Fatalf("%s (v0.5.5): %v", name, err)
		}
		v2, err := DecodeIssueRequest(read(v2Dir, name))
		if err != nil {
			t.Fatalf("%s (v2): %v", name, err)
		}
		if !reflect.DeepEqual(old, v2) {
			t.Errorf("%s: v0.5.5 decodes to %+v, v2 to %+v", name, old, v2)
		}
		ours, err := EncodeIssueRequest(v2)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeIssueRequest(ours)
		if err != nil || !reflect.DeepEqual(back, v2) {
			t.Errorf("%s: re-encoded: %v, %+v", name, err, back)
		}
		if back.ProofKey != nil || len(back.Identity.ExtraClaims) > 0 {
			// A WIT request, and one asking for extra claims (which need an
			// Issuer with a policy): TestWITFromGoVector and the issuer tests
			// sign them.
			continue
		}
		if _, err := kr.IssueMsgpack(read(v2Dir, name), at(now)); err != nil {
			t.Errorf("%s (v2 bytes): the library refused to sign: %v", name, err)
		}
	}

	name := "node_identity_request.msgpack"
	old, err := DecodeNodeIdentityRequest(read(vectorsDir(), name))
	if err != nil {
		t.Fatalf("%s (v0.5.5): %v", name, err)
	}
	v2, err := DecodeNodeIdentityRequest(read(v2Dir, name))
	if err != nil {
		t.Fatalf("%s (v2): %v", name, err)
	}
	if !reflect.DeepEqual(old, v2) {
		t.Errorf("%s: v0.5.5 decodes to %+v, v2 to %+v", name, old, v2)
	}
	ours, err := EncodeNodeIdentityRequest(v2)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeNodeIdentityRequest(ours); err != nil || !reflect.DeepEqual(back, v2) {
		t.Errorf("%s: re-encoded: %v, %+v", name, err, back)
	}
}

// Bytes after the request are refused, as the library refuses them, and the
// message says how many.
func TestDecodeRequestRefusesTrailingBytes(t *testing.T) {
	b, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeIssueRequest(b); err != nil {
		t.Fatalf("the request itself: %v", err)
	}
	_, err = DecodeIssueRequest(append(b, 0xc0, 0xc0))
	if err == nil || !strings.Contains(err.Error(), "2 trailing byte(s)") {
		t.Errorf("two bytes after an IssueRequest: %v", err)
	}
	if _, err := newKeyring(t).IssueMsgpack(append(b, 0xc0, 0xc0), at(now)); !errors.Is(err, ErrDecodeError) {
		t.Errorf("the library on trailing bytes: %v", err)
	}
	nb, err := EncodeNodeIdentityRequest(&NodeIdentityRequest{Region: "global",
		Node: &Node{ID: "n1", Datacenter: "dc1", NodePool: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeNodeIdentityRequest(append(nb, 0x01))
	if err == nil || !strings.Contains(err.Error(), "1 trailing byte(s)") {
		t.Errorf("a byte after a NodeIdentityRequest: %v", err)
	}
}
