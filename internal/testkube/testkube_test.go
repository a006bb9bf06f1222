package testkube

import (
	"net"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The API server is the Kubernetes release of troop's client-go (v0.X.Y is
// v1.X.Y), and nothing Start started outlives the test that started it.
func TestAPIServerStartsAndStops(t *testing.T) {
	var addr string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t)
		u, err := url.Parse(c.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		addr = u.Host
		v, err := c.Client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if want := clientGoKubernetesVersion(t); v.GitVersion != want {
			t.Errorf("kube-apiserver %s, want %s, the release of troop's client-go", v.GitVersion, want)
		}
	})
	if addr == "" {
		t.Skip("no cluster was started")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("kube-apiserver still answers at %s after its test ended", addr)
	}
}

// clientGoKubernetesVersion is v1.X.Y for troop's k8s.io/client-go v0.X.Y,
// read as scripts/k8s-bins reads it.
func clientGoKubernetesVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/client-go: %v", err)
	}
	return "v1." + strings.TrimPrefix(strings.TrimSpace(string(out)), "v0.")
}
