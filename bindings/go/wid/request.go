package wid

// #include "wid_helpers.h"
import "C"

import (
	"fmt"
	"reflect"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// IssueRequest asks for one identity for one task or service of an
// allocation, like Nomad's. Exactly one of Task and Service is set (an empty
// string counts as absent).
//
// It travels to the library msgpack-encoded by go-msgpack, Nomad's wire
// codec, configured as Nomad configures it (only `codec` tags count), so the
// Go field names below are the wire names and must not change.
type IssueRequest struct {
	Region     string            // the region, first part of the token's sub
	Allocation *Allocation       // the allocation the workload belongs to
	Task       string            // the task name, for a task identity
	Service    string            // the service name, for a service identity
	Identity   *WorkloadIdentity // the identity block to sign

	// ProofKey is the workload's public key when it asks for a workload
	// identity token bound to it (Keyring.IssueWIT; see
	// WorkloadKey.ProofKey). nil for a bearer token: omitted from the
	// encoding, so such requests encode exactly as before.
	ProofKey *ProofKey `codec:",omitempty"`

	// Node is the client node the allocation runs on, when the sender
	// includes it (Nomad's Node, trimmed): extra claims and SPIFFE path
	// templates read it as ${node.id}, ${node.name}, ${node.datacenter},
	// ${node.pool} and ${node.class}. nil: omitted from the encoding, so
	// requests without it encode exactly as before.
	Node *Node `codec:",omitempty"`

	// Vault is the task's vault block (Nomad's Task.Vault; a Go host may
	// copy Role, Namespace and Cluster from it). A task identity named
	// vault_<cluster> carries its Role and Namespace as the claims
	// vault_role and vault_namespace (each when not empty), as Nomad's
	// servers write them, and templates read ${vault.cluster},
	// ${vault.namespace} and ${vault.role} ("" for other identities).
	// nil: omitted from the encoding, so requests without it encode
	// exactly as before.
	Vault *Vault `codec:",omitempty"`

	// Consul is the consul block that applies to the workload: the task's,
	// else the group's (Nomad's Task.Consul, TaskGroup.Consul). An identity
	// whose name starts with "consul" (consul_<cluster>,
	// consul-service_<service>) carries its Namespace as the claim
	// consul_namespace (when not empty). nil: omitted from the encoding.
	Consul *Consul `codec:",omitempty"`
}

// Vault is the part of Nomad's Vault block the claims read; the Go field
// names are Nomad's codec names. Each field at most 256 bytes.
type Vault struct {
	Role      string // the JWT auth method's role; empty: its default role
	Namespace string // the Vault namespace
	Cluster   string // the Vault cluster's name in Nomad's configuration
}

// Consul is the part of Nomad's Consul block the claims read; the Go field
// name is Nomad's codec name. At most 256 bytes.
type Consul struct {
	Namespace string // the Consul namespace
}

// Node is the part of Nomad's Node an identity may name: the node an
// allocation runs on (IssueRequest.Node), or the node whose own identity a
// NodeIdentityRequest asks for.
type Node struct {
	Datacenter string // ${node.datacenter}; nomad_node_datacenter
	ID         string // ${node.id}; nomad_node_id
	Name       string // ${node.name}
	NodeClass  string // ${node.class}; nomad_node_class; empty when none is set
	NodePool   string // ${node.pool}; nomad_node_pool
	// Status is Nomad's node status ("initializing", "ready", "down",
	// "disconnected"). Omitted from the encoding when empty, so requests
	// that do not set it encode exactly as before.
	Status string `codec:",omitempty"`
}

// NodeIdentityRequest asks for a client node's own identity (Nomad 1.11's
// node identities; Keyring.IssueNode, Issuer.IssueNode): a token with the
// claims nomad_node_id, nomad_node_pool, nomad_node_class (when set) and
// nomad_node_datacenter, sub "node:<Region>:<NodePool>:<ID>:default", and
// never an allocation claim. As IssueRequest, its Go field names are its
// msgpack wire names.
type NodeIdentityRequest struct {
	Audience []string      // the token's aud; empty: Nomad's "nomadproject.io"
	Node     *Node         // the node: ID, Datacenter and NodePool required
	Region   string        // the region, part of the token's sub
	TTL      time.Duration // the token's lifetime; zero: Nomad's 24 h (a node identity always expires)
}

// ProofKey is a workload's public key as JWK members. In msgpack the keys
// are the Go field names (Alg, Crv, Kty, X, Y; go-msgpack ignores json
// tags); in JSON (a WIT's cnf.jwk, WorkloadKey.PublicJWK) the JWK names.
type ProofKey struct {
	Alg string `json:"alg"`         // "EdDSA" or "ES256"
	Crv string `json:"crv"`         // "Ed25519" or "P-256"
	Kty string `json:"kty"`         // "OKP" or "EC"
	X   string `json:"x"`           // base64url, no padding
	Y   string `json:"y,omitempty"` // base64url, no padding; empty for Ed25519
}

// Allocation is the part of Nomad's Allocation an identity needs.
type Allocation struct {
	ID            string
	Namespace     string
	JobID         string
	Job           *Job // for child jobs, Job.ParentID names the parent
	TaskGroup     string
	DesiredStatus string
	ClientStatus  string
}

// Job is the part of Nomad's Job an identity needs.
type Job struct {
	ID       string
	ParentID string            // for a dispatched or periodic child job; else empty
	Meta     map[string]string // the job's meta block: ${job.meta.<key>} in templates
	NodePool string            // the job's node pool: ${job.node_pool}
}

// WorkloadIdentity is Nomad's identity block of a task or service.
type WorkloadIdentity struct {
	Name         string        // ^[a-zA-Z0-9-_]{1,128}$
	Audience     []string      // the token's aud
	ChangeMode   string        // "", "restart" or "signal"
	ChangeSignal string        // with ChangeMode "signal"
	Env          bool          // expose the token in the environment
	File         bool          // write the token to the secrets directory
	ServiceName  string        // for a service identity
	TTL          time.Duration // zero: no exp claim
	Filepath     string        // custom file path; requires File
	// ExtraClaims names the optional extra claims this identity asks for
	// (Nomad 2.0.3's extra_claims): each must be one the issuer's extra
	// claims policy offers the allocation's namespace (IssuerOptions).
	ExtraClaims []string
}

// msgpackHandle is Nomad's msgpack configuration (nomad/structs, since
// Nomad 1.7 on go-msgpack/v2): raw strings as old-spec msgpack, time.Time
// not as a builtin extension, maps into interface{} as map[string]interface{},
// and only `codec` struct tags (json tags are ignored). A handle is safe for
// concurrent use once configured.
var msgpackHandle = newMsgpackHandle()

// decodeWhole decodes all of b into v, as the library does: bytes after the
// value are refused (the library would refuse them too), so a request this
// binding accepts is one the library accepts.
func decodeWhole(b []byte, v interface{}, what string) error {
	d := codec.NewDecoderBytes(b, msgpackHandle)
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("wid: decoding the %s: %w", what, err)
	}
	if n := d.NumBytesRead(); n != len(b) {
		return fmt.Errorf("wid: decoding the %s: %d trailing byte(s) after the value (%d bytes)", what, len(b)-n, len(b))
	}
	return nil
}

func newMsgpackHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.BasicHandle.TimeNotBuiltin = true
	h.MapType = reflect.TypeOf(map[string]interface{}(nil))
	h.TypeInfos = codec.NewTypeInfos([]string{"codec"})
	return h
}

// EncodeIssueRequest encodes req as Nomad does (go-msgpack,
// MsgpackHandle as Nomad configures it): the bytes Keyring.IssueMsgpack takes.
func EncodeIssueRequest(req *IssueRequest) ([]byte, error) {
	if req == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *IssueRequest"}
	}
	var out []byte
	if err := codec.NewEncoderBytes(&out, msgpackHandle).Encode(req); err != nil {
		return nil, fmt.Errorf("wid: encoding the IssueRequest: %w", err)
	}
	return out, nil
}

// DecodeIssueRequest decodes msgpack written by Nomad (or EncodeIssueRequest)
// into an IssueRequest; fields this struct does not have are skipped.
func DecodeIssueRequest(b []byte) (*IssueRequest, error) {
	var req IssueRequest
	if err := decodeWhole(b, &req, "IssueRequest"); err != nil {
		return nil, err
	}
	return &req, nil
}

// Issue signs the identity req asks for at now (whole seconds; the zero
// time.Time is ErrInvalidArgument) with the active EdDSA key and returns the JWT: iat = nbf = now, exp = now + TTL
// when the TTL is positive. Without an active EdDSA key it fails with
// ErrNoActiveKey; an invalid request fails with ErrInvalidArgument (the
// message lists every problem with its field path).
func (k *Keyring) Issue(req *IssueRequest, now time.Time) (string, error) {
	return k.issueRequest("Keyring.Issue", AlgEdDSA, req, "", now)
}

// IssueWithIssuer is Issue with an iss claim (none when issuer is empty).
func (k *Keyring) IssueWithIssuer(req *IssueRequest, issuer string, now time.Time) (string, error) {
	return k.issueRequest("Keyring.IssueWithIssuer", AlgEdDSA, req, issuer, now)
}

// IssueAlg is IssueWithIssuer signed with the active key of alg (the
// token's header alg is alg's JOSE name, its kid that key's ID). An unknown
// alg fails with ErrInvalidArgument; an alg without an active key with
// ErrNoActiveKey.
func (k *Keyring) IssueAlg(alg Alg, req *IssueRequest, issuer string, now time.Time) (string, error) {
	return k.issueRequest("Keyring.IssueAlg", alg, req, issuer, now)
}

