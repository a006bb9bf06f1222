package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/node/reconfig"
	"github.com/troop-lab/troop/topology"
)

// A node is added to rack1 at the middle of its range and later removed,
// both under load through all three coordinators at DC_QUORUM: no
// acknowledged write is lost, the new owner holds exactly the keys of its
// range, the old owner none of them, and the removed node nothing.
func TestMembershipAddRemoveUnderLoad(t *testing.T) {
	if problems := membershipUnderLoad(t, ""); len(problems) > 0 {
		t.Fatalf("%d problems, the first ones:\n%s", len(problems), strings.Join(problems[:min(len(problems), 20)], "\n"))
	}
}

// loadModel is the writers' record: per key, the highest sequence number
// a write of it was acknowledged with.
type loadModel struct {
	mu     sync.Mutex
	acked  map[string]int
	fails  int
	writes int // acknowledged
}

// more waits until n more writes are acknowledged than now, for at most
// 2 minutes: the load is under way, whatever the time a busy machine
// gives it. It fails the test otherwise.
func (m *loadModel) more(t *testing.T, n int, what string) {
	t.Helper()
	if msg := m.awaitMore(n, what); msg != "" {
		t.Fatal(msg)
	}
}

// awaitMore is more for a goroutine other than the test's: it says what
// is missing ("" once the writes are there).
func (m *loadModel) awaitMore(n int, what string) string {
	m.mu.Lock()
	want := m.writes + n
	m.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		m.mu.Lock()
		got := m.writes - want + n
		m.mu.Unlock()
		if got >= n {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%d of %d writes acknowledged %s within 2 minutes", got, n, what)
		}
	}
}

