package wid

// #include "wid_helpers.h"
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// Errors from Go callbacks (a StateStore, a NodeLookup, a Signer, an
// Exchange) come back to the caller as Go errors: the *Error's Message says
// in Go's words which callback failed and for what, and its Cause is the
// callback's own error (errors.Is and errors.As reach it), never the
// library's account of a C callback's result code.

// callbackFailure is one failed Go callback.
type callbackFailure struct {
	what string // `the StateStore failed for allocation "a1" (stale)`
	err  error  // the callback's error, its panic, or what was wrong with its answer
	code Result // the code handed back to the library
}

// asError is the *Error a call reports for f, with code.
func (f callbackFailure) asError(code Result) *Error {
	return &Error{Code: code, Message: "wid: " + f.what, Cause: f.err}
}

// failureLog keeps the failures of Go callbacks per OS thread, until the
// call that made the library call them (on that thread, which it holds
// locked) claims them.
type failureLog struct {
	mu       sync.Mutex
	byThread map[uintptr][]callbackFailure
}

func newFailureLog() *failureLog {
	return &failureLog{byThread: make(map[uintptr][]callbackFailure)}
}

// add records f for thread (wid_go_thread_key of the callback's thread).
func (l *failureLog) add(thread uintptr, f callbackFailure) {
	l.mu.Lock()
	l.byThread[thread] = append(l.byThread[thread], f)
	l.mu.Unlock()
}

// addHere records f for the calling OS thread (in a callback: the thread of
// the call that caused it).
func (l *failureLog) addHere(f callbackFailure) {
	l.add(uintptr(C.wid_go_thread_key()), f)
}

// claim takes the failures recorded on the calling thread.
func (l *failureLog) claim() []callbackFailure {
	thread := uintptr(C.wid_go_thread_key())
	l.mu.Lock()
	fs := l.byThread[thread]
	delete(l.byThread, thread)
	l.mu.Unlock()
	return fs
}

// pick is the failure behind a call that failed with code: the first whose
// code is code, else the first; nil when no Go callback failed.
func pick(fs []callbackFailure, code Result) *callbackFailure {
	for i := range fs {
		if fs[i].code == code {
			return &fs[i]
		}
	}
	if len(fs) > 0 {
		return &fs[0]
	}
	return nil
}

// panicError is a callback's recovered panic value as an error: the value
// itself when it is an error (errors.Is reaches it), else its text.
func panicError(r interface{}) error {
	if err, ok := r.(error); ok {
		return err
	}
	return errors.New(fmt.Sprint(r))
}
