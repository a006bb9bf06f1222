package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/resp"
)

// Membership changes (docs/store.md, Membership changes): the steps a
// change goes through reach every member as MEMBERSHIP peer requests; each
// member saves a step in troop_data_dir/membership.json before it routes
// by it, so a restarted node starts from the last step it took.

// membershipFile is where a node keeps the last membership step it took.
const membershipFile = "membership.json"

// changeDriver serialises the steps this node takes and the changes it
// drives.
type changeDriver struct {
	mu      sync.Mutex // one step taken at a time
	driving sync.Mutex // one change driven at a time
}

// loadMembership reads the step saved in dir; nil when there is none.
func loadMembership(dir string) (*membership.State, error) {
	raw, err := os.ReadFile(filepath.Join(dir, membershipFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	var s membership.State
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("membership: %s: %w", filepath.Join(dir, membershipFile), err)
	}
	return &s, nil
}

// saveMembership writes s to dir, through a temporary file and a rename,
// synced, so a crash leaves the old step or the new one.
func saveMembership(dir string, s membership.State) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, membershipFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, membershipFile))
}

// applyWrite applies a write on this node's replica (writeLocal) for a
// request routed by view v. While a change is under way, a write to a key
// whose owner in this rack changes, and of which this node is one owner,
// is copied once applied to the key's other owner (mirrored: old to new
// before the switch, and both ways, so that a cancel loses nothing), with
// the repair copy that never replaces a newer version; the write answers
// only when the copy is in, else it fails. Copies travel as HANDOFF, which
// the receiver does not mirror again. With no change under way this is
// writeLocal and one nil check.
func (n *Node) applyWrite(b *batch, tr *trace, v *view, version []byte, cmd *command, keys, args [][]byte, done func([]byte, error)) {
	if v.other == nil || n.noMirror || len(version) == 0 {
		n.writeLocal(b, tr, version, cmd, keys, args, done)
		return
	}
	var mkeys [][]byte
	var targets []*member
	for _, k := range keys {
		if t := v.mirrorTarget(n.token(k)); t != nil {
			mkeys = append(mkeys, append([]byte(nil), k...))
			targets = append(targets, t)
		}
	}
	if len(mkeys) == 0 {
		n.writeLocal(b, tr, version, cmd, keys, args, done)
		return
	}
	n.writeLocal(b, tr, version, cmd, keys, args, func(raw []byte, err error) {
		if err != nil || len(raw) == 0 || raw[0] == '-' {
			done(raw, err)
			return
		}
		n.mirror(mkeys, targets, func(merr error) {
			if merr != nil {
				n.stats.mirrorFailures.Add(1)
				done(resp.AppendError(nil, "ERR troop: the write was applied here, but a membership change is under way and its copy to the key's other owner failed: "+merr.Error()), nil)
				return
			}
			done(raw, nil)
		})
	})
}

// mirrorTarget returns the other owner, in this node's rack, of a token
// whose owner a change under way moves, when this node is one of its two
// owners; else nil.
func (v *view) mirrorTarget(t uint32) *member {
	if v.other == nil {
		return nil
	}
	mine := v.members[v.localRacks[0].ring.Owner(t)]
	theirs := v.other.members[v.other.localRacks[0].ring.Owner(t)]
	switch {
	case mine == theirs:
		return nil
	case mine.self:
		return theirs
	case theirs.self:
		return mine
	}
	return nil
}

// mirror copies each key to its target and calls done once all are in,
// with the first failure.
func (n *Node) mirror(keys [][]byte, targets []*member, done func(error)) {
	var mu sync.Mutex
	left := len(keys)
	var first error
	for i, k := range keys {
		t := targets[i]
		n.repair.copyKeyAs("HANDOFF", k, n.self, []*member{t}, nil, func(_ int, err error) {
			mu.Lock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %v", t.peerAddr, err)
			}
			left--
			last := left == 0
			mu.Unlock()
			if last {
				done(first)
			}
		})
	}
}
