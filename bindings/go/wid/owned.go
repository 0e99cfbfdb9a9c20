package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime"
	"sync"
)

// owned is a C handle one Go value owns (a followed key source): calls
// hold it for reading, close for writing, so that no call runs on a freed
// handle and close waits for the calls in flight.
// P is the handle's pointer type (*C.wid_remote_jwks, ...): cgo's
// incomplete C types cannot be type arguments themselves.
type owned[P comparable] struct {
	mu sync.RWMutex
	p  P
}

// close frees the handle with free, once, and drops owner's finalizer
// (which would only close it again).
func (o *owned[P]) close(owner any, free func(P)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var none P
	if o.p == none {
		return
	}
	free(o.p)
	o.p = none
	runtime.SetFinalizer(owner, nil)
}

// with runs the call f on the handle, or fails as a use of a closed what.
func (o *owned[P]) with(what string, f func(P) C.wid_result) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var none P
	if o.p == none {
		return errClosed(what)
	}
	return call(func() C.wid_result { return f(o.p) })
}

// keyring is the source's keyring (get writes it): shared with the source,
// and keeping owner, the Go value of the source, reachable while it is.
func (o *owned[P]) keyring(what string, owner any, get func(P, **C.wid_keyring) C.wid_result) (*Keyring, error) {
	var kr *C.wid_keyring
	if err := o.with(what, func(p P) C.wid_result { return get(p, &kr) }); err != nil {
		return nil, err
	}
	k := wrapKeyring(kr)
	k.source = owner
	return k, nil
}
