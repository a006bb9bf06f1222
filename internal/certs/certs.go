// Package certs makes a certificate authority and certificates signed by
// it, as PEM files: for labs that run encrypted (troop lab up --tls) and for
// tests. ECDSA P-256 keys; a leaf serves as both TLS server and client, as a
// node's certificate does on its peer links.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// CA is a certificate authority held in memory.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

// Validity of what this package makes: an hour back, for clocks a little
// behind, and a year ahead.
const (
	backdate = time.Hour
	validity = 365 * 24 * time.Hour
)

// NewCA makes a self-signed certificate authority named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := template(cn)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, der: der}, nil
}

// Leaf is a certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for cn, valid for hosts (IP addresses or DNS
// names) as a TLS server and as a client.
func (ca *CA) Issue(cn string, hosts ...string) (Leaf, error) {
	return ca.IssueOrg(cn, nil, hosts...)
}

// IssueOrg is Issue with the subject's organizations, which some servers
// read as the client's groups (the Kubernetes API server does).
func (ca *CA) IssueOrg(cn string, orgs []string, hosts ...string) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	tmpl := template(cn)
	tmpl.Subject.Organization = orgs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: encode("CERTIFICATE", der), KeyPEM: encode("EC PRIVATE KEY", keyDER)}, nil
}

// CertPEM is the authority's certificate, for the files that trust it.
func (ca *CA) CertPEM() []byte { return encode("CERTIFICATE", ca.der) }

// Write writes the leaf's certificate and key, the key readable by its
// owner only.
func (l Leaf) Write(certFile, keyFile string) error {
	if err := os.WriteFile(certFile, l.CertPEM, 0o644); err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	return nil
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity)}
}

func encode(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
