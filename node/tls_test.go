package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	troopclient "github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/certs"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// testCA is a CA for one test, and what trusts it.
type testCA struct {
	ca   *certs.CA
	file string // its certificate, PEM
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	ca, err := certs.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return testCA{ca: ca, file: file, pool: pool}
}

// issue writes a certificate for 127.0.0.1 into dir and answers its files.
func (c testCA) issue(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	leaf, err := c.ca.Issue("troop node", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	if err := leaf.Write(cert, key); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// configureTLS gives every node a certificate of ca and the options.
func configureTLS(t *testing.T, ca testCA, option string, client, admin bool) func(*topology.Config) {
	return func(c *topology.Config) {
		c.TLSCert, c.TLSKey = ca.issue(t, t.TempDir())
		c.TLSCA, c.SecureServerOption, c.TLSClient, c.TLSAdmin = ca.file, option, client, admin
	}
}

// A cluster whose every link is TLS: peers verify each other against the
// CA, clients and the admin API are served over TLS, quorum writes and
// reads work through them; a peer with a certificate of another CA, or
// none, is refused, logged and counted.
func TestTLSCluster(t *testing.T) {
	ca := newTestCA(t, "troop test CA")
	logs := &lockedBuffer{}
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum, logTo: logs,
		configure: configureTLS(t, ca, topology.SecureAll, true, true)})

	var nodes []troopclient.Node
	for _, tn := range tc.nodes {
		nodes = append(nodes, troopclient.Node{Name: tn.cfg.Name, DC: tn.cfg.Datacenter, Rack: tn.cfg.Rack, Tokens: tn.cfg.Tokens, Addr: tn.cfg.Listen})
	}
	cl, err := troopclient.NewCluster(nodes, troopclient.Options{Dial: troopclient.Dial{TLS: &tls.Config{RootCAs: ca.pool}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Do(ctx, []byte("SET"), []byte("k"), []byte("v")); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
	// DC_QUORUM answers once two replicas hold the write; the third, over
	// its TLS link, soon after.
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		eventually(t, 5*time.Second, func() string {
			if got := r.must("GET", "k"); got != "v" {
				return fmt.Sprintf("%s's redis-server: k = %q", tn.cfg.Name, got)
			}
			return ""
		})
	}

	// The admin API over HTTPS.
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	res, err := https.Get("https://" + tc.nodes[0].cfg.StatsListen + "/cluster_describe")
	if err != nil {
		t.Fatal(err)
	}
	var described []ClusterNode
	json.NewDecoder(res.Body).Decode(&described)
	res.Body.Close()
	if len(described) != 3 || !described[1].Up {
		t.Errorf("/cluster_describe over HTTPS: %+v", described)
	}

	// A plain client gets nothing from a TLS listener.
	if c, err := net.DialTimeout("tcp", tc.nodes[0].cfg.Listen, time.Second); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write(resp.AppendCommandStrings(nil, "PING"))
		buf := make([]byte, 16)
		k, _ := c.Read(buf)
		if strings.Contains(string(buf[:k]), "PONG") {
			t.Error("a plain PING was answered on a TLS client listener")
		}
		c.Close()
	}

	// Peers: a certificate of another CA, no certificate, plain RESP.
	peerAddr := tc.nodes[0].cfg.DynListen
	other := newTestCA(t, "another CA")
	otherCert, otherKey := other.issue(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{
		"another CA":     {InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}},
		"no certificate": {RootCAs: ca.pool},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", peerAddr, cfg)
		if err == nil {
			// TLS 1.3 reports the server's refusal on the first read.
			c.SetDeadline(time.Now().Add(2 * time.Second))
			c.Write(resp.AppendCommandStrings(nil, "HELLO", peerProtocol, "x", "dc1", "rack9", "", ""))
			_, err = resp.NewReader(c, resp.DefaultLimits).ReadValue()
			c.Close()
		}
		if err == nil {
			t.Errorf("a peer with %s was served", name)
		}
	}
	plain := dial(t, peerAddr)
	if v, err := plain.try("HELLO", peerProtocol, "x", "dc1", "rack9", "", ""); err == nil && !strings.Contains(string(v.Str), "TLS only") {
		t.Errorf("a plain peer on a secure_server_option: all node: %v", v)
	}
	eventually(t, 5*time.Second, func() string {
		if got := tc.nodes[0].node.Info().PeerTLSRefused; got < 3 {
			return "peer_tls_refused stays below 3"
		}
		return ""
	})
	if out := logs.String(); !strings.Contains(out, "peer connection refused") || !strings.Contains(out, "certificate") {
		t.Errorf("the refusals are not in the log:\n%s", out)
	}
}

// secure_server_option datacenter: links between datacenters are TLS,
// links inside one plain; a plain peer claiming another datacenter is
// refused, and writes reach the other datacenter.
func TestTLSBetweenDatacenters(t *testing.T) {
	ca := newTestCA(t, "troop test CA")
	tc := startCluster(t, clusterOpts{dcs: 2, racks: 2, configure: configureTLS(t, ca, topology.SecureDatacenter, false, false)})
	c := tc.client(0, "")
	c.must("SET", "k", "v")
	tc.redisesHold("k", "v", 10*time.Second)
	peer := dial(t, tc.nodes[0].cfg.DynListen)
	if v := peer.do("HELLO", peerProtocol, "x", "dc2", "rack1", "", ""); !v.IsError() || !strings.Contains(string(v.Str), "connects with TLS") {
		t.Errorf("plain HELLO from dc2 = %s", v)
	}
	dialPeer(t, tc.nodes[0]) // from dc1: plain is fine
	for _, tn := range tc.nodes {
		for _, m := range tn.node.view().all {
			if m.link != nil && !m.link.Connected() {
				t.Errorf("%s: link to %s/%s down", tn.cfg.Name, m.dc, m.rack)
			}
		}
	}
}

// Certificates are reloaded from their files without a restart.
func TestTLSReload(t *testing.T) {
	ca := newTestCA(t, "troop test CA")
	tc := startCluster(t, clusterOpts{racks: 1, configure: configureTLS(t, ca, topology.SecureAll, true, false)})
	cfg := tc.nodes[0].cfg
	serial := func() string {
		c, err := tls.Dial("tcp", cfg.Listen, &tls.Config{RootCAs: ca.pool})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	leaf, err := ca.ca.Issue("troop node", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.Write(cfg.TLSCert, cfg.TLSKey); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		if serial() == before {
			return "the node still shows its first certificate"
		}
		return ""
	})
}
