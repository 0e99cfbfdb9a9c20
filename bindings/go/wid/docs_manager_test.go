package wid_test

// docs/go.md's identity manager example, compiled and run: the block after
// "<!-- checked by bindings/go/wid/docs_manager_test.go: identity-manager -->"
// in docs/go.md is runAllocation below, as written (TestDocsManagerExampleIsThisCode),
// and TestDocsManagerExample runs it through three starts of a "process"
// against a stand-in Vault over https.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// docsBlock is the fenced block after the marker in docs/go.md.
func docsBlock(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "go.md"))
	if err != nil {
		t.Fatal(err)
	}
	marker := "<!-- checked by bindings/go/wid/docs_manager_test.go: " + name + " -->"
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
	if doc := docsBlock(t, "identity-manager"); doc != code {
		t.Fatalf("docs/go.md's identity manager block differs from runAllocation in docs_manager_test.go: copy the code into the page\n--- page:\n%s\n--- code:\n%s", doc, code)
	}
}

// fakeVault follows Vault's token API as VaultLogin uses it: JWT login
// (checking the token with a wid.Verifier), lookup-self, renew-self,
// revoke-self.
type fakeVault struct {
	*httptest.Server
	caPEM []byte
	v     *wid.Verifier

	mu     sync.Mutex
	live   map[string]time.Time // token -> expiry
	logins int
}

func newFakeVault(t *testing.T, kr *wid.Keyring) *fakeVault {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := wid.NewVerifier(kr, "vault.io", wid.StateStoreFunc(func(string, wid.Consistency) (wid.AllocState, error) {
		return wid.Live, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	f := &fakeVault{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), v: v,
		live: make(map[string]time.Time)}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeVault) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	f.mu.Lock()
	defer f.mu.Unlock()
	token := r.Header.Get("X-Vault-Token")
	expiry, live := f.live[token]
	live = live && time.Now().Before(expiry)
	refuse := func() {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"errors":["permission denied"]}`)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/jwt/login":
		var body struct{ Role, JWT string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Role != "nomad-workloads" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"errors":["invalid role name"]}`)
			return
		}
		if _, err := f.v.Verify(body.JWT, time.Now()); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"errors":[%q]}`, "error validating token: "+err.Error())
			return
		}
		f.logins++
		tok := fmt.Sprintf("hvs.fake-%d", f.logins)
		f.live[tok] = time.Now().Add(time.Hour)
		fmt.Fprintf(w, `{"auth":{"client_token":%q,"lease_duration":3600,"renewable":true}}`, tok)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/auth/token/lookup-self":
		if !live {
			refuse()
			return
		}
		fmt.Fprintf(w, `{"data":{"ttl":%d}}`, int(time.Until(expiry).Seconds()))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/token/renew-self":
		if !live {
			refuse()
			return
		}
		f.live[token] = time.Now().Add(time.Hour)
		fmt.Fprintf(w, `{"auth":{"client_token":%q,"lease_duration":3600,"renewable":true}}`, token)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/token/revoke-self":
		delete(f.live, token)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeVault) revokeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = make(map[string]time.Time)
}

func (f *fakeVault) Logins() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins
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
	vault := newFakeVault(t, kr)
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
			done <- runAllocation(ctx, kr, wid.IssuerSigner(iss), dir, vault.URL, vault.caPEM, alloc,
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
		!strings.HasPrefix(first[1].Value, "hvs.fake-") || vault.Logins() != 1 {
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
	vault.revokeAll()
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