// runWriters writes through every coordinator, one write every few
// milliseconds each, until stop closes (or each writer made max writes):
// mostly new keys, a quarter overwrites of earlier ones, each value a
// sequence number higher than the key's last.
func runWriters(t *testing.T, tc *testCluster, model *loadModel, round int, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		c := tc.client(w, "DC_QUORUM")
		wg.Add(1)
		go func() {
			defer wg.Done()
			const max = 5000
			tick := time.NewTicker(4 * time.Millisecond)
			defer tick.Stop()
			for seq := 1; seq <= max; seq++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				idx := seq
				if seq%4 == 0 {
					idx = seq / 2
				}
				key := fmt.Sprintf("r%d-w%d-%d", round, w, idx)
				v, err := c.try("SET", key, strconv.Itoa(seq))
				model.mu.Lock()
				if err == nil && !v.IsError() {
					model.writes++
				}
				if err == nil && !v.IsError() && model.acked[key] < seq {
					model.acked[key] = seq
				} else if err != nil || v.IsError() {
					model.fails++
				}
				model.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return &wg
}

func adminPost(t *testing.T, admin, path string, q url.Values) (int, reconfig.Report, string) {
	t.Helper()
	res, err := http.Post("http://"+admin+path+"?"+q.Encode(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var rep reconfig.Report
	json.Unmarshal(body, &rep)
	return res.StatusCode, rep, string(body)
}

// redisKeys lists the values troop keeps on a redis-server (not the
// version keys), with their values.
func redisKeys(t *testing.T, addr string) map[string]string {
	t.Helper()
	c := dial(t, addr)
	out := map[string]string{}
	cursor := "0"
	for {
		v := c.do("SCAN", cursor, "COUNT", "1000")
		for _, e := range v.Elems[1].Elems {
			k := string(e.Str)
			if !strings.HasPrefix(k, reservedPrefix) {
				out[k] = ""
			}
		}
		cursor = string(v.Elems[0].Str)
		if cursor == "0" {
			break
		}
	}
	for k := range out {
		out[k] = c.must("GET", k)
	}
	return out
}

// checkHandoff checks a moved range after its change: the new owner's
// redis-server holds the keys of the range that were written, each at
// least at its last acknowledged value (and, when exactly, no other key),
// and the old owner's none of them.
func checkHandoff(t *testing.T, n *Node, model *loadModel, r membership.Range, newRedis, oldRedis string, exactly bool) []string {
	var problems []string
	have, old := redisKeys(t, newRedis), redisKeys(t, oldRedis)
	model.mu.Lock()
	defer model.mu.Unlock()
	for k, v := range have {
		if !r.Contains(n.token([]byte(k))) {
			if exactly {
				problems = append(problems, fmt.Sprintf("the new owner holds %s, outside its range", k))
			}
			continue
		}
		if _, ok := model.acked[k]; !ok {
			seq, _ := strconv.Atoi(v)
			if seq == 0 {
				problems = append(problems, fmt.Sprintf("the new owner holds %s = %q, which nobody wrote", k, v))
			}
		}
	}
	var keys []string
	for k := range model.acked {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !r.Contains(n.token([]byte(k))) {
			continue
		}
		seq, _ := strconv.Atoi(have[k])
		if seq < model.acked[k] {
			problems = append(problems, fmt.Sprintf("the new owner holds %s = %q, older than its last acknowledged write %d", k, have[k], model.acked[k]))
		}
		if _, ok := old[k]; ok {
			problems = append(problems, fmt.Sprintf("the old owner still holds %s after cleanup", k))
		}
	}
	return problems
}

// checkReadBack reads every acknowledged key through each node at
// DC_QUORUM.
func checkReadBack(t *testing.T, addrs []string, model *loadModel) []string {
	var problems []string
	model.mu.Lock()
	defer model.mu.Unlock()
	for _, a := range addrs {
		c := dial(t, a)
		c.must("TROOP", "CONSISTENCY", "DC_QUORUM")
		for k, want := range model.acked {
			v, err := c.try("GET", k)
			if err != nil {
				return append(problems, fmt.Sprintf("GET %s through %s: %v", k, a, err))
			}
			if seq, _ := strconv.Atoi(string(v.Str)); v.IsError() || seq < want {
				problems = append(problems, fmt.Sprintf("GET %s through %s = %s, want at least %d", k, a, v, want))
			}
		}
	}
	return problems
}

// membershipUnderLoad runs the add and the removal and returns what the
// checks found; with a planted bug it returns after the add's checks.
func membershipUnderLoad(t *testing.T, bug string) []string {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum,
		configure: func(c *topology.Config) {
			c.PlantedBug = bug
			// The checks are of the handoff's own mirroring: anti-entropy
			// would repair the writes a broken mirror loses.
			c.AntiEntropyInterval = 0
		}})
	old := tc.nodes[0] // rack1's only node, token 0

	fresh, split := startJoining(t, tc)
	c := fresh.cfg
	model := &loadModel{acked: map[string]int{}}
	moved := membership.Range{Lo: old.cfg.Tokens[0], Hi: split}
	// Between the streaming and the switch, writes to keys of the moving
	// range land on the old owner, and only the mirror brings them to the
	// new one: the hook makes them, through every coordinator, whatever
	// the writers happen to do meanwhile.
	var moving []string
	for i := 0; len(moving) < 12; i++ {
		if k := fmt.Sprintf("after-stream-%d", i); moved.Contains(fresh.node.token([]byte(k))) {
			moving = append(moving, k)
		}
	}
	coordinators := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM"), tc.client(2, "DC_QUORUM")}
	var afterStream sync.Mutex
	seq := 0
	writeMoving := func() {
		afterStream.Lock()
		defer afterStream.Unlock()
		for i, k := range moving {
			seq++
			v, err := coordinators[i%len(coordinators)].try("SET", k, strconv.Itoa(seq))
			model.mu.Lock()
			if err == nil && !v.IsError() {
				model.acked[k] = seq
			} else {
				model.fails++
			}
			model.mu.Unlock()
		}
	}
	tc.nodes[1].node.changes.AfterStream = writeMoving
	tc.nodes[2].node.changes.AfterStream = writeMoving

	// The add, under load.
	changeUnderLoad(t, tc, model, 1, tc.nodes[1].cfg.StatsListen, "/cluster/add", url.Values{"addr": {c.DynListen}, "rack": {"rack1"}}, 4)
	t.Logf("add: %d keys acknowledged, %d writes failed", len(model.acked), model.fails)
	afterStream.Lock()
	if seq == 0 {
		t.Fatal("the change never ran the hook between its streaming and its switch")
	}
	afterStream.Unlock()
	problems := checkHandoff(t, fresh.node, model, moved, fresh.redis.Addr, old.redis.Addr, true)
	problems = append(problems, checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen, c.Listen}, model)...)
	if len(problems) > 0 || bug != "" {
		return problems
	}
	for _, tn := range append([]*testNode{fresh}, tc.nodes...) {
		d := tn.node.Describe()
		if len(d) != 4 {
			t.Fatalf("%s describes %d members after the add, want 4", tn.cfg.Name, len(d))
		}
	}

	// The removal, under load, driven from another node.
	changeUnderLoad(t, tc, model, 2, tc.nodes[2].cfg.StatsListen, "/cluster/remove", url.Values{"addr": {c.DynListen}}, 3)
	t.Logf("after the removal: %d keys acknowledged, %d writes failed", len(model.acked), model.fails)
	problems = checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen}, model)
	if left := redisKeys(t, fresh.redis.Addr); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("the removed node's redis-server still holds %d keys", len(left)))
	}
	if n := dial(t, fresh.redis.Addr).must("DBSIZE"); n != "0" {
		problems = append(problems, "the removed node's redis-server holds "+n+" keys (versions included)")
	}
	if v := dial(t, c.Listen).do("GET", "x"); !v.IsError() || string(v.Str) != "ERR troop: this node was removed from the cluster" {
		problems = append(problems, fmt.Sprintf("the removed node answered GET with %s", v))
	}
	// Every key of the range is back on the old owner.
	problems = append(problems, checkHandoff(t, old.node, model, moved, old.redis.Addr, fresh.redis.Addr, false)...)
	return problems
}

