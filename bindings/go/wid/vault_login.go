package wid

// #include "wid_helpers.h"
import "C"

import (
	"fmt"
	"runtime/cgo"
	"time"
)

// VaultLogin is the library's own Vault/OpenBao login, an exchange for
// NewIdentityManager (pass it as an option): it logs in to the JWT auth
// method with an identity's token, delivers the client token as the
// exchange's secret, renews it, logs in again when the identity is
// re-signed or the token nears its end, revokes the token it replaces
// after its successor is delivered, and after a restart confirms the saved
// token (lookup-self) before handing it out again, or logs in anew. (The
// C library must be built with the cargo feature vault, a default of the
// workload-identity-ffi crate, as scripts/go-tests.sh builds it; without it
// NewIdentityManager fails with ErrInvalidArgument saying so.)
//
// The zero values of the optional fields are the library's defaults.
type VaultLogin struct {
	// Addr is Vault's address, "https://host:port"; "http://" only to a
	// loopback host, with AllowHTTPLoopback.
	Addr string
	// Workload and Identity name the identity whose token logs in.
	Workload string
	Identity string
	// Role is the JWT auth role.
	Role string
	// Name is the exchange's name ("": "vault"): its secret is saved under
	// it and IdentityManager.Secret finds it by it. Each exchange of a
	// manager needs its own.
	Name string
	// Mount is the JWT auth method's mount path ("": "jwt").
	Mount string
	// Namespace is the Vault namespace to log in to (X-Vault-Namespace);
	// "": none.
	Namespace string
	// CABundlePEM, when set, is the only trusted certificates (default:
	// the Mozilla roots).
	CABundlePEM []byte
	// Timeout is the most a whole request may take (0: 10 s; at most 10
	// minutes; rounded up to whole milliseconds).
	Timeout time.Duration
	// MinTTL is the least TTL a token must have left to be kept, after a
	// restore or a renewal (0: 60 s; negative: none; at most 10 minutes;
	// rounded up to whole milliseconds). Keep it below the role's
	// token_ttl.
	MinTTL time.Duration
	// AllowHTTPLoopback allows "http://" to 127.0.0.0/8, ::1 and
	// localhost (tests, a local agent).
	AllowHTTPLoopback bool
}

// vaultMaxMs is the library's bound on Timeout and MinTTL (ms).
const vaultMaxMs = 600_000

func (v VaultLogin) applyManager(c *managerConfig) error {
	c.exchanges = append(c.exchanges, v)
	return nil
}

func (v VaultLogin) exchangeName() string {
	if v.Name == "" {
		return "vault"
	}
	return v.Name
}

func (v VaultLogin) exchangeIdentity() IdentityID {
	return IdentityID{Workload: v.Workload, Name: v.Identity}
}

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (v VaultLogin) addTo(b *C.wid_identity_manager_builder, _ *[]cgo.Handle) error {
	bad := func(format string, args ...interface{}) error {
		return &Error{Code: ResultInvalidArgument, Message: "wid: VaultLogin " + fmt.Sprintf(format, args...)}
	}
	if v.Timeout < 0 || millis(v.Timeout) > vaultMaxMs {
		return bad("Timeout is %v: expected 0 (the default, 10s) up to 10m", v.Timeout)
	}
	if millis(v.MinTTL) > vaultMaxMs {
		return bad("MinTTL is %v: expected at most 10m (0: the default, 60s; negative: none)", v.MinTTL)
	}
	var cfg *C.wid_vault_login_config
	if err := call(func() C.wid_result {
		a, aLen := strIn(v.Addr)
		w, wLen := strIn(v.Workload)
		i, iLen := strIn(v.Identity)
		r, rLen := strIn(v.Role)
		return C.wid_vault_login_config_new(a, aLen, w, wLen, i, iLen, r, rLen, &cfg)
	}); err != nil {
		return err
	}
	defer C.wid_vault_login_config_free(cfg)

	var steps []func() C.wid_result
	setStr := func(s string, set func(*C.wid_vault_login_config, *C.char, C.size_t) C.wid_result) {
		if s != "" {
			steps = append(steps, func() C.wid_result {
				p, n := strIn(s)
				return set(cfg, p, n)
			})
		}
	}
	setStr(v.Name, func(c *C.wid_vault_login_config, p *C.char, n C.size_t) C.wid_result {
		return C.wid_vault_login_config_set_name(c, p, n)
	})
	setStr(v.Mount, func(c *C.wid_vault_login_config, p *C.char, n C.size_t) C.wid_result {
		return C.wid_vault_login_config_set_mount(c, p, n)
	})
	setStr(v.Namespace, func(c *C.wid_vault_login_config, p *C.char, n C.size_t) C.wid_result {
		return C.wid_vault_login_config_set_namespace(c, p, n)
	})
	if len(v.CABundlePEM) > 0 {
		steps = append(steps, func() C.wid_result {
			p, n := bytesIn(v.CABundlePEM)
			return C.wid_vault_login_config_set_ca_bundle_pem(cfg, (*C.uint8_t)(ptr(p)), n)
		})
	}
	if v.Timeout > 0 {
		ms := C.uint64_t(millis(v.Timeout))
		steps = append(steps, func() C.wid_result { return C.wid_vault_login_config_set_timeout_ms(cfg, ms) })
	}
	if v.MinTTL != 0 {
		ms := C.uint64_t(0) // negative: none
		if v.MinTTL > 0 {
			ms = C.uint64_t(millis(v.MinTTL))
		}
		steps = append(steps, func() C.wid_result { return C.wid_vault_login_config_set_min_ttl_ms(cfg, ms) })
	}
	if v.AllowHTTPLoopback {
		steps = append(steps, func() C.wid_result { return C.wid_vault_login_config_set_allow_http_loopback(cfg, 1) })
	}
	steps = append(steps, func() C.wid_result { return C.wid_identity_manager_builder_add_vault_login(b, cfg) })
	for _, step := range steps {
		if err := call(step); err != nil {
			return err
		}
	}
	return nil
}
