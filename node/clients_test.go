package node

import (
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// TestWhatFrameworksNeed runs, through a node of a 3-rack cluster, the
// commands job frameworks and Redis's own units use beyond the data
// types: CLIENT LIST, ID, KILL and UNBLOCK, HELLO, INFO's sections,
// RANDOMKEY, SORT, and the commands Redis allows inside MULTI.
func TestWhatFrameworksNeed(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}"; c.AllowFlush = true }})
	addr := tc.nodes[0].cfg.Listen

	t.Run("CLIENT ID, LIST, INFO and KILL", func(t *testing.T) {
		a, b := dial(t, addr), dial(t, addr)
		idA, idB := a.do("CLIENT", "ID").Int, b.do("CLIENT", "ID").Int
		if idA <= 0 || idB <= 0 || idA == idB {
			t.Fatalf("CLIENT ID = %d and %d on two connections, want two different positive ids", idA, idB)
		}
		b.must("CLIENT", "SETNAME", "worker-b")
		list := a.must("CLIENT", "LIST")
		lineB := regexp.MustCompile(fmt.Sprintf(`(?m)^id=%d addr=\S+ laddr=\S+ .*name=worker-b .*cmd=client .*resp=2$`, idB))
		if !strings.Contains(list, fmt.Sprintf("id=%d addr=%s ", idA, a.c.LocalAddr())) || !lineB.MatchString(list) {
			t.Fatalf("CLIENT LIST does not show both connections as Redis does:\n%s", list)
		}
		if info := b.must("CLIENT", "INFO"); !strings.HasPrefix(info, fmt.Sprintf("id=%d ", idB)) {
			t.Fatalf("CLIENT INFO = %q, want the line of connection %d", info, idB)
		}
		if got := a.must("CLIENT", "LIST", "ID", fmt.Sprint(idB)); strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, fmt.Sprintf("id=%d ", idB)) {
			t.Fatalf("CLIENT LIST ID %d = %q", idB, got)
		}
		if got := a.do("CLIENT", "KILL", "ID", fmt.Sprint(idB)); got.Int != 1 {
			t.Fatalf("CLIENT KILL ID %d = %s, want 1", idB, got)
		}
		b.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := b.c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the killed connection still reads")
		}
		eventually(t, 5*time.Second, func() string {
			if list := a.must("CLIENT", "LIST"); strings.Contains(list, fmt.Sprintf("id=%d ", idB)) {
				return "the killed connection is still listed:\n" + list
			}
			return ""
		})
		if got := a.do("CLIENT", "KILL", "127.0.0.1:1"); !got.IsError() || string(got.Str) != "ERR No such client" {
			t.Fatalf("CLIENT KILL of no client = %s", got)
		}
	})

	t.Run("CLIENT UNBLOCK", func(t *testing.T) {
		for _, tt := range []struct{ mode, want string }{{"TIMEOUT", "nil"}, {"ERROR", "UNBLOCKED client unblocked via CLIENT UNBLOCK"}} {
			a, blocked := dial(t, addr), dial(t, addr)
			id := blocked.do("CLIENT", "ID").Int
			if got := a.do("CLIENT", "UNBLOCK", fmt.Sprint(id)); got.Int != 0 {
				t.Fatalf("CLIENT UNBLOCK of a client that is not blocked = %s, want 0", got)
			}
			blocked.c.Write(resp.AppendCommandStrings(nil, "BLPOP", "{u}:nothing", "0"))
			eventually(t, 5*time.Second, func() string { // it is blocked once the node lists it so
				if line := a.must("CLIENT", "LIST", "ID", fmt.Sprint(id)); !strings.Contains(line, " flags=b ") {
					return "not blocked yet: " + line
				}
				return ""
			})
			if got := a.do("CLIENT", "UNBLOCK", fmt.Sprint(id), tt.mode); got.Int != 1 {
				t.Fatalf("CLIENT UNBLOCK %s = %s, want 1", tt.mode, got)
			}
			blocked.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			v, err := blocked.rd.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			got := string(v.Str)
			if v.IsNull {
				got = "nil"
			}
			if got != tt.want {
				t.Fatalf("BLPOP unblocked with %s answered %q, want %q", tt.mode, got, tt.want)
			}
		}
	})

	t.Run("HELLO and INFO", func(t *testing.T) {
		out, err := exec.Command(testredis.Path(t), "--version").Output()
		if err != nil {
			t.Fatal(err)
		}
		version := regexp.MustCompile(`v=(\S+)`).FindStringSubmatch(string(out))[1]
		c := dial(t, addr)
		eventually(t, 5*time.Second, func() string { // the heartbeat reads it at start
			hello := c.do("HELLO", "3")
			fields := map[string]string{}
			for i := 0; i+1 < len(hello.Elems); i += 2 {
				fields[string(hello.Elems[i].Str)] = string(hello.Elems[i+1].Str)
			}
			if fields["version"] != version || fields["mode"] != "standalone" {
				return fmt.Sprintf("HELLO 3 = %s, want version %s and mode standalone", hello, version)
			}
			return ""
		})
		c = dial(t, addr)
		for _, tt := range []struct {
			args     []string
			has, not []string
		}{
			{nil, []string{"redis_version:" + version, "redis_mode:standalone", "used_cpu_user:", "used_memory:", "# Clients"}, []string{"rejected_calls", "# Keyspace"}},
			{[]string{"cpu"}, []string{"# Cpu", "used_cpu_sys_children:"}, []string{"used_memory", "# Server"}},
			{[]string{"commandstats"}, []string{"cmdstat_info:calls=", "rejected_calls=0"}, []string{"used_memory"}},
			{[]string{"cpu", "all"}, []string{"used_cpu_user", "used_memory", "master_repl_offset", "rejected_calls", "# Keyspace"}, nil},
		} {
			info := c.must(append([]string{"INFO"}, tt.args...)...)
			for _, s := range tt.has {
				if !strings.Contains(info, s) {
					t.Errorf("INFO %v has no %q:\n%s", tt.args, s, info)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(info, s) {
					t.Errorf("INFO %v has %q:\n%s", tt.args, s, info)
				}
			}
			if strings.Count(info, "used_cpu_user_children") > 1 || strings.Count(info, "# Memory") > 1 {
				t.Errorf("INFO %v gives a section twice", tt.args)
			}
		}
	})

	t.Run("RANDOMKEY", func(t *testing.T) {
		c := dial(t, addr)
		c.must("FLUSHALL")
		if got := c.do("RANDOMKEY"); !got.IsNull {
			t.Fatalf("RANDOMKEY of no key = %s", got)
		}
		c.must("SET", "gone", "1")
		c.must("DEL", "gone") // leaves its tombstone, troop's own key
		if got := c.do("RANDOMKEY"); !got.IsNull {
			t.Fatalf("RANDOMKEY with only a tombstone = %s, want nil", got)
		}
		c.must("SET", "foo", "x")
		c.must("SET", "bar", "y")
		seen := map[string]bool{}
		for i := 0; i < 200 && len(seen) < 2; i++ {
			seen[c.must("RANDOMKEY")] = true
		}
		if !seen["foo"] || !seen["bar"] || len(seen) != 2 {
			t.Fatalf("RANDOMKEY gave %v in 200 calls, want foo and bar", seen)
		}
	})

	t.Run("SORT and SORT STORE", func(t *testing.T) {
		c := dial(t, addr)
		c.must("RPUSH", "{s}:list", "3", "1", "2")
		c.must("SET", "{s}:w_1", "30")
		c.must("SET", "{s}:w_2", "20")
		c.must("SET", "{s}:w_3", "10")
		if got := fmt.Sprint(values(c.do("SORT", "{s}:list"))); got != "[1 2 3]" {
			t.Fatalf("SORT = %s", got)
		}
		if got := fmt.Sprint(values(c.do("SORT_RO", "{s}:list", "BY", "{s}:w_*", "GET", "#"))); got != "[3 2 1]" {
			t.Fatalf("SORT_RO BY {s}:w_* = %s", got)
		}
		if got := c.do("SORT", "{s}:list", "BY", "w_*"); !got.IsError() || !strings.Contains(string(got.Str), "hash tag") {
			t.Fatalf("SORT BY a pattern of any node = %s, want an error about the hash tag", got)
		}
		if got := c.do("SORT", "{s}:list", "DESC", "STORE", "{s}:sorted"); got.Int != 3 {
			t.Fatalf("SORT STORE = %s", got)
		}
		for _, tn := range tc.nodes { // a write: every replica has it, the last one once its copy lands
			r := dial(t, tn.redis.Addr)
			eventually(t, 10*time.Second, func() string {
				if got := fmt.Sprint(values(r.do("LRANGE", "{s}:sorted", "0", "-1"))); got != "[3 2 1]" {
					return fmt.Sprintf("%s's redis-server holds %s after SORT STORE", tn.cfg.Name, got)
				}
				return ""
			})
		}
	})

	t.Run("MULTI as Redis", func(t *testing.T) {
		c := dial(t, addr)
		c.must("SADD", "{m}:set", "a", "b", "c", "d", "e")
		got := c.pipeline([]string{"MULTI"}, []string{"SPOP", "{m}:set", "2"}, []string{"UNWATCH"}, []string{"EXEC"})
		if exec := got[3]; exec.IsError() || len(exec.Elems) != 2 || len(exec.Elems[0].Elems) != 2 || string(exec.Elems[1].Str) != "OK" {
			t.Fatalf("EXEC of SPOP and UNWATCH = %s", exec)
		}
		// Every replica loses the members the deciding one drew: a quorum
		// before EXEC answers, the last replica once its copy lands.
		var replicas []*client
		for _, tn := range tc.nodes {
			replicas = append(replicas, dial(t, tn.redis.Addr))
		}
		eventually(t, 10*time.Second, func() string {
			var sets []string
			for _, r := range replicas {
				m := values(r.do("SMEMBERS", "{m}:set"))
				sort.Strings(m)
				sets = append(sets, fmt.Sprint(m))
			}
			if len(strings.Fields(sets[0])) != 3 || sets[0] != sets[1] || sets[1] != sets[2] {
				return fmt.Sprintf("after SPOP 2 inside MULTI the replicas hold %v, want the same 3 members", sets)
			}
			return ""
		})
		// Cluster commands run in their place: the GET after FLUSHALL finds nothing.
		got = c.pipeline([]string{"MULTI"}, []string{"SET", "{m}:a", "1"}, []string{"FLUSHALL"}, []string{"GET", "{m}:a"},
			[]string{"SET", "{m}:b", "2"}, []string{"DBSIZE"}, []string{"CONFIG", "GET", "maxmemory"}, []string{"EXEC"})
		if exec := got[7]; exec.IsError() || len(exec.Elems) != 6 || string(exec.Elems[1].Str) != "OK" || !exec.Elems[2].IsNull ||
			exec.Elems[4].Int != 1 || len(exec.Elems[5].Elems) != 2 {
			t.Fatalf("EXEC of SET, FLUSHALL, GET, SET, DBSIZE, CONFIG GET = %s", exec)
		}
		got = c.pipeline([]string{"MULTI"}, []string{"SET", "{m}:k", "v"}, []string{"SAVE"}, []string{"EXEC"}, []string{"GET", "{m}:k"})
		if string(got[2].Str) != "ERR Command not allowed inside a transaction" || !strings.HasPrefix(string(got[3].Str), "EXECABORT") || !got[4].IsNull {
			t.Fatalf("SAVE inside MULTI: %s, EXEC %s, then GET %s; want Redis's refusal, EXECABORT and nothing run", got[2], got[3], got[4])
		}
	})
}

// values are the strings of an array reply.
func values(v resp.Value) []string {
	out := []string{}
	for _, e := range v.Elems {
		out = append(out, string(e.Str))
	}
	return out
}