// changeUnderLoad runs writers (their round of keys) while admin's endpoint
// path makes a membership change, and fails the test unless the change
// ends stable with members members.
func changeUnderLoad(t *testing.T, tc *testCluster, model *loadModel, round int, admin, path string, params url.Values, members int) {
	t.Helper()
	stop := make(chan struct{})
	wg := runWriters(t, tc, model, round, stop)
	model.more(t, 30, "before the change")
	code, rep, body := adminPost(t, admin, path, params)
	model.more(t, 30, "after the change")
	close(stop)
	wg.Wait()
	if code != http.StatusOK || rep.State.Phase != membership.Stable || len(rep.State.New) != members {
		t.Fatalf("POST %s: %d %s", path, code, body)
	}
}

// startJoining starts a node with troop_join for rack1, at the middle of
// rack1's one range, and checks that it refuses clients meanwhile.
func startJoining(t *testing.T, tc *testCluster) (*testNode, uint32) {
	old := tc.nodes[0]
	split, err := membership.SplitToken([]membership.Member{{Addr: old.cfg.DynListen, DC: "dc1", Rack: "rack1", Tokens: old.cfg.Tokens}}, "dc1", "rack1")
	if err != nil {
		t.Fatal(err)
	}
	return startJoiningAt(t, tc, "rack1", split), split
}

// startJoiningAt starts a node with troop_join for rack at token, every
// node of tc its seeds, and checks that it refuses clients meanwhile.
func startJoiningAt(t *testing.T, tc *testCluster, rack string, token uint32) *testNode {
	c := topology.Default()
	c.Datacenter, c.Rack, c.Name = "dc1", rack, "dc1-"+rack+"-new"
	c.Listen, c.DynListen, c.StatsListen = freePort(t), freePort(t), freePort(t)
	c.Tokens, c.Timeout, c.Join, c.PlantedBug = []uint32{token}, 2*time.Second, true, tc.nodes[0].cfg.PlantedBug
	c.AntiEntropyInterval = tc.nodes[0].cfg.AntiEntropyInterval
	c.ReadConsistency, c.WriteConsistency = consistency.DCQuorum, consistency.DCQuorum
	c.DataDir = t.TempDir()
	for _, o := range tc.nodes {
		c.Seeds = append(c.Seeds, topology.Seed{Addr: o.cfg.DynListen, Rack: o.cfg.Rack, DC: o.cfg.Datacenter, Tokens: o.cfg.Tokens})
	}
	fresh := &testNode{t: t, cfg: c, redis: testredis.StartArgs(t), log: tc.nodes[0].log}
	c.Servers = []topology.Server{{Addr: fresh.redis.Addr, Weight: 1}}
	fresh.start()
	t.Cleanup(fresh.stop)
	waitPing(t, c.Listen)
	if v := dial(t, c.Listen).do("SET", "x", "1"); !v.IsError() || !strings.HasPrefix(string(v.Str), "TRYAGAIN") {
		t.Fatalf("a joining node answered SET with %s, want TRYAGAIN", v)
	}
	return fresh
}

// A new member that takes longer than a request's timeout to take its
// first step (a node that has just started, on a machine starved of CPU)
// does not fail the add: its steps go on the connection of long timeout.
func TestMembershipAddWaitsForASlowNewMember(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	fresh, _ := startJoining(t, tc)
	driver := tc.nodes[1]
	var slowed atomic.Bool
	fresh.node.changes.BeforeStep = func(membership.State) {
		if !slowed.Swap(true) {
			time.Sleep(driver.cfg.Timeout + time.Second)
		}
	}
	code, rep, body := adminPost(t, driver.cfg.StatsListen, "/cluster/add", url.Values{"addr": {fresh.cfg.DynListen}, "rack": {"rack1"}})
	if !slowed.Load() {
		t.Fatal("the new member was never asked to take a step")
	}
	if code != http.StatusOK || rep.State.Phase != membership.Stable || len(rep.State.New) != 4 {
		t.Fatalf("POST /cluster/add, the new member slower than the timeout (%v) at its first step: %d %s", driver.cfg.Timeout, code, body)
	}
}

