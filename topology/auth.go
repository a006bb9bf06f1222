package topology

import (
	"encoding/hex"
	"fmt"
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
