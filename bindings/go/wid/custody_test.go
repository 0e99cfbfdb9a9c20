package wid

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func kekFile(t *testing.T, dir, name string, b byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Repeat(string([]byte{b}), 32)), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWrappedKeystores(t *testing.T) {
	dir := t.TempDir()
	a, err := NewKEKFileWrapper(kekFile(t, dir, "a", 1, 0600))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewKEKFileWrapper(kekFile(t, dir, "b", 2, 0600))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := NewKEKFileWrapper(kekFile(t, dir, "open", 3, 0644)); !errors.Is(err, ErrIOError) ||
		!strings.Contains(err.Error(), "mode 0644") {
		t.Fatalf("a readable KEK file: %v", err)
	}

	kr, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.RotateAlg(AlgES256, at(now)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keystore")
	if err := kr.SaveWrapped(path, a); err != nil {
		t.Fatal(err)
	}
	back, err := LoadKeyringWrapped(path, a)
	if err != nil {
		t.Fatal(err)
	}
	back.Close()
	if _, err := LoadKeyringWrapped(path, b); !errors.Is(err, ErrKeyCustodyFailed) ||
		!strings.Contains(err.Error(), "not by the given KEK") {
		t.Fatalf("another KEK: %v", err)
	}
	if _, err := LoadKeyring(path); !errors.Is(err, ErrKeyCustodyFailed) {
		t.Fatalf("no KEK: %v", err)
	}
	if n, err := RewrapKeystore(path, a, b); err != nil || n != 1 {
		t.Fatalf("rewrap a -> b: %d %v", n, err)
	}
	if _, err := RewrapKeystore(path, b, nil); err != nil {
		t.Fatal(err)
	}
	plain, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	if _, err := RewrapKeystore(path, nil, a); err != nil {
		t.Fatal(err)
	}
	// A closed wrapper is a NULL handle.
	c, _ := NewKEKFileWrapper(kekFile(t, dir, "c", 4, 0600))
	c.Close()
	if err := kr.SaveWrapped(path, c); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("closed wrapper: %v", err)
	}
	// A closed wrapper is never taken for "plaintext": the keystore stays
	// wrapped.
	if _, err := RewrapKeystore(path, a, c); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("rewrap to a closed wrapper: %v", err)
	}
	if _, err := LoadKeyringWrapped(path, a); err != nil {
		t.Fatalf("still wrapped by a: %v", err)
	}
	if _, err := NewTransitWrapper("https://127.0.0.1:1", "", "kek", "t", []byte{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("an empty CA bundle: %v", err)
	}
	// Transit: the default library build has none and says so; a build
	// with it fails closed on a server that is not there.
	_, err = NewTransitWrapper("https://127.0.0.1:1", "", "kek", "t", nil)
	if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrKeyCustodyFailed) {
		t.Fatalf("transit: %v", err)
	}
}