// A replacement takes over every key of the node it replaces, which ends
// empty and refuses clients; the cluster serves throughout.
func TestMembershipReplace(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	gone := tc.nodes[1] // rack2's only node
	fresh := startJoiningAt(t, tc, "rack2", gone.cfg.Tokens[0])
	model := &loadModel{acked: map[string]int{}}
	stop := make(chan struct{})
	wg := runWriters(t, tc, model, 1, stop)
	model.more(t, 30, "before the replace")
	// The coordinator of one writer is the node replaced: its writes fail
	// once it is out, and are not acknowledged.
	code, rep, body := adminPost(t, tc.nodes[2].cfg.StatsListen, "/cluster/replace", url.Values{"old": {gone.cfg.DynListen}, "addr": {fresh.cfg.DynListen}})
	close(stop)
	wg.Wait()
	if code != http.StatusOK || rep.State.Phase != membership.Stable || len(rep.State.New) != 3 || len(rep.Moves) != 1 || rep.Moves[0].Range.Lo != rep.Moves[0].Range.Hi {
		t.Fatalf("POST /cluster/replace: %d %s", code, body)
	}
	whole := membership.Range{} // Lo == Hi: the whole ring
	problems := checkHandoff(t, fresh.node, model, whole, fresh.redis.Addr, gone.redis.Addr, true)
	problems = append(problems, checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[2].cfg.Listen, fresh.cfg.Listen}, model)...)
	if n := dial(t, gone.redis.Addr).must("DBSIZE"); n != "0" {
		problems = append(problems, "the replaced node's redis-server holds "+n+" keys")
	}
	if v := dial(t, gone.cfg.Listen).do("GET", "x"); !v.IsError() || string(v.Str) != "ERR troop: this node was removed from the cluster" {
		problems = append(problems, fmt.Sprintf("the replaced node answered GET with %s", v))
	}
	if len(problems) > 0 {
		t.Fatalf("%d problems, e.g.\n%s", len(problems), strings.Join(problems[:min(len(problems), 20)], "\n"))
	}
}

