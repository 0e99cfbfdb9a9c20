package k8ssigner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestAsKubeApiserverChecks calls a signer of each algorithm as
// kube-apiserver does when it starts and when it mints a pod's token, and
// holds every answer to the apiserver's checks; the token verifies with
// go-jose against the key FetchKeys lists, the JWKS `wid serve` publishes
// at /kubernetes/jwks.json and, through go-oidc, the cluster's discovery
// document.
func TestAsKubeApiserverChecks(t *testing.T) {
	for _, alg := range []string{"ES256", "RS256"} {
		t.Run(alg, func(t *testing.T) { apiserverChecks(t, alg) })
	}
}

// TestRefreshHint: the refresh hint is half the stored lead time, within
// 1 s to 60 s.
func TestRefreshHint(t *testing.T) {
	for _, c := range []struct {
		leadTime string
		want     int64
	}{{"2s", 1}, {"40s", 20}, {"30s", 15}, {"119s", 59}, {"10m", 60}} {
		t.Run(c.leadTime, func(t *testing.T) {
			dir := shortDir(t)
			kek := newKEK(t, dir)
			ks := filepath.Join(dir, "ks.json")
			runWid(t, "keyring", "init", "--keystore", ks, "--kek-file", kek, "--purpose", "kubernetes",
				"--alg", "ES256", "--longest-ttl", "1h", "--lead-time", c.leadTime)
			st := &store{flags: []string{"--keystore", ks, "--kek-file", kek}}
			s := startSigner(t, st, testIssuer, filepath.Join(dir, "s.sock"))
			if got := s.fetchKeys(t).GetRefreshHintSeconds(); got != c.want {
				t.Fatalf("lead time %s: refresh_hint_seconds %d, want %d", c.leadTime, got, c.want)
			}
		})
	}
}

