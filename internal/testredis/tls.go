package testredis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	caKey, caCert, caDER := newCert(t, "troop test CA", nil, nil, true)
	_, _, serverDER, serverKey := issue(t, "127.0.0.1", caCert, caKey, x509.ExtKeyUsageServerAuth)
	_, _, clientDER, clientKey := issue(t, "troop client", caCert, caKey, x509.ExtKeyUsageClientAuth)
	f := TLSFiles{
		CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	writePEM(t, f.ServerCert, "CERTIFICATE", serverDER)
	writePEM(t, f.ServerKey, "EC PRIVATE KEY", serverKey)
	writePEM(t, f.ClientCert, "CERTIFICATE", clientDER)
	writePEM(t, f.ClientKey, "EC PRIVATE KEY", clientKey)
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

func newCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: isCA,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

// issue signs a leaf certificate for cn (an IP address or a name) with usage.
func issue(t testing.TB, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (*ecdsa.PrivateKey, *x509.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der, keyDER
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
