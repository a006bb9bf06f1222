package node

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/troop-lab/troop/resp"
)

// fallbackRedisVersion is the version INFO and HELLO give until the node
// has read its redis-server's: the oldest Redis whose commands troop
// serves.
const fallbackRedisVersion = "7.0.0"

// redisVersion is the version of the redis-server behind the node, which
// INFO and HELLO report as Redis's own (clients check it before using a
// feature), read by the heartbeat.
func (n *Node) redisVersion() string {
	if v := n.storeVersion.Load(); v != nil {
		return *v
	}
	return fallbackRedisVersion
}

// learnStoreVersion reads redis_version from the answer to INFO server.
func (n *Node) learnStoreVersion(raw []byte, err error) {
	if err != nil {
		return
	}
	v, perr := resp.Parse(raw)
	if perr != nil || v.IsError() {
		return
	}
	for _, line := range strings.Split(string(v.Str), "\n") {
		if ver, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok && ver != "" {
			n.storeVersion.Store(&ver)
			return
		}
	}
}

// infoSections are INFO's sections in Redis's order, and whether INFO and
// INFO default give them; INFO all gives every one, as does everything.
// Keyspace is last, and apart: it takes a scan of the rack (wantsKeyspace).
var infoSections = []struct {
	name      string
	isDefault bool
}{
	{"server", true}, {"clients", true}, {"memory", true}, {"persistence", true}, {"stats", true},
	{"replication", true}, {"cpu", true}, {"modules", true}, {"commandstats", false},
	{"errorstats", true}, {"latencystats", false}, {"cluster", true},
}

// wantsKeyspace says whether INFO's sections name the keyspace: it takes a
// scan of the rack, so plain INFO leaves it out.
func wantsKeyspace(sections [][]byte) bool {
	for _, s := range sections {
		switch strings.ToLower(string(s)) {
		case "keyspace", "all", "everything":
			return true
		}
	}
	return false
}

// chosenSections are the sections (but keyspace) that INFO's arguments
// name, as Redis reads them: none is default; all, everything and default
// add their sets, any other word the section of that name (unknown names
// add nothing).
func chosenSections(args [][]byte) map[string]bool {
	want := map[string]bool{}
	if len(args) == 0 {
		args = [][]byte{[]byte("default")}
	}
	for _, a := range args {
		switch name := strings.ToLower(string(a)); name {
		case "all", "everything", "default":
			for _, s := range infoSections {
				if s.isDefault || name != "default" {
					want[s.name] = true
				}
			}
		default:
			want[name] = true
		}
	}
	return want
}

// info answers INFO: the memory section has figures of the node's
// redis-server (storeMemory), asked for as INFO runs, and the keyspace a
// count of the rack (keyspace.go).
func (n *Node) info(args [][]byte, b *batch, complete func([]byte)) {
	answer := func(store string) {
		text := n.infoText(args, store)
		if wantsKeyspace(args) {
			n.keyspace(false, text, complete)
			return
		}
		complete(resp.AppendBulkString(nil, text))
	}
	if !chosenSections(args)["memory"] {
		answer("")
		return
	}
	n.onNode(b, n.self, [][]byte{[]byte("INFO"), []byte("memory")}, func(raw []byte, err error) {
		answer(storeMemory(raw, err))
	})
}

// storeMemory are the lines of INFO memory that come from the node's
// redis-server, from its answer to INFO memory: the scripts it caches
// (less troop's own, which it always holds) and the memory they take
// (troop's own included); none when it did not answer.
func storeMemory(raw []byte, err error) string {
	if err != nil {
		return ""
	}
	v, perr := resp.Parse(raw)
	if perr != nil || v.IsError() {
		return ""
	}
	var b strings.Builder
	for _, line := range strings.Split(string(v.Str), "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "number_of_cached_scripts":
			if k, err := strconv.Atoi(value); err == nil {
				fmt.Fprintf(&b, "number_of_cached_scripts:%d\r\n", max(k-len(troopScripts), 0))
			}
		case "used_memory_scripts":
			b.WriteString(name + ":" + value + "\r\n")
		}
	}
	return b.String()
}

// infoText is the node's INFO reply for the sections args name, in Redis's
// format, without the keyspace (keyspace.go adds it); store is what the
// memory section has of the node's redis-server (storeMemory).
func (n *Node) infoText(args [][]byte, store string) string {
	want := chosenSections(args)
	var b strings.Builder
	for _, s := range infoSections {
		if !want[s.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(s.name[:1]) + s.name[1:] + "\r\n")
		n.infoSection(&b, s.name, store)
	}
	return b.String()
}

