package wid

// #include "wid_helpers.h"
import "C"

import (
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

func (v VaultLogin) addTo(b *C.wid_identity_manager_builder, _ *[]cgo.Handle) error {
	c := loginConfig{kind: "VaultLogin"}
	if err := c.checkTimeout(v.Timeout); err != nil {
		return err
	}
	if err := c.checkOptional("MinTTL", v.MinTTL, "60s"); err != nil {
		return err
	}
	var cfg *C.wid_vault_login_config
	if err := c.open(v.Addr, v.Workload, v.Identity, v.Role, func(a *C.char, aLen C.size_t, w *C.char, wLen C.size_t, i *C.char, iLen C.size_t, r *C.char, rLen C.size_t) C.wid_result {
		return C.wid_vault_login_config_new(a, aLen, w, wLen, i, iLen, r, rLen, &cfg)
	}); err != nil {
		return err
	}
	defer C.wid_vault_login_config_free(cfg)
	c.str(v.Name, func(p *C.char, n C.size_t) C.wid_result { return C.wid_vault_login_config_set_name(cfg, p, n) })
	c.str(v.Mount, func(p *C.char, n C.size_t) C.wid_result { return C.wid_vault_login_config_set_mount(cfg, p, n) })
	c.str(v.Namespace, func(p *C.char, n C.size_t) C.wid_result { return C.wid_vault_login_config_set_namespace(cfg, p, n) })
	c.pem(v.CABundlePEM, func(p *C.uint8_t, n C.size_t) C.wid_result {
		return C.wid_vault_login_config_set_ca_bundle_pem(cfg, p, n)
	})
	c.timeout(v.Timeout, func(ms C.uint64_t) C.wid_result { return C.wid_vault_login_config_set_timeout_ms(cfg, ms) })
	c.optional(v.MinTTL, func(ms C.uint64_t) C.wid_result { return C.wid_vault_login_config_set_min_ttl_ms(cfg, ms) })
	c.when(v.AllowHTTPLoopback, func() C.wid_result { return C.wid_vault_login_config_set_allow_http_loopback(cfg, 1) })
	return c.run(func() C.wid_result { return C.wid_identity_manager_builder_add_vault_login(b, cfg) })
}
