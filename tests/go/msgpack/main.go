// Command msgpack is the Go side of the msgpack interoperability check for
// workload-identity. It encodes golden vectors with Nomad's codec and checks
// vectors produced by the Rust encoder by decoding them into the same Go
// structs, with both generations of the codec Nomad's Go code links:
//
//   - github.com/hashicorp/go-msgpack/v2 (Nomad 1.7 and later, and 2.x),
//     configured as nomad/structs configures its MsgpackHandle: RawToString,
//     TimeNotBuiltin, MapType map[string]interface{}, codec tags only. The
//     committed vectors are its output, and the binding encodes with it.
//   - github.com/hashicorp/go-msgpack v0.5.5 (Nomad 1.6 and older, and the
//     plugins built against them), MsgpackHandle{RawToString: true}.
//
// Only `codec` struct tags count, so the Go field names below are the
// msgpack wire names. `json` tags (see ConsulExposeConfig) are deliberately
// ignored by the msgpack codec.
//
// Usage:
//
//	go run ./go/msgpack write <dir>     write golden vectors (v2) into <dir>
//	go run ./go/msgpack write-v0 <dir>  the same values encoded by v0.5.5
//	go run ./go/msgpack check <dir>     decode and verify Rust-written vectors
//	                                    in <dir> with both codecs, and check
//	                                    that each codec reads the other's bytes
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	codec0 "github.com/hashicorp/go-msgpack/codec"
	"github.com/hashicorp/go-msgpack/v2/codec"
)

// ---------------------------------------------------------------------------
// Wire structs. Field order is significant only for array-form decoding; in
// map form go-msgpack 0.5.5 writes keys sorted by name.

type Job struct {
	Region    string // extra (not in Rust view)
	Namespace string // extra
	ID        string
	ParentID  string
	Name      string // extra
	Type      string // extra
	Priority  int    // extra
	Meta      map[string]string
	NodePool  string
}

type Allocation struct {
	ID            string
	Namespace     string
	EvalID        string // extra
	Name          string // extra
	NodeID        string // extra
	JobID         string
	Job           *Job
	TaskGroup     string
	DesiredStatus string
	ClientStatus  string
	CreateIndex   uint64 // extra
	ModifyIndex   uint64 // extra
	CreateTime    int64  // extra
	ModifyTime    int64  // extra
}

type WorkloadIdentity struct {
	Name         string
	Audience     []string
	ChangeMode   string
	ChangeSignal string
	Env          bool
	File         bool
	ServiceName  string
	TTL          time.Duration
	Filepath     string
	ExtraClaims  []string
}

// Node is the client node an allocation runs on (Nomad's Node, trimmed): the
// six fields the Rust view knows, plus a Go-only one it must ignore.
type Node struct {
	ID         string
	Name       string
	Datacenter string
	NodeClass  string
	NodePool   string
	Status     string
	HTTPAddr   string // extra
}

type IssueRequest struct {
	Region     string
	Allocation *Allocation
	Task       string
	Service    string
	Identity   *WorkloadIdentity
	// Absent (nil) in bearer-token requests: omitempty keeps their bytes
	// exactly as before.
	ProofKey *ProofKey `codec:",omitempty"`
	// Absent (nil) unless the sender includes the node; omitempty keeps the
	// bytes of requests without it exactly as before.
	Node *Node `codec:",omitempty"`
	// The task's Vault block and the Consul block that applies (Nomad 2.x's
	// claims for the logins): absent (nil) unless sent; omitempty keeps the
	// bytes of requests without them exactly as before.
	Vault  *Vault  `codec:",omitempty"`
	Consul *Consul `codec:",omitempty"`
}

// Vault is Nomad's Vault block (structs.Vault, in its field order): the three
// fields the Rust view knows, and Go-only ones it must ignore.
type Vault struct {
	Role                 string
	Namespace            string
	Cluster              string
	Env                  bool   // extra
	DisableFile          bool   // extra
	ChangeMode           string // extra
	ChangeSignal         string // extra
	AllowTokenExpiration bool   // extra
}

// Consul is Nomad's Consul block (structs.Consul): Namespace, which the Rust
// view knows, and Go-only fields it must ignore.
type Consul struct {
	Namespace string
	Cluster   string // extra
	Partition string // extra
}

