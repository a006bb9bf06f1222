package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/netns"
)

func TestFreeSubnet(t *testing.T) {
	p := netip.MustParsePrefix
	for _, c := range []struct {
		name string
		used []netip.Prefix
		want string
	}{
		{"nothing used", nil, "10.231.0.0/24"},
		{"first taken", []netip.Prefix{p("10.231.0.0/24")}, "10.231.1.0/24"},
		{"a host route inside the first", []netip.Prefix{p("10.231.0.7/32")}, "10.231.1.0/24"},
		{"a wider network over the first two", []netip.Prefix{p("10.231.0.0/23")}, "10.231.2.0/24"},
		{"other networks", []netip.Prefix{p("192.0.2.0/24"), p("172.17.0.0/16"), p("127.0.0.0/8")}, "10.231.0.0/24"},
	} {
		got, ok := freeSubnet(c.used)
		if !ok || got.String() != c.want {
			t.Errorf("%s: %v %v, want %s", c.name, got, ok, c.want)
		}
	}
	if got, ok := freeSubnet([]netip.Prefix{p("10.0.0.0/8")}); ok {
		t.Errorf("all of 10/8 used: got %v", got)
	}
}

// netnsInode is the network namespace of pid, 0 if it is gone.
func netnsInode(pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	ino, _ := netns.Inode(f)
	return ino
}

