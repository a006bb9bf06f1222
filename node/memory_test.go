package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/procmem"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

func TestMemBudget(t *testing.T) {
	b := memBudget{limit: 100}
	steps := []struct {
		op   string
		n    int64
		ok   bool
		used int64
	}{
		{"take", 60, true, 60},
		{"take", 50, false, 60}, // would pass the limit
		{"take", 40, true, 100}, // up to it is fine
		{"add", 30, true, 130},  // a reply is counted, limit or not
		{"take", 1, false, 130},
		{"give", 130, true, 0},
		{"take", 500, true, 500}, // larger than the limit, but alone
		{"take", 1, false, 500},
		{"give", 500, true, 0},
	}
	for i, s := range steps {
		ok := true
		switch s.op {
		case "take":
			ok = b.take(s.n)
		case "add":
			b.add(s.n)
		case "give":
			b.give(s.n)
		}
		if ok != s.ok || b.used.Load() != s.used {
			t.Fatalf("step %d, %s(%d): got %v with %d used, want %v with %d", i, s.op, s.n, ok, b.used.Load(), s.ok, s.used)
		}
	}
}

// countingWriter records each Write.
type countingWriter struct {
	writes [][]byte
	err    error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), c.err
}

func TestReplyWriter(t *testing.T) {
	out := &countingWriter{}
	w := replyWriter{w: out}
	w.write([]byte("+OK\r\n"))
	w.write([]byte(":1\r\n"))
	if len(out.writes) != 0 {
		t.Fatalf("wrote before a flush: %q", out.writes)
	}
	if err := w.release(); err != nil || w.buf != nil {
		t.Fatalf("release: err %v, buffer kept %v", err, w.buf != nil)
	}
	if len(out.writes) != 1 || string(out.writes[0]) != "+OK\r\n:1\r\n" {
		t.Fatalf("got writes %q, want the two replies in one", out.writes)
	}
	// A reply larger than the buffer goes out from where it lies, after
	// what was buffered before it, and the buffer never grows past its size.
	big := bytes.Repeat([]byte("x"), replyBufSize+1)
	w.write([]byte("+A\r\n"))
	w.write(big)
	w.write([]byte("+B\r\n"))
	if cap(*w.buf) != replyBufSize {
		t.Errorf("buffer grew to %d bytes, want %d", cap(*w.buf), replyBufSize)
	}
	w.release()
	got := out.writes[1:]
	if len(got) != 3 || string(got[0]) != "+A\r\n" || len(got[1]) != len(big) || string(got[2]) != "+B\r\n" {
		t.Errorf("got %d writes, want +A, the big reply, +B", len(got))
	}
	// After a write error, nothing more is written and the error stays.
	out.err = errors.New("broken pipe")
	w.write([]byte("+C\r\n"))
	w.flush()
	w.write([]byte("+D\r\n"))
	if err := w.release(); err == nil || len(out.writes) != 5 {
		t.Errorf("after a failed write: err %v, %d writes, want the error and no write after it", err, len(out.writes))
	}
}