// NodeIdentityRequest asks for a client node's own identity (Nomad 1.11's
// node identities): the four fields the Rust view knows, plus a Go-only one
// it must ignore.
type NodeIdentityRequest struct {
	Region    string
	Node      *Node
	Audience  []string
	TTL       time.Duration
	AuthToken string // extra (the RPC's write-request token; never in the view)
}

// ProofKey is the workload's public key a request for a workload identity
// token (WIT) carries: JWK members under Go field names.
type ProofKey struct {
	Alg string
	Crv string
	Kty string
	X   string
	Y   string
}

type ConsulExposePath struct {
	Path          string
	Protocol      string
	LocalPathPort int
	ListenerPort  string
}

type ConsulExposeConfig struct {
	Paths []ConsulExposePath `json:"Path"`
}

// ---------------------------------------------------------------------------
// Sample values (the Rust tests hard-code the same values).

const (
	sampleAllocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	sampleJobID   = "web/dispatch-1700000000-abcd1234"
)

// fullAllocation is the complete Go allocation, including fields the Rust
// view does not know about.
func fullAllocation() *Allocation {
	return &Allocation{
		ID:        sampleAllocID,
		Namespace: "default",
		EvalID:    "0c7f3a10-aaaa-bbbb-cccc-000000000001",
		Name:      "web.frontend[0]",
		NodeID:    "9d1e6a44-1111-2222-3333-444444444444",
		JobID:     sampleJobID,
		Job: &Job{
			Region:    "global",
			Namespace: "default",
			ID:        sampleJobID,
			ParentID:  "web",
			Name:      "web",
			Type:      "batch",
			Priority:  50,
			Meta:      map[string]string{"owner": "team-a"},
		},
		TaskGroup:     "frontend",
		DesiredStatus: "run",
		ClientStatus:  "running",
		CreateIndex:   1234567,
		ModifyIndex:   1234570,
		CreateTime:    1700000000123456789,
		ModifyTime:    1700000001123456789,
	}
}

// viewAllocation is what the Rust view of an allocation round-trips: only the
// fields it knows; every extra field is the Go zero value.
func viewAllocation() *Allocation {
	return &Allocation{
		ID:        sampleAllocID,
		Namespace: "default",
		JobID:     sampleJobID,
		Job: &Job{
			ID:       sampleJobID,
			ParentID: "web",
			Meta:     map[string]string{"owner": "team-a"},
		},
		TaskGroup:     "frontend",
		DesiredStatus: "run",
		ClientStatus:  "running",
	}
}

func sampleWorkloadIdentity() *WorkloadIdentity {
	return &WorkloadIdentity{
		Name:         "vault_default",
		Audience:     []string{"vault.io", "consul.io"},
		ChangeMode:   "signal",
		ChangeSignal: "SIGHUP",
		Env:          true,
		File:         true,
		ServiceName:  "",
		TTL:          time.Hour,
		Filepath:     "secrets/vault.jwt",
	}
}

func zeroWorkloadIdentity() *WorkloadIdentity {
	return &WorkloadIdentity{Name: "default"} // Audience and ExtraClaims are nil slices on purpose
}

func serviceWorkloadIdentity() *WorkloadIdentity {
	return &WorkloadIdentity{
		Name:     "consul-service_web-api",
		Audience: []string{"consul.io"},
		TTL:      90 * time.Minute,
	}
}

// extraAllocation sets the job's NodePool on an allocation (full or view):
// the allocation of the extra-claims request. Job.Meta keeps its single entry:
// go-msgpack 0.5.5 writes map entries in Go's random map order and has no
// Canonical option, so a map of more than one entry would make the committed
// bytes (and the check's byte comparison) flake.
func extraAllocation(alloc *Allocation) *Allocation {
	alloc.Job.NodePool = "gpu"
	return alloc
}

// sampleNode is the node of the extra-claims request; with full set it also
// carries the Go-only fields the Rust view must ignore.
func sampleNode(full bool) *Node {
	n := &Node{
		ID:         "9d1e6a44-1111-2222-3333-444444444444",
		Name:       "client-gpu-1",
		Datacenter: "dc1",
		NodeClass:  "gpu-a100",
		NodePool:   "gpu",
		Status:     "ready",
	}
	if full {
		n.HTTPAddr = "10.0.0.7:4646"
	}
	return n
}

