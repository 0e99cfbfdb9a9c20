// Command host is seed 001's scheduler client, on the Go binding: one
// allocation with two identities (tasks "server" and "worker", identity
// "vault_default"), each with its own Vault or Consul login, kept by a
// wid.IdentityManager whose state directory survives the process.
//
// tests/seed001/harness.py runs it again and again, killing it with SIGKILL
// at varied points; each new process restores from the state directory. For
// every secret delivered it prints, before doing anything else with it,
//
//	deliver <workload/identity> <fingerprint> <kind> used=ok|<why>
//
// having used the secret at once (Vault: read the KV secret with it;
// Consul: ask token/self): a fingerprint (sha256, 16 hex digits) and never
// the secret. "ready" follows once every identity's secret was delivered;
// "paused" after SIGUSR1 stopped its ticking. -kill-at-sign N makes it kill
// itself inside its Nth signing, after signing, before anything is saved.
// -end ends the allocation (IdentityManager.EndAllocation) and prints
// "ended".
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

var workloads = []string{"server", "worker"}

func main() {
	mode := flag.String("mode", "vault", "vault or consul")
	addr := flag.String("addr", "", "the server's address for the logins (http to loopback)")
	useAddr := flag.String("use-addr", "", "the server's address for using the secrets (default -addr)")
	name := flag.String("name", "", "the JWT auth role (vault) or auth method (consul)")
	keystore := flag.String("keystore", "", "the issuer's keystore")
	stateDir := flag.String("state", "", "the state directory")
	killAtSign := flag.Int("kill-at-sign", 0, "SIGKILL this process inside its Nth signing (0: never)")
	end := flag.Bool("end", false, "end the allocation (revoke its secrets, remove its saved state) and exit")
	flag.Parse()
	if *useAddr == "" {
		*useAddr = *addr
	}
	if err := run(*mode, *addr, *useAddr, *name, *keystore, *stateDir, *killAtSign, *end); err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
}

func run(mode, addr, useAddr, name, keystore, stateDir string, killAtSign int, end bool) error {
	kr, err := wid.LoadKeyring(keystore)
	if err != nil {
		return err
	}
	defer kr.Close()
	iss, err := wid.NewIssuer(kr, wid.IssuerOptions{})
	if err != nil {
		return err
	}
	defer iss.Close()
	// The signer a client has is its servers' RPC; here, the issuer, with a
	// kill inside the Nth signing when asked.
	var signings atomic.Int64
	signer := wid.SignerFunc(func(req *wid.IssueRequest, now time.Time) (string, error) {
		token, err := wid.IssuerSigner(iss).Sign(req, now)
		if killAtSign > 0 && signings.Add(1) == int64(killAtSign) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns: the token is signed, nothing is saved
		}
		return token, err
	})

	alloc := &wid.Allocation{ID: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", Namespace: "default",
		JobID: "web", TaskGroup: "g", DesiredStatus: "run", ClientStatus: "running"}
	var requests []*wid.IssueRequest
	var opts []wid.ManagerOption
	for _, w := range workloads {
		// Short-lived identities, so renewals come within each round.
		requests = append(requests, &wid.IssueRequest{Region: "global", Allocation: alloc, Task: w,
			Identity: &wid.WorkloadIdentity{Name: "vault_default",
				Audience: []string{"vault.io", "consul.io"}, TTL: 12 * time.Second}})
		opts = append(opts, login(mode, addr, name, w))
	}
	if end {
		return endAllocation(kr, stateDir, requests, signer, opts)
	}
	// doc:begin manager
	m, err := wid.NewIdentityManager(kr, stateDir, requests, signer, opts...)
	if err != nil {
		return err
	}
	defer m.Close()
	events := m.Watch() // before Restore: no event is missed
	// After a restart the saved secrets are confirmed (or replaced), never
	// handed out unconfirmed; with nothing saved, everything is new. A login
	// that failed is retried by Run.
	if _, err := m.Restore(time.Now()); err != nil && !errors.Is(err, wid.ErrTokenExchangeFailed) {
		return err
	}
	// doc:end manager
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	pause := make(chan os.Signal, 1)
	signal.Notify(pause, syscall.SIGUSR1)

	have := map[string]bool{}
	ready := false
	for {
		select {
		case ev := <-events:
			if ev.What != wid.ManagedSecret {
				continue
			}
			id := ev.Identity.String()
			fmt.Printf("deliver %s %s %s used=%s\n", id, fingerprint(ev.Value), ev.Kind, use(mode, useAddr, ev.Value))
			have[id] = true
			if !ready && len(have) == len(workloads) {
				ready = true
				fmt.Println("ready")
			}
		case <-pause:
			stop()
			<-ran // the tick under way has finished
			fmt.Println("paused")
			select {}
		}
	}
}

// endAllocation is what a host does when the allocation stopped while it
// was down: a manager on the state directory, never started, revokes the
// saved secrets and removes the saved state.
func endAllocation(kr *wid.Keyring, stateDir string, requests []*wid.IssueRequest, signer wid.Signer, opts []wid.ManagerOption) error {
	// doc:begin end
	m, err := wid.NewIdentityManager(kr, stateDir, requests, signer, opts...)
	if err != nil {
		return err
	}
	defer m.Close()
	// Revokes every saved secret, then removes the allocation's state file;
	// on an error (a server unreachable) what was not revoked stays saved:
	// call it again.
	if err := m.EndAllocation(); err != nil {
		return err
	}
	// doc:end end
	fmt.Println("ended")
	return nil
}

// login is the identity's login: its exchange is named after its workload.
func login(mode, addr, name, workload string) wid.ManagerOption {
	if mode == "consul" {
		// doc:begin consul
		return wid.ConsulLogin{
			Addr:              addr, // "https://consul.example.com:8501"
			Workload:          workload,
			Identity:          "vault_default", // whose token logs in
			AuthMethod:        name,            // the JWT auth method
			Name:              "consul-" + workload,
			AllowHTTPLoopback: true, // a dev agent on this machine
		}
		// doc:end consul
	}
	// doc:begin vault
	return wid.VaultLogin{
		Addr:              addr, // "https://vault.example.com:8200"
		Workload:          workload,
		Identity:          "vault_default",     // whose token logs in
		Role:              name,                // the JWT auth role
		Name:              "vault-" + workload, // one name per exchange
		MinTTL:            2 * time.Second,     // below the role's token_ttl
		AllowHTTPLoopback: true,                // a dev server on this machine
	}
	// doc:end vault
}

func fingerprint(secret string) string {
	if secret == "" {
		return "empty"
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

// use uses the secret at once, as the workload would: "ok" or why not.
func use(mode, addr, secret string) string {
	path, header := "/v1/secret/data/seed", "X-Vault-Token"
	if mode == "consul" {
		path, header = "/v1/acl/token/self", "X-Consul-Token"
	}
	req, err := http.NewRequest("GET", addr+path, nil)
	if err != nil {
		return "request:" + err.Error()
	}
	req.Header.Set(header, secret)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "unreachable"
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("status-%d", resp.StatusCode)
	}
	return "ok"
}
