package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// Client authentication (docs/security.md): requirepass sets the default
// user's password and troop_users adds named users, full or read-only, as
// Redis 6's ACL users with +@all or read commands only. A connection that
// has not authenticated may run AUTH, HELLO and QUIT, nothing else.

// An authUser is a user a connection can authenticate as.
type authUser struct {
	name     string
	readOnly bool
	hash     [sha256.Size]byte // SHA-256 of the password
}

// authenticator holds the users and the limit on failed attempts; a node
// without passwords has none (nil), and every connection is the default
// user with full access.
type authenticator struct {
	users   map[string]*authUser
	limiter *failureLimiter
}

func newAuthenticator(cfg *topology.Config) *authenticator {
	if !cfg.AuthRequired() {
		return nil
	}
	a := &authenticator{users: map[string]*authUser{}, limiter: newFailureLimiter(authFailureBurst, authFailureRefill, authLimiterHosts)}
	if cfg.RequirePass != "" {
		a.users[topology.DefaultUser] = &authUser{name: topology.DefaultUser, hash: passwordHash(cfg.RequirePass)}
	}
	for _, u := range cfg.Users {
		a.users[u.Name] = &authUser{name: u.Name, readOnly: u.Access == topology.AccessReadOnly, hash: passwordHash(u.Password)}
	}
	return a
}

// passwordHash is the SHA-256 a password is compared by: the config's
// "#"-prefixed hex form as written, or the hash of a clear password.
func passwordHash(configured string) [sha256.Size]byte {
	var h [sha256.Size]byte
	if strings.HasPrefix(configured, "#") {
		if b, err := hex.DecodeString(configured[1:]); err == nil && len(b) == len(h) {
			copy(h[:], b)
			return h
		}
	}
	return sha256.Sum256([]byte(configured))
}

