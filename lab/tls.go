package lab

import (
	"net"
	"os"
	"path/filepath"

	"github.com/troop-lab/troop/internal/certs"
)

// makeCerts makes a fresh CA for the lab in DIR/tls/ca.crt and a
// certificate per node, for the host its peers dial (its dyn_listen host)
// and localhost, and answers the CA's file. A lab that comes up again gets
// new ones.
func makeCerts(dir string, nodes []Node) (string, error) {
	ca, err := certs.NewCA("troop lab CA " + filepath.Base(dir))
	if err != nil {
		return "", err
	}
	tlsDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o755); err != nil {
		return "", err
	}
	caFile := filepath.Join(tlsDir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return "", err
	}
	for _, n := range nodes {
		host, _, err := net.SplitHostPort(n.DynListen)
		if err != nil {
			return "", err
		}
		leaf, err := ca.Issue(n.Name, host, "localhost")
		if err != nil {
			return "", err
		}
		if err := leaf.Write(n.TLSCert(), n.TLSKey()); err != nil {
			return "", err
		}
	}
	return caFile, nil
}
