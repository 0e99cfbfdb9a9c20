// Command ed25519seed checks the nomad-raw-seed vectors in
// tests/vectors/keyring.json against Go's crypto/ed25519, the library Nomad
// itself uses: for a raw-seed key, the public key must be
// ed25519.NewKeyFromSeed(material).Public(), encoded as base64url without
// padding (the JWK "x" member).
//
// The standard library only.
//
// Usage (from tests/, the module tests/go.mod):
//
//	go run ./go/ed25519seed vectors/keyring.json
package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
)

type vector struct {
	Name        string `json:"name"`
	MaterialHex string `json:"material_hex"`
	KeyID       string `json:"key_id"`
	Derivation  string `json:"derivation"`
	SeedHex     string `json:"seed_hex"`
	X           string `json:"x"`
}

type vectorFile struct {
	Description string   `json:"description"`
	Salt        string   `json:"salt"`
	Vectors     []vector `json:"vectors"`
}

func checkVector(v vector) error {
	material, err := hex.DecodeString(v.MaterialHex)
	if err != nil {
		return fmt.Errorf("material_hex: %v", err)
	}
	if len(material) != ed25519.SeedSize {
		return fmt.Errorf("material is %d bytes, want %d", len(material), ed25519.SeedSize)
	}
	seed, err := hex.DecodeString(v.SeedHex)
	if err != nil {
		return fmt.Errorf("seed_hex: %v", err)
	}
	if !bytes.Equal(seed, material) {
		return fmt.Errorf("seed_hex %s != material_hex %s (nomad-raw-seed uses the material as seed)",
			v.SeedHex, v.MaterialHex)
	}
	pub := ed25519.NewKeyFromSeed(material).Public().(ed25519.PublicKey)
	got := base64.RawURLEncoding.EncodeToString(pub)
	if got != v.X {
		return fmt.Errorf("x mismatch: file %s, Go crypto/ed25519 %s", v.X, got)
	}
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run main.go <keyring.json>")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "read %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	var f vectorFile
	if err := json.Unmarshal(data, &f); err != nil {
		fmt.Fprintf(os.Stderr, "parse %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}

	n, failures := 0, 0
	for _, v := range f.Vectors {
		if v.Derivation != "nomad-raw-seed" {
			continue
		}
		n++
		if err := checkVector(v); err != nil {
			failures++
			fmt.Printf("FAIL %s: %v\n", v.Name, err)
			continue
		}
		fmt.Printf("ok %s\n", v.Name)
	}
	if n == 0 {
		fmt.Fprintln(os.Stderr, "no nomad-raw-seed vectors found")
		failures++
	}
	fmt.Printf("go ed25519 seed check: %d vectors, %d failures\n", n, failures)
	if failures != 0 {
		os.Exit(1)
	}
}