// A node with a small memory budget, under a burst of large pipelined
// writes from many connections that would take several times the budget
// (redis-server paused while it arrives), refuses some of them with -BUSY
// instead of growing: its resident memory stays within the budget and a
// slack, and every write it acknowledged is there afterwards. The node runs as its own process (the troop binary),
// so that its memory is its own.
func TestMemoryBudgetRefusesABurst(t *testing.T) {
	const (
		budgetMB   = 64
		conns      = 16
		rounds     = 2
		depth      = 32
		valueBytes = 256 << 10 // offered at once: conns x depth x value = 128 MiB
		slackMB    = 48        // measured: 71 MiB peak; 1026 MiB with no budget to speak of
	)
	redis := startRedis(t)
	cfg := topology.Default()
	cfg.Name, cfg.Datacenter, cfg.Rack = "mem", "dc1", "rack1"
	cfg.Listen, cfg.DynListen, cfg.StatsListen = freePort(t), freePort(t), freePort(t)
	cfg.Servers = []topology.Server{{Addr: redis.Addr, Weight: 1}}
	cfg.Tokens = []uint32{0}
	cfg.MaxMemoryMB = budgetMB
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "node.yml")
	if err := os.WriteFile(path, cfg.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testlab.Troop(t), "node", "--config", path, "--log-level", "warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitPing(t, cfg.Listen)

	value := func(c, i int) []byte {
		v := bytes.Repeat([]byte{byte('a' + (c+i)%26)}, valueBytes)
		copy(v, fmt.Sprintf("%d:%d:", c, i))
		return v
	}
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, procmem.Read(cmd.Process.Pid).Total)
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	// The requests are made first, and redis-server stays paused until the
	// node has refused one with BUSY: no write completes before more than
	// the budget is offered, however fast the node reads and however slow
	// the test is.
	reqs := make([][][]byte, conns)
	clients := make([]*client, conns)
	for c := range conns {
		clients[c] = dial(t, cfg.Listen)
		for r := range rounds {
			var req []byte
			for i := r * depth; i < (r+1)*depth; i++ {
				req = resp.AppendCommand(req, []byte("SET"), []byte(fmt.Sprintf("mem:%d:%d", c, i)), value(c, i))
			}
			reqs[c] = append(reqs[c], req)
		}
	}
	redis.Cmd.Process.Signal(syscall.SIGSTOP)
	defer redis.Cmd.Process.Signal(syscall.SIGCONT)
	refused := make(chan error, 1)
	go func() {
		refused <- waitInfo(cfg.StatsListen, 2*time.Minute, func(i Info) bool { return i.Busy > 0 })
		redis.Cmd.Process.Signal(syscall.SIGCONT)
	}()
	var mu sync.Mutex
	acked := map[string][]int{} // conn -> indices of the writes answered +OK
	busy, other := 0, []string{}
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[c]
			for r, req := range reqs[c] {
				cl.c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := cl.c.Write(req); err != nil {
					mu.Lock()
					other = append(other, err.Error())
					mu.Unlock()
					return
				}
				for i := r * depth; i < (r+1)*depth; i++ {
					v, err := cl.rd.ReadValue()
					mu.Lock()
					switch {
					case err != nil:
						other = append(other, err.Error())
					case v.IsError() && strings.HasPrefix(string(v.Str), "BUSY"):
						busy++
					case v.IsError() || string(v.Str) != "OK":
						other = append(other, v.String())
					default:
						acked[strconv.Itoa(c)] = append(acked[strconv.Itoa(c)], i)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if err := <-refused; err != nil {
		t.Fatalf("with redis-server paused and %d MiB offered: %v", conns*depth*valueBytes>>20, err)
	}
	if len(other) > 0 {
		t.Fatalf("%d replies neither OK nor BUSY, first: %s\nnode log: %s", len(other), other[0], logs.String())
	}
	ok := 0
	for _, is := range acked {
		ok += len(is)
	}
	t.Logf("%d writes acknowledged, %d refused with BUSY; peak RSS %d MiB (budget %d MiB)", ok, busy, peak>>20, budgetMB)
	if busy == 0 || ok == 0 {
		t.Errorf("%d acknowledged and %d BUSY, want some of each", ok, busy)
	}
	if peak > (budgetMB+slackMB)<<20 {
		t.Errorf("peak RSS %d MiB, want at most the budget and slack, %d MiB", peak>>20, budgetMB+slackMB)
	}
	check := dial(t, cfg.Listen)
	for cs, is := range acked {
		c, _ := strconv.Atoi(cs)
		for _, i := range is {
			v := check.do("GET", fmt.Sprintf("mem:%d:%d", c, i))
			if !bytes.Equal(v.Str, value(c, i)) {
				t.Fatalf("acknowledged write mem:%d:%d: got %d bytes back, want its %d", c, i, len(v.Str), valueBytes)
			}
		}
	}
}

// nodeInfo is the node's /info at admin (host:port).
func nodeInfo(t *testing.T, admin string) Info {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + admin + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var info Info
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}

// waitInfo polls the node's /info at admin until ok holds of it, for at
// most within.
func waitInfo(admin string, within time.Duration, ok func(Info) bool) error {
	var last Info
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		res, err := http.Get("http://" + admin + "/info")
		if err != nil {
			continue
		}
		err = json.NewDecoder(res.Body).Decode(&last)
		res.Body.Close()
		if err == nil && ok(last) {
			return nil
		}
	}
	return fmt.Errorf("the node's /info never showed it (last: %d busy, %d in flight)", last.Busy, last.Inflight)
}