// extraIssueRequest is the task request exercising the Nomad 2.0.3 fields:
// Job.Meta and Job.NodePool, Identity.ExtraClaims and the Node.
func extraIssueRequest(alloc *Allocation, full bool) *IssueRequest {
	r := taskIssueRequest(extraAllocation(alloc))
	r.Identity.ExtraClaims = []string{"dc", "owner"}
	r.Node = sampleNode(full)
	return r
}

// exchangeIssueRequest is the task request with the Nomad 2.x blocks for the
// exchange claims: the task's Vault block (with its Go-only fields when full)
// and the Consul block (with Cluster and Partition when full).
func exchangeIssueRequest(alloc *Allocation, full bool) *IssueRequest {
	r := taskIssueRequest(alloc)
	r.Vault = &Vault{Role: "nomad-web", Namespace: "engineering/web", Cluster: "default"}
	r.Consul = &Consul{Namespace: "web-team"}
	if full {
		r.Vault.Env = true
		r.Vault.ChangeMode = "signal"
		r.Vault.ChangeSignal = "SIGHUP"
		r.Consul.Cluster = "default"
		r.Consul.Partition = "eu"
	}
	return r
}

// nodeIdentityRequest is the node request: the sample node (with its Go-only
// HTTPAddr and the request's Go-only AuthToken when full), two audiences and
// a 12-hour TTL.
func nodeIdentityRequest(full bool) *NodeIdentityRequest {
	r := &NodeIdentityRequest{
		Region:   "global",
		Node:     sampleNode(full),
		Audience: []string{"nomadproject.io", "consul.io"},
		TTL:      12 * time.Hour,
	}
	if full {
		r.AuthToken = "2f1c1f0e-5b6a-4e53-9d2c-0d1e2f3a4b5c"
	}
	return r
}

func taskIssueRequest(alloc *Allocation) *IssueRequest {
	return &IssueRequest{
		Region:     "global",
		Allocation: alloc,
		Task:       "server",
		Service:    "",
		Identity:   sampleWorkloadIdentity(),
	}
}

func serviceIssueRequest(alloc *Allocation) *IssueRequest {
	return &IssueRequest{
		Region:     "eu-west",
		Allocation: alloc,
		Task:       "",
		Service:    "web-api",
		Identity:   serviceWorkloadIdentity(),
	}
}

// sampleProofKey is a P-256 public key (that of the p256-zero-uuid vector in
// tests/vectors/p256.json, computed by Python cryptography), as a workload
// sends it.
func sampleProofKey() *ProofKey {
	return &ProofKey{
		Alg: "ES256",
		Crv: "P-256",
		Kty: "EC",
		X:   "Y6bejJX5OVzmFs_wlgXJc20GiGPjQavixp0fdgkQKEo",
		Y:   "inaCvw7j3XRbcAKrBotHiA1rL06As33rDwfAArxVjo0",
	}
}

// proofKeyIssueRequest is the task request asking for a WIT bound to
// sampleProofKey.
func proofKeyIssueRequest(alloc *Allocation) *IssueRequest {
	r := taskIssueRequest(alloc)
	r.ProofKey = sampleProofKey()
	return r
}

func sampleConsulExpose() *ConsulExposeConfig {
	return &ConsulExposeConfig{
		Paths: []ConsulExposePath{
			{Path: "/health", Protocol: "http", LocalPathPort: 8080, ListenerPort: "health"},
			{Path: "/metrics", Protocol: "http2", LocalPathPort: 9102, ListenerPort: "metrics"},
		},
	}
}

// vector ties a file name to the value Go writes and the value expected back
// from the Rust encoder.
type vector struct {
	file  string
	write interface{} // pointer to the full Go value written by `write`
	want  interface{} // pointer to the expected Rust view for `check`
}

