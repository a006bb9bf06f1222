package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
)

// Dial says how a plain client reaches a server that guards itself, as a
// redis-server with requirepass, ACL users, several databases or TLS does:
// each new connection dials TLS when TLS is set, then authenticates and
// selects the database before any command.
type Dial struct {
	TLS      *tls.Config // nil: plain TCP
	User     string      // AUTH user password; "" with a password: AUTH password (requirepass)
	Password string
	DB       int // SELECT DB when not 0
}

// setup is what a new connection sends first: AUTH, SELECT, and the
// levels of a troop node's connection. Errors never quote the password.
func (d Dial) setup(read, write string) [][]string {
	var cmds [][]string
	switch {
	case d.User != "":
		cmds = append(cmds, []string{"AUTH", d.User, d.Password})
	case d.Password != "":
		cmds = append(cmds, []string{"AUTH", d.Password})
	}
	if d.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(d.DB)})
	}
	for _, set := range [][2]string{{"READ", read}, {"WRITE", write}} {
		if set[1] != "" {
			cmds = append(cmds, []string{"TROOP", "CONSISTENCY", set[0], set[1]})
		}
	}
	return cmds
}

// Handshake is what a new connection sends first (AUTH, SELECT), for links
// a program makes itself: the store node's to its redis-server. nil when
// there is nothing to send.
func (d Dial) Handshake() link.Handshake { return handshake(d.setup("", "")) }

// Dialer opens a link's connections as d says: TLS when d.TLS is set,
// plain TCP otherwise (nil, the link's default).
func (d Dial) Dialer() link.Dialer {
	if d.TLS == nil {
		return nil
	}
	return d.dialConn
}

// handshake runs cmds on a new connection and fails on the first error
// reply, naming the command (not its arguments: AUTH carries a password).
func handshake(cmds [][]string) link.Handshake {
	if len(cmds) == 0 {
		return nil
	}
	var req []byte
	for _, c := range cmds {
		req = resp.AppendCommandStrings(req, c...)
	}
	return func(c net.Conn, rd *resp.Reader) error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		for _, cmd := range cmds {
			name := cmd[0]
			if name == "TROOP" {
				name = "TROOP CONSISTENCY"
			}
			v, err := rd.ReadValue()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("%s: no answer within the connect timeout", name)
			}
			if err != nil { // not %w: the link would strip the message down to the innermost net.OpError
				return fmt.Errorf("%s: %v", name, err)
			}
			if v.IsError() {
				return fmt.Errorf("%s refused: %s", name, v.Str)
			}
		}
		return nil
	}
}

// dialConn connects to addr within timeout, over TLS when d says so,
// checking the server's name against the host of addr unless the TLS
// config names one.
func (d Dial) dialConn(addr string, timeout time.Duration) (net.Conn, error) {
	dialer := &net.Dialer{Timeout: timeout}
	if d.TLS == nil {
		nc, err := dialer.Dial("tcp", addr)
		if err == nil {
			nc.(*net.TCPConn).SetNoDelay(true)
		}
		return nc, err
	}
	cfg := d.TLS
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
	}
	nc, err := tls.DialWithDialer(dialer, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.NetConn().(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return nc, nil
}
