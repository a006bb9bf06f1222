package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/node/reconfig"
)

// troop cluster add is the admin endpoint: POST /cluster/add with the
// address, rack and token, the bearer token of $TROOP_ADMIN_TOKEN, and the
// report printed; a refusal is the verb's error.
func TestClusterVerbs(t *testing.T) {
	t.Setenv("TROOP_ADMIN_TOKEN", "s3cret")
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		st := membership.Initial([]membership.Member{{Addr: "a:1", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}}})
		rep := reconfig.Report{State: st, Moves: []membership.Move{{DC: "dc1", Rack: "rack1", Range: membership.Range{Lo: 0, Hi: 7}, From: "a:1", To: "b:1"}}}
		if r.URL.Path == "/cluster/remove" {
			rep.Error = "a:1 is the last node of rack dc1/rack1"
			w.WriteHeader(http.StatusConflict)
		}
		json.NewEncoder(w).Encode(rep)
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")

	var out bytes.Buffer
	cmd := newClusterCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"add", "b:1", "--rack", "rack1", "--tokens", "7", "--admin", admin})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "POST /cluster/add?addr=b%3A1&rack=rack1&tokens=7 Bearer s3cret"; len(got) != 1 || got[0] != want {
		t.Fatalf("requests %q, want %q", got, want)
	}
	if !strings.Contains(out.String(), "epoch 0, stable, change: none") || !strings.Contains(out.String(), "moves dc1/rack1 (0, 7]: a:1 -> b:1") {
		t.Fatalf("output:\n%s", out.String())
	}

	cmd = newClusterCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"remove", "a:1", "--admin", admin})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "409 Conflict: a:1 is the last node of rack dc1/rack1") {
		t.Fatalf("remove refused: %v", err)
	}
	cmd = newClusterCmd()
	cmd.SetArgs([]string{"status", "--admin", admin})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil || !strings.HasPrefix(got[len(got)-1], "GET /cluster/membership? ") {
		t.Fatalf("status: %v, %q", err, got)
	}
}

// With --cacert the verbs call the admin API over HTTPS (a node with
// troop_tls_admin), trusting that CA; without it they speak plain HTTP,
// which such a node refuses.
func TestClusterVerbsHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(reconfig.Report{State: membership.Initial([]membership.Member{{Addr: "a:1", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}}})})
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "https://")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newClusterCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"status", "--admin", admin}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := status("--cacert", ca); err != nil || !strings.Contains(out, "epoch 0, stable") {
		t.Fatalf("status over HTTPS: %v\n%s", err, out)
	}
	if _, err := status(); err == nil {
		t.Fatal("status over plain HTTP to an HTTPS admin API succeeded")
	}
	if _, err := status("--cacert", filepath.Join(t.TempDir(), "none.crt")); err == nil || !strings.Contains(err.Error(), "--cacert") {
		t.Fatalf("a missing --cacert file: %v", err)
	}
}