// A new node killed in the middle of its handoff leaves the cluster
// serving, with the change under way; cancel rolls it back though the
// node is still down; the node restarts and learns the cancel; a second
// add, killed again, is resumed once the node is back, and completes.
func TestMembershipKilledMidHandoffCancelResume(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	old := tc.nodes[0]
	fresh, split := startJoining(t, tc)
	addr := fresh.cfg.DynListen
	kill := func() { fresh.stop() }
	tc.nodes[1].node.changes.AfterStream = kill

	model := &loadModel{acked: map[string]int{}}
	stop := make(chan struct{})
	wg := runWriters(t, tc, model, 1, stop)
	model.more(t, 30, "before the add")
	code, rep, body := adminPost(t, tc.nodes[1].cfg.StatsListen, "/cluster/add", url.Values{"addr": {addr}, "rack": {"rack1"}})
	if code != http.StatusInternalServerError || !strings.Contains(rep.Error, "did not take step 2 (switched), so no member did") {
		t.Fatalf("add with the new node killed after streaming: %d %s", code, body)
	}
	model.more(t, 30, "after the add failed") // the cluster goes on serving, routed by the old members
	close(stop)
	wg.Wait()
	for _, tn := range tc.nodes {
		if st := tn.node.view().state; st.Phase != membership.Streaming || st.Epoch != 1 {
			t.Fatalf("%s holds step %d (%s), want 1 (streaming)", tn.cfg.Name, st.Epoch, st.Phase)
		}
	}
	if p := checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen}, model); len(p) > 0 {
		t.Fatalf("after the kill: %d problems, e.g. %s", len(p), p[0])
	}

	// Cancel, from another node, with the new node still down.
	code, rep, body = adminPost(t, tc.nodes[2].cfg.StatsListen, "/cluster/cancel", nil)
	if code != http.StatusOK || rep.State.Phase != membership.Stable || rep.State.Epoch != 2 || len(rep.State.New) != 3 || len(rep.Missed) == 0 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if d := tc.nodes[0].node.Describe(); len(d) != 3 {
		t.Fatalf("after the cancel rack1's node routes by %d members, want 3", len(d))
	}
	dial(t, tc.nodes[0].cfg.Listen).must("SET", "after-cancel", "1")

	// The node restarts, and catches up with the cancel it missed: it is
	// no member; a resume finds nothing under way.
	fresh.start()
	waitPing(t, fresh.cfg.Listen)
	waitUp(t, tc, addr)
	if st := fresh.node.view().state; st.Epoch != 2 || st.Phase != membership.Stable {
		t.Fatalf("the restarted node holds step %d (%s), want the cancel's 2 (stable)", st.Epoch, st.Phase)
	}
	if v := dial(t, fresh.cfg.Listen).do("GET", "x"); !v.IsError() || string(v.Str) != "ERR troop: this node was removed from the cluster" {
		t.Fatalf("the restarted node, no member, answered GET with %s", v)
	}
	if code, _, body := adminPost(t, tc.nodes[1].cfg.StatsListen, "/cluster/resume", nil); code != http.StatusConflict || !strings.Contains(body, "nothing to resume") {
		t.Fatalf("resume with nothing under way: %d %s", code, body)
	}

	// Add it again, killed again; resumed once it is back.
	stop = make(chan struct{})
	wg = runWriters(t, tc, model, 2, stop)
	model.more(t, 30, "before the second add")
	code, _, body = adminPost(t, tc.nodes[1].cfg.StatsListen, "/cluster/add", url.Values{"addr": {addr}, "rack": {"rack1"}})
	if code != http.StatusInternalServerError || !strings.Contains(body, "did not take step 4 (switched)") {
		t.Fatalf("second add with the new node killed: %d %s", code, body)
	}
	fresh.start()
	waitPing(t, fresh.cfg.Listen)
	waitUp(t, tc, addr)
	tc.nodes[1].node.changes.AfterStream = nil
	code, rep, body = adminPost(t, tc.nodes[2].cfg.StatsListen, "/cluster/resume", nil)
	model.more(t, 30, "after the resume")
	close(stop)
	wg.Wait()
	if code != http.StatusOK || rep.State.Phase != membership.Stable || rep.State.Epoch != 5 || len(rep.State.New) != 4 {
		t.Fatalf("resume: %d %s", code, body)
	}
	moved := membership.Range{Lo: old.cfg.Tokens[0], Hi: split}
	problems := checkHandoff(t, fresh.node, model, moved, fresh.redis.Addr, old.redis.Addr, true)
	problems = append(problems, checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen, fresh.cfg.Listen}, model)...)
	if len(problems) > 0 {
		t.Fatalf("%d problems, e.g.\n%s", len(problems), strings.Join(problems[:min(len(problems), 20)], "\n"))
	}
}

// waitUp waits until every node of tc holds the member at addr up: a
// restarted node is marked down until its heartbeats come back.
func waitUp(t *testing.T, tc *testCluster, addr string) {
	eventually(t, 10*time.Second, func() string {
		for _, tn := range tc.nodes {
			if m := tn.node.memberByAddr(addr); m != nil && m.isDown() {
				return fmt.Sprintf("%s holds %s down", tn.cfg.Name, addr)
			}
		}
		return ""
	})
}