// hashMatches says, in constant time, whether given hashes to want.
func hashMatches(want [sha256.Size]byte, given string) bool {
	got := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// check returns the user whose name and password these are, or nil. The
// comparison takes the same time whether the user exists or not.
func (a *authenticator) check(name, password string) *authUser {
	u := a.users[name]
	want := [sha256.Size]byte{}
	if u != nil {
		want = u.hash
	}
	if !hashMatches(want, password) || u == nil {
		return nil
	}
	return u
}

// Failed AUTH attempts are limited per client address: a burst of
// authFailureBurst, then one per authFailureRefill. Past the limit, AUTH
// is refused without looking at the password, so guessing costs time.
const (
	authFailureBurst  = 10
	authFailureRefill = time.Second
	authLimiterHosts  = 4096 // addresses remembered; beyond it the fullest buckets are forgotten first
)

const (
	noAuthReply    = "NOAUTH Authentication required."
	wrongPassReply = "WRONGPASS invalid username-password pair or user is disabled."
	helloAuthReply = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)

// login authenticates sess as name with password, answering nil on
// success or the error reply. It counts failures and refusals.
func (n *Node) login(sess *session, name, password string) []byte {
	if n.auth == nil {
		// No password is configured: the default user, as redis-server's
		// with nopass, is let in with any password; no other user exists.
		if name != topology.DefaultUser {
			n.stats.authFailures.Add(1)
			return resp.AppendError(nil, wrongPassReply)
		}
		return nil
	}
	now := time.Now()
	if wait := n.auth.limiter.wait(sess.remote, now); wait > 0 {
		n.stats.authRateLimited.Add(1)
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: too many failed AUTH attempts from %s: retry in %v", sess.remote, wait.Round(time.Millisecond)))
	}
	u := n.auth.check(name, password)
	if u == nil {
		n.stats.authFailures.Add(1)
		if n.auth.limiter.fail(sess.remote, now) {
			// Logged once per address as it reaches the limit; never the
			// user or password given, which may be a password mistyped.
			n.log.Warn("failed AUTH attempts from a client address reached the limit; its AUTH is refused until it slows down",
				"remote", sess.remote, "burst", authFailureBurst, "refill", authFailureRefill.String())
		}
		return resp.AppendError(nil, wrongPassReply)
	}
	sess.user = u
	sess.publish()
	return nil
}

// authCommand answers AUTH [username] password.
func (n *Node) authCommand(args [][]byte, sess *session) []byte {
	switch {
	case len(args) > 3:
		return resp.AppendError(nil, "ERR syntax error")
	case len(args) == 2 && n.auth == nil:
		return resp.AppendError(nil, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	}
	name := topology.DefaultUser
	if len(args) == 3 {
		name = string(args[1])
	}
	if reply := n.login(sess, name, string(args[len(args)-1])); reply != nil {
		return reply
	}
	return resp.AppendSimple(nil, "OK")
}

// authorize answers the error reply for a command sess may not run, or
// nil: NOAUTH before authentication, NOPERM for a read-only user's writes.
func (n *Node) authorize(c *command, args [][]byte, sess *session) []byte {
	if n.auth == nil || c == nil { // an unknown command gets its own error first, as in Redis
		return nil
	}
	if sess.user == nil {
		switch c.name {
		case "AUTH", "HELLO", "QUIT":
			return nil
		}
		return resp.AppendError(nil, noAuthReply)
	}
	if sess.user.readOnly && !readOnlyAllows(c) {
		n.stats.aclDenied.Add(1)
		name := strings.ToLower(c.name)
		if (c.name == "CONFIG" || c.name == "FUNCTION") && len(args) > 1 {
			name += "|" + strings.ToLower(resp.Printable(args[1]))
		}
		return resp.AppendError(nil, fmt.Sprintf("NOPERM this user has no permissions to run the '%s' command", name))
	}
	return nil
}

// readOnlyAllows says whether a read-only user may run c: reads, scans and
// connection commands, and transactions of reads (each queued command is
// checked as it is queued). Writes, pops, flushes and CONFIG are refused.
func readOnlyAllows(c *command) bool {
	switch c.kind {
	case kindRead, kindMultiRead, kindTransaction, kindUnsupported:
		return true
	case kindSplit, kindScript, kindCopied:
		return !c.writes()
	case kindLocal:
		switch c.name {
		case "FLUSHALL", "FLUSHDB", "FUNCTION", "CONFIG":
			return false
		}
		return true
	}
	return false
}

// failureLimiter is a token bucket per client address for failed attempts,
// time passed in.
type failureLimiter struct {
	mu     sync.Mutex
	burst  float64
	refill time.Duration
	max    int
	hosts  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFailureLimiter(burst int, refill time.Duration, maxHosts int) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, max: maxHosts, hosts: map[string]*bucket{}}
}

// level is host's bucket refilled to now; nil when it is full (forgotten).
func (l *failureLimiter) level(host string, now time.Time) *bucket {
	b := l.hosts[host]
	if b == nil {
		return nil
	}
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
	b.at = now
	if b.tokens >= l.burst {
		delete(l.hosts, host)
		return nil
	}
	return b
}

// wait is how long host must wait before its next attempt is looked at; 0
// when it may try now.
func (l *failureLimiter) wait(host string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.level(host, now)
	if b == nil || b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.refill))
}

// fail counts a failed attempt of host; it says whether that one used the
// last token, so the caller can report the address once as it is limited.
func (l *failureLimiter) fail(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.level(host, now)
	if b == nil {
		if len(l.hosts) >= l.max {
			l.forgetFullest()
		}
		b = &bucket{tokens: l.burst, at: now}
		l.hosts[host] = b
	}
	b.tokens = max(b.tokens-1, 0) // wait let this attempt in: it had a token
	return b.tokens < 1
}

// forgetFullest drops the address with the most tokens left, so memory
// stays bounded when many addresses fail; the limited ones are kept.
func (l *failureLimiter) forgetFullest() {
	var host string
	best := -1.0
	for h, b := range l.hosts {
		if b.tokens > best {
			host, best = h, b.tokens
		}
	}
	delete(l.hosts, host)
}