// leftovers lists what is left on this machine of a lab in address mode:
// host interfaces marked with its directory or named after its network,
// host firewall rules naming its network, and processes in, or
// descriptors of, its namespaces.
func leftovers(t *testing.T, dir string, st *Status) []string {
	t.Helper()
	var left []string
	links, err := hostLinks()
	if err != nil {
		t.Fatal(err)
	}
	for name, alias := range links {
		if alias == aliasOf(dir) || (st.Network != nil && name == st.Network.Interface) {
			left = append(left, "interface "+name)
		}
	}
	// No firewall rule of the host's names the lab's network.
	if st.Network != nil {
		rules, err := netns.Run(nil, "", nil, "iptables", "-S")
		if err != nil {
			t.Fatal(err)
		}
		prefix := strings.TrimSuffix(st.Network.Subnet, "0/24")
		for _, r := range strings.Split(rules, "\n") {
			if strings.Contains(r, prefix) || strings.Contains(r, st.Network.Interface) {
				left = append(left, "host rule "+r)
			}
		}
	}
	ours := map[string]bool{}
	if st.Network != nil && st.Network.HubInode != 0 {
		ours[fmt.Sprintf("net:[%d]", st.Network.HubInode)] = true
	}
	for _, n := range st.Nodes {
		if n.NetnsInode != 0 {
			ours[fmt.Sprintf("net:[%d]", n.NetnsInode)] = true
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		links, _ := filepath.Glob(p + "/fd/*")
		for _, l := range append(links, p+"/ns/net") {
			if target, err := os.Readlink(l); err == nil && ours[target] && labProcess(atoi(filepath.Base(p)), dir) {
				left = append(left, l+" -> "+target+" ("+cmdline(atoi(filepath.Base(p)))+")")
			}
		}
	}
	return left
}

// labProcess says whether pid is this test or a process of the lab in dir
// (its command line names dir, or it runs in it). The kernel reuses a
// namespace's inode number once the namespace is gone: a lab another test
// starts meanwhile may get this lab's numbers.
func labProcess(pid int, dir string) bool {
	if pid == os.Getpid() || strings.Contains(cmdline(pid), dir) {
		return true
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && strings.HasPrefix(cwd, dir)
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

func waitNothingLeft(t *testing.T, dir string, st *Status, what string) {
	t.Helper()
	var left []string
	if !waitUntil(func() bool { left = leftovers(t, dir, st); return len(left) == 0 }, 5*time.Second) {
		t.Errorf("%s: left behind after 5s:\n%s", what, strings.Join(left, "\n"))
	}
}

func TestAddressMode(t *testing.T) {
	needRedis(t)
	dir := t.TempDir()
	l, r := startLab(t, Spec{Dir: dir, Shape: Shape{1, 3, 1}, Netns: true, NodeCommand: standIn, ReplaceAfter: 300 * time.Millisecond})
	st := l.Status()
	nw := st.Network
	if nw == nil || !strings.HasPrefix(nw.Interface, "troop") || len(nw.Interface) > 15 {
		t.Fatalf("network: %+v", nw)
	}
	subnet := netip.MustParsePrefix(nw.Subnet)
	if links, _ := hostLinks(); links[nw.Interface] != aliasOf(dir) {
		t.Errorf("host interface %s has alias %q, want %q", nw.Interface, links[nw.Interface], aliasOf(dir))
	}
	self, _ := os.Open("/proc/self/ns/net")
	hostNS, _ := netns.Inode(self)
	self.Close()
	seen := map[uint64]string{}
	for _, n := range st.Nodes {
		ip := netip.MustParseAddr(n.IP)
		if !subnet.Contains(ip) || n.IP == nw.Host || !strings.HasPrefix(n.Listen, n.IP+":") || !strings.HasPrefix(n.Redis, n.IP+":") {
			t.Errorf("%s: ip %s, listen %s, redis %s in %s", n.Name, n.IP, n.Listen, n.Redis, nw.Subnet)
		}
		// The host reaches every node and redis-server at its address.
		if !pingOK(n.Listen) || !pingOK(n.Redis) {
			t.Errorf("%s does not answer PING at %s and %s", n.Name, n.Listen, n.Redis)
		}
		// The node and its redis-server share the position's namespace,
		// which is no other position's and not the host's.
		node, redis := netnsInode(n.NodePID), netnsInode(n.RedisPID)
		if node != n.NetnsInode || redis != n.NetnsInode || node == hostNS {
			t.Errorf("%s: node in namespace %d, redis in %d, recorded %d, host %d", n.Name, node, redis, n.NetnsInode, hostNS)
		}
		if other, dup := seen[node]; dup {
			t.Errorf("%s and %s share namespace %d", n.Name, other, node)
		}
		seen[node] = n.Name
	}

	// From inside a position, another's address is reachable over the bridge.
	ns, err := OpenNetns(st.Nodes[0].Node)
	if err != nil {
		t.Fatal(err)
	}
	var inside error
	if err := netns.Do(ns, func() error { inside = Ping(context.Background(), st.Nodes[1].Redis); return nil }); err != nil || inside != nil {
		t.Errorf("PING %s from %s's namespace: %v %v", st.Nodes[1].Redis, st.Nodes[0].Name, err, inside)
	}
	ns.Close()

	// A replaced process comes back in the same namespace.
	name := st.Nodes[1].Name
	old, err := l.Kill(name, RedisProc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "redis replaced", func() bool {
		n, _ := l.Status().Node(name)
		return n.RedisPID != old && n.RedisP.State == Running
	})
	now, _ := l.Status().Node(name)
	r.addStatus(l.Status())
	if got := netnsInode(now.RedisPID); got != now.NetnsInode {
		t.Errorf("the replacement runs in namespace %d, not %d", got, now.NetnsInode)
	}

	var table strings.Builder
	st.WriteTable(&table)
	if !strings.Contains(table.String(), "address mode") || !strings.Contains(table.String(), nw.Subnet) || !strings.Contains(table.String(), st.Nodes[2].Listen) {
		t.Errorf("status table:\n%s", table.String())
	}
	if env := strings.Join(st.EnvLines(), "\n"); !strings.Contains(env, "TROOP_NODES="+st.Nodes[0].Listen) || !strings.Contains(env, st.Nodes[2].Redis) {
		t.Errorf("env:\n%s", env)
	}

	// The check of what is left sees the lab while it runs: its hub and
	// node namespaces, its interface.
	hub := fmt.Sprintf("net:[%d]", nw.HubInode)
	if left := strings.Join(leftovers(t, dir, st), "\n"); !strings.Contains(left, hub) || !strings.Contains(left, "interface "+nw.Interface) {
		t.Errorf("while the lab runs, the leftovers check sees:\n%s\nwant the hub namespace %s and interface %s among them", left, hub, nw.Interface)
	}

	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	waitNothingLeft(t, dir, st, "after Stop")
	if _, err := OpenNetns(st.Nodes[0].Node); err == nil {
		t.Error("a stopped lab's namespace still opens")
	}
}

// Two labs starting at once get their own ids and subnets.
func TestAddressModeTwoLabs(t *testing.T) {
	needRedis(t)
	var (
		wg   sync.WaitGroup
		labs [2]*Lab
		errs [2]error
	)
	for i := range labs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labs[i], errs[i] = Start(t.Context(), Spec{Dir: t.TempDir(), Shape: Shape{1, 2, 1}, Netns: true, NodeCommand: standIn})
		}()
	}
	wg.Wait()
	for i, l := range labs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { l.Stop() })
	}
	a, b := labs[0].Status(), labs[1].Status()
	if a.Network.ID == b.Network.ID || a.Network.Subnet == b.Network.Subnet {
		t.Fatalf("two labs share a name or subnet: %+v and %+v", a.Network, b.Network)
	}
	for _, st := range []*Status{a, b} {
		for _, n := range st.Nodes {
			if !pingOK(n.Listen) {
				t.Errorf("%s of %s does not answer", n.Name, st.Dir)
			}
		}
	}
}

