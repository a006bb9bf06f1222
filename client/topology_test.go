package client

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestFromClusterFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `[
 {"name":"a","datacenter":"dc1","rack":"rack1","tokens":[1],"listen":"127.0.0.1:7001","state":"up"},
 {"name":"b","datacenter":"dc1","rack":"rack2","tokens":[2],"listen":"127.0.0.1:7002"}]`)
	nodes, err := FromClusterFile(good)
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{{Name: "a", DC: "dc1", Rack: "rack1", Tokens: []uint32{1}, Addr: "127.0.0.1:7001"},
		{Name: "b", DC: "dc1", Rack: "rack2", Tokens: []uint32{2}, Addr: "127.0.0.1:7002"}}
	if !reflect.DeepEqual(nodes, want) {
		t.Fatalf("got %+v", nodes)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"broken.json":  {`[{"name":`, "not a cluster_describe answer"},
		"empty.json":   {`[]`, "no nodes"},
		"missing.json": {`[{"datacenter":"dc1","rack":"rack3","tokens":[3]}]`, "the client address of the node of dc1/rack3 with tokens [3] is missing"},
	} {
		_, err := FromClusterFile(write(name, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the file and saying %q", name, err, tc.want)
		}
	}
	if _, err := FromClusterFile(filepath.Join(dir, "absent.json")); err == nil {
		t.Error("a missing file gave no error")
	}
}

// Dynomite's /cluster_describe shape: datacenters of racks of servers, each
// with its IP, host, peer port and token; the client port is the peer
// port plus one, on the IP (a host name may not resolve), and 0.0.0.0 is
// reached on the host asked.
func TestDynomiteDescribe(t *testing.T) {
	body := `{"dcs":[{"name":"us-east-1","racks":[
	  {"name":"us-east-1a","servers":[{"name":"10.0.0.1","host":"ip-10-0-0-1","port":8101,"token":101134286}]},
	  {"name":"us-east-1b","servers":[{"name":"0.0.0.0","host":"","port":9101,"token":12345}]}]}]}`
	nodes, missing, err := parseDescribed(strings.NewReader(body), "test", "192.168.1.5")
	if err != nil || len(missing) != 0 {
		t.Fatal(err, missing)
	}
	want := []Node{
		{Name: "10.0.0.1:8102", DC: "us-east-1", Rack: "us-east-1a", Tokens: []uint32{101134286}, Addr: "10.0.0.1:8102", Dynomite: true},
		{Name: "192.168.1.5:9102", DC: "us-east-1", Rack: "us-east-1b", Tokens: []uint32{12345}, Addr: "192.168.1.5:9102", Dynomite: true},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Fatalf("got %+v\nwant %+v", nodes, want)
	}
	for body, wantErr := range map[string]string{
		`{"dcs":[]}`: "no nodes",
		`{"dcs":[{"name":"d","racks":[{"name":"r","servers":[{"name":"h","port":0,"token":1}]}]}]}`: "has no address",
		`{"dcs":"x"}`: "not a Dynomite cluster_describe answer",
		`"x"`:         "not a cluster_describe answer of troop",
	} {
		if _, _, err := parseDescribed(strings.NewReader(body), "test", ""); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %v, want %q", body, err, wantErr)
		}
	}
}

func FuzzParseDescribed(f *testing.F) {
	f.Add([]byte(`[{"name":"a","datacenter":"dc1","rack":"rack1","tokens":[1],"listen":"127.0.0.1:7001"}]`))
	f.Add([]byte(`{"dcs":[{"name":"d","racks":[{"name":"r","servers":[{"name":"10.0.0.1","host":"h","port":8101,"token":1}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		parseDescribed(bytes.NewReader(data), "fuzz", "127.0.0.1")
	})
}
