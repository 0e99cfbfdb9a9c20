package k8ssigner

import (
	"path/filepath"
	"testing"
	"time"
)

// TestTwoSignersOnEtcd: two signers of one cluster (say two control-plane
// nodes) on one keyring replicated through a real etcd list the same keys
// with the same data_timestamp, so that either apiserver verifies the
// other's tokens; a rotation (prepublished for the lead time) reaches both
// before either signs with it, and once promoted both sign with it.
func TestTwoSignersOnEtcd(t *testing.T) {
	dir := shortDir(t)
	etcdURL := startEtcd(t)
	kek := newKEK(t, dir)
	st := &store{
		flags: []string{"--etcd", etcdURL, "--etcd-prefix", "/k8s-test/", "--etcd-allow-plain-http", "--kek-file", kek},
	}
	st.keyring(t, "init", "--purpose", "kubernetes", "--alg", "ES256", "--longest-ttl", "1h", "--lead-time", "2s")

	s1 := startSigner(t, st, testIssuer, filepath.Join(dir, "one.sock"))
	s2 := startSigner(t, st, testIssuer, filepath.Join(dir, "two.sock"))

	for _, s := range []*signer{s1, s2} {
		if got := s.metadata(t).GetMaxTokenExpirationSeconds(); got != 3600 {
			t.Fatalf("Metadata on %s: %d, want the stored LongestTTL 3600", s.socket, got)
		}
	}
	r1, r2 := s1.fetchKeys(t), s2.fetchKeys(t)
	k1, k2 := checkKeys(t, r1, "ES256"), checkKeys(t, r2, "ES256")
	if !sameKeys(k1, k2) {
		t.Fatalf("the signers list different keys: %s and %s", kidList(k1), kidList(k2))
	}
	sameTimestamp(t, st, s1, s2)
	for _, r := range []int64{r1.GetRefreshHintSeconds(), r2.GetRefreshHintSeconds()} {
		if r != 1 {
			t.Errorf("refresh_hint_seconds %d, want 1 (half the stored 2 s lead time)", r)
		}
	}

	tok1 := s1.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
	tok2 := s2.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
	if tok1.kid != tok2.kid {
		t.Fatalf("the signers sign with different keys: %s and %s", tok1.kid, tok2.kid)
	}
	if _, err := verifyWith(tok1, k2, "ES256"); err != nil {
		t.Fatalf("signer one's token with signer two's keys: %v", err)
	}
	if _, err := verifyWith(tok2, k1, "ES256"); err != nil {
		t.Fatalf("signer two's token with signer one's keys: %v", err)
	}

	// A rotation: the new key is prepublished for the lead time (2 s here,
	// the least etcd allows, to keep the test short) and must reach both
	// signers' FetchKeys before it may sign anywhere.
	newKid := st.rotate(t, "ES256")
	t.Logf("rotated: new key %s (prepublished for the lead time)", newKid)
	k1, k2 = waitBothList(t, s1, s2, newKid)
	var publishAt int64
	for _, k := range st.list(t) {
		if k.Kid == newKid {
			if k.State != "prepublished" || k.PublishTime == nil {
				t.Fatalf("wid keyring rotate --etcd made %+v, want a prepublished key with a publish time", k)
			}
			publishAt = *k.PublishTime
		}
	}
	if k1[newKid].exclude {
		t.Fatalf("the new key %s is excluded from discovery", newKid)
	}
	sameTimestamp(t, st, s1, s2)
	// Prepublished: no one signs with it yet (no rotator promotes it here).
	for i, s := range []*signer{s1, s2} {
		if tok := s.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256"); tok.kid != tok1.kid {
			t.Fatalf("signer %d signs with %s while the keyring's active key is %s (%s is only prepublished)", i+1, tok.kid, tok1.kid, newKid)
		}
	}
	// Tokens of the old key still verify with both.
	for i, tok := range []*signed{tok1, tok2} {
		for j, keys := range []map[string]fetched{k1, k2} {
			if _, err := verifyWith(tok, keys, "ES256"); err != nil {
				t.Fatalf("token %d after the rotation, with signer %d's keys: %v", i+1, j+1, err)
			}
		}
	}

	// Once its publish time has come, promote it (wid keyring promote
	// waits the lead time itself): both signers then sign with it.
	if wait := time.Until(time.Unix(publishAt+1, 0)); wait > 0 {
		time.Sleep(wait)
	}
	st.keyring(t, "promote", newKid)
	deadline := time.Now().Add(60 * time.Second)
	var a, b *signed
	for {
		a = s1.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		b = s2.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if a.kid == newKid && b.kid == newKid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after promoting %s signer one signs with %s, signer two with %s", newKid, a.kid, b.kid)
		}
		time.Sleep(200 * time.Millisecond)
	}
	k1, k2 = checkKeys(t, s1.fetchKeys(t), "ES256"), checkKeys(t, s2.fetchKeys(t), "ES256")
	if !sameKeys(k1, k2) {
		t.Fatalf("after the promotion the signers list different keys: %s and %s", kidList(k1), kidList(k2))
	}
	sameTimestamp(t, st, s1, s2)
	for i, tok := range []*signed{tok1, tok2, a, b} {
		for j, keys := range []map[string]fetched{k1, k2} {
			if _, err := verifyWith(tok, keys, "ES256"); err != nil {
				t.Fatalf("token %d (kid %s) after the promotion, with signer %d's keys: %v", i+1, tok.kid, j+1, err)
			}
		}
	}
	t.Logf("after the promotion both signers sign with %s and list %s", newKid, kidList(k1))
}

// waitBothList polls both signers' FetchKeys until each lists kid (within
// 60 s: no timing is asserted beyond a generous bound) and the two answer
// the same keys; it returns the two sets.
func waitBothList(t *testing.T, s1, s2 *signer, kid string) (map[string]fetched, map[string]fetched) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		k1, k2 := checkKeys(t, s1.fetchKeys(t), "ES256"), checkKeys(t, s2.fetchKeys(t), "ES256")
		_, in1 := k1[kid]
		_, in2 := k2[kid]
		if in1 && in2 && sameKeys(k1, k2) {
			t.Logf("both signers list %s", kidList(k1))
			return k1, k2
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s is not listed by both signers alike within 60 s: one lists %s, two lists %s", kid, kidList(k1), kidList(k2))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameTimestamp wants both signers' data_timestamp equal, and equal to the
// latest time a kubernetes key of the keyring records.
func sameTimestamp(t *testing.T, st *store, s1, s2 *signer) {
	t.Helper()
	ts1, ts2 := s1.fetchKeys(t).GetDataTimestamp(), s2.fetchKeys(t).GetDataTimestamp()
	if !ts1.AsTime().Equal(ts2.AsTime()) {
		t.Fatalf("data_timestamp %v on signer one, %v on signer two, of one keyring", ts1.AsTime(), ts2.AsTime())
	}
	listed := st.list(t)
	if want := keyringTimestamp(listed); ts1.GetSeconds() != want {
		t.Errorf("data_timestamp %d, want %d, the latest time a kubernetes key records (%+v)", ts1.GetSeconds(), want, listed)
	}
}
