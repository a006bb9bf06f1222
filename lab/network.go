package lab

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/troop-lab/troop/internal/netns"
)

// Address mode (Spec.Netns) gives every position its own Linux network
// namespace, holding its troop node and its redis-server, with its own
// address on a bridge of the lab's own. A fault can then come between two
// nodes: the chaos kinds partition, loss and delay act on the traffic
// between these addresses.
//
//	host: troop<id> 10.231.S.1/24 ──veth── hub namespace: bridge br0
//	                                          ├─ p1 ──veth── eth0 10.231.S.11/24 (position 1)
//	                                          ├─ p2 ──veth── eth0 10.231.S.12/24 (position 2)
//	                                          └─ ...
//
// The namespaces are anonymous, held open by the supervisor's file
// descriptors (and by the processes inside), so that when the supervisor
// dies, even by SIGKILL, the kernel removes them with every veth pair that
// has an end inside, the host's troop<id> among them. Nothing of a lab is
// visible from the host but that interface: its name carries the lab's
// random id, and its alias the lab's directory, which is what a later up
// or down in the same directory looks for (sweepNetwork) and all it ever
// deletes. No firewall rule is ever added on the host.

// Ports in address mode: every position has its own address, so all take
// Dynomite's defaults.
const (
	netListenPort = 8102
	netDynPort    = 8101
	netStatsPort  = 22222
	netRedisPort  = 6379
)

// NetworkStatus is a lab's own network in address mode.
type NetworkStatus struct {
	ID        string `json:"id"`        // random, unique among the labs of the machine
	Interface string `json:"interface"` // the host's end of the lab's network: troop<id>
	Subnet    string `json:"subnet"`    // e.g. 10.231.4.0/24
	Host      string `json:"host"`      // the host's address in it
	// HubInode is the bridge's namespace, for checks that nothing of the
	// lab outlives it.
	HubInode uint64 `json:"hub_netns_inode,omitempty"`
}

// subnets are where a lab's /24 is taken from.
var subnets = netip.MustParsePrefix("10.231.0.0/16")

// netLockFile serializes the labs of this machine while one picks its id
// and subnet and creates its host interface.
const netLockFile = "/run/troop-lab-network.lock"

// network is the namespaces and host interface of a lab in address mode.
type network struct {
	NetworkStatus
	hub   *os.File   // the bridge's namespace
	nodes []*os.File // each position's namespace, in position order
}

// aliasOf marks the host interface of the lab in dir.
func aliasOf(dir string) string { return "troop-lab " + dir }

// interfaceName is the host interface of lab id: at most 15 bytes, the
// kernel's limit.
func interfaceName(id string) string { return "troop" + id }

// createNetwork makes the namespaces of n positions, the bridge and the
// host's interface, and gives position i (from 0) the address .11+i (a
// lab has at most 64 positions: Shape.validate). Whatever an earlier lab
// in dir left is removed first. On error nothing it made is left. The
// caller has checked that this process is root (Spec.withDefaults).
func createNetwork(dir string, n int) (nw *network, err error) {
	if a := aliasOf(dir); len(a) > 255 {
		return nil, fmt.Errorf("lab address mode: directory %s is too long to mark the lab's interface with (at most %d bytes)", dir, 255-len(aliasOf("")))
	}
	if err := sweepNetwork(dir); err != nil {
		return nil, err
	}
	nw = &network{}
	defer func() {
		if err != nil {
			nw.close()
			nw = nil
		}
	}()
	if nw.hub, err = netns.New(); err != nil {
		return nw, err
	}
	if nw.HubInode, err = netns.Inode(nw.hub); err != nil {
		return nw, err
	}
	for range n {
		f, err := netns.New()
		if err != nil {
			return nw, err
		}
		nw.nodes = append(nw.nodes, f)
	}
	if err := nw.claim(dir); err != nil {
		return nw, err
	}
	// The hub: its end of the host's pair joins the bridge, and so does
	// one end of a pair per position, whose other end is the position's
	// eth0.
	hub := "link add br0 type bridge\nlink set br0 up\nlink set host master br0 up\n"
	for i := range n {
		hub += plugCommands(i, 3+i)
	}
	if _, err := netns.Run(nw.hub, hub, nw.nodes, "ip", "-batch", "-"); err != nil {
		return nw, fmt.Errorf("lab address mode: %w", err)
	}
	for i := range nw.nodes {
		if err := nw.addressPosition(i); err != nil {
			return nw, err
		}
	}
	return nw, nil
}

