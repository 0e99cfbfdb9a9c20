package k8ssigner

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRotationTrace follows a signer through a full rotation of its
// keystore done with the CLI while it runs (A signs; rotate: B signs, A
// verifies; rotate: C signs; deprecate A: it leaves the set), as the
// apiserver sees it: after every step every token signed so far whose key
// was not deprecated verifies against the current FetchKeys set (no
// unknown kid at any moment), the new Sign's kid is listed and is the
// keyring's active key, and a deprecated key's tokens no longer verify.
// Each step is logged as a trace line.
func TestRotationTrace(t *testing.T) {
	dir := shortDir(t)
	st := newKeystore(t, dir, "kubernetes", "1h", "ES256")
	s := startSigner(t, st, testIssuer, filepath.Join(dir, "s.sock"))

	labels := map[string]string{} // kid -> A, B, C...
	label := func(kid string) string {
		if l, ok := labels[kid]; ok {
			return l
		}
		l := string(rune('A' + len(labels)))
		labels[kid] = l
		t.Logf("key %s = %s", l, kid)
		return l
	}
	var tokens []*signed
	deprecated := map[string]bool{}
	var lastTS int64

	// step checks and traces the signer after a change; moved: the change
	// made a key record a new time (a rotation), so data_timestamp must
	// move on.
	step := func(n int, what string, moved bool) {
		t.Helper()
		resp := s.fetchKeys(t)
		keys := checkKeys(t, resp, "ES256")
		// Unchanged, the answer is the same: the apiserver takes a new
		// data_timestamp, key order or exclude flag for a change of keys.
		if again := s.fetchKeys(t); !sameAnswer(resp, again) {
			t.Errorf("step %d: two FetchKeys in a row differ: %v then %v", n, resp, again)
		}
		ts := resp.GetDataTimestamp().GetSeconds()
		if ts < lastTS || (moved && ts == lastTS) {
			t.Errorf("step %d: data_timestamp went from %d to %d", n, lastTS, ts)
		}
		lastTS = ts
		listed := st.list(t)
		if want := keyringTimestamp(listed); ts != want {
			t.Errorf("step %d: data_timestamp %d, want %d (the latest time a kubernetes key records)", n, ts, want)
		}
		active := ""
		for _, k := range listed {
			if k.Purpose == "kubernetes" && k.State == "active" {
				active = k.Kid
			}
		}

		tok := s.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if _, ok := keys[tok.kid]; !ok {
			// The set fetched before Sign may predate a reload; the
			// apiserver would refetch at once on an unknown kid.
			keys = checkKeys(t, s.fetchKeys(t), "ES256")
		}
		if k, ok := keys[tok.kid]; !ok {
			t.Errorf("step %d: Sign's kid %s is not listed by FetchKeys (%s)", n, tok.kid, kidList(keys))
		} else if k.exclude {
			t.Errorf("step %d: Sign's kid %s is excluded from discovery", n, tok.kid)
		}
		if tok.kid != active {
			t.Errorf("step %d: Sign used kid %s, the keyring's active kubernetes key is %s", n, tok.kid, active)
		}
		tokens = append(tokens, tok)

		verified, refused := 0, 0
		for i, old := range tokens {
			_, err := verifyWith(old, keys, "ES256")
			switch {
			case deprecated[old.kid] && err == nil:
				t.Errorf("step %d: token %d of deprecated key %s still verifies", n, i, label(old.kid))
			case deprecated[old.kid]:
				refused++
			case err != nil:
				t.Errorf("step %d: token %d (kid %s) does not verify: %v", n, i, label(old.kid), err)
			default:
				verified++
			}
		}

		var set []string
		for kid, k := range keys {
			set = append(set, fmt.Sprintf("%s(exclude=%v)", label(kid), k.exclude))
		}
		sort.Strings(set)
		var states []string
		for _, k := range listed {
			if k.Purpose == "kubernetes" {
				states = append(states, label(k.Kid)+":"+k.State)
			}
		}
		sort.Strings(states)
		t.Logf("trace step %d %-22s FetchKeys [%s] keyring [%s] data_timestamp=%d refresh=%ds | Sign kid=%s | tokens so far: %d verify, %d of deprecated keys refused",
			n, what+":", strings.Join(set, " "), strings.Join(states, " "), ts, resp.GetRefreshHintSeconds(),
			label(tok.kid), verified, refused)
	}

	// A second between changes, so that each rotation records a later
	// time than the one before (times are whole seconds).
	pause := func() { time.Sleep(1100 * time.Millisecond) }
	step(0, "start", false)
	a := tokens[0].kid
	pause()
	b := st.rotate(t, "ES256")
	label(b)
	step(1, "rotate -> "+label(b), true)
	if tokens[1].kid != b {
		t.Fatalf("after rotate, Sign used %s, want the new key %s", label(tokens[1].kid), label(b))
	}
	pause()
	c := st.rotate(t, "ES256")
	label(c)
	step(2, "rotate -> "+label(c), true)
	if tokens[2].kid != c {
		t.Fatalf("after the second rotate, Sign used %s, want %s", label(tokens[2].kid), label(c))
	}
	st.keyring(t, "deprecate", "--force", a)
	deprecated[a] = true
	step(3, "deprecate --force "+label(a), false)
	keys := checkKeys(t, s.fetchKeys(t), "ES256")
	if _, ok := keys[a]; ok {
		t.Fatalf("deprecated key %s is still listed by FetchKeys (%s)", a, kidList(keys))
	}
	if _, ok := keys[b]; !ok {
		t.Fatalf("inactive key %s left FetchKeys with %s's deprecation", b, a)
	}
}