func apiserverChecks(t *testing.T, alg string) {
	dir := shortDir(t)
	st := newKeystore(t, dir, "kubernetes", "1h", alg)
	// The cluster's issuer is `wid serve`'s --kubernetes-issuer, so that its
	// discovery document names the iss of the tokens.
	var issuer string
	base := serveOn(t, func(port int) []string {
		issuer = fmt.Sprintf("http://127.0.0.1:%d/k8s", port)
		return append(append([]string{}, st.flags...),
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--kubernetes-issuer", issuer)
	})
	s := startSigner(t, st, issuer, filepath.Join(dir, "s.sock"), "--alg", alg)

	// Metadata: at least 600 s (the apiserver refuses less), and the stored
	// LongestTTL.
	if got := s.metadata(t).GetMaxTokenExpirationSeconds(); got < 600 || got != 3600 {
		t.Fatalf("Metadata: max_token_expiration_seconds %d, want the stored LongestTTL 3600 (>= 600)", got)
	}

	resp := s.fetchKeys(t)
	keys := checkKeys(t, resp, alg)
	if h := resp.GetRefreshHintSeconds(); h != 15 {
		t.Errorf("FetchKeys: refresh_hint_seconds %d, want 15 (half the default 30 s lead time)", h)
	}
	listed := st.list(t)
	if len(keys) != 1 || len(listed) != 1 || keys[listed[0].Kid].kid == "" {
		t.Fatalf("FetchKeys lists %s; the keyring holds %+v", kidList(keys), listed)
	}
	if want := keyringTimestamp(listed); resp.GetDataTimestamp().GetSeconds() != want {
		t.Errorf("FetchKeys: data_timestamp %d, want %d, the latest time a kubernetes key records (%+v)",
			resp.GetDataTimestamp().GetSeconds(), want, listed)
	}

	claims := saClaims(issuer, 30*time.Minute)
	tok := s.sign(t, claims, alg)
	k, ok := keys[tok.kid]
	if !ok {
		t.Fatalf("Sign: kid %s is not listed by FetchKeys (%s)", tok.kid, kidList(keys))
	}
	if k.exclude {
		t.Fatalf("Sign: kid %s is excluded from OIDC discovery (the apiserver refuses such a header)", tok.kid)
	}
	jalg := jose.SignatureAlgorithm(alg)

	t.Run("FetchKeys", func(t *testing.T) {
		payload, err := verifyWith(tok, keys, jalg)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(payload, &back); err != nil {
			t.Fatal(err)
		}
		var sent map[string]any
		if err := json.Unmarshal(tok.claims, &sent); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, sent) {
			t.Fatalf("claims came back as %v, want %v", back, sent)
		}
		// And as a JWT: the registered claims an apiserver's verifier checks.
		parsed, err := jwt.ParseSigned(tok.token, []jose.SignatureAlgorithm{jalg})
		if err != nil {
			t.Fatal(err)
		}
		var std jwt.Claims
		var priv struct {
			K8s struct {
				Namespace      string `json:"namespace"`
				ServiceAccount struct {
					Name string `json:"name"`
					UID  string `json:"uid"`
				} `json:"serviceaccount"`
				Pod struct {
					Name string `json:"name"`
					UID  string `json:"uid"`
				} `json:"pod"`
			} `json:"kubernetes.io"`
		}
		if err := parsed.Claims(k.pub, &std, &priv); err != nil {
			t.Fatal(err)
		}
		if err := std.Validate(jwt.Expected{
			Issuer:      issuer,
			Subject:     "system:serviceaccount:default:builder",
			AnyAudience: jwt.Audience{"https://kubernetes.default.svc"},
			Time:        time.Now(),
		}); err != nil {
			t.Fatalf("jwt.Claims.Validate: %v", err)
		}
		if priv.K8s.Namespace != "default" || priv.K8s.ServiceAccount.Name != "builder" || priv.K8s.Pod.Name != "builder-7d9f8c6b5-x2x9q" {
			t.Fatalf("kubernetes.io claims came back as %+v", priv.K8s)
		}
	})

	t.Run("WidServeJWKS", func(t *testing.T) {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(httpGet(t, base+"/kubernetes/jwks.json"), &set); err != nil {
			t.Fatalf("/kubernetes/jwks.json: %v", err)
		}
		// The published set is FetchKeys' keys not excluded from discovery.
		published := map[string]bool{}
		for _, jwk := range set.Keys {
			published[jwk.KeyID] = true
			k, ok := keys[jwk.KeyID]
			if !ok || k.exclude {
				t.Errorf("/kubernetes/jwks.json publishes %s, not a FetchKeys key for discovery (%s)", jwk.KeyID, kidList(keys))
			}
		}
		for kid, k := range keys {
			if !k.exclude && !published[kid] {
				t.Errorf("/kubernetes/jwks.json lacks FetchKeys key %s", kid)
			}
		}
		found := set.Key(tok.kid)
		if len(found) != 1 {
			t.Fatalf("/kubernetes/jwks.json: %d keys with kid %s", len(found), tok.kid)
		}
		jws, err := jose.ParseSignedCompact(tok.token, []jose.SignatureAlgorithm{jalg})
		if err != nil {
			t.Fatal(err)
		}
		payload, err := jws.Verify(found[0])
		if err != nil {
			t.Fatalf("verify with /kubernetes/jwks.json's key: %v", err)
		}
		if string(payload) != string(tok.claims) {
			t.Fatalf("payload %s, want %s", payload, tok.claims)
		}
	})

	t.Run("Discovery", func(t *testing.T) {
		// As a relying party of the cluster's issuer does (the apiserver's
		// /.well-known/openid-configuration, served by wid serve).
		ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), httpClient()), widWait)
		defer cancel()
		provider, err := oidc.NewProvider(ctx, issuer)
		if err != nil {
			t.Fatalf("oidc.NewProvider(%s): %v", issuer, err)
		}
		idt, err := provider.Verifier(&oidc.Config{
			ClientID:             "https://kubernetes.default.svc",
			SupportedSigningAlgs: []string{alg},
		}).Verify(ctx, tok.token)
		if err != nil {
			t.Fatalf("go-oidc Verify: %v", err)
		}
		if idt.Subject != "system:serviceaccount:default:builder" {
			t.Fatalf("go-oidc: subject %q", idt.Subject)
		}
	})

	t.Run("AuditLine", func(t *testing.T) {
		exp := claims["exp"].(int64)
		expRFC := time.Unix(exp, 0).UTC().Format(time.RFC3339)
		var line string
		deadline := time.Now().Add(10 * time.Second)
		for line == "" && time.Now().Before(deadline) {
			for _, l := range strings.Split(s.stderr.String(), "\n") {
				if strings.Contains(l, "signed service-account token") {
					line = l
				}
			}
			if line == "" {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if line == "" {
			t.Fatalf("no audit line (`signed service-account token`) on stderr:\n%s", s.stderr.String())
		}
		t.Logf("audit line: %s", line)
		for _, want := range []string{issuer, "system:serviceaccount:default:builder", tok.kid} {
			if !strings.Contains(line, want) {
				t.Errorf("audit line %q does not name %q", line, want)
			}
		}
		if !strings.Contains(line, strconv.FormatInt(exp, 10)) && !strings.Contains(line, strings.TrimSuffix(expRFC, "Z")) {
			t.Errorf("audit line %q names no expiry (%d or %s)", line, exp, expRFC)
		}
		sig := tok.token[strings.LastIndexByte(tok.token, '.')+1:]
		if all := s.stderr.String(); strings.Contains(all, sig) || strings.Contains(all, tok.claimsB64) {
			t.Errorf("stderr holds the token or its signature:\n%s", all)
		}
	})
}

// keyringTimestamp is the latest moment (Unix seconds) a key of purpose
// kubernetes records: created, published or retired.
func keyringTimestamp(keys []listedKey) int64 {
	var latest int64
	for _, k := range keys {
		if k.Purpose != "kubernetes" {
			continue
		}
		for _, ts := range []*int64{k.CreateTime, k.PublishTime, k.RetiredTime} {
			if ts != nil && *ts > latest {
				latest = *ts
			}
		}
	}
	return latest
}