func vectors() []vector {
	return []vector{
		{"allocation.msgpack", fullAllocation(), viewAllocation()},
		{"workload_identity.msgpack", sampleWorkloadIdentity(), sampleWorkloadIdentity()},
		{"workload_identity_zero.msgpack", zeroWorkloadIdentity(), zeroWorkloadIdentity()},
		{"issue_request_task.msgpack", taskIssueRequest(fullAllocation()), taskIssueRequest(viewAllocation())},
		{"issue_request_service.msgpack", serviceIssueRequest(fullAllocation()), serviceIssueRequest(viewAllocation())},
		{"consul_expose.msgpack", sampleConsulExpose(), sampleConsulExpose()},
		{"issue_request_proof_key.msgpack", proofKeyIssueRequest(fullAllocation()), proofKeyIssueRequest(viewAllocation())},
		{"issue_request_extra.msgpack", extraIssueRequest(fullAllocation(), true), extraIssueRequest(viewAllocation(), false)},
		{"node_identity_request.msgpack", nodeIdentityRequest(true), nodeIdentityRequest(false)},
		{"issue_request_exchange.msgpack", exchangeIssueRequest(fullAllocation(), true), exchangeIssueRequest(viewAllocation(), false)},
	}
}

// goCodec is one generation of Nomad's codec.
type goCodec struct {
	name   string
	encode func(v interface{}) ([]byte, error)
	// decode decodes data into v and says how many bytes were left over.
	decode func(data []byte, v interface{}) (rest int, err error)
}

// nomadHandle is go-msgpack/v2's handle as Nomad configures it.
func nomadHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.BasicHandle.TimeNotBuiltin = true
	h.MapType = reflect.TypeOf(map[string]interface{}(nil))
	h.TypeInfos = codec.NewTypeInfos([]string{"codec"})
	return h
}

// codecs are the generations checked, the committed one (v2) first.
var codecs = []goCodec{
	{
		name: "go-msgpack/v2 v2.1.5",
		encode: func(v interface{}) ([]byte, error) {
			var out []byte
			err := codec.NewEncoderBytes(&out, nomadHandle()).Encode(v)
			return out, err
		},
		decode: func(data []byte, v interface{}) (int, error) {
			// Through a bytes.Reader, to see what was left unconsumed.
			r := bytes.NewReader(data)
			err := codec.NewDecoder(r, nomadHandle()).Decode(v)
			return r.Len(), err
		},
	},
	{
		name: "go-msgpack v0.5.5",
		encode: func(v interface{}) ([]byte, error) {
			var out []byte
			err := codec0.NewEncoderBytes(&out, &codec0.MsgpackHandle{RawToString: true}).Encode(v)
			return out, err
		},
		decode: func(data []byte, v interface{}) (int, error) {
			// v0.5.5's ioDecReader does not buffer or read ahead.
			r := bytes.NewReader(data)
			err := codec0.NewDecoder(r, &codec0.MsgpackHandle{RawToString: true}).Decode(v)
			return r.Len(), err
		},
	},
}

// ---------------------------------------------------------------------------
// write

func writeFile(dir, name string, data []byte) error {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d bytes)\n", p, len(data))
	return nil
}

func runWrite(dir string, gc goCodec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, vec := range vectors() {
		data, err := gc.encode(vec.write)
		if err != nil {
			return fmt.Errorf("encode %s: %v", vec.file, err)
		}
		if err := writeFile(dir, vec.file, data); err != nil {
			return err
		}
	}
	// Same ConsulExposeConfig through encoding/json: JSON key is "Path"
	// (json tag honoured) while the msgpack key is "Paths" (json tag ignored).
	js, err := json.Marshal(sampleConsulExpose())
	if err != nil {
		return fmt.Errorf("json consul_expose: %v", err)
	}
	return writeFile(dir, "consul_expose.json", js)
}

// ---------------------------------------------------------------------------
// check

type checker struct {
	file  string
	fails []string
}

func (c *checker) fail(path, got, want string) {
	if path == "" {
		path = "<root>"
	}
	c.fails = append(c.fails, fmt.Sprintf("FAIL %s: %s: got %s want %s", c.file, path, got, want))
}

var durationType = reflect.TypeOf(time.Duration(0))

