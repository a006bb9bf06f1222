package bench

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/troop-lab/troop/client"
)

// Access is how a run reaches servers that guard themselves: a database,
// credentials and TLS. The password is never written to a result.
type Access struct {
	DB            int    `json:"db"`                 // --db: SELECT this database on every connection
	User          string `json:"user,omitempty"`     // --user: AUTH user password (an ACL user)
	Password      string `json:"-"`                  // --password, or $REDISCLI_AUTH
	TLS           bool   `json:"tls"`                // --tls
	TLSCA         string `json:"cacert,omitempty"`   // --cacert: PEM file of the CAs to trust; "" = the system's
	TLSCert       string `json:"cert,omitempty"`     // --cert: client certificate (PEM)
	TLSKey        string `json:"key,omitempty"`      // --key: its private key (PEM)
	TLSServerName string `json:"sni,omitempty"`      // --sni: the name to check the server's certificate against
	TLSInsecure   bool   `json:"insecure,omitempty"` // --insecure: do not check the server's certificate
}

// Check refuses settings that cannot work together.
func (a Access) Check() error {
	switch {
	case a.DB < 0:
		return fmt.Errorf("--db %d must not be negative", a.DB)
	case a.User != "" && a.Password == "":
		return fmt.Errorf("--user %s needs a password: --password, or $REDISCLI_AUTH", a.User)
	case (a.TLSCert == "") != (a.TLSKey == ""):
		return fmt.Errorf("--cert and --key go together: a client certificate and its key")
	}
	return nil
}

// Dial is how a plain RESP target is reached: database, credentials, and
// TLS with the certificates the files hold.
func (a Access) Dial() (client.Dial, error) {
	d := client.Dial{User: a.User, Password: a.Password, DB: a.DB}
	if !a.TLS {
		return d, nil
	}
	d.TLS = &tls.Config{ServerName: a.TLSServerName, InsecureSkipVerify: a.TLSInsecure}
	if a.TLSCA != "" {
		pem, err := os.ReadFile(a.TLSCA)
		if err != nil {
			return d, fmt.Errorf("--cacert: %w", err)
		}
		d.TLS.RootCAs = x509.NewCertPool()
		if !d.TLS.RootCAs.AppendCertsFromPEM(pem) {
			return d, fmt.Errorf("--cacert %s holds no PEM certificate", a.TLSCA)
		}
	}
	if a.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
		if err != nil {
			return d, fmt.Errorf("--cert %s and --key %s: %w", a.TLSCert, a.TLSKey, err)
		}
		d.TLS.Certificates = []tls.Certificate{cert}
	}
	return d, nil
}
