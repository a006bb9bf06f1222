package fault

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/internal/netns"
	"github.com/troop-lab/troop/lab"
)

// delay holds every packet the instance sends to a peer for the delay,
// give or take the jitter: with netem where the kernel has it (a prio
// qdisc on the interface toward the peers whose fourth band, chosen by
// u32 filters on the peers' addresses, is a netem), else with a user-space
// queue (queue.go) held by a troop chaos delay process, started in its own
// session, that ends by itself at the lease's end, or when the namespace
// has lost its network.
type delay struct{}

func init() { register(chaos.Delay, delay{}) }

// netemAvailable reports whether the kernel has netem: it tries one on the
// loopback of a namespace made for the purpose and dropped at once.
var netemAvailable = sync.OnceValue(func() bool {
	ns, err := netns.New()
	if err != nil {
		return false
	}
	defer ns.Close()
	_, err = netns.Run(ns, "", nil, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	return err == nil
})

func (delay) Apply(ctx context.Context, t Target) error {
	if netemAvailable() {
		_, err := inNetns(t.Node, func(ns *os.File) error { return netemAdd(ns, t) })
		return err
	}
	return queueAdd(ctx, t)
}

func (delay) Revert(_ context.Context, t Target) error {
	name := tag(t.Lease.ID)
	err := eachNetns([]Node{t.Node}, true, func(_ Node, ns *os.File) error {
		err := deleteChain(ns, name)
		if netemAvailable() {
			err = errors.Join(err, netemDelete(ns, netemHandle(name)))
		}
		return err
	})
	err = errors.Join(err, endQueues(name))
	os.Remove(queueLog(name))
	return err
}

func (delay) Present(_ context.Context, t Target) (bool, error) {
	name := tag(t.Lease.ID)
	if len(queueProcesses(name)) > 0 {
		return true, nil
	}
	found := false
	err := eachNetns([]Node{t.Node}, true, func(_ Node, ns *os.File) error {
		has, err := hasChain(ns, name)
		if err == nil && !has && netemAvailable() {
			var devs []string
			devs, err = netemRoots(ns, netemHandle(name))
			has = len(devs) > 0
		}
		found = has
		return err
	})
	return found, err
}

// queueNumber is the NFQUEUE of a fault: from its tag, so that a revert
// without undo data finds the same.
func queueNumber(tag string) uint16 {
	sum := sha256.Sum256([]byte(tag))
	return binary.BigEndian.Uint16(sum[:])
}

// queueLog is where a delay queue process writes.
func queueLog(tag string) string { return filepath.Join(os.TempDir(), tag+".log") }

// queueAdd starts the queue process, waits until it holds its queue, and
// only then sends the instance's packets to its peers into the queue.
func queueAdd(ctx context.Context, t Target) error {
	name, q := tag(t.Lease.ID), queueNumber(tag(t.Lease.ID))
	if t.Troop == "" {
		return errors.New("delay: no troop binary to run the delay queue with")
	}
	a := t.Lease.Action
	argv := []string{t.Troop, "chaos", "delay",
		"--netns", t.Node.Netns, "--netns-inode", strconv.FormatUint(t.Node.NetnsInode, 10),
		"--queue", strconv.Itoa(int(q)), "--delay", a.Delay.String(), "--jitter", a.Jitter.String(),
		"--until", t.Lease.Until.UTC().Format(time.RFC3339Nano), "--tag", name}
	pid, err := lease.Spawn(argv, queueLog(name))
	if err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	// The process says when the kernel has bound its queue.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(queueLog(name))
		if strings.Contains(string(b), queueBoundMsg) {
			break
		}
		if _, alive := lab.StartTicks(pid); !alive {
			return fmt.Errorf("delay: the queue process (pid %d) exited: %s", pid, strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delay: the queue process (pid %d) did not hold queue %d within 5s: %s", pid, q, strings.TrimSpace(string(b)))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var rules []string
	for _, peer := range t.Peers {
		rules = append(rules, fmt.Sprintf("-d %s -j NFQUEUE --queue-num %d --queue-bypass", peer.IP, q))
	}
	if _, err := inNetns(t.Node, func(ns *os.File) error { return addChain(ns, name, []string{"OUTPUT"}, rules) }); err != nil {
		return fmt.Errorf("delay: %s: %w", t.Node.ID, err)
	}
	return nil
}

// endQueues ends the queue processes of a fault, found by the tag on
// their command lines: SIGTERM, so that they let every packet they hold
// go, then SIGKILL after 2 s.
func endQueues(tag string) error {
	var errs []error
	for _, pid := range queueProcesses(tag) {
		ticks, _ := lab.StartTicks(pid)
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Second)
		for lab.Ours(pid, ticks) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if lab.Ours(pid, ticks) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("delay: end queue process %d: %w", pid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// queueProcesses are the processes whose command line is troop chaos
// delay with --tag tag.
func queueProcesses(tag string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && args[1] == "chaos" && args[2] == "delay" && strings.Contains(string(b), "\x00--tag\x00"+tag+"\x00") {
			if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// netemHandle is the handle of the prio qdisc a delay puts at the root of
// the interface toward the peers, from the fault's tag; its netem is the
// next major number.
func netemHandle(tag string) uint16 { return queueNumber(tag)%0x7000 + 0x100 }

func netemAdd(ns *os.File, t Target) error {
	out, err := netns.Run(ns, "", nil, "ip", "-j", "route", "get", t.Peers[0].IP.String())
	if err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	var routes []struct {
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil || len(routes) == 0 || routes[0].Dev == "" {
		return fmt.Errorf("delay: no interface toward %s in %s's namespace", t.Peers[0].IP, t.Node.ID)
	}
	// The prio qdisc's default priority map uses its first three bands;
	// only the filters send packets to the fourth, the netem. A second
	// delay on the same interface fails here: the root is taken.
	h := netemHandle(tag(t.Lease.ID))
	a := t.Lease.Action
	var b strings.Builder
	fmt.Fprintf(&b, "qdisc add dev %s root handle %x: prio bands 4\n", routes[0].Dev, h)
	fmt.Fprintf(&b, "qdisc add dev %s parent %x:4 handle %x: netem delay %dus %dus\n", routes[0].Dev, h, h+1, a.Delay.Microseconds(), a.Jitter.Microseconds())
	for _, p := range t.Peers {
		fmt.Fprintf(&b, "filter add dev %s parent %x: protocol ip prio 1 u32 match ip dst %s/32 flowid %x:4\n", routes[0].Dev, h, p.IP, h)
	}
	if _, err := netns.Run(ns, b.String(), nil, "tc", "-batch", "-"); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	return nil
}

// netemRoots lists the interfaces of the namespace whose root qdisc has
// handle h.
func netemRoots(ns *os.File, h uint16) ([]string, error) {
	out, err := netns.Run(ns, "", nil, "tc", "-j", "qdisc", "show")
	if err != nil {
		return nil, fmt.Errorf("delay: %w", err)
	}
	var qdiscs []struct {
		Dev    string `json:"dev"`
		Handle string `json:"handle"`
		Root   bool   `json:"root"`
	}
	if err := json.Unmarshal([]byte(out), &qdiscs); err != nil {
		return nil, fmt.Errorf("delay: tc -j qdisc show: %w", err)
	}
	var devs []string
	for _, q := range qdiscs {
		if q.Root && q.Handle == fmt.Sprintf("%x:", h) {
			devs = append(devs, q.Dev)
		}
	}
	return devs, nil
}

// netemDelete removes the root qdisc with handle h from every interface
// of the namespace that has it; the interface gets its default back.
func netemDelete(ns *os.File, h uint16) error {
	devs, err := netemRoots(ns, h)
	for _, dev := range devs {
		if _, e := netns.Run(ns, "", nil, "tc", "qdisc", "del", "dev", dev, "root", "handle", fmt.Sprintf("%x:", h)); e != nil {
			err = errors.Join(err, fmt.Errorf("delay: %w", e))
		}
	}
	return err
}
