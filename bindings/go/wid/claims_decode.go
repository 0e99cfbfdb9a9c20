package wid

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// claimsBox is one allocation holding a Claims and what its slice points
// to in the common case: a one-element audience.
type claimsBox struct {
	c   Claims
	aud [1]string
}

// decodeClaimsString decodes the verified claims the library wrote as JSON.
// The library's own output (serde_json: no whitespace, no escapes in the
// usual values, each key once) takes a hand-written path that allocates only
// the Claims (the strings are substrings of raw); anything else, whatever
// fastClaims does not recognize exactly (an escape, a null, a cnf, a key it
// does not know, a repeated key, a name repeated inside extra_claims, a
// number that is not a plain int64, invalid UTF-8), goes to decodeClaims,
// encoding/json, so the result is always what json.Unmarshal into Claims
// gives.
func decodeClaimsString(raw string) (*Claims, error) {
	if c, ok := fastClaims(raw); ok {
		return c, nil
	}
	return decodeClaims([]byte(raw))
}

// Claim keys fastClaims knows, as bits (to refuse a repeated key).
const (
	keyNamespace = 1 << iota
	keyJobID
	keyAllocationID
	keyTask
	keyService
	keySubject
	keyAudience
	keyIssuedAt
	keyNotBefore
	keyExpires
	keyJTI
	keyIssuer
	keyExtraClaims
	keyNodeID
	keyNodePool
	keyNodeClass
	keyNodeDatacenter
	keyConsulNamespace
	keyVaultNamespace
	keyVaultRole
)

// fastClaims decodes a JSON object of the claim keys (a node token's
// nomad_node_* included) with string, integer and string-array values, and
// extra_claims an object of strings; ok is false for anything else.
func fastClaims(s string) (c *Claims, ok bool) {
	if !utf8.ValidString(s) || len(s) < 2 || s[0] != '{' {
		return nil, false
	}
	box := new(claimsBox)
	c = &box.c
	i := 1
	if s[i] == '}' {
		return c, i+1 == len(s)
	}
	seen := 0
	for {
		key, j, ok := fastString(s, i)
		if !ok || j >= len(s) || s[j] != ':' {
			return nil, false
		}
		i = j + 1
		var bit int
		var str *string
		var num *time.Time
		switch key {
		case "nomad_namespace":
			bit, str = keyNamespace, &c.Namespace
		case "nomad_job_id":
			bit, str = keyJobID, &c.JobID
		case "nomad_allocation_id":
			bit, str = keyAllocationID, &c.AllocationID
		case "nomad_task":
			bit, str = keyTask, &c.Task
		case "nomad_service":
			bit, str = keyService, &c.Service
		case "consul_namespace":
			bit, str = keyConsulNamespace, &c.ConsulNamespace
		case "vault_namespace":
			bit, str = keyVaultNamespace, &c.VaultNamespace
		case "vault_role":
			bit, str = keyVaultRole, &c.VaultRole
		case "sub":
			bit, str = keySubject, &c.Subject
		case "jti":
			bit, str = keyJTI, &c.JTI
		case "iss":
			bit, str = keyIssuer, &c.Issuer
		case "nomad_node_id":
			bit, str = keyNodeID, &c.NodeID
		case "nomad_node_pool":
			bit, str = keyNodePool, &c.NodePool
		case "nomad_node_class":
			bit, str = keyNodeClass, &c.NodeClass
		case "nomad_node_datacenter":
			bit, str = keyNodeDatacenter, &c.NodeDatacenter
		case "iat":
			bit, num = keyIssuedAt, &c.IssuedAt
		case "nbf":
			bit, num = keyNotBefore, &c.NotBefore
		case "exp":
			bit, num = keyExpires, &c.Expires
		case "aud":
			bit = keyAudience
		case "extra_claims":
			bit = keyExtraClaims
		default:
			return nil, false
		}
		if seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		switch {
		case str != nil:
			v, j, ok := fastString(s, i)
			if !ok {
				return nil, false
			}
			*str, i = v, j
		case bit == keyExtraClaims:
			m, j, ok := fastStringObject(s, i)
			if !ok {
				return nil, false
			}
			c.ExtraClaims, i = m, j
		case num != nil:
			j := i
			if j < len(s) && s[j] == '-' {
				j++
			}
			digits := j
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			// JSON integers: digits, no leading zero (json.Unmarshal
			// refuses those, so the slow path reports it).
			if j == digits || (s[digits] == '0' && j-digits > 1) {
				return nil, false
			}
			n, err := strconv.ParseInt(s[i:j], 10, 64)
			if err != nil {
				return nil, false
			}
			*num, i = unixTime(n), j
		default: // aud: a string or an array of at least one string
			if i < len(s) && s[i] == '"' {
				v, j, ok := fastString(s, i)
				if !ok {
					return nil, false
				}
				box.aud[0], i = v, j
				c.Audience = box.aud[:1:1]
				break
			}
			if i >= len(s) || s[i] != '[' {
				return nil, false
			}
			i++
			var many []string
			for {
				v, j, ok := fastString(s, i)
				if !ok || j >= len(s) {
					return nil, false
				}
				many = append(many, v)
				i = j + 1
				if s[j] == ']' {
					break
				}
				if s[j] != ',' {
					return nil, false
				}
			}
			c.Audience = many
		}
		if i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case ',':
			i++
		case '}':
			return c, i+1 == len(s)
		default:
			return nil, false
		}
	}
}

// fastStringObject reads the JSON object of strings starting at s[i]
// (which must be '{'), as fastString reads its names and values, returning
// it and the index after its closing brace. A name given twice is refused
// (encoding/json would keep the last value; the slow path gives that).
// {} is an empty, non-nil map, as encoding/json makes it.
func fastStringObject(s string, i int) (m map[string]string, next int, ok bool) {
	if i >= len(s) || s[i] != '{' {
		return nil, 0, false
	}
	i++
	m = make(map[string]string)
	if i < len(s) && s[i] == '}' {
		return m, i + 1, true
	}
	for {
		name, j, ok := fastString(s, i)
		if !ok || j >= len(s) || s[j] != ':' {
			return nil, 0, false
		}
		v, j, ok := fastString(s, j+1)
		if !ok || j >= len(s) {
			return nil, 0, false
		}
		if _, dup := m[name]; dup {
			return nil, 0, false
		}
		m[name] = v
		switch s[j] {
		case ',':
			i = j + 1
		case '}':
			return m, j + 1, true
		default:
			return nil, 0, false
		}
	}
}

// fastString reads the JSON string starting at s[i] (which must be '"')
// without escapes or control characters, returning it (a substring of s)
// and the index after its closing quote.
func fastString(s string, i int) (v string, next int, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch b := s[j]; {
		case b == '"':
			return s[i+1 : j], j + 1, true
		case b == '\\' || b < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}
