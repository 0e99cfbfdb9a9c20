package wid_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// Issue an allocation's identity and verify it as a relying party does: the
// token is accepted while its allocation runs, refused once it is terminal.
func Example() {
	now := time.Now()
	kr, err := wid.NewKeyring()
	if err != nil {
		log.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(now); err != nil { // a fresh active EdDSA key
		log.Fatal(err)
	}

	const allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	token, err := kr.Issue(&wid.IssueRequest{
		Region:     "global",
		Allocation: &wid.Allocation{ID: allocID, Namespace: "default", JobID: "web", TaskGroup: "frontend"},
		Task:       "server",
		Identity:   &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour},
	}, now)
	if err != nil {
		log.Fatal(err)
	}

	// The relying party: the scheduler's state says which allocations run.
	store := newAllocStore()
	store.Set(allocID, wid.Live)
	v, err := wid.NewVerifier(kr, "vault.io", store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	claims, err := v.Verify(token, now)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("namespace:", claims.Namespace)
	fmt.Println("job:", claims.JobID)
	fmt.Println("allocation:", claims.AllocationID)
	fmt.Println("task:", claims.Task)
	fmt.Println("sub:", claims.Subject)
	fmt.Println("aud:", claims.Audience)
	fmt.Println("valid for:", claims.Expires.Sub(claims.IssuedAt))

	// The allocation stops: its token is refused from then on.
	store.Set(allocID, wid.Terminal)
	_, err = v.Verify(token, now)
	fmt.Println("terminal allocation refused:", errors.Is(err, wid.ErrAllocationTerminal))
	// Output:
	// namespace: default
	// job: web
	// allocation: 5f8c7d2e-3b1a-4c6d-9e0f-123456789abc
	// task: server
	// sub: global:default:web:frontend:server:vault_default
	// aud: [vault.io]
	// valid for: 1h0m0s
	// terminal allocation refused: true
}

// Why a token is refused: Explain runs Verify's checks in order and says
// which one failed.
func ExampleVerifier_Explain() {
	issued := time.Unix(1700000000, 0) // a fixed clock, for the output below
	kr, err := wid.NewKeyring()
	if err != nil {
		log.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(issued); err != nil {
		log.Fatal(err)
	}
	const allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	token, err := kr.Issue(&wid.IssueRequest{
		Region:     "global",
		Allocation: &wid.Allocation{ID: allocID, Namespace: "default", JobID: "web", TaskGroup: "frontend"},
		Task:       "server",
		Identity:   &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour},
	}, issued)
	if err != nil {
		log.Fatal(err)
	}
	store := newAllocStore()
	store.Set(allocID, wid.Live)
	v, err := wid.NewVerifier(kr, "vault.io", store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	x, err := v.Explain(token, issued.Add(2*time.Hour)) // err: only a failed call
	if err != nil {
		log.Fatal(err)
	}
	for _, step := range x.Steps {
		fmt.Println(step.Name, step.Passed)
	}
	fmt.Println("accepted:", x.Accepted, x.Code)
	fmt.Println("failed:", x.Failed().Detail)
	fmt.Println("as Verify says:", errors.Is(x.Err(), wid.ErrExpired))
	// Output:
	// length true
	// structure true
	// key true
	// algorithm true
	// signature true
	// claims true
	// times false
	// accepted: false WID_RESULT_EXPIRED
	// failed: token expired at 1700003600 (now 1700007200, leeway 60s)
	// as Verify says: true
}

// An identity manager keeps an allocation's identity and the Vault token it
// logs in for; after a restart, a new manager on the same state directory
// takes both back, the Vault token confirmed with lookup-self, not a new
// login.
func ExampleNewIdentityManager() {
	kr, err := wid.NewKeyring()
	if err != nil {
		log.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(time.Now().Add(-time.Minute)); err != nil {
		log.Fatal(err)
	}
	iss, err := wid.NewIssuer(kr, wid.IssuerOptions{Issuer: "https://nomad.example.com"})
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()

	// Vault's JWT auth method trusts the issuer's JWKS (here a stand-in
	// over https, with its own CA).
	jwks, err := kr.JWKS()
	if err != nil {
		log.Fatal(err)
	}
	vault := newStandInVault(jwks, "nomad-workloads")
	defer vault.Close()

	stateDir, err := os.MkdirTemp("", "wid-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(stateDir)

	alloc := &wid.Allocation{ID: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", Namespace: "default", JobID: "web", TaskGroup: "frontend"}
	identities := []*wid.IssueRequest{{Region: "global", Allocation: alloc, Task: "server",
		Identity: &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour}}}
	login := wid.VaultLogin{Addr: vault.URL, Workload: "server", Identity: "vault_default",
		Role: "nomad-workloads", CABundlePEM: vault.CAPEM}
	printEvents := func(events <-chan wid.ManagedEvent) {
		for len(events) > 0 { // delivered before Start or Restore returned
			ev := <-events
			fmt.Println("  event:", ev.What, ev.Identity, ev.Kind)
		}
	}

	// The first process: a new allocation.
	m, err := wid.NewIdentityManager(kr, stateDir, identities, wid.IssuerSigner(iss), login)
	if err != nil {
		log.Fatal(err)
	}
	events := m.Watch() // before Start: no event is missed
	if err := m.Start(time.Now()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("started")
	printEvents(events)
	vaultToken, err := m.Secret("vault")
	if err != nil {
		log.Fatal(err)
	}
	h, err := m.Health(time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("at risk:", h.AtRisk, "| vault has a token:", h.Exchanges[0].HasSecret, "| logins:", vault.Logins())
	m.Close() // the process stops; the state stays in stateDir

	// The process restarts: a new manager on the same directory.
	m, err = wid.NewIdentityManager(kr, stateDir, identities, wid.IssuerSigner(iss), login)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	events = m.Watch()
	report, err := m.Restore(time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("restored: reused", report.Reused, "| rederived", report.Rederived)
	printEvents(events)
	restored, err := m.Secret("vault")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the same Vault token:", restored == vaultToken)
	fmt.Println("confirmed by lookup-self:", vault.Lookups(), "| logins:", vault.Logins())
	// Output:
	// started
	//   event: identity server/vault_default initial
	//   event: secret server/vault_default initial
	// at risk: false | vault has a token: true | logins: 1
	// restored: reused true | rederived []
	//   event: identity server/vault_default restored
	//   event: secret server/vault_default restored
	// the same Vault token: true
	// confirmed by lookup-self: 1 | logins: 1
}

// A trust set verifies the tokens of several issuers: each token goes to the
// one issuer its iss names, so one issuer's key never verifies a token that
// claims another, and a token of an issuer not in the set is refused.
func ExampleNewTrustSet() {
	now := time.Now()
	const east, west = "https://nomad-east.example.com", "https://nomad-west.example.com"
	eastKeys, err := wid.NewKeyring() // in practice: each issuer's JWKS (NewRemoteJWKS)
	if err != nil {
		log.Fatal(err)
	}
	defer eastKeys.Close()
	westKeys, err := wid.NewKeyring()
	if err != nil {
		log.Fatal(err)
	}
	defer westKeys.Close()
	for _, kr := range []*wid.Keyring{eastKeys, westKeys} {
		if _, err := kr.Rotate(now); err != nil {
			log.Fatal(err)
		}
	}
	const allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	store := newAllocStore()
	store.Set(allocID, wid.Live)

	ts, err := wid.NewTrustSet([]wid.TrustedIssuer{
		{Iss: east, Keyring: eastKeys, Audience: "vault.io", Store: store},
		{Iss: west, Keyring: westKeys, Audience: "vault.io", Store: store},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer ts.Close()

	issue := func(kr *wid.Keyring, region, iss string) string {
		token, err := kr.IssueWithIssuer(&wid.IssueRequest{
			Region:     region,
			Allocation: &wid.Allocation{ID: allocID, Namespace: "default", JobID: "web", TaskGroup: "frontend"},
			Task:       "server",
			Identity:   &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour},
		}, iss, now)
		if err != nil {
			log.Fatal(err)
		}
		return token
	}
	for _, token := range []string{issue(eastKeys, "east", east), issue(westKeys, "west", west)} {
		claims, issuer, err := ts.Verify(token, now)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s verified by %s\n", claims.Subject, issuer)
	}

	code := func(err error) wid.Result {
		var e *wid.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return wid.ResultOK
	}
	// West's key signing a token that claims to be east's: east's keys are
	// the only ones asked, and none of them signed it.
	_, _, err = ts.Verify(issue(westKeys, "west", east), now)
	fmt.Println("west's key claiming east:", code(err))
	// An issuer the set does not trust, whatever key signed it.
	_, _, err = ts.Verify(issue(eastKeys, "east", "https://nomad.evil.example"), now)
	fmt.Println("an unknown issuer:", code(err), errors.Is(err, wid.ErrIssuerMismatch))
	// Output:
	// east:default:web:frontend:server:vault_default verified by https://nomad-east.example.com
	// west:default:web:frontend:server:vault_default verified by https://nomad-west.example.com
	// west's key claiming east: WID_RESULT_UNKNOWN_KEY
	// an unknown issuer: WID_RESULT_ISSUER_MISMATCH true
}

// A relying party follows an issuer's JWKS over the network: Refresh fetches
// it, verifiers over its Keyring see every fetch, and a token signed by a
// key it has not seen yet starts a fetch while Verify waits for the key.
func ExampleNewRemoteJWKS() {
	now := time.Now()
	issuer, err := wid.NewKeyring() // the issuer's side, publishing its JWKS
	if err != nil {
		log.Fatal(err)
	}
	defer issuer.Close()
	if _, err := issuer.Rotate(now.Add(-time.Minute)); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		jwks, err := issuer.JWKS()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwks)
	}))
	defer srv.Close()

	// The relying party. Plain http only because the server is on loopback.
	remote, err := wid.NewRemoteJWKS(srv.URL+"/.well-known/jwks.json", &wid.RemoteJWKSOptions{AllowHTTPLoopback: true})
	if err != nil {
		log.Fatal(err)
	}
	defer remote.Close()
	report, err := remote.Refresh() // the first set, now
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fetched %d key(s), %d new\n", len(report.Keys), len(report.Added))
	kr, err := remote.Keyring()
	if err != nil {
		log.Fatal(err)
	}
	defer kr.Close()
	const allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	store := newAllocStore()
	store.Set(allocID, wid.Live)
	v, err := wid.NewVerifier(kr, "vault.io", store, &wid.VerifierOptions{KeyWait: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()

	req := &wid.IssueRequest{
		Region:     "global",
		Allocation: &wid.Allocation{ID: allocID, Namespace: "default", JobID: "web", TaskGroup: "frontend"},
		Task:       "server",
		Identity:   &wid.WorkloadIdentity{Name: "vault_default", Audience: []string{"vault.io"}, TTL: time.Hour},
	}
	token, err := issuer.Issue(req, now)
	if err != nil {
		log.Fatal(err)
	}
	claims, err := v.Verify(token, now)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("verified:", claims.Subject)

	// The issuer rotates: its next token names a kid the keyring lacks.
	if _, err := issuer.Rotate(now); err != nil {
		log.Fatal(err)
	}
	token, err = issuer.Issue(req, now)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := v.Verify(token, now); err != nil {
		log.Fatal(err)
	}
	st, err := remote.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after the rotation: verified, %d keys, %d fetch(es) for an unknown kid\n", st.Keys, st.UnknownKidFetches)
	// Output:
	// fetched 1 key(s), 1 new
	// verified: global:default:web:frontend:server:vault_default
	// after the rotation: verified, 2 keys, 1 fetch(es) for an unknown kid
}