func fmtVal(v reflect.Value) string {
	if !v.IsValid() {
		return "<invalid>"
	}
	if v.Type() == durationType {
		return fmt.Sprintf("%d (%v)", v.Int(), time.Duration(v.Int()))
	}
	switch v.Kind() {
	case reflect.String:
		return fmt.Sprintf("%q", v.String())
	case reflect.Ptr:
		if v.IsNil() {
			return "nil"
		}
		return "&" + fmtVal(v.Elem())
	case reflect.Slice, reflect.Map:
		if v.IsNil() {
			return "nil"
		}
		return fmt.Sprintf("%#v", v.Interface())
	case reflect.Struct:
		return fmt.Sprintf("%+v", v.Interface())
	}
	return fmt.Sprintf("%v", v.Interface())
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// compare walks want and got in lock step. Only a nil slice and an empty slice,
// and a nil map and an empty map, are treated as equal (Rust writes an empty
// list or map as an empty container where Go writes nil); everything else must
// match exactly.
func (c *checker) compare(path string, got, want reflect.Value) {
	switch want.Kind() {
	case reflect.Ptr:
		if got.IsNil() || want.IsNil() {
			if got.IsNil() != want.IsNil() {
				c.fail(path, fmtVal(got), fmtVal(want))
			}
			return
		}
		c.compare(path, got.Elem(), want.Elem())
	case reflect.Struct:
		t := want.Type()
		for i := 0; i < t.NumField(); i++ {
			c.compare(join(path, t.Field(i).Name), got.Field(i), want.Field(i))
		}
	case reflect.Slice:
		if got.Len() != want.Len() {
			c.fail(path, fmt.Sprintf("len %d %s", got.Len(), fmtVal(got)),
				fmt.Sprintf("len %d %s", want.Len(), fmtVal(want)))
			return
		}
		for i := 0; i < want.Len(); i++ {
			c.compare(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))
		}
	case reflect.Map:
		if got.Len() != want.Len() {
			c.fail(path, fmtVal(got), fmtVal(want))
			return
		}
		for _, k := range want.MapKeys() {
			gv := got.MapIndex(k)
			kp := fmt.Sprintf("%s[%v]", path, k.Interface())
			if !gv.IsValid() {
				c.fail(kp, "<missing>", fmtVal(want.MapIndex(k)))
				continue
			}
			c.compare(kp, gv, want.MapIndex(k))
		}
	default:
		if got.Interface() != want.Interface() {
			c.fail(path, fmtVal(got), fmtVal(want))
		}
	}
}

func describeRaw(v interface{}) string {
	switch v.(type) {
	case nil:
		return "msgpack nil"
	case map[interface{}]interface{}:
		return "msgpack map"
	case []interface{}:
		return "msgpack array"
	case string:
		return "msgpack string"
	case []byte:
		return "msgpack bin"
	case bool:
		return "msgpack bool"
	case int64, uint64:
		return "msgpack int"
	case float32, float64:
		return "msgpack float"
	}
	return fmt.Sprintf("msgpack %T", v)
}