// plugCommands are the hub's ip commands that plug position i (from 0),
// whose namespace the command holds as fd, into the bridge: a veth pair,
// p<i+1> on the bridge and eth0 in the position's namespace.
func plugCommands(i, fd int) string {
	return fmt.Sprintf("link add p%d type veth peer name eth0 netns /proc/self/fd/%d\nlink set p%d master br0 up\n", i+1, fd, i+1)
}

// addressPosition brings position i's interfaces up, eth0 with its
// address.
func (nw *network) addressPosition(i int) error {
	cmds := fmt.Sprintf("link set lo up\naddr add %s/24 dev eth0\nlink set eth0 up\n", nw.addr(i))
	if _, err := netns.Run(nw.nodes[i], cmds, nil, "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("lab address mode: %w", err)
	}
	return nil
}

// addPosition makes the namespace of one more position in a running
// network, plugged into the bridge with the next address, and answers its
// index. On error nothing it made is left.
func (nw *network) addPosition() (int, error) {
	i := len(nw.nodes)
	if 11+i > 254 {
		return 0, fmt.Errorf("lab address mode: the lab's network has no address left for position %d", i+1)
	}
	f, err := netns.New()
	if err != nil {
		return 0, err
	}
	if _, err := netns.Run(nw.hub, plugCommands(i, 3), []*os.File{f}, "ip", "-batch", "-"); err != nil {
		f.Close()
		return 0, fmt.Errorf("lab address mode: %w", err)
	}
	nw.nodes = append(nw.nodes, f)
	if err := nw.addressPosition(i); err != nil {
		// Closing the namespace removes its veth pair with it.
		nw.nodes = nw.nodes[:i]
		f.Close()
		return 0, err
	}
	return i, nil
}

// claim picks the lab's id and subnet and creates the host's interface,
// under a machine-wide lock so that two labs starting at once do not pick
// the same.
func (nw *network) claim(dir string) error {
	lock, err := os.OpenFile(netLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lab address mode: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lab address mode: lock %s: %w", netLockFile, err)
	}
	links, err := hostLinks()
	if err != nil {
		return err
	}
	used, err := usedPrefixes()
	if err != nil {
		return err
	}
	subnet, ok := freeSubnet(used)
	if !ok {
		return fmt.Errorf("lab address mode: every /24 of %s overlaps a network of this machine", subnets)
	}
	for {
		var b [3]byte
		rand.Read(b[:])
		nw.ID = hex.EncodeToString(b[:])
		if _, taken := links[interfaceName(nw.ID)]; !taken {
			break
		}
	}
	nw.Interface = interfaceName(nw.ID)
	nw.Subnet = subnet.String()
	nw.Host = subnet.Addr().Next().String()
	if _, err := netns.Run(nil, "", []*os.File{nw.hub}, "ip", "link", "add", nw.Interface, "type", "veth", "peer", "name", "host", "netns", "/proc/self/fd/3"); err != nil {
		nw.Interface = "" // not made: close must not look for it
		return fmt.Errorf("lab address mode: %w", err)
	}
	// The alias is set outside ip's batch mode, whose quoting a directory
	// name could break.
	cmds := fmt.Sprintf("addr add %s/24 dev %s\nlink set %s up\n", nw.Host, nw.Interface, nw.Interface)
	if _, err := netns.Run(nil, "", nil, "ip", "link", "set", nw.Interface, "alias", aliasOf(dir)); err != nil {
		return fmt.Errorf("lab address mode: %w", err)
	}
	if _, err := netns.Run(nil, cmds, nil, "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("lab address mode: %w", err)
	}
	return nil
}

// addr is the address of position i (from 0).
func (nw *network) addr(i int) string {
	a := netip.MustParseAddr(nw.Host).As4()
	a[3] = byte(11 + i)
	return netip.AddrFrom4(a).String()
}

// nsPath is how other processes reach position i's namespace while this
// process holds it.
func (nw *network) nsPath(i int) (path string, ino uint64) {
	ino, _ = netns.Inode(nw.nodes[i])
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), nw.nodes[i].Fd()), ino
}

// close deletes the host's interface (its pair in the hub goes with it)
// and lets the namespaces go; the kernel removes them once the last
// process inside has exited. Safe on a partly created network.
func (nw *network) close() error {
	var err error
	if nw.Interface != "" {
		if _, e := netns.Run(nil, "", nil, "ip", "link", "del", nw.Interface); e != nil && linkExists(nw.Interface) {
			err = fmt.Errorf("lab address mode: %w", e)
		}
	}
	for _, f := range append(nw.nodes, nw.hub) {
		if f != nil {
			f.Close()
		}
	}
	nw.nodes, nw.hub = nil, nil
	return err
}

