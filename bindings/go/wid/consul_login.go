package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime/cgo"
	"sort"
	"time"
)

// ConsulLogin is the library's own Consul login, an exchange for
// NewIdentityManager (pass it as an option): it logs in at Consul's JWT
// auth method (POST /v1/acl/login) with an identity's token and Nomad's
// Meta (requested_by, and the node's ID when NodeID is set), delivers the
// Consul token (its SecretID) as the exchange's secret, logs in again when
// the identity is re-signed or the token nears its ExpirationTime, logs out
// the token it replaces after its successor is delivered, never sends an
// identity token that expires within Leeway, and after a restart confirms
// the saved token (GET /v1/acl/token/self) before handing it out again, or
// logs in anew (seed 001). (The C library must be built with the cargo
// feature consul, a default of the workload-identity-ffi crate, as
// scripts/go-tests.sh builds it; without it NewIdentityManager fails with
// ErrInvalidArgument saying so.)
//
// The zero values of the optional fields are the library's defaults.
type ConsulLogin struct {
	// Addr is Consul's address, "https://host:port"; "http://" only to a
	// loopback host, with AllowHTTPLoopback.
	Addr string
	// Workload and Identity name the identity whose token logs in.
	Workload string
	Identity string
	// AuthMethod is the JWT auth method's name.
	AuthMethod string
	// Name is the exchange's name ("": "consul"): its secret is saved under
	// it and IdentityManager.Secret finds it by it. Each exchange of a
	// manager needs its own.
	Name string
	// Namespace and Partition are Consul Enterprise's, to log in to ("":
	// none); Datacenter is the datacenter ("": the agent's).
	Namespace, Partition, Datacenter string
	// Meta is added to the login's Meta (Consul puts it in the token's
	// Description); a key here replaces a derived one (requested_by,
	// node_id).
	Meta map[string]string
	// Service: the workload is a service (requested_by =
	// nomad_service_<workload>) rather than a task (nomad_task_<workload>).
	Service bool
	// NodeID is the client node's ID, sent as Meta node_id ("": none).
	NodeID string
	// CABundlePEM, when set, is the only trusted certificates (default:
	// the Mozilla roots).
	CABundlePEM []byte
	// Timeout is the most a whole request may take (0: 10 s; at most 10
	// minutes; rounded up to whole milliseconds).
	Timeout time.Duration
	// Leeway is the least life an identity token must have left to be sent
	// (0: 5 s; negative: none; at most 10 minutes): match the auth method's
	// ClockSkewLeeway.
	Leeway time.Duration
	// MinTTL is the least life a Consul token must have left (0: 10 s;
	// negative: none; at most 10 minutes): a saved one with less after a
	// restore is replaced, and a new login is made at least this long
	// before its ExpirationTime. Keep it well below the auth method's
	// MaxTokenTTL.
	MinTTL time.Duration
	// AllowHTTPLoopback allows "http://" to 127.0.0.0/8, ::1 and
	// localhost (tests, a local agent).
	AllowHTTPLoopback bool
}

func (v ConsulLogin) applyManager(c *managerConfig) error {
	c.exchanges = append(c.exchanges, v)
	return nil
}

func (v ConsulLogin) exchangeName() string {
	if v.Name == "" {
		return "consul"
	}
	return v.Name
}

func (v ConsulLogin) exchangeIdentity() IdentityID {
	return IdentityID{Workload: v.Workload, Name: v.Identity}
}

func (v ConsulLogin) addTo(b *C.wid_identity_manager_builder, _ *[]cgo.Handle) error {
	c := loginConfig{kind: "ConsulLogin"}
	if err := c.checkTimeout(v.Timeout); err != nil {
		return err
	}
	if err := c.checkOptional("Leeway", v.Leeway, "5s"); err != nil {
		return err
	}
	if err := c.checkOptional("MinTTL", v.MinTTL, "10s"); err != nil {
		return err
	}
	var cfg *C.wid_consul_login_config
	if err := c.open(v.Addr, v.Workload, v.Identity, v.AuthMethod, func(a *C.char, aLen C.size_t, w *C.char, wLen C.size_t, i *C.char, iLen C.size_t, m *C.char, mLen C.size_t) C.wid_result {
		return C.wid_consul_login_config_new(a, aLen, w, wLen, i, iLen, m, mLen, &cfg)
	}); err != nil {
		return err
	}
	defer C.wid_consul_login_config_free(cfg)
	c.str(v.Name, func(p *C.char, n C.size_t) C.wid_result { return C.wid_consul_login_config_set_name(cfg, p, n) })
	c.str(v.Namespace, func(p *C.char, n C.size_t) C.wid_result { return C.wid_consul_login_config_set_namespace(cfg, p, n) })
	c.str(v.Partition, func(p *C.char, n C.size_t) C.wid_result { return C.wid_consul_login_config_set_partition(cfg, p, n) })
	c.str(v.Datacenter, func(p *C.char, n C.size_t) C.wid_result { return C.wid_consul_login_config_set_datacenter(cfg, p, n) })
	c.str(v.NodeID, func(p *C.char, n C.size_t) C.wid_result { return C.wid_consul_login_config_set_node_id(cfg, p, n) })
	keys := make([]string, 0, len(v.Meta))
	for k := range v.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		k, val := k, v.Meta[k]
		c.steps = append(c.steps, func() C.wid_result {
			kp, kn := strIn(k)
			vp, vn := strIn(val)
			return C.wid_consul_login_config_set_meta(cfg, kp, kn, vp, vn)
		})
	}
	c.when(v.Service, func() C.wid_result { return C.wid_consul_login_config_set_service(cfg, 1) })
	c.pem(v.CABundlePEM, func(p *C.uint8_t, n C.size_t) C.wid_result {
		return C.wid_consul_login_config_set_ca_bundle_pem(cfg, p, n)
	})
	c.timeout(v.Timeout, func(ms C.uint64_t) C.wid_result { return C.wid_consul_login_config_set_timeout_ms(cfg, ms) })
	c.optional(v.Leeway, func(ms C.uint64_t) C.wid_result { return C.wid_consul_login_config_set_leeway_ms(cfg, ms) })
	c.optional(v.MinTTL, func(ms C.uint64_t) C.wid_result { return C.wid_consul_login_config_set_min_ttl_ms(cfg, ms) })
	c.when(v.AllowHTTPLoopback, func() C.wid_result { return C.wid_consul_login_config_set_allow_http_loopback(cfg, 1) })
	return c.run(func() C.wid_result { return C.wid_identity_manager_builder_add_consul_login(b, cfg) })
}