// shape checks the generic decode of the Rust bytes against the Go type:
// every struct must be encoded as a msgpack map (not the positional array
// form go-msgpack would also accept), and every key must name a Go field
// (go-msgpack silently drops unknown keys, which would hide a renamed field).
func (c *checker) shape(path string, t reflect.Type, raw interface{}) {
	switch t.Kind() {
	case reflect.Ptr:
		if raw != nil {
			c.shape(path, t.Elem(), raw)
		}
	case reflect.Struct:
		if t == reflect.TypeOf(time.Time{}) {
			return
		}
		m, ok := raw.(map[interface{}]interface{})
		if !ok {
			c.fail(path, describeRaw(raw), "msgpack map (struct "+t.Name()+")")
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			ks, ok := k.(string)
			if !ok {
				c.fail(path, fmt.Sprintf("map key %#v", k), "string key")
				continue
			}
			keys = append(keys, ks)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := t.FieldByName(k)
			if !ok || len(f.Index) != 1 {
				c.fail(join(path, k), fmt.Sprintf("key %q (no such field in Go %s; go-msgpack would drop it)", k, t.Name()), "no such key")
				continue
			}
			c.shape(join(path, k), f.Type, m[k])
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 || raw == nil {
			return
		}
		a, ok := raw.([]interface{})
		if !ok {
			c.fail(path, describeRaw(raw), "msgpack array")
			return
		}
		for i, e := range a {
			c.shape(fmt.Sprintf("%s[%d]", path, i), t.Elem(), e)
		}
	}
}

func (c *checker) checkBytes(gc goCodec, data []byte, want interface{}) {
	wantV := reflect.ValueOf(want)
	gotPtr := reflect.New(wantV.Elem().Type()) // fresh zero value
	rest, err := gc.decode(data, gotPtr.Interface())
	if err != nil {
		c.fail("<decode>", fmt.Sprintf("error %q", err.Error()), "successful decode")
		return
	}
	if rest != 0 {
		c.fail("<trailing>", fmt.Sprintf("%d unconsumed byte(s) of %d", rest, len(data)), "0")
	}

	// The shape is read from a generic decode (maps keyed by interface{}).
	var raw interface{}
	generic := &codec.MsgpackHandle{}
	generic.RawToString = true
	if err := codec.NewDecoderBytes(data, generic).Decode(&raw); err != nil {
		c.fail("<decode-generic>", fmt.Sprintf("error %q", err.Error()), "successful decode")
	} else {
		c.shape("", wantV.Type(), raw)
	}

	c.compare("", gotPtr.Elem(), wantV.Elem())
}

// report prints a checker's verdict and returns its number of failures.
func (c *checker) report() int {
	if len(c.fails) == 0 {
		fmt.Printf("ok %s\n", c.file)
	}
	for _, f := range c.fails {
		fmt.Println(f)
	}
	return len(c.fails)
}

func runCheck(dir string) int {
	vecs := vectors()
	failures := 0
	checks := 0
	// The Rust encoder's bytes, read by each generation.
	for _, gc := range codecs {
		for _, vec := range vecs {
			c := &checker{file: vec.file + " (Rust -> " + gc.name + ")"}
			data, err := os.ReadFile(filepath.Join(dir, vec.file))
			if err != nil {
				c.fail("<file>", fmt.Sprintf("read error: %v", err), "readable file")
			} else {
				c.checkBytes(gc, data, vec.want)
			}
			failures += c.report()
			checks++
		}
	}
	// Each generation reads the other's bytes to the full Go value, and
	// says whether the two wrote the same bytes.
	for _, from := range codecs {
		for _, to := range codecs {
			if from.name == to.name {
				continue
			}
			for _, vec := range vecs {
				c := &checker{file: vec.file + " (" + from.name + " -> " + to.name + ")"}
				data, err := from.encode(vec.write)
				if err != nil {
					c.fail("<encode>", fmt.Sprintf("error %q", err.Error()), "successful encode")
				} else {
					c.checkBytes(to, data, vec.write)
				}
				failures += c.report()
				checks++
			}
		}
	}
	same := 0
	for _, vec := range vecs {
		a, errA := codecs[0].encode(vec.write)
		b, errB := codecs[1].encode(vec.write)
		if errA == nil && errB == nil && bytes.Equal(a, b) {
			same++
		} else if errA == nil && errB == nil {
			fmt.Printf("note %s: %s writes %d bytes, %s %d (different bytes, equal values)\n",
				vec.file, codecs[0].name, len(a), codecs[1].name, len(b))
		}
	}
	fmt.Printf("go msgpack check: %d checks over %d files, %d failures; %s and %s wrote identical bytes for %d of %d\n",
		checks, len(vecs), failures, codecs[0].name, codecs[1].name, same, len(vecs))
	if failures > 0 {
		return 1
	}
	return 0
}

// ---------------------------------------------------------------------------

func usage() {
	fmt.Fprintln(os.Stderr, "usage: msgpack write <dir> | msgpack write-v0 <dir> | msgpack check <dir>")
	os.Exit(2)
}

func main() {
	if len(os.Args) != 3 {
		usage()
	}
	dir := os.Args[2]
	switch os.Args[1] {
	case "write", "write-v0":
		gc := codecs[0]
		if os.Args[1] == "write-v0" {
			gc = codecs[1]
		}
		if err := runWrite(dir, gc); err != nil {
			fmt.Fprintf(os.Stderr, "write: %v\n", strings.TrimSpace(err.Error()))
			os.Exit(1)
		}
	case "check":
		os.Exit(runCheck(dir))
	default:
		usage()
	}
}
