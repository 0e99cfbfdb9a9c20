package wid

// #include "wid_helpers.h"
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// widGoLookup is the allocation lookup behind every Verifier: the C
// trampoline (wid_helpers.c) calls it with the Verifier's cgo.Handle value
// and the calling thread's key. It runs on the goroutine that called Verify.
//
//export widGoLookup
func widGoLookup(handle C.uintptr_t, thread C.uintptr_t, allocID *C.uint8_t, allocIDLen C.size_t,
	consistency C.uint32_t, outState *C.uint32_t) (rc C.wid_result) {
	st := cgo.Handle(handle).Value().(*lookupState)
	var id string
	fail := func(how string, err error) C.wid_result {
		st.log.add(uintptr(thread), callbackFailure{
			what: fmt.Sprintf("the StateStore %s for allocation %q (%v)", how, id, Consistency(consistency)),
			err:  err, code: ResultStoreUnavailable})
		return C.WID_RESULT_STORE_UNAVAILABLE
	}
	defer func() {
		if r := recover(); r != nil {
			rc = fail("panicked", panicError(r))
		}
	}()
	id = st.allocID(unsafe.Slice((*byte)(unsafe.Pointer(allocID)), int(allocIDLen)))
	state, err := st.store.AllocationState(id, Consistency(consistency))
	if err != nil {
		return fail("failed", err)
	}
	switch state {
	case Missing, Live, Terminal:
	default:
		return fail("failed", fmt.Errorf("it answered %v, not Missing, Live or Terminal", state))
	}
	*outState = C.uint32_t(state)
	return C.WID_RESULT_OK
}

// allocID is the allocation ID in b (C memory, valid during the callback) as
// a Go string: the one from the previous lookup when the bytes are the same
// (strings are immutable, so a StateStore that keeps it sees no difference),
// else a fresh copy, remembered for the next lookup.
func (s *lookupState) allocID(b []byte) string {
	if last := s.lastID.Load(); last != nil && *last == string(b) {
		return *last
	}
	id := string(b)
	s.lastID.Store(&id)
	return id
}

// widGoNodeLookup is the node lookup of a Verifier with
// VerifierOptions.NodeLookup, called as widGoLookup is.
//
//export widGoNodeLookup
func widGoNodeLookup(handle C.uintptr_t, thread C.uintptr_t, nodeID *C.uint8_t, nodeIDLen C.size_t,
	consistency C.uint32_t, outState *C.uint32_t) (rc C.wid_result) {
	st := cgo.Handle(handle).Value().(*lookupState)
	var id string
	fail := func(how string, err error) C.wid_result {
		st.log.add(uintptr(thread), callbackFailure{
			what: fmt.Sprintf("the NodeLookup %s for node %q (%v)", how, id, Consistency(consistency)),
			err:  err, code: ResultStoreUnavailable})
		return C.WID_RESULT_STORE_UNAVAILABLE
	}
	defer func() {
		if r := recover(); r != nil {
			rc = fail("panicked", panicError(r))
		}
	}()
	id = string(unsafe.Slice((*byte)(unsafe.Pointer(nodeID)), int(nodeIDLen)))
	state, err := st.nodeLookup(id, Consistency(consistency))
	if err != nil {
		return fail("failed", err)
	}
	switch state {
	case NodeMissing, NodeLive, NodeDown:
	default:
		return fail("failed", fmt.Errorf("it answered %v, not NodeMissing, NodeLive or NodeDown", state))
	}
	*outState = C.uint32_t(state)
	return C.WID_RESULT_OK
}
