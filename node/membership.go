package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/troop-lab/troop/node/membership"
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
