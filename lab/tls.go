package lab

import (
	"net"
	"os"
	"path/filepath"

	"github.com/troop-lab/troop/internal/certs"
)

// makeCerts makes a fresh CA for the lab in DIR/tls/ca.crt and a
// certificate per node (issueCert), and answers the CA and its file. The
// CA's key stays in the supervisor's memory, for the certificates of
// nodes added later (AddNode), and goes with it: a lab that comes up
// again gets a new CA.
func makeCerts(dir string, nodes []Node) (*certs.CA, string, error) {
	ca, err := certs.NewCA("troop lab CA " + filepath.Base(dir))
	if err != nil {
		return nil, "", err
	}
	tlsDir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o755); err != nil {
		return nil, "", err
	}
	caFile := filepath.Join(tlsDir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, "", err
	}
	for _, n := range nodes {
		if err := issueCert(ca, n); err != nil {
			return nil, "", err
		}
	}
	return ca, caFile, nil
}

// issueCert writes n's certificate, signed by ca, for the host its peers
// dial (its dyn_listen host) and localhost.
func issueCert(ca *certs.CA, n Node) error {
	host, _, err := net.SplitHostPort(n.DynListen)
	if err != nil {
		return err
	}
	leaf, err := ca.Issue(n.Name, host, "localhost")
	if err != nil {
		return err
	}
	return leaf.Write(n.TLSCert(), n.TLSKey())
}
