package topology

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// User is one entry of troop_users: a name clients give to AUTH, what it
// may run, and its password. Written "NAME:ACCESS:PASSWORD"; the password
// is everything after the second colon, so it may hold colons itself.
type User struct {
	Name   string
	Access string // AccessFull or AccessReadOnly
	// Password is as written: the password itself, or "#" and the 64 hex
	// digits of its SHA-256, as Redis's ACL rules write a hashed password,
	// so that a config file need not hold it in clear.
	Password string
}

// What a user may run (docs/security.md).
const (
	AccessFull     = "full"     // every command
	AccessReadOnly = "readonly" // reads and connection commands; no writes, flushes or CONFIG
)

// DefaultUser is the user of AUTH PASSWORD, and of connections that never
// authenticate when no password is configured, as in Redis.
const DefaultUser = "default"

// parseUser reads a troop_users entry. Its errors never quote the password.
func parseUser(s string) (User, error) {
	name, rest, ok1 := strings.Cut(s, ":")
	access, password, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return User{}, fmt.Errorf("an entry is not NAME:ACCESS:PASSWORD (ACCESS is %s or %s)", AccessFull, AccessReadOnly)
	}
	u := User{Name: name, Access: access, Password: password}
	return u, u.check()
}

// String writes the entry as troop_users lists it.
func (u User) String() string { return u.Name + ":" + u.Access + ":" + u.Password }

func (u User) check() error {
	if err := checkUserName(u.Name); err != nil {
		return fmt.Errorf("user name %v", err)
	}
	if u.Access != AccessFull && u.Access != AccessReadOnly {
		return fmt.Errorf("user %s: access %q: want %s or %s", u.Name, u.Access, AccessFull, AccessReadOnly)
	}
	if err := checkPassword(u.Password, true); err != nil {
		return fmt.Errorf("user %s: password %v", u.Name, err)
	}
	return nil
}

// checkUserName accepts what a RESP client can send as one word and a
// config entry can hold before its first colon.
func checkUserName(s string) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	if len(s) > 128 {
		return fmt.Errorf("is longer than 128 characters")
	}
	for _, r := range s {
		if r == ':' || r > unicode.MaxASCII || !unicode.IsGraphic(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%q has %q; use printable ASCII without spaces or ':'", s, r)
		}
	}
	return nil
}

// checkPassword accepts a password, or when hashOK its "#"-prefixed
// SHA-256, without ever echoing it.
func checkPassword(s string, hashOK bool) error {
	switch {
	case s == "":
		return fmt.Errorf("is empty")
	case len(s) > 512:
		return fmt.Errorf("is longer than 512 characters")
	case hashOK && strings.HasPrefix(s, "#"):
		if b, err := hex.DecodeString(s[1:]); err != nil || len(b) != 32 {
			return fmt.Errorf("starts with '#' but is not '#' and the 64 hex digits of a SHA-256 (sha256sum of the password)")
		}
		return nil
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("has an unprintable or space character (at byte %d)", strings.IndexRune(s, r))
		}
	}
	return nil
}

// checkUsers checks the users together: each entry, no name twice, and no
// default user in troop_users when requirepass sets its password.
func checkUsers(c *Config) error {
	seen := map[string]bool{}
	for _, u := range c.Users {
		if err := u.check(); err != nil {
			return err
		}
		if seen[u.Name] {
			return fmt.Errorf("user %s is listed twice", u.Name)
		}
		seen[u.Name] = true
		if u.Name == DefaultUser && c.RequirePass != "" {
			return fmt.Errorf("user %s is listed and requirepass is set: set the default user's password in one place", DefaultUser)
		}
	}
	return nil
}

// AuthRequired says whether clients must authenticate: a password for the
// default user, or users listed without a default one (the default user is
// then off, so every connection names a user).
func (c *Config) AuthRequired() bool { return c.RequirePass != "" || len(c.Users) > 0 }

// Dynomite's secure_server_option values: which peers talk encrypted.
const (
	SecureNone       = "none"       // no peer
	SecureRack       = "rack"       // peers in other racks (and so other datacenters)
	SecureDatacenter = "datacenter" // peers in other datacenters
	SecureAll        = "all"        // every peer
)

var secureOptions = []string{SecureNone, SecureRack, SecureDatacenter, SecureAll}

func checkSecureOption(s string) error {
	if slices.Contains(secureOptions, s) {
		return nil
	}
	return fmt.Errorf("%q is not a secure_server_option (want none, rack, datacenter or all)", s)
}

// PeerTLS says whether this node's link to a peer in dc and rack is
// encrypted, as secure_server_option asks.
func (c *Config) PeerTLS(dc, rack string) bool {
	switch c.SecureServerOption {
	case SecureAll:
		return true
	case SecureDatacenter:
		return dc != c.Datacenter
	case SecureRack:
		return dc != c.Datacenter || rack != c.Rack
	}
	return false
}

// checkTLS checks secure_server_option with the TLS files: certificate,
// key and CA go together, and are needed as soon as one link or listener
// is encrypted. A single-datacenter config with "datacenter", as Dynomite's
// samples have, encrypts nothing and needs none.
// It answers the key to report the problem at.
func checkTLS(c *Config) (key string, err error) {
	var set []string
	for _, f := range [][2]string{{"troop_tls_cert", c.TLSCert}, {"troop_tls_key", c.TLSKey}, {"troop_tls_ca", c.TLSCA}} {
		if f[1] != "" {
			set = append(set, f[0])
		}
	}
	if len(set) != 0 && len(set) != 3 {
		return set[0], fmt.Errorf("troop_tls_cert, troop_tls_key and troop_tls_ca go together: set all three or none")
	}
	var why string
	for _, s := range c.Seeds {
		if c.PeerTLS(s.DC, s.Rack) {
			key, why = "secure_server_option", fmt.Sprintf("%s encrypts the link to %s (%s/%s)", c.SecureServerOption, s.Addr, s.DC, s.Rack)
			break
		}
	}
	switch {
	case why == "" && c.TLSClient:
		key, why = "troop_tls_client", "true encrypts the client listener"
	case why == "" && c.TLSAdmin:
		key, why = "troop_tls_admin", "true encrypts the admin API"
	}
	if why != "" && len(set) == 0 {
		return key, fmt.Errorf("%s: it needs troop_tls_cert, troop_tls_key and troop_tls_ca (PEM files: this node's certificate and key, and the CA its peers' certificates chain to)", why)
	}
	return "", nil
}
