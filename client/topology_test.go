package client

import (
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
