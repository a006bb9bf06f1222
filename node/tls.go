package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	troopclient "github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// TLS (docs/security.md): the peer links that secure_server_option names
// are mutual TLS, each end showing a certificate the other verifies
// against troop_tls_ca; the client listener (troop_tls_client) and the
// admin API (troop_tls_admin) serve TLS with the same certificate. The
// files are read again when they change, so certificates are rotated
// without a restart.

// tlsFiles holds the node's certificate and CA pool, reloaded from their
// files when these change: looked at, at most once per reloadCheck, as a
// handshake needs them.
type tlsFiles struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	stamp   string    // the files' sizes and times at the last load
	checked time.Time // when the files were last looked at
}

const reloadCheck = time.Second

// loadTLS reads the node's TLS files; nil when the config names none.
func loadTLS(cfg *topology.Config, log *slog.Logger) (*tlsFiles, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	f := &tlsFiles{certFile: cfg.TLSCert, keyFile: cfg.TLSKey, caFile: cfg.TLSCA, log: log}
	stamp, err := f.stampNow()
	if err == nil {
		err = f.load(stamp)
	}
	if err != nil {
		return nil, fmt.Errorf("node: TLS: %w", err)
	}
	f.checked = time.Now()
	return f, nil
}

// stampNow says which versions of the files are on disk.
func (f *tlsFiles) stampNow() (string, error) {
	stamp := ""
	for _, name := range []string{f.certFile, f.keyFile, f.caFile} {
		st, err := os.Stat(name)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return stamp, nil
}

func (f *tlsFiles) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("troop_tls_cert %s, troop_tls_key %s: %w", f.certFile, f.keyFile, err)
	}
	ca, err := os.ReadFile(f.caFile)
	if err != nil {
		return fmt.Errorf("troop_tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("troop_tls_ca %s holds no PEM certificate", f.caFile)
	}
	f.cert, f.pool, f.stamp = &cert, pool, stamp
	return nil
}

// current is the certificate and pool to use now, reloaded first when the
// files changed. A reload that fails keeps the previous ones, and says so.
func (f *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= reloadCheck {
		f.checked = now
		stamp, err := f.stampNow()
		if err == nil && stamp != f.stamp {
			err = f.load(stamp)
			if err == nil {
				f.log.Info("TLS certificate reloaded", "cert", f.certFile, "ca", f.caFile, "not_after", f.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
			}
		}
		if err != nil {
			f.log.Error("TLS files not reloaded; the previous certificate stays in use", "err", err)
		}
	}
	return f.cert, f.pool
}

// serverConfig is the TLS config of a listener; clientAuth says what it
// asks of the other end's certificate.
func (f *tlsFiles) serverConfig(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := f.current()
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, ClientCAs: pool, ClientAuth: clientAuth}, nil
	}}
}

// dialer opens peer links over mutual TLS, checking the peer's certificate
// against the CA and the host of its dyn_seeds address.
func (f *tlsFiles) dialer() link.Dialer {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		cert, pool := f.current()
		d := troopclient.Dial{TLS: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{*cert}}}
		return d.Dialer()(addr, timeout)
	}
}

// tlsRecord is the first byte of a TLS handshake; a RESP request starts
// with '*' or a letter, so one byte tells the two apart on the peer port.
const tlsRecord = 0x16

// peekedConn gives back the bytes read to tell TLS from plain RESP.
type peekedConn struct {
	net.Conn
	first []byte
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		k := copy(p, c.first)
		c.first = c.first[k:]
		return k, nil
	}
	return c.Conn.Read(p)
}

// acceptPeer serves a connection on the peer listener: TLS when it starts
// with a TLS handshake and this node has certificates, plain RESP
// otherwise. A TLS handshake that fails (a certificate of another CA, or
// none) is refused, logged and counted; so is a plain connection on a node
// whose every peer link is encrypted. Which plain peers may stay plain is
// decided at their HELLO, which says where they are (servePeer).
func (n *Node) acceptPeer(c net.Conn) {
	if n.tls == nil {
		n.servePeer(c, false)
		return
	}
	c.SetReadDeadline(time.Now().Add(n.cfg.Timeout))
	first := make([]byte, 1)
	if _, err := c.Read(first); err != nil {
		c.Close()
		return
	}
	pc := &peekedConn{Conn: c, first: first}
	if first[0] != tlsRecord {
		c.SetReadDeadline(time.Time{})
		if n.cfg.SecureServerOption == topology.SecureAll {
			n.refusePeer(c, "plain connection, and secure_server_option is all: peers connect with TLS only")
			c.Write(resp.AppendError(nil, "ERR troop peer protocol: this node takes peers over TLS only (secure_server_option: all)"))
			c.Close()
			return
		}
		n.servePeer(pc, false)
		return
	}
	tc := tls.Server(pc, n.peerTLS)
	c.SetDeadline(time.Now().Add(n.cfg.Timeout))
	if err := tc.Handshake(); err != nil {
		n.refusePeer(c, "TLS handshake failed: "+err.Error())
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	n.servePeer(tc, true)
}

// refusePeer logs and counts a peer connection refused for its security.
func (n *Node) refusePeer(c net.Conn, why string) {
	n.stats.peerTLSRefused.Add(1)
	n.log.Warn("peer connection refused", "remote", c.RemoteAddr().String(), "why", why)
}

// peerLink is a link to peer m, over mutual TLS when secure_server_option
// says so for m's place.
func (n *Node) peerLink(name string, m *member, timeout time.Duration) *link.Link {
	var dial link.Dialer
	if n.cfg.PeerTLS(m.dc, m.rack) {
		dial = n.tls.dialer()
	}
	return link.NewDial(name, m.peerAddr, timeout, dial, n.peerHandshake(m))
}
