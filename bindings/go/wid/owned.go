package wid

// #include "wid_helpers.h"
import "C"

import "sync"

// owned is a C handle one Go value owns (a followed key source): calls
// hold it for reading, close for writing, so that no call runs on a freed
// handle and close waits for the calls in flight.
// P is the handle's pointer type (*C.wid_remote_jwks, ...): cgo's
// incomplete C types cannot be type arguments themselves.
type owned[P comparable] struct {
	mu sync.RWMutex
	p  P
}

// close frees the handle with free, once; it reports whether it did.
func (o *owned[P]) close(free func(P)) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	var none P
	if o.p == none {
		return false
	}
	free(o.p)
	o.p = none
	return true
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