// sweepNetwork deletes what an earlier lab in dir left on the host: the
// interfaces whose alias names dir. The kernel removes a dead lab's
// namespaces by itself; only a namespace some stray process still held
// would keep its interface alive.
func sweepNetwork(dir string) error {
	if os.Geteuid() != 0 {
		return nil // a lab in address mode needed root, so there is none
	}
	links, err := hostLinks()
	if err != nil {
		return err
	}
	var errs []error
	for name, alias := range links {
		if alias != aliasOf(dir) || !strings.HasPrefix(name, "troop") {
			continue
		}
		if _, err := netns.Run(nil, "", nil, "ip", "link", "del", name); err != nil && linkExists(name) {
			errs = append(errs, fmt.Errorf("lab address mode: remove %s left by an earlier lab: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// hostLinks maps the host's interfaces to their aliases.
func hostLinks() (map[string]string, error) {
	out, err := netns.Run(nil, "", nil, "ip", "-j", "link", "show")
	if err != nil {
		return nil, fmt.Errorf("lab address mode: %w", err)
	}
	var links []struct {
		Name  string `json:"ifname"`
		Alias string `json:"ifalias"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, fmt.Errorf("lab address mode: ip -j link show: %w", err)
	}
	m := map[string]string{}
	for _, l := range links {
		m[l.Name] = l.Alias
	}
	return m, nil
}

func linkExists(name string) bool {
	_, err := netns.Run(nil, "", nil, "ip", "link", "show", "dev", name)
	return err == nil
}

// usedPrefixes are the host's IPv4 networks: its addresses with their
// prefixes, and the destinations of its routes in every table.
func usedPrefixes() ([]netip.Prefix, error) {
	out, err := netns.Run(nil, "", nil, "ip", "-j", "-4", "addr", "show")
	if err != nil {
		return nil, fmt.Errorf("lab address mode: %w", err)
	}
	var ifs []struct {
		Addrs []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &ifs); err != nil {
		return nil, fmt.Errorf("lab address mode: ip -j addr show: %w", err)
	}
	var used []netip.Prefix
	for _, i := range ifs {
		for _, a := range i.Addrs {
			if p, err := netip.ParsePrefix(a.Local + "/" + strconv.Itoa(a.PrefixLen)); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	if out, err = netns.Run(nil, "", nil, "ip", "-j", "-4", "route", "show", "table", "all"); err != nil {
		return nil, fmt.Errorf("lab address mode: %w", err)
	}
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, fmt.Errorf("lab address mode: ip -j route show: %w", err)
	}
	for _, r := range routes {
		if p, err := netip.ParsePrefix(r.Dst); err == nil {
			used = append(used, p.Masked())
		} else if a, err := netip.ParseAddr(r.Dst); err == nil {
			used = append(used, netip.PrefixFrom(a, 32))
		}
		// "default" overlaps everything, and is what reaches outside: not
		// a network of this machine.
	}
	return used, nil
}

// freeSubnet returns the first /24 of subnets that overlaps none of used.
func freeSubnet(used []netip.Prefix) (netip.Prefix, bool) {
	base := subnets.Addr().As4()
	for i := range 256 {
		base[2] = byte(i)
		p := netip.PrefixFrom(netip.AddrFrom4(base), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// assignAddresses gives every position its own address in nw, with
// Dynomite's default ports, and records its namespace.
func (nw *network) assignAddresses(nodes []Node) {
	for i := range nodes {
		nw.assignAddress(&nodes[i], i)
	}
}

// assignAddress gives n the address of position i and its namespace.
func (nw *network) assignAddress(n *Node, i int) {
	n.IP = nw.addr(i)
	n.Listen = net.JoinHostPort(n.IP, strconv.Itoa(netListenPort))
	n.DynListen = net.JoinHostPort(n.IP, strconv.Itoa(netDynPort))
	n.StatsListen = net.JoinHostPort(n.IP, strconv.Itoa(netStatsPort))
	n.Redis = net.JoinHostPort(n.IP, strconv.Itoa(netRedisPort))
	n.Netns, n.NetnsInode = nw.nsPath(i)
}

// OpenNetns opens the network namespace of a position of a running lab in
// address mode, for code that acts inside it (netns.Do): chaos faults,
// tests. Close it when done.
func OpenNetns(n Node) (*os.File, error) {
	if n.Netns == "" {
		return nil, fmt.Errorf("%s has no network namespace of its own: the lab is not in address mode (troop lab up --netns)", n.Name)
	}
	f, err := netns.Open(n.Netns, n.NetnsInode)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (is its lab still running?)", n.Name, err)
	}
	return f, nil
}
