package wid

// #include "wid_helpers.h"
import "C"

import (
	"fmt"
	"time"
)

// loginMaxMs is the library's bound on a login's times (ms).
const loginMaxMs = 600_000

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// loginConfig is what the built-in logins' Go configs share on the way to
// their C config: the checks of their times, and the setter calls, queued
// as the fields are read and run in order once the C config is made. Each
// login gives only its C functions.
type loginConfig struct {
	kind  string // "VaultLogin"
	steps []func() C.wid_result
}

func (c *loginConfig) bad(format string, args ...interface{}) error {
	return &Error{Code: ResultInvalidArgument, Message: "wid: " + c.kind + " " + fmt.Sprintf(format, args...)}
}

// checkTimeout refuses a negative Timeout, or one past the library's bound.
func (c *loginConfig) checkTimeout(d time.Duration) error {
	if d < 0 || millis(d) > loginMaxMs {
		return c.bad("Timeout is %v: expected 0 (the default, 10s) up to 10m", d)
	}
	return nil
}

// checkOptional refuses a time (0: the default, byDefault; negative: none)
// past the library's bound.
func (c *loginConfig) checkOptional(field string, d time.Duration, byDefault string) error {
	if millis(d) > loginMaxMs {
		return c.bad("%s is %v: expected at most 10m (0: the default, %s; negative: none)", field, d, byDefault)
	}
	return nil
}

// open makes the C config with new, given the address, the identity and
// the login's own argument (a role, an auth method).
func (c *loginConfig) open(addr, workload, identity, own string, new func(a *C.char, aLen C.size_t, w *C.char, wLen C.size_t, i *C.char, iLen C.size_t, o *C.char, oLen C.size_t) C.wid_result) error {
	return call(func() C.wid_result {
		a, aLen := strIn(addr)
		w, wLen := strIn(workload)
		i, iLen := strIn(identity)
		o, oLen := strIn(own)
		return new(a, aLen, w, wLen, i, iLen, o, oLen)
	})
}

// str queues set(s) for a string given ("": the default).
func (c *loginConfig) str(s string, set func(*C.char, C.size_t) C.wid_result) {
	if s != "" {
		c.steps = append(c.steps, func() C.wid_result {
			p, n := strIn(s)
			return set(p, n)
		})
	}
}

// pem queues set(pem) for a CA bundle given.
func (c *loginConfig) pem(pem []byte, set func(*C.uint8_t, C.size_t) C.wid_result) {
	if len(pem) > 0 {
		c.steps = append(c.steps, func() C.wid_result {
			p, n := bytesIn(pem)
			return set((*C.uint8_t)(ptr(p)), n)
		})
	}
}

// timeout queues set(ms) for a Timeout given (0: the default).
func (c *loginConfig) timeout(d time.Duration, set func(C.uint64_t) C.wid_result) {
	if d > 0 {
		ms := C.uint64_t(millis(d))
		c.steps = append(c.steps, func() C.wid_result { return set(ms) })
	}
}

// optional queues set(ms) for a time given (0: the default; negative:
// none, 0 ms).
func (c *loginConfig) optional(d time.Duration, set func(C.uint64_t) C.wid_result) {
	if d == 0 {
		return
	}
	ms := C.uint64_t(0)
	if d > 0 {
		ms = C.uint64_t(millis(d))
	}
	c.steps = append(c.steps, func() C.wid_result { return set(ms) })
}

// when queues set when on.
func (c *loginConfig) when(on bool, set func() C.wid_result) {
	if on {
		c.steps = append(c.steps, set)
	}
}

// run makes the queued calls in order, then add (the config added to a
// manager's builder); the first failure stops them.
func (c *loginConfig) run(add func() C.wid_result) error {
	for _, step := range append(c.steps, add) {
		if err := call(step); err != nil {
			return err
		}
	}
	return nil
}
