package wid

// #include "wid_helpers.h"
import "C"

import "unsafe"

// bytePtr is &b[0], or nil for an empty slice.
func bytePtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// bytesIn passes b to C as (pointer, length): (NULL, 0) when empty. The
// pointer is a Go pointer to pointer-free memory, valid during the C call.
func bytesIn(b []byte) (*C.char, C.size_t) {
	return (*C.char)(bytePtr(b)), C.size_t(len(b))
}

// strIn passes s to C as (pointer, length) without copying: (NULL, 0) when
// empty. The library only reads it, during the call.
func strIn(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// takeBytes copies a wid_bytes the library filled and frees it.
func takeBytes(b *C.wid_bytes) []byte {
	var out []byte
	if b.data != nil {
		out = C.GoBytes(unsafe.Pointer(b.data), C.int(b.len))
	}
	C.wid_bytes_free(b)
	return out
}

// takeString is takeBytes as a string.
func takeString(b *C.wid_bytes) string {
	var out string
	if b.data != nil {
		out = C.GoStringN((*C.char)(unsafe.Pointer(b.data)), C.int(b.len))
	}
	C.wid_bytes_free(b)
	return out
}

// ptr converts a *C.char from bytesIn/strIn to an unsafe.Pointer.
func ptr(p *C.char) unsafe.Pointer { return unsafe.Pointer(p) }
