package testredis

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/certs"
	"github.com/troop-lab/troop/internal/freeport"
)

// TLSFiles are the PEM files of a certificate authority made for one test,
// a server certificate for 127.0.0.1 and localhost, and a client
// certificate, all signed by it.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// MakeTLS writes a fresh CA and certificates into a temporary directory.
func MakeTLS(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	ca, err := certs.NewCA("troop test CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.CA, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, leaf := range [][3]string{{"127.0.0.1", f.ServerCert, f.ServerKey}, {"troop client", f.ClientCert, f.ClientKey}} {
		l, err := ca.Issue(leaf[0], "127.0.0.1", "localhost")
		if err == nil {
			err = l.Write(leaf[1], leaf[2])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TLSServer is a redis-server with a plain port (Addr) and a TLS port
// (TLSAddr) that wants client certificates.
type TLSServer struct {
	*Server
	TLSAddr string
	Files   TLSFiles
}

// StartTLS runs a redis-server that also listens with TLS, with the
// certificates of MakeTLS, and more arguments.
func StartTLS(t testing.TB, args ...string) *TLSServer {
	t.Helper()
	f := MakeTLS(t)
	tlsAddr, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(tlsAddr)
	s := StartArgs(t, append([]string{"--tls-port", port, "--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes"}, args...)...)
	// The TLS port is up once the plain one is: redis-server opens both
	// before it serves.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", tlsAddr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not listen with TLS on %s: %v (is it built with TLS?)", tlsAddr, err)
		}
	}
	return &TLSServer{Server: s, TLSAddr: tlsAddr, Files: f}
}

// ClientConfig is a TLS config that trusts the test CA and shows the client
// certificate.
func (f TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(f.CA)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("CA %s: %v", f.CA, err)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}