// Two changes started at once on two nodes make two different steps of
// one epoch: a node holding one refuses the other, so the drivers stop.
func TestMembershipConflictingStep(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	n := tc.nodes[0].node
	st := n.view().state
	one, err := st.Add(membership.Member{Addr: freePort(t), DC: "dc1", Rack: "rack1", Tokens: []uint32{1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Add(membership.Member{Addr: freePort(t), DC: "dc1", Rack: "rack2", Tokens: []uint32{1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.changes.TakeStep(one, ""); err != nil {
		t.Fatal(err)
	}
	if err := n.changes.TakeStep(one, ""); err != nil {
		t.Fatalf("the same step again: %v", err)
	}
	if err := n.changes.TakeStep(other, ""); err == nil || !strings.Contains(err.Error(), "conflicting membership step: this node holds another step 1 (add ") {
		t.Fatalf("another step of the same epoch: %v", err)
	}
	if got := n.view().state; !reflect.DeepEqual(got, one) {
		t.Fatalf("the node routes by %+v, want the first step", got)
	}
}

// With the old owner down, the nodes of the other racks stream the range
// to the new one: every key written before is there after the add.
func TestMembershipAddWithOldOwnerDown(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	old := tc.nodes[0]
	fresh, split := startJoining(t, tc)
	model := &loadModel{acked: map[string]int{}}
	w := tc.client(1, "DC_QUORUM")
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("k%d", i)
		w.must("SET", k, "1")
		model.acked[k] = 1
	}
	old.stop()
	waitDown(t, tc.nodes[1:], old.cfg.DynListen)
	code, rep, body := adminPost(t, tc.nodes[2].cfg.StatsListen, "/cluster/add", url.Values{"addr": {fresh.cfg.DynListen}, "rack": {"rack1"}})
	if code != http.StatusOK || rep.State.Phase != membership.Stable || !slices.Contains(rep.Missed, old.cfg.DynListen) {
		t.Fatalf("add with the old owner down: %d %s", code, body)
	}
	moved := membership.Range{Lo: old.cfg.Tokens[0], Hi: split}
	have := redisKeys(t, fresh.redis.Addr)
	in := 0
	for k := range model.acked {
		if moved.Contains(fresh.node.token([]byte(k))) {
			in++
			if have[k] != "1" {
				t.Errorf("the new owner lacks %s", k)
			}
		}
	}
	if in == 0 || len(have) != in {
		t.Fatalf("the new owner holds %d keys, the range %d", len(have), in)
	}
	if p := checkReadBack(t, []string{fresh.cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen}, model); len(p) > 0 {
		t.Fatalf("%d problems, e.g. %s", len(p), p[0])
	}
}

// A node streams a moving range to its new owner at most
// troop_handoff_keys_per_sec keys a second, and copies every key of it.
func TestMembershipStreamRate(t *testing.T) {
	const rate = 20
	tc := startCluster(t, clusterOpts{racks: 1, configure: func(c *topology.Config) { c.HandoffKeysPerSec = rate }})
	old := tc.nodes[0]
	fresh, split := startJoining(t, tc)
	w := tc.client(0, "DC_ONE")
	moved := membership.Range{Lo: old.cfg.Tokens[0], Hi: split}
	in := 0
	for i := 0; in < 150; i++ {
		k := fmt.Sprintf("k%d", i)
		w.must("SET", k, "1")
		if moved.Contains(old.node.token([]byte(k))) {
			in++
		}
	}
	done := make(chan string, 1)
	go func() {
		code, _, body := adminPost(t, old.cfg.StatsListen, "/cluster/add", url.Values{"addr": {fresh.cfg.DynListen}, "rack": {"rack1"}})
		if code != http.StatusOK {
			done <- fmt.Sprintf("POST /cluster/add: %d %s", code, body)
		}
		close(done)
	}()
	// The limiter spaces the copies' starts a rate apart. When the new
	// owner holds fewer than k keys, fewer than k+handoffInflight copies
	// have started, so the last arrives at least in-k-handoffInflight
	// spacings later. That bound holds however late the observations are
	// (a starved test sees fewer of them, never a wrong one), and the
	// first, before the stream starts, is the strongest: without the
	// limiter the whole range landed 2.0 s after it on a busy machine,
	// against a bound of 4.3 s. Each key arrives with its version: two of
	// the new owner's keys.
	r := dial(t, fresh.redis.Addr)
	type seen struct {
		at   time.Time
		keys int
	}
	var partial []seen
	var full time.Time
	for deadline := time.Now().Add(2 * time.Minute); full.IsZero() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n, _ := strconv.Atoi(r.must("DBSIZE"))
		if now := time.Now(); (n+1)/2 >= in {
			full = now
		} else {
			partial = append(partial, seen{now, (n + 1) / 2})
		}
	}
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
	if full.IsZero() {
		t.Fatalf("the new owner never held the %d keys of its range within 2 minutes", in)
	}
	for _, p := range partial {
		if least := time.Duration(in-p.keys-handoffInflight) * time.Second / rate; full.Sub(p.at) < least {
			t.Fatalf("the new owner held %d of %d keys, and all of them %v later: faster than the %v %d keys/s allows", p.keys, in, full.Sub(p.at), least, rate)
		}
	}
	if n := len(redisKeys(t, fresh.redis.Addr)); n != in {
		t.Fatalf("the new owner holds %d keys, want %d", n, in)
	}
}

// A repair that reaches a moving key's old owner during a change (read
// repair, anti-entropy) reaches its new owner too, as a write does: the
// stream may have copied the key already.
func TestMembershipRepairMirrored(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	old := tc.nodes[0]
	fresh, split := startJoining(t, tc)
	moved := membership.Range{Lo: old.cfg.Tokens[0], Hi: split}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); moved.Contains(old.node.token([]byte(k))) {
			key = k
		}
	}
	tc.client(1, "DC_QUORUM").must("SET", key, "before")

	streamed, resume := make(chan struct{}), make(chan struct{})
	tc.nodes[1].node.changes.AfterStream = func() { close(streamed); <-resume }
	done := make(chan string, 1)
	go func() {
		code, _, body := adminPost(t, tc.nodes[1].cfg.StatsListen, "/cluster/add", url.Values{"addr": {fresh.cfg.DynListen}, "rack": {"rack1"}})
		if code != http.StatusOK {
			done <- fmt.Sprintf("POST /cluster/add: %d %s", code, body)
		}
		close(done)
	}()
	select {
	case <-streamed:
	case msg := <-done:
		t.Fatalf("the change ended before its switch: %s", msg)
	}
	if got := dial(t, fresh.redis.Addr).must("GET", key); got != "before" {
		t.Fatalf("the new owner holds %s = %q after the stream, want \"before\"", key, got)
	}
	// A repair of a newer copy, as another replica would send it.
	scratch := dial(t, old.redis.Addr)
	scratch.must("SET", "scratch", "repaired")
	dump := scratch.do("DUMP", "scratch").Str
	version := string(hlc.Encode(uint64(time.Now().Add(time.Hour).UnixMilli())<<16, 9))
	if got := dialPeer(t, old).must("REPAIR", key, version, string(dump), "-1", "-1"); got != "1" {
		t.Fatalf("REPAIR answered %s, want 1", got)
	}
	close(resume)
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
	if got := dial(t, fresh.redis.Addr).must("GET", key); got != "repaired" {
		t.Fatalf("the new owner holds %s = %q, want the repaired copy", key, got)
	}
}

// waitDown waits until every node of nodes holds the member at addr down.
func waitDown(t *testing.T, nodes []*testNode, addr string) {
	eventually(t, 10*time.Second, func() string {
		for _, tn := range nodes {
			if m := tn.node.memberByAddr(addr); m == nil || !m.isDown() {
				return fmt.Sprintf("%s does not hold %s down", tn.cfg.Name, addr)
			}
		}
		return ""
	})
}

// The membership endpoints are admin changes: POST only, with the token;
// bad parameters are a 400 and a refused change a 409 that says why.
func TestMembershipAdminEndpoints(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, configure: func(c *topology.Config) { c.AdminToken = "s3cret" }})
	admin := "http://" + tc.nodes[0].cfg.StatsListen
	call := func(method, path, token string) (int, string) {
		t.Helper()
		return adminCall(t, method, admin+path, token)
	}
	addr := url.QueryEscape(tc.nodes[0].cfg.DynListen)
	for _, c := range []struct {
		method, path, token string
		code                int
		want                string
	}{
		{"POST", "/cluster/remove?addr=" + addr, "", http.StatusUnauthorized, "needs the admin token"},
		{"GET", "/cluster/remove?addr=" + addr, "s3cret", http.StatusMethodNotAllowed, "answers POST or PUT only"},
		{"POST", "/cluster/add?rack=rack1", "s3cret", http.StatusBadRequest, "want addr=PEER_ADDRESS and rack=RACK"},
		{"POST", "/cluster/add?addr=x:1&rack=rack1&tokens=abc", "s3cret", http.StatusBadRequest, `"abc" is not a token`},
		{"POST", "/cluster/remove?addr=" + addr, "s3cret", http.StatusConflict, "is the last node of rack dc1/rack1"},
		{"POST", "/cluster/add?addr=x:1&rack=rack1&dc=dc9", "s3cret", http.StatusConflict, "adding a datacenter is not supported"},
		{"POST", "/cluster/resume", "s3cret", http.StatusConflict, "nothing to resume"},
		{"POST", "/cluster/cancel", "s3cret", http.StatusConflict, "nothing to cancel"},
		{"POST", "/cluster/grow", "s3cret", http.StatusNotFound, "want add, remove, replace, cancel or resume"},
		{"GET", "/cluster/membership", "", http.StatusOK, `"phase": "stable"`},
	} {
		if code, body := call(c.method, c.path, c.token); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want %d and %q", c.method, c.path, code, body, c.code, c.want)
		}
	}
}