// A SIGKILLed supervisor leaves nothing behind, and the next up in its
// directory removes what a stray process might have kept.
func TestAddressModeSupervisorKilled(t *testing.T) {
	needRedis(t)
	dir := t.TempDir()
	r := newReaper(t)
	t.Cleanup(func() { Down(context.Background(), dir) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	up := func() *Status {
		t.Helper()
		st, _, err := Up(t.Context(), Spec{Dir: dir, Shape: Shape{1, 2, 1}, Netns: true, Troop: exe, ReplaceAfter: time.Second, StopGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r.addStatus(st)
		return st
	}
	st := up()
	if st.Network == nil || !pingOK(st.Nodes[1].Listen) {
		t.Fatalf("up: network %+v", st.Network)
	}
	_, _, err = Up(t.Context(), Spec{Dir: dir, Shape: Shape{1, 2, 1}, Troop: exe})
	if want := "a lab in address mode (--netns) already runs in " + dir + ", asked for one on loopback"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("up on loopback over a lab in address mode: %v", err)
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNothingLeft(t, dir, st, "after the supervisor's SIGKILL")

	// Plant what a lab could leave if a process kept its namespace: an
	// interface marked with the directory. The next up removes it.
	planted := "troopzz" + fmt.Sprint(os.Getpid()%10000)
	t.Cleanup(func() { netns.Run(nil, "", nil, "ip", "link", "del", planted) })
	if _, err := netns.Run(nil, "", nil, "ip", "link", "add", planted, "type", "veth", "peer", "name", planted+"p"); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Run(nil, "", nil, "ip", "link", "set", planted, "alias", aliasOf(dir)); err != nil {
		t.Fatal(err)
	}
	st2 := up()
	if links, _ := hostLinks(); links[planted] != "" {
		t.Errorf("up left %s, marked with its directory", planted)
	}
	if _, ok := hostLinksMust(t)[st2.Network.Interface]; !ok || !pingOK(st2.Nodes[0].Listen) {
		t.Fatalf("second up: network %+v", st2.Network)
	}
	if _, err := Down(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	waitNothingLeft(t, dir, st2, "after down")
}

func hostLinksMust(t *testing.T) map[string]string {
	t.Helper()
	links, err := hostLinks()
	if err != nil {
		t.Fatal(err)
	}
	return links
}
