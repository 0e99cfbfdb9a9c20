package wid

// #include "wid_helpers.h"
import "C"

import "time"

// Times and durations at the C boundary. The Go API takes time.Time and
// time.Duration only; the library takes Unix seconds or milliseconds. A
// zero time.Time is refused (ErrInvalidArgument naming the argument)
// rather than passed on as a date in year 1: a forgotten `now` must not
// issue, rotate or verify at some arbitrary instant.

// errZeroTime is the error for a zero time.Time given as what.
func errZeroTime(what string) error {
	return &Error{Code: ResultInvalidArgument,
		Message: "wid: " + what + " is the zero time.Time (pass time.Now() or another real time)"}
}

// unixSecs is t in Unix seconds for the library (sub-second parts are
// dropped, as the JWT times are whole seconds), or errZeroTime(what).
func unixSecs(what string, t time.Time) (C.int64_t, error) {
	if t.IsZero() {
		return 0, errZeroTime(what)
	}
	return C.int64_t(t.Unix()), nil
}

// unixMillis is t in Unix milliseconds for the library, or
// errZeroTime(what).
func unixMillis(what string, t time.Time) (C.int64_t, error) {
	if t.IsZero() {
		return 0, errZeroTime(what)
	}
	return C.int64_t(t.UnixMilli()), nil
}

// errNegative is the error for a negative duration given as what (an
// option or argument the library cannot take negative).
func errNegative(what string, d time.Duration) error {
	return &Error{Code: ResultInvalidArgument,
		Message: "wid: " + what + " is negative (" + d.String() + ")"}
}

// secsCeil is d in whole seconds, rounded up (d >= 0).
func secsCeil(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// unixTime is the time.Time of Unix seconds s.
func unixTime(s int64) time.Time { return time.Unix(s, 0) }