// A member that missed a step while it was serving (its peers could not
// reach it) learns it from them within a period of its own look at them
// (catchUpEvery), without a restart, a resume or a cancel.
func TestMembershipCatchUpWhileRunning(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	fresh, split := startJoining(t, tc)
	step, err := tc.nodes[0].node.view().state.Add(membership.Member{Addr: fresh.cfg.DynListen, DC: "dc1", Rack: "rack1", Tokens: []uint32{split}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range []*testNode{fresh, tc.nodes[0], tc.nodes[1]} { // not tc.nodes[2]
		if err := tn.node.changes.TakeStep(step, tn.cfg.DynListen); err != nil {
			t.Fatal(err)
		}
	}
	if st := tc.nodes[2].node.view().state; st.Epoch != 0 {
		t.Fatalf("rack3's node holds step %d before it could look, want 0", st.Epoch)
	}
	eventually(t, catchUpEvery+3*time.Second, func() string {
		if st := tc.nodes[2].node.view().state; st.Epoch != 1 || st.Phase != membership.Streaming {
			return fmt.Sprintf("rack3's node holds step %d (%s), want 1 (streaming)", st.Epoch, st.Phase)
		}
		return ""
	})
	saved, err := reconfig.Load(tc.nodes[2].cfg.DataDir)
	if err != nil || saved == nil || saved.Epoch != 1 || saved.Self != tc.nodes[2].cfg.DynListen {
		t.Fatalf("rack3's node saved %+v, %v; want step 1 as %s", saved, err, tc.nodes[2].cfg.DynListen)
	}
}

// A fourth rack is added under load through three coordinators at
// DC_QUORUM: its node streams the whole ring from one of the racks while
// every write is mirrored to it, refuses clients until the switch, and
// ends holding every acknowledged key; every key reads back through each
// of the four nodes, which then count four racks (a quorum of three).
func TestMembershipAddRackUnderLoad(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum})
	fresh := startJoiningAt(t, tc, "rack4", 0)
	model := &loadModel{acked: map[string]int{}}
	tc.nodes[1].node.changes.AfterStream = func() { // writes land on the three racks after the streaming
		if v := dial(t, fresh.cfg.Listen).do("GET", "x"); !v.IsError() || !strings.HasPrefix(string(v.Str), "TRYAGAIN") {
			t.Errorf("the new rack's node answered GET with %s while streaming, want TRYAGAIN", v)
		}
		if msg := model.awaitMore(30, "after the streaming"); msg != "" {
			t.Error(msg)
		}
	}
	changeUnderLoad(t, tc, model, 1, tc.nodes[1].cfg.StatsListen, "/cluster/add", url.Values{"addr": {fresh.cfg.DynListen}, "rack": {"rack4"}}, 4)
	t.Logf("add rack: %d keys acknowledged, %d writes failed", len(model.acked), model.fails)
	var problems []string
	have := redisKeys(t, fresh.redis.Addr)
	model.mu.Lock()
	for k, want := range model.acked {
		if seq, _ := strconv.Atoi(have[k]); seq < want {
			problems = append(problems, fmt.Sprintf("the new rack holds %s = %q, want at least %d", k, have[k], want))
		}
	}
	model.mu.Unlock()
	problems = append(problems, checkReadBack(t, []string{tc.nodes[0].cfg.Listen, tc.nodes[1].cfg.Listen, tc.nodes[2].cfg.Listen, fresh.cfg.Listen}, model)...)
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("%d problems, e.g.\n%s", len(problems), strings.Join(problems[:min(len(problems), 20)], "\n"))
	}
	for _, tn := range append([]*testNode{fresh}, tc.nodes...) {
		if v := tn.node.view(); len(v.localRacks) != 4 || !v.ownRack || v.other != nil {
			t.Fatalf("%s routes by %d racks (own rack %v, change under way %v), want 4", tn.cfg.Name, len(v.localRacks), v.ownRack, v.other != nil)
		}
	}
}

// Cleanup's drop script deletes a key and its version only while the
// version is the one scanned: a key written since (a newer version), one
// whose version is gone, and one never scanned are kept.
func TestCleanupDropsOnlyScannedVersions(t *testing.T) {
	c := dial(t, testredis.Start(t).Addr)
	for _, k := range []string{"scanned", "rewritten", "unversioned"} {
		c.must("SET", k, "value")
	}
	c.must("SET", VersionPrefix+"scanned", "0001")
	c.must("SET", VersionPrefix+"rewritten", "0003") // scanned at 0002
	c.must("SET", VersionPrefix+"unscanned", "0004")
	got := c.must("EVAL", dropIfScript, "3", "scanned", "rewritten", "unversioned", "0001", "0002", "")
	if got != "1" {
		t.Errorf("the script dropped %s keys, want 1", got)
	}
	for k, want := range map[string]string{
		"scanned": "(nil)", VersionPrefix + "scanned": "(nil)",
		"rewritten": "value", VersionPrefix + "rewritten": "0003",
		"unversioned": "value", VersionPrefix + "unscanned": "0004",
	} {
		if v := c.must("GET", k); v != want {
			t.Errorf("GET %s = %s after the drop, want %s", k, v, want)
		}
	}
}
