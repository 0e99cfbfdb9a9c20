package wid_test

// docs/go.md's identity manager example, compiled and run: the block after
// "<!-- checked by bindings/go/wid/docs_manager_test.go: identity-manager -->"
// in docs/go.md is runAllocation below, as written (TestDocsManagerExampleIsThisCode),
// and TestDocsManagerExample runs it through three starts of a "process"
// against the stand-in Vault over https (example_helpers_test.go).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// begin docs/go.md identity-manager

// runAllocation keeps one allocation's identity and its Vault token, from
// a start or a restart of this process until ctx is done.
func runAllocation(ctx context.Context, kr *wid.Keyring, signer wid.Signer, stateDir string,
	vaultAddr string, caPEM []byte, alloc *wid.Allocation, use func(wid.ManagedEvent)) error {
	vaultIdentity := &wid.IssueRequest{Region: "global", Allocation: alloc, Task: "server",
		Identity: &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour}}
	m, err := wid.NewIdentityManager(kr, stateDir, []*wid.IssueRequest{vaultIdentity}, signer,
		wid.VaultLogin{Addr: vaultAddr, Workload: "server", Identity: "vault_default",
			Role: "nomad-workloads", CABundlePEM: caPEM})
	if err != nil {
		return err // a bad request or option, a missing state directory
	}
	defer m.Close()
	events := m.Watch() // before Restore: no event is missed
	// The saved tokens are checked and reused, the saved Vault token confirmed
	// (lookup-self) or replaced by a new login, never handed out unconfirmed;
	// with nothing saved, everything is new. A failed login is retried by Run.
	if _, err := m.Restore(time.Now()); err != nil && !errors.Is(err, wid.ErrTokenExchangeFailed) {
		return err // the identity could not be signed
	}
	go m.Run(ctx) // ticks at NextDue: renewals, the Vault token's renewals, retries
	for {
		select {
		case ev := <-events: // the identity token, then the Vault token (wid.ManagedSecret)
			use(ev)
		case <-ctx.Done():
			return nil
		}
	}
}

// end docs/go.md identity-manager

// docsBlock is the ```go block after the line marker in docs/go.md.
func docsBlock(t *testing.T, marker string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "go.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), marker)
	if !ok {
		t.Fatalf("docs/go.md has no %s", marker)
	}
	_, body, ok := strings.Cut(after, "```go\n")
	if !ok {
		t.Fatalf("docs/go.md has no ```go block after %s", marker)
	}
	block, _, ok := strings.Cut(body, "```")
	if !ok {
		t.Fatal("an unclosed block")
	}
	return block
}

func TestDocsManagerExampleIsThisCode(t *testing.T) {
	src, err := os.ReadFile("docs_manager_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "// begin docs/go.md identity-manager\n\n")
	code, _, _ = strings.Cut(code, "\n// end docs/go.md identity-manager")
	if code == "" {
		t.Fatal("no marked code")
	}
	if doc := docsBlock(t, "<!-- checked by bindings/go/wid/docs_manager_test.go: identity-manager -->"); doc != code {
		t.Fatalf("docs/go.md's identity manager block differs from runAllocation in docs_manager_test.go: copy the code into the page\n--- page:\n%s\n--- code:\n%s", doc, code)
	}
}

func TestDocsManagerExample(t *testing.T) {
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(time.Now().Add(-60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	iss, err := wid.NewIssuer(kr, wid.IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	jwks, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	vault := newStandInVault(jwks, "nomad-workloads") // example_helpers_test.go
	t.Cleanup(vault.Close)
	dir := t.TempDir()
	alloc := &wid.Allocation{ID: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", Namespace: "default", JobID: "web", TaskGroup: "frontend"}

	// One run of the "process": until the Vault token is delivered.
	run := func() (events []wid.ManagedEvent) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		got := make(chan wid.ManagedEvent, 16)
		done := make(chan error, 1)
		go func() {
			done <- runAllocation(ctx, kr, wid.IssuerSigner(iss), dir, vault.URL, vault.CAPEM, alloc,
				func(ev wid.ManagedEvent) { got <- ev })
		}()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case ev := <-got:
				events = append(events, ev)
				if ev.What == wid.ManagedSecret {
					cancel()
					if err := <-done; err != nil {
						t.Fatalf("runAllocation: %v", err)
					}
					return events
				}
			case err := <-done:
				t.Fatalf("runAllocation returned early: %v", err)
			case <-deadline:
				t.Fatalf("no Vault token in 20 s (events %v)", events)
			}
		}
	}
	kinds := func(evs []wid.ManagedEvent) string {
		var s []string
		for _, ev := range evs {
			s = append(s, ev.What.String()+":"+ev.Kind.String())
		}
		return strings.Join(s, " ")
	}

	first := run()
	vaultID := wid.IdentityID{Workload: "server", Name: "vault_default"}
	if len(first) != 2 || first[0].What != wid.ManagedIdentity || first[1].Exchange != "vault" ||
		first[0].Identity != vaultID || first[1].Identity != vaultID ||
		!strings.HasPrefix(first[1].Value, "hvs.stand-in-") || vault.Logins() != 1 {
		t.Fatalf("first run: %v, logins %d", kinds(first), vault.Logins())
	}
	t.Logf("first run: %s", kinds(first))

	// A restart: the saved Vault token is confirmed and delivered again.
	second := run()
	if kinds(second) != "identity:restored secret:restored" || second[1].Value != first[1].Value || vault.Logins() != 1 {
		t.Fatalf("restart: %v (same token: %v), logins %d", kinds(second), second[1].Value == first[1].Value, vault.Logins())
	}

	// The token deleted out of band: the restart logs in again and never
	// hands out the dead token.
	vault.RevokeAll()
	third := run()
	for _, ev := range third {
		if ev.Value == first[1].Value {
			t.Fatal("the revoked Vault token was delivered")
		}
	}
	if kinds(third) != "identity:restored secret:restored" || vault.Logins() != 2 {
		t.Fatalf("restart after revocation: %v, logins %d", kinds(third), vault.Logins())
	}
}
