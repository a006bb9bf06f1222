package reconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/troop-lab/troop/node/membership"
)

// file is where a node keeps the last membership step it took, in its
// data directory.
const file = "membership.json"

// Saved is what file holds: the step, and this node's address in it (the
// one its peers dial).
type Saved struct {
	Self string `json:"self"`
	membership.State
}

// Load reads the step saved in dir; nil when there is none.
func Load(dir string) (*Saved, error) {
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	var s Saved
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("membership: %s: %w", filepath.Join(dir, file), err)
	}
	return &s, nil
}

// save writes s to dir, through a temporary file and a rename, synced, so
// a crash leaves the old step or the new one.
func save(dir string, s Saved) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, file+".tmp")
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
	return os.Rename(tmp, filepath.Join(dir, file))
}
