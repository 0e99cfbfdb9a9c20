package k8ssigner

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSignRefusals: claims the signer must not sign are InvalidArgument
// with a message saying why, and a signer that could not keep its promises
// (no kubernetes key of --alg, EdDSA, no or too short a LongestTTL) refuses
// to start.
func TestSignRefusals(t *testing.T) {
	dir := shortDir(t)
	st := newKeystore(t, dir, "kubernetes", "1h", "ES256")
	s := startSigner(t, st, testIssuer, filepath.Join(dir, "s.sock"))

	b64 := base64.RawURLEncoding.EncodeToString
	js := func(v map[string]any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b64(raw)
	}
	now := time.Now().Unix()
	claims := func(edit func(map[string]any)) string {
		c := saClaims(testIssuer, 10*time.Minute)
		edit(c)
		return js(c)
	}

	// Standard base64 ('+', '/', padding) is not base64url.
	std := base64.StdEncoding.EncodeToString([]byte(`{"iss":"` + testIssuer + `","exp":9999999999,"x":"?>?>?>?>"}`))
	if !strings.ContainsAny(std, "+/") {
		t.Fatalf("%s: no '+' or '/' in it", std)
	}

	refusals := []struct {
		name   string
		claims string
		word   []string // the message names one of these (case-insensitive)
	}{
		{"NotBase64url", "not base64url!*", []string{"base64"}},
		{"StandardBase64", std, []string{"base64"}},
		{"NotJSON", b64([]byte("iss=" + testIssuer)), []string{"json"}},
		{"Array", b64([]byte(`[{"iss":"` + testIssuer + `"}]`)), []string{"object"}},
		{"String", b64([]byte(`"` + testIssuer + `"`)), []string{"object"}},
		{"Number", b64([]byte(`42`)), []string{"object"}},
		{"OtherIssuer", claims(func(c map[string]any) { c["iss"] = "https://other.example" }), []string{"iss"}},
		{"NoIssuer", claims(func(c map[string]any) { delete(c, "iss") }), []string{"iss"}},
		{"IssuerNotString", claims(func(c map[string]any) { c["iss"] = 7 }), []string{"iss"}},
		{"NoExp", claims(func(c map[string]any) { delete(c, "exp") }), []string{"exp"}},
		{"ExpString", claims(func(c map[string]any) { c["exp"] = "soon" }), []string{"exp"}},
		{"ExpFraction", claims(func(c map[string]any) { c["exp"] = float64(now) + 600.5 }), []string{"exp"}},
		{"ExpBeforeIat", claims(func(c map[string]any) { c["exp"] = now - 10 }), []string{"exp"}},
		{"ExpIsIat", claims(func(c map[string]any) { c["exp"] = now }), []string{"exp"}},
		{"ExpPastNoIat", claims(func(c map[string]any) { delete(c, "iat"); c["exp"] = now - 60 }), []string{"exp"}},
		{"TooLong", claims(func(c map[string]any) { c["exp"] = now + 2*3600 }), []string{"longest", "ttl", "3600", "1h"}},
		{"TooLongBy1s", claims(func(c map[string]any) { c["exp"] = now + 3601 }), []string{"longest", "ttl", "3600", "1h"}},
		{"TooLongNoIat", claims(func(c map[string]any) { delete(c, "iat"); c["exp"] = now + 2*3600 }), []string{"longest", "ttl", "3600", "1h"}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			resp, err := s.signRaw(r.claims)
			if err == nil {
				t.Fatalf("Sign(%q) signed (header %s), want InvalidArgument", r.claims, resp.GetHeader())
			}
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("Sign(%q): %v, want code InvalidArgument", r.claims, err)
			}
			msg := strings.ToLower(st.Message())
			for _, w := range r.word {
				if strings.Contains(msg, strings.ToLower(w)) {
					t.Logf("InvalidArgument: %s", st.Message())
					return
				}
			}
			t.Fatalf("Sign(%q): message %q names none of %q", r.claims, st.Message(), r.word)
		})
	}

	// The edges that must sign: a lifetime of exactly LongestTTL, a short
	// one, no iat (lifetime from now), and only iss and exp.
	for _, ok := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"LifetimeIsLongestTTL", func(c map[string]any) { c["exp"] = c["iat"].(int64) + 3600 }},
		{"OneMinute", func(c map[string]any) { c["exp"] = c["iat"].(int64) + 60 }},
		{"NoIat", func(c map[string]any) { c["exp"] = c["iat"].(int64) + 600; delete(c, "iat") }},
		{"NoOptionalClaims", func(c map[string]any) {
			for k := range c {
				if k != "iss" && k != "exp" {
					delete(c, k)
				}
			}
		}},
	} {
		t.Run(ok.name, func(t *testing.T) {
			c := saClaims(testIssuer, 10*time.Minute)
			ok.edit(c)
			tok := s.sign(t, c, "ES256")
			if _, err := verifyWith(tok, checkKeys(t, s.fetchKeys(t), "ES256"), "ES256"); err != nil {
				t.Fatal(err)
			}
		})
	}

	// Refusals to start.
	sock := filepath.Join(dir, "r.sock")
	t.Run("AlgEdDSA", func(t *testing.T) {
		refuseStart(t, st, testIssuer, sock, []string{"--alg", "EdDSA"}, "EdDSA")
	})
	t.Run("NoKubernetesKey", func(t *testing.T) {
		bearer := newKeystore(t, shortDir(t), "bearer", "1h", "ES256")
		refuseStart(t, bearer, testIssuer, sock, nil, "wid keyring rotate --purpose kubernetes --alg ES256")
	})
	t.Run("NoKubernetesKeyOfAlg", func(t *testing.T) {
		refuseStart(t, st, testIssuer, sock, []string{"--alg", "RS256"}, "wid keyring rotate --purpose kubernetes --alg RS256")
	})
	t.Run("LongestTTL5m", func(t *testing.T) {
		short := newKeystore(t, shortDir(t), "kubernetes", "5m", "ES256")
		stderr := refuseStart(t, short, testIssuer, sock, nil)
		if l := strings.ToLower(stderr); !strings.Contains(l, "600") && !strings.Contains(l, "10m") && !strings.Contains(l, "longest") {
			t.Errorf("the refusal names neither the LongestTTL nor the 600 s minimum:\n%s", stderr)
		}
	})
	t.Run("LongestTTLUnknown", func(t *testing.T) {
		unknown := newKeystore(t, shortDir(t), "kubernetes", "", "ES256")
		stderr := refuseStart(t, unknown, testIssuer, sock, nil)
		if l := strings.ToLower(stderr); !strings.Contains(l, "longest") && !strings.Contains(l, "ttl") {
			t.Errorf("the refusal does not name the LongestTTL:\n%s", stderr)
		}
	})
}
