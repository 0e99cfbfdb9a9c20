// Command gospiffeworkload is a go-spiffe v2 workload: it fetches the JWT
// bundles a SPIRE agent hands it over the Workload API and prints the key
// IDs of one trust domain's JWT authorities, sorted, space-separated
// (scripts/spire-interop.sh checks ours are there).
//
//	gospiffeworkload unix:///path/to/agent.sock wid.test
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gospiffeworkload AGENT_ADDRESS TRUST_DOMAIN")
		os.Exit(2)
	}
	td, err := spiffeid.TrustDomainFromString(os.Args[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gospiffeworkload: trust domain %q: %v\n", os.Args[2], err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := workloadapi.FetchJWTBundles(ctx, workloadapi.WithAddr(os.Args[1]))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gospiffeworkload: FetchJWTBundles from %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	bundle, ok := set.Get(td)
	if !ok {
		fmt.Fprintf(os.Stderr, "gospiffeworkload: the agent holds no JWT bundle for %s\n", td)
		os.Exit(1)
	}
	var kids []string
	for kid := range bundle.JWTAuthorities() {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	fmt.Println(strings.Join(kids, " "))
}
