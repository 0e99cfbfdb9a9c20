package wid_test

// docs/go.md's "The API in five lines", compiled and run: the block after
// "<!-- run by bindings/go/wid/docs_api_test.go: api -->" in docs/go.md is
// the body of apiInFiveLines below, as written, one tab of indentation
// less (TestDocsAPIIsThisCode), and TestDocsAPI runs it for a live and a
// terminal allocation.

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// apiInFiveLines is the page's block, given what it leaves to the reader:
// the allocation and the StateStore.
func apiInFiveLines(alloc *wid.Allocation, store wid.StateStore) (*wid.Claims, error) {
	// begin docs/go.md api
	kr, _ := wid.NewKeyring()
	kr.Rotate(time.Now())
	token, _ := kr.Issue(&wid.IssueRequest{Region: "global", Allocation: alloc, Task: "server",
		Identity: &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour}}, time.Now())
	// store: your wid.StateStore
	v, _ := wid.NewVerifier(kr, "vault.io", store, &wid.VerifierOptions{Leeway: 30 * time.Second})
	claims, err := v.Verify(token, time.Now()) // claims.Expires is a time.Time
	if errors.Is(err, wid.ErrAllocationTerminal) {
		// the workload is gone
	}
	// end docs/go.md api
	defer kr.Close()
	defer v.Close()
	return claims, err
}

func TestDocsAPIIsThisCode(t *testing.T) {
	src, err := os.ReadFile("docs_api_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "\t// begin docs/go.md api\n")
	code, _, _ = strings.Cut(code, "\t// end docs/go.md api\n")
	if code == "" {
		t.Fatal("no marked code")
	}
	var body strings.Builder
	for _, line := range strings.SplitAfter(code, "\n") {
		body.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if doc := docsBlock(t, "<!-- run by bindings/go/wid/docs_api_test.go: api -->"); doc != body.String() {
		t.Fatalf("docs/go.md's API block differs from apiInFiveLines in docs_api_test.go: copy the code into the page (one tab less)\n--- page:\n%s\n--- code:\n%s", doc, body.String())
	}
}

func TestDocsAPI(t *testing.T) {
	alloc := &wid.Allocation{ID: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", Namespace: "default", JobID: "web", TaskGroup: "frontend"}
	state := wid.Live
	store := wid.StateStoreFunc(func(id string, _ wid.Consistency) (wid.AllocState, error) {
		if id != alloc.ID {
			return wid.Missing, nil
		}
		return state, nil
	})
	claims, err := apiInFiveLines(alloc, store)
	if err != nil {
		t.Fatalf("a live allocation's token: %v", err)
	}
	if claims.JobID != "web" || claims.Task != "server" || claims.AllocationID != alloc.ID {
		t.Fatalf("claims: %+v", claims)
	}
	if got := claims.Expires.Sub(claims.IssuedAt); got != time.Hour {
		t.Fatalf("exp - iat = %v, want the identity's TTL, 1h", got)
	}
	state = wid.Terminal
	if _, err := apiInFiveLines(alloc, store); !errors.Is(err, wid.ErrAllocationTerminal) {
		t.Fatalf("a terminal allocation's token: %v, want ErrAllocationTerminal", err)
	}
}
