package lab

import (
	"fmt"
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	for _, c := range []struct {
		i, n int
		want uint32
	}{
		{0, 1, 0},
		{0, 2, 0}, {1, 2, 1 << 31},
		{0, 3, 0}, {1, 3, 1431655765}, {2, 3, 2863311530},
		{1, 4, 1 << 30}, {3, 4, 3 << 30},
		{6, 7, 3681400539}, // floor(6 * 4294967296 / 7)
	} {
		if got := Token(c.i, c.n); got != c.want {
			t.Errorf("Token(%d, %d) = %d, want %d", c.i, c.n, got, c.want)
		}
	}
}

func TestLayout(t *testing.T) {
	for _, c := range []struct {
		shape  Shape
		names  []string
		tokens []uint32
	}{
		{Shape{1, 3, 1}, []string{"dc1-rack1-1", "dc1-rack2-1", "dc1-rack3-1"}, []uint32{0, 0, 0}},
		{Shape{1, 1, 2}, []string{"dc1-rack1-1", "dc1-rack1-2"}, []uint32{0, 1 << 31}},
		{Shape{2, 2, 2},
			[]string{"dc1-rack1-1", "dc1-rack1-2", "dc1-rack2-1", "dc1-rack2-2", "dc2-rack1-1", "dc2-rack1-2", "dc2-rack2-1", "dc2-rack2-2"},
			[]uint32{0, 1 << 31, 0, 1 << 31, 0, 1 << 31, 0, 1 << 31}},
	} {
		nodes := Layout(c.shape, "/lab")
		if len(nodes) != len(c.names) || c.shape.Size() != len(c.names) {
			t.Fatalf("%s: %d nodes, want %d", c.shape, len(nodes), len(c.names))
		}
		for i, n := range nodes {
			if n.Name != c.names[i] || n.Token != c.tokens[i] {
				t.Errorf("%s: node %d = %s token %d, want %s token %d", c.shape, i, n.Name, n.Token, c.names[i], c.tokens[i])
			}
			if want := n.DC + "-" + n.Rack + "-"; !strings.HasPrefix(n.Name, want) {
				t.Errorf("%s: name %s does not start with %s", c.shape, n.Name, want)
			}
			if n.Dir != "/lab/"+n.Name || n.Config != "/lab/"+n.Name+"/node.yml" {
				t.Errorf("%s: %s dir %s config %s", c.shape, n.Name, n.Dir, n.Config)
			}
		}
	}
}

func TestShapeValidate(t *testing.T) {
	for _, c := range []struct {
		s  Shape
		ok bool
	}{
		{Shape{1, 3, 1}, true}, {Shape{2, 3, 2}, true}, {Shape{1, 7, 1}, true},
		{Shape{0, 3, 1}, false}, {Shape{1, 0, 1}, false}, {Shape{1, 3, -1}, false}, {Shape{8, 8, 2}, false},
	} {
		if err := c.s.validate(); (err == nil) != c.ok {
			t.Errorf("validate(%+v) = %v, want ok=%v", c.s, err, c.ok)
		}
	}
	if got := (Shape{1, 3, 1}).String(); got != "1 dc x 3 racks x 1 node per rack" {
		t.Errorf("String() = %q", got)
	}
}

func TestAssignPortsDistinct(t *testing.T) {
	nodes := Layout(Shape{2, 3, 2}, "/lab")
	if err := assignPorts(nodes); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, a := range []string{n.Listen, n.DynListen, n.StatsListen, n.Redis} {
			if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
				t.Fatalf("address %s is not loopback or handed out twice", a)
			}
			seen[a] = true
		}
	}
}

