package wid

// #include "wid_helpers.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// The identity manager's callbacks. The C trampolines (wid_helpers.c) call
// them with the cgo.Handle value given as userdata, on the goroutine that
// called Start, Restore or Tick (inside that cgo call). Each fails closed:
// an error, a panic or a missing value is a failed call the library
// retries after a backoff, and only a message (never a secret) goes back.

// signerState is what a Go Signer's handle holds.
type signerState struct {
	signer Signer
	log    *failureLog // the manager's: its Start and Restore report the failure
}

// maxOutput is the most a callback may hand back (wid_output_set's limit).
const maxOutput = 64 * 1024

// maxCallbackMessage is the most of an error message handed back (the
// library keeps less: its first 64 bytes, so messages are kept short).
const maxCallbackMessage = 1024

// setOutput hands s back through out (a copy is made by the library).
func setOutput(out *C.wid_output, s string) C.wid_result {
	p, n := strIn(s)
	return C.wid_output_set(out, (*C.uint8_t)(ptr(p)), n)
}

// setMessage hands a failure's message back: valid UTF-8, cut short.
func setMessage(out *C.wid_output, msg string) {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) > maxCallbackMessage {
		cut := maxCallbackMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	setOutput(out, msg)
}

// checkValue says what is wrong with a token or secret a callback hands
// back ("" when nothing).
func checkValue(what, v string) string {
	switch {
	case v == "":
		return what + " is empty"
	case len(v) > maxOutput:
		return fmt.Sprintf("%s is %d bytes (at most %d)", what, len(v), maxOutput)
	case !utf8.ValidString(v):
		return what + " is not valid UTF-8"
	}
	return ""
}

// failCode is the code of a wid *Error in err's chain, else def.
func failCode(err error, def C.wid_result) C.wid_result {
	var e *Error
	if errors.As(err, &e) && e != nil && e.Code != ResultOK {
		return C.wid_result(e.Code)
	}
	return def
}

// refreshAtMs is a refresh time for the library: 0 (none) for the zero time
// or one not after the Unix epoch.
func refreshAtMs(t time.Time) C.int64_t {
	if t.IsZero() {
		return 0
	}
	if ms := t.UnixMilli(); ms > 0 {
		return C.int64_t(ms)
	}
	return 0
}

func goString(p *C.char, n C.size_t) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
}

//export widGoSign
func widGoSign(handle C.uintptr_t, request *C.uint8_t, requestLen C.size_t, nowUnix C.int64_t,
	out *C.wid_output) (rc C.wid_result) {
	st := cgo.Handle(handle).Value().(*signerState)
	var id IdentityID
	fail := func(how string, err error, code C.wid_result) C.wid_result {
		setMessage(out, healthMessage(how, err))
		st.log.addHere(callbackFailure{what: fmt.Sprintf("the Signer %s for %v", how, id), err: err, code: Result(code)})
		return code
	}
	defer func() {
		if r := recover(); r != nil {
			rc = fail("panicked", panicError(r), C.WID_RESULT_PANIC)
		}
	}()
	raw := C.GoBytes(unsafe.Pointer(request), C.int(requestLen))
	req, err := DecodeIssueRequest(raw)
	if err != nil {
		return fail("was not called", fmt.Errorf("decoding the request: %w", err), C.WID_RESULT_DECODE_ERROR)
	}
	id = IdentityOf(req)
	token, err := st.signer.Sign(req, time.Unix(int64(nowUnix), 0))
	if err != nil {
		return fail("failed", err, failCode(err, C.WID_RESULT_IO_ERROR))
	}
	if why := checkValue("the token", token); why != "" {
		return fail("failed", errors.New(why), C.WID_RESULT_INVALID_ARGUMENT)
	}
	return setOutput(out, token)
}

