package wid_test

// What the examples (example_test.go) share and a real host has of its own:
// an allocation store (Nomad's state) and a stand-in Vault served over https
// by net/http/httptest. Nothing here is part of the API the examples show.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// allocStore is a StateStore over an in-memory table of allocations (a host
// asks its scheduler's state instead), safe for concurrent use: Verify may
// ask it from several goroutines at once.
type allocStore struct {
	mu     sync.Mutex
	states map[string]wid.AllocState
}

func newAllocStore() *allocStore {
	return &allocStore{states: make(map[string]wid.AllocState)}
}

// Set records allocation id's state.
func (s *allocStore) Set(id string, state wid.AllocState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[id] = state
}

// AllocationState answers from the table (an unknown allocation: Missing),
// whatever the consistency asked for.
func (s *allocStore) AllocationState(id string, _ wid.Consistency) (wid.AllocState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[id], nil
}

// standInVault follows Vault's token API as wid.VaultLogin calls it, over
// https with its own CA: POST /v1/auth/jwt/login with {"role","jwt"}
// (the JWT checked against the issuer's JWKS, as Vault's JWT auth method
// does), GET /v1/auth/token/lookup-self, POST /v1/auth/token/renew-self and
// POST /v1/auth/token/revoke-self, the client token in X-Vault-Token.
type standInVault struct {
	*httptest.Server
	// CAPEM is the CA that signed the server's certificate: what
	// VaultLogin.CABundlePEM takes.
	CAPEM []byte

	role  string
	jwks  *wid.Keyring
	check *wid.Verifier

	mu      sync.Mutex
	live    map[string]time.Time // client token -> expiry
	logins  int
	lookups int
}

// newStandInVault starts a stand-in whose JWT auth role role accepts tokens
// for audience "vault.io" signed by a key of jwks. Close stops it.
func newStandInVault(jwks []byte, role string) *standInVault {
	kr, err := wid.NewKeyring()
	if err != nil {
		panic(err)
	}
	if _, err := kr.ImportJWKS(jwks); err != nil {
		panic(err)
	}
	// Vault's JWT auth checks signature, times and audience; it knows
	// nothing of allocations.
	anyLive := wid.StateStoreFunc(func(string, wid.Consistency) (wid.AllocState, error) { return wid.Live, nil })
	check, err := wid.NewVerifier(kr, "vault.io", anyLive, nil)
	if err != nil {
		panic(err)
	}
	caPEM, cert := loopbackCertificate()
	v := &standInVault{CAPEM: caPEM, role: role, jwks: kr, check: check, live: make(map[string]time.Time)}
	v.Server = httptest.NewUnstartedServer(http.HandlerFunc(v.serve))
	v.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	v.StartTLS()
	return v
}

// Close stops the server and releases its verifier.
func (v *standInVault) Close() {
	v.Server.Close()
	v.check.Close()
	v.jwks.Close()
}

// Logins is how many JWT logins succeeded.
func (v *standInVault) Logins() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.logins
}

// RevokeAll forgets every client token, as a Vault operator revoking them
// out of band would.
func (v *standInVault) RevokeAll() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.live = make(map[string]time.Time)
}

// Lookups is how many lookup-self calls confirmed a live token.
func (v *standInVault) Lookups() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lookups
}

func (v *standInVault) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	v.mu.Lock()
	defer v.mu.Unlock()
	token := r.Header.Get("X-Vault-Token")
	expiry, live := v.live[token]
	live = live && time.Now().Before(expiry)
	refuse := func() {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"errors":["permission denied"]}`)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/jwt/login":
		var body struct {
			Role string `json:"role"`
			JWT  string `json:"jwt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Role != v.role {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"errors":["invalid role name"]}`)
			return
		}
		if _, err := v.check.Verify(body.JWT, time.Now()); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"errors":[%q]}`, "error validating token: "+err.Error())
			return
		}
		v.logins++
		tok := fmt.Sprintf("hvs.stand-in-%d", v.logins)
		v.live[tok] = time.Now().Add(time.Hour)
		fmt.Fprintf(w, `{"auth":{"client_token":%q,"lease_duration":3600,"renewable":true}}`, tok)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/auth/token/lookup-self":
		if !live {
			refuse()
			return
		}
		v.lookups++
		fmt.Fprintf(w, `{"data":{"ttl":%d}}`, int(time.Until(expiry).Seconds()))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/token/renew-self":
		if !live {
			refuse()
			return
		}
		v.live[token] = time.Now().Add(time.Hour)
		fmt.Fprintf(w, `{"auth":{"client_token":%q,"lease_duration":3600,"renewable":true}}`, token)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/auth/token/revoke-self":
		delete(v.live, token)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// loopbackCertificate makes a CA and a server certificate it signs for
// 127.0.0.1 (a CA's own certificate is not accepted as a server's), and
// returns the CA in PEM and the server's certificate with its key.
func loopbackCertificate() (caPEM []byte, cert tls.Certificate) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in Vault CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		panic(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}
