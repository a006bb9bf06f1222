package reconfig

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/resp"
)

// fakeNode is a node whose peers answer MEMBERSHIP STATE from a table.
type fakeNode struct {
	self   string
	state  membership.State
	peers  map[string]membership.State // by address; absent: unreachable
	routed string                      // the self of the last step routed by
}

func (f *fakeNode) Self() string            { return f.self }
func (f *fakeNode) SetSelf(addr string)     { f.self = addr }
func (f *fakeNode) State() membership.State { return f.state }
func (f *fakeNode) Route(s membership.State, self string, keep func() error) error {
	if err := keep(); err != nil {
		return err
	}
	f.state, f.routed, f.self = s, self, self
	return nil
}
func (f *fakeNode) Stream(context.Context, membership.Range, string) (int64, error) { return 0, nil }
func (f *fakeNode) Cleanup(context.Context) (int64, error)                          { return 0, nil }
func (f *fakeNode) Ask(_ context.Context, m membership.Member, _ bool, args ...[]byte) ([]byte, error) {
	s, ok := f.peers[m.Addr]
	if !ok || string(args[0]) != "STATE" {
		return nil, errors.New("unreachable")
	}
	raw, _ := json.Marshal(s)
	return resp.AppendBulk(nil, raw), nil
}

func TestCatchUp(t *testing.T) {
	three := membership.Initial([]membership.Member{
		{Addr: "a:1", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}},
		{Addr: "b:1", DC: "dc1", Rack: "rack2", Tokens: []uint32{0}},
		{Addr: "c:1", DC: "dc1", Rack: "rack3", Tokens: []uint32{0}},
	})
	step := func(s membership.State, err error) membership.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	added := step(three.Add(membership.Member{Addr: "d:1", DC: "dc1", Rack: "rack1", Tokens: []uint32{1 << 31}}))
	replaced := step(step(step(three.Replace("c:1", membership.Member{Addr: "r:1"})).Advance()).Advance()) // stable: c:1 is gone
	// A node whose dyn_listen is 0.0.0.0:8101, known to its peers as c:1.
	local := three.Rename("c:1", "0.0.0.0:8101")

	for _, tc := range []struct {
		name      string
		self      string
		own       membership.State
		peers     map[string]membership.State
		wantEpoch uint64
		wantSelf  string
	}{
		{"a member that missed a step takes it", "c:1", three, map[string]membership.State{"a:1": added, "b:1": three}, 1, "c:1"},
		{"nobody answers: nothing changes", "c:1", three, nil, 0, ""},
		{"an older step changes nothing", "c:1", added, map[string]membership.State{"a:1": three, "b:1": three}, 1, ""},
		{"a joining node learns nothing", "j:1", membership.Initial(three.New), map[string]membership.State{"a:1": added}, 0, ""},
		{"0.0.0.0 takes the name its peers give", "0.0.0.0:8101", local, map[string]membership.State{"a:1": added}, 1, "c:1"},
		{"a replaced node does not take its replacement's name", "c:1", three, map[string]membership.State{"a:1": replaced, "b:1": replaced}, 3, "c:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNode{self: tc.self, state: tc.own, peers: tc.peers}
			d := New(f, Config{Dir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			d.CatchUp(context.Background())
			if f.state.Epoch != tc.wantEpoch || f.routed != tc.wantSelf {
				t.Fatalf("routes by step %d as %q, want %d as %q", f.state.Epoch, f.routed, tc.wantEpoch, tc.wantSelf)
			}
			if tc.wantSelf != "" {
				saved, err := Load(d.cfg.Dir)
				if err != nil || saved == nil || saved.Epoch != tc.wantEpoch || saved.Self != tc.wantSelf {
					t.Fatalf("saved %+v, %v", saved, err)
				}
			}
		})
	}
}