//export widGoDerive
func widGoDerive(handle C.uintptr_t, token *C.char, tokenLen C.size_t, nowMs C.int64_t,
	out *C.wid_output, outRefreshAt *C.int64_t) (rc C.wid_result) {
	e := cgo.Handle(handle).Value().(*hostExchange)
	defer func() {
		if r := recover(); r != nil {
			rc = e.fail(out, "Derive", "panicked", panicError(r), C.WID_RESULT_PANIC)
		}
	}()
	secret, at, err := e.x.Derive(goString(token, tokenLen), time.UnixMilli(int64(nowMs)))
	if err != nil {
		return e.fail(out, "Derive", "failed", err, failCode(err, C.WID_RESULT_TOKEN_EXCHANGE_FAILED))
	}
	if why := checkValue("the secret", secret); why != "" {
		return e.fail(out, "Derive", "failed", errors.New(why), C.WID_RESULT_TOKEN_EXCHANGE_FAILED)
	}
	if rc := setOutput(out, secret); rc != C.WID_RESULT_OK {
		return rc
	}
	*outRefreshAt = refreshAtMs(at)
	return C.WID_RESULT_OK
}

//export widGoRefresh
func widGoRefresh(handle C.uintptr_t, secret *C.char, secretLen C.size_t, token *C.char, tokenLen C.size_t,
	reason C.uint32_t, nowMs C.int64_t, outOutcome *C.uint32_t, out *C.wid_output,
	outRefreshAt *C.int64_t) (rc C.wid_result) {
	e := cgo.Handle(handle).Value().(*hostExchange)
	call := fmt.Sprintf("Refresh(%v)", RefreshReason(reason))
	defer func() {
		if r := recover(); r != nil {
			rc = e.fail(out, call, "panicked", panicError(r), C.WID_RESULT_PANIC)
		}
	}()
	res, err := e.x.Refresh(goString(secret, secretLen), goString(token, tokenLen),
		RefreshReason(reason), time.UnixMilli(int64(nowMs)))
	if err != nil {
		return e.fail(out, call, "failed", err, failCode(err, C.WID_RESULT_TOKEN_EXCHANGE_FAILED))
	}
	switch res.Outcome {
	case SecretKept, SecretRenewed:
	case SecretReplaced:
		if why := checkValue("the new secret", res.Secret); why != "" {
			return e.fail(out, call, "failed", errors.New(why), C.WID_RESULT_TOKEN_EXCHANGE_FAILED)
		}
		if rc := setOutput(out, res.Secret); rc != C.WID_RESULT_OK {
			return rc
		}
	default:
		return e.fail(out, call, "failed", fmt.Errorf("it returned the outcome %v", res.Outcome),
			C.WID_RESULT_TOKEN_EXCHANGE_FAILED)
	}
	*outOutcome = C.uint32_t(res.Outcome)
	*outRefreshAt = refreshAtMs(res.RefreshAt)
	return C.WID_RESULT_OK
}

// healthMessage is what the library keeps of a callback's failure (Health
// shows it): the error's text, marked when it was a panic.
func healthMessage(how string, err error) string {
	if how == "panicked" {
		return "panicked: " + err.Error()
	}
	return err.Error()
}

// fail hands a failed Derive or Refresh back: the message to the library
// (Health shows it), the error to the manager's failure log (Start and
// Restore return it as the Cause).
func (e *hostExchange) fail(out *C.wid_output, call, how string, err error, code C.wid_result) C.wid_result {
	setMessage(out, healthMessage(how, err))
	e.log.addHere(callbackFailure{
		what: fmt.Sprintf("the Exchange %q %s in %s", e.name, how, call), err: err, code: Result(code)})
	return code
}

//export widGoRelease
func widGoRelease(handle C.uintptr_t, secret *C.char, secretLen C.size_t) {
	e := cgo.Handle(handle).Value().(*hostExchange)
	defer func() { _ = recover() }() // best effort, as the library's release
	e.x.Release(goString(secret, secretLen))
}

//export widGoWatch
func widGoWatch(handle C.uintptr_t, what C.uint32_t, workload *C.char, workloadLen C.size_t,
	name *C.char, nameLen C.size_t, value *C.char, valueLen C.size_t, kind C.uint32_t) {
	hub := cgo.Handle(handle).Value().(*eventHub)
	ev := ManagedEvent{
		What:  Managed(what),
		Kind:  EventKind(kind),
		Value: goString(value, valueLen),
	}
	w, n := goString(workload, workloadLen), goString(name, nameLen)
	if ev.What == ManagedSecret {
		ev.Exchange = n
		ev.Identity = hub.exchanges[n]
		if ev.Identity.Workload == "" {
			ev.Identity.Workload = w
		}
	} else {
		ev.Identity = IdentityID{Workload: w, Name: n}
	}
	hub.publish(ev)
}