func (k *Keyring) issueRequest(what string, alg Alg, req *IssueRequest, issuer string, now time.Time) (string, error) {
	b, err := EncodeIssueRequest(req)
	if err != nil {
		return "", err
	}
	return k.issue(what, alg, b, issuer, now)
}

// IssueMsgpack is Issue for an IssueRequest already msgpack-encoded (as
// Nomad's go-msgpack writes it, e.g. received off Nomad's RPC wire).
func (k *Keyring) IssueMsgpack(request []byte, now time.Time) (string, error) {
	return k.issue("Keyring.IssueMsgpack", AlgEdDSA, request, "", now)
}

// IssueMsgpackWithIssuer is IssueMsgpack with an iss claim (none when
// issuer is empty).
func (k *Keyring) IssueMsgpackWithIssuer(request []byte, issuer string, now time.Time) (string, error) {
	return k.issue("Keyring.IssueMsgpackWithIssuer", AlgEdDSA, request, issuer, now)
}

// IssueMsgpackAlg is IssueAlg for an IssueRequest already msgpack-encoded.
func (k *Keyring) IssueMsgpackAlg(alg Alg, request []byte, issuer string, now time.Time) (string, error) {
	return k.issue("Keyring.IssueMsgpackAlg", alg, request, issuer, now)
}

func (k *Keyring) issue(what string, alg Alg, request []byte, issuer string, now time.Time) (string, error) {
	secs, err := unixSecs(what+": now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		r, rLen := bytesIn(request)
		iss, issLen := strIn(issuer) // (NULL, 0) when empty: no iss
		return C.wid_issue_alg(kr, C.wid_alg(alg), (*C.uint8_t)(ptr(r)), rLen, iss, issLen, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// EncodeNodeIdentityRequest encodes req as Nomad's codec does (go-msgpack,
// MsgpackHandle as Nomad configures it): the bytes Keyring.IssueNodeMsgpack
// takes.
func EncodeNodeIdentityRequest(req *NodeIdentityRequest) ([]byte, error) {
	if req == nil {
		return nil, &Error{Code: ResultNullArgument, Message: "wid: nil *NodeIdentityRequest"}
	}
	var out []byte
	if err := codec.NewEncoderBytes(&out, msgpackHandle).Encode(req); err != nil {
		return nil, fmt.Errorf("wid: encoding the NodeIdentityRequest: %w", err)
	}
	return out, nil
}

// DecodeNodeIdentityRequest decodes msgpack written by Nomad (or
// EncodeNodeIdentityRequest) into a NodeIdentityRequest; fields this struct
// does not have are skipped.
func DecodeNodeIdentityRequest(b []byte) (*NodeIdentityRequest, error) {
	var req NodeIdentityRequest
	if err := decodeWhole(b, &req, "NodeIdentityRequest"); err != nil {
		return nil, err
	}
	return &req, nil
}

// encodeNodeRequest is EncodeNodeIdentityRequest refusing a request without
// a Node (the library would only say that its fields are missing).
func encodeNodeRequest(req *NodeIdentityRequest) ([]byte, error) {
	if req != nil && req.Node == nil {
		return nil, &Error{Code: ResultInvalidArgument,
			Message: "wid: NodeIdentityRequest.Node is nil: a node identity names its node (ID, Datacenter, NodePool)"}
	}
	return EncodeNodeIdentityRequest(req)
}

// IssueNode signs the identity of the client node req names at now (whole
// seconds; the zero time.Time is ErrInvalidArgument) with the active key of alg, with an iss claim (none when issuer
// is empty), and returns the JWT: Nomad 1.11's node identity claims, sub
// "node:<region>:<node pool>:<node ID>:default", aud (nomadproject.io
// unless req.Audience names others), iat = nbf = now, exp = now + TTL (24 h
// when TTL is zero), jti. Only a Verifier with VerifierOptions.NodeTokens
// accepts it. An invalid request (a required field missing, a ':' in
// Region, Node.ID or Node.NodePool, an empty audience, a TTL that is
// negative or under one second) fails with ErrInvalidArgument naming every
// problem; an unknown alg with ErrInvalidArgument; an alg without an active
// key with ErrNoActiveKey.
func (k *Keyring) IssueNode(alg Alg, req *NodeIdentityRequest, issuer string, now time.Time) (string, error) {
	b, err := encodeNodeRequest(req)
	if err != nil {
		return "", err
	}
	return k.IssueNodeMsgpack(alg, b, issuer, now)
}

// IssueNodeMsgpack is IssueNode for a NodeIdentityRequest already
// msgpack-encoded (as Nomad's go-msgpack writes it).
func (k *Keyring) IssueNodeMsgpack(alg Alg, request []byte, issuer string, now time.Time) (string, error) {
	secs, err := unixSecs("Keyring.IssueNode: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		r, rLen := bytesIn(request)
		iss, issLen := strIn(issuer) // (NULL, 0) when empty: no iss
		return C.wid_issue_node(kr, C.wid_alg(alg), (*C.uint8_t)(ptr(r)), rLen, iss, issLen, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}