func TestNodeConfig(t *testing.T) {
	nodes := Layout(Shape{2, 2, 1}, "/lab")
	for i := range nodes {
		p := 1000 + 10*i
		nodes[i].Listen = addr(p)
		nodes[i].DynListen = addr(p + 1)
		nodes[i].StatsListen = addr(p + 2)
		nodes[i].Redis = addr(p + 3)
	}
	nodes[1].Token = 7 // to see that seeds carry the peer's token
	got := string(NodeConfig(nodes[0], nodes, "DC_QUORUM", "DC_SAFE_QUORUM", ""))
	want := `dyn_o_mite:
  datacenter: dc1
  rack: rack1
  listen: 127.0.0.1:1000
  dyn_listen: 127.0.0.1:1001
  stats_listen: 127.0.0.1:1002
  dyn_seeds:
  - 127.0.0.1:1011:rack2:dc1:7
  - 127.0.0.1:1021:rack1:dc2:0
  - 127.0.0.1:1031:rack2:dc2:0
  tokens: '0'
  servers:
  - 127.0.0.1:1003:1
  data_store: 0
  read_consistency: DC_QUORUM
  write_consistency: DC_SAFE_QUORUM
  timeout: 5000
  troop_node_name: dc1-rack1-1
  troop_pprof: true
`
	if got != want {
		t.Errorf("config:\n%s\nwant:\n%s", got, want)
	}
}

func addr(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }

func TestNormalizeLevel(t *testing.T) {
	for in, want := range map[string]string{"": "DC_ONE", "dc_one": "DC_ONE", "DC_QUORUM": "DC_QUORUM", "dc_safe_quorum": "DC_SAFE_QUORUM"} {
		if got, err := normalizeLevel("read consistency", in); err != nil || got != want {
			t.Errorf("normalizeLevel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := normalizeLevel("read consistency", "ALL"); err == nil || !strings.Contains(err.Error(), `"ALL"`) {
		t.Errorf("normalizeLevel(ALL) = %v, want an error naming it", err)
	}
}

func TestEnvLines(t *testing.T) {
	s := &Status{Dir: "/tmp/my lab", Nodes: []NodeStatus{
		{Node: Node{Listen: "127.0.0.1:1", StatsListen: "127.0.0.1:2", Redis: "127.0.0.1:3"}},
		{Node: Node{Listen: "127.0.0.1:4", StatsListen: "127.0.0.1:5", Redis: "127.0.0.1:6"}},
	}}
	got := strings.Join(s.EnvLines(), "\n")
	want := `TROOP_NODES=127.0.0.1:1,127.0.0.1:4
TROOP_STATS=127.0.0.1:2,127.0.0.1:5
TROOP_REDIS=127.0.0.1:3,127.0.0.1:6
TROOP_LAB='/tmp/my lab'
export TROOP_NODES TROOP_STATS TROOP_REDIS TROOP_LAB`
	if got != want {
		t.Errorf("env:\n%s\nwant:\n%s", got, want)
	}
}

func TestFindRedisServerMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("TROOP_REDIS_SERVER", "")
	_, err := FindRedisServer("")
	if err == nil || !strings.HasPrefix(err.Error(), "redis-server not found on PATH: install it") {
		t.Errorf("FindRedisServer with an empty PATH: %v", err)
	}
	t.Setenv("TROOP_REDIS_SERVER", "/nonexistent/redis-server")
	if _, err := FindRedisServer(""); err == nil || !strings.Contains(err.Error(), "TROOP_REDIS_SERVER=/nonexistent/redis-server") {
		t.Errorf("FindRedisServer with a bad TROOP_REDIS_SERVER: %v", err)
	}
	// Start says the same before it touches anything.
	if _, err := Start(t.Context(), Spec{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "TROOP_REDIS_SERVER") {
		t.Errorf("Start without redis-server: %v", err)
	}
}

func TestParseProc(t *testing.T) {
	for _, s := range []string{"node", "redis"} {
		if p, err := ParseProc(s); err != nil || string(p) != s {
			t.Errorf("ParseProc(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParseProc("nginx"); err == nil {
		t.Error("ParseProc(nginx) accepted")
	}
}