func (n *Node) infoSection(b *strings.Builder, name, store string) {
	switch name {
	case "server":
		client, _, _ := n.Addrs()
		_, port, _ := net.SplitHostPort(client)
		up := time.Since(n.stats.started)
		fmt.Fprintf(b, "redis_version:%s\r\nredis_mode:standalone\r\ntroop_node:%s\r\nprocess_id:%d\r\ntcp_port:%s\r\nuptime_in_seconds:%d\r\nuptime_in_days:%d\r\n",
			n.redisVersion(), n.cfg.Name, os.Getpid(), port, int64(up.Seconds()), int64(up.Hours()/24))
		fmt.Fprintf(b, "datacenter:%s\r\nrack:%s\r\nread_consistency:%s\r\nwrite_consistency:%s\r\n",
			n.cfg.Datacenter, n.cfg.Rack, n.level(false), n.level(true))
	case "clients":
		fmt.Fprintf(b, "connected_clients:%d\r\nblocked_clients:%d\r\n", n.stats.connections.Load(), n.stats.blocked.Load())
	case "memory":
		b.WriteString(n.memoryInfo())
		b.WriteString(store)
	case "persistence":
		b.WriteString("loading:0\r\n")
	case "stats":
		fmt.Fprintf(b, "total_connections_received:%d\r\ninflight_requests:%d\r\nforwarded_requests:%d\r\nbusy_replies:%d\r\nquorum_failures:%d\r\ntimeouts:%d\r\n",
			n.stats.connsAccepted.Load(), n.inflight.Load(), n.stats.forwarded.Load(), n.stats.busy.Load(), n.stats.quorumFailures.Load(), n.stats.timeouts.Load())
		fmt.Fprintf(b, "acl_access_denied_auth:%d\r\nacl_access_denied_cmd:%d\r\n", n.stats.authFailures.Load()+n.stats.authRateLimited.Load(), n.stats.aclDenied.Load())
		fmt.Fprintf(b, "total_error_replies:%d\r\n", n.stats.replies.errors.Load())
	case "replication":
		// Replication is troop's, between nodes; to a client the node is a
		// master with no replicas of its own.
		b.WriteString("role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n")
	case "cpu":
		self, children := cpuUsage(syscall.RUSAGE_SELF), cpuUsage(syscall.RUSAGE_CHILDREN)
		fmt.Fprintf(b, "used_cpu_sys:%.6f\r\nused_cpu_user:%.6f\r\nused_cpu_sys_children:%.6f\r\nused_cpu_user_children:%.6f\r\n",
			self[0], self[1], children[0], children[1])
	case "commandstats":
		r := &n.stats.replies
		var names []string
		for name, c := range commandTable {
			if n.stats.commands[c.id].Load() > r.callsAtReset[c.id].Load() || r.failed[c.id].Load() > 0 || r.rejected[c.id].Load() > 0 {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			id := commandTable[name].id
			fmt.Fprintf(b, "cmdstat_%s:calls=%d,usec=0,usec_per_call=0.00,rejected_calls=%d,failed_calls=%d\r\n",
				strings.ToLower(name), n.stats.commands[id].Load()-r.callsAtReset[id].Load(), r.rejected[id].Load(), r.failed[id].Load())
		}
	case "errorstats":
		codes := n.stats.replies.codes()
		for _, code := range slices.Sorted(maps.Keys(codes)) {
			fmt.Fprintf(b, "errorstat_%s:count=%d\r\n", code, codes[code])
		}
	case "cluster":
		b.WriteString("cluster_enabled:0\r\n")
	}
}

// cpuUsage is the system and user CPU seconds of the process (RUSAGE_SELF)
// or of its children, as Redis's CPU section gives them.
func cpuUsage(who int) [2]float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) != nil {
		return [2]float64{}
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return [2]float64{seconds(ru.Stime), seconds(ru.Utime)}
}

// randomKeyScript answers a random key of the redis-server that is not
// troop's own (a version key or a tombstone), or nil when it holds none:
// a few random picks, then a scan, for a server that holds mostly
// tombstones.
const randomKeyScript = `
local prefix = '` + reservedPrefix + `'
local function users(k) return string.sub(k, 1, #prefix) ~= prefix end
for i = 1, 16 do
  local k = redis.call('RANDOMKEY')
  if not k then return false end
  if users(k) then return k end
end
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    if users(k) then return k end
  end
until cursor == '0'
return false
`

// randomKey answers RANDOMKEY: every rack holds every key, so a key of a
// node of this rack, the nodes asked in a random order until one holds a
// key. It is not uniform over the keys when the rack's nodes hold
// different numbers of keys.
func (n *Node) randomKey(b *batch, complete func([]byte)) {
	members := n.rackMembers()
	order := rand.Perm(len(members))
	eval := scriptArgs("EVAL", randomKeyScript, nil)
	var failures []string
	var try func(i int)
	try = func(i int) {
		if i == len(order) {
			if len(failures) > 0 {
				complete(resp.AppendError(nil, "ERR troop: RANDOMKEY found no key, and could not ask: "+strings.Join(failures, "; ")))
				return
			}
			complete(resp.AppendNullBulk(nil))
			return
		}
		m := members[order[i]]
		n.onNode(b, m, eval, func(raw []byte, err error) {
			v, perr := resp.Parse(raw)
			switch {
			case err != nil:
				failures = append(failures, m.name()+": "+err.Error())
			case perr != nil || v.IsError():
				failures = append(failures, m.name()+": "+cleanScriptError(raw))
			case !v.IsNull:
				complete(raw)
				return
			}
			b = nil // the callback runs off the connection's batch
			try(i + 1)
		})
	}
	try(0)
}
