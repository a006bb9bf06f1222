// Package lease keeps troop chaos's leases (chaos.Lease: faults in place
// that must be undone at a set time) in a directory of JSON files, one per
// lease, and runs the watchdog that reverts one lease at its end.
//
// A directory rather than the records database because the watchdog is a
// separate, short-lived process started for every lease: a file it can read
// and delete without opening SQLite, and that a person can read and delete
// too.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos"
)

// Store is a directory of leases, <id>.json each. Several processes may
// use it at once: writes go through a temporary file and a rename, so a
// reader sees a whole lease or none.
type Store struct{ dir string }

// Open returns the store in dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("lease: empty lease directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// NewID returns a fresh lease ID: the start time and random bits, so that
// IDs sort by start and never collide.
func NewID(start time.Time) string {
	var b [6]byte
	rand.Read(b[:])
	return start.UTC().Format("20060102T150405.000000000Z") + "-" + hex.EncodeToString(b[:])
}

func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, `/\`) && id != "." && id != ".." && !strings.HasPrefix(id, ".")
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Save writes l, replacing the lease with the same ID.
func (s *Store) Save(l chaos.Lease) error {
	if !validID(l.ID) {
		return fmt.Errorf("lease: bad lease ID %q", l.ID)
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("lease %s: %w", l.ID, err)
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-"+l.ID+"-*")
	if err != nil {
		return fmt.Errorf("lease %s: %w", l.ID, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("lease %s: write: %w", l.ID, err)
	}
	if err := os.Rename(tmp.Name(), s.path(l.ID)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("lease %s: %w", l.ID, err)
	}
	return nil
}

// ErrNotFound is returned by Load for a lease that is not (or no longer)
// in the store.
var ErrNotFound = errors.New("lease not found")

// Load reads one lease.
func (s *Store) Load(id string) (chaos.Lease, error) {
	if !validID(id) {
		return chaos.Lease{}, fmt.Errorf("lease: bad lease ID %q", id)
	}
	data, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return chaos.Lease{}, fmt.Errorf("lease %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return chaos.Lease{}, fmt.Errorf("lease %s: %w", id, err)
	}
	var l chaos.Lease
	if err := json.Unmarshal(data, &l); err != nil {
		return chaos.Lease{}, fmt.Errorf("lease %s: bad file %s: %w", id, s.path(id), err)
	}
	if l.ID != id {
		return chaos.Lease{}, fmt.Errorf("lease %s: file %s holds lease %q", id, s.path(id), l.ID)
	}
	return l, nil
}

// List returns every lease in the store, oldest start first. A file that
// cannot be read is an error, not skipped: a lease nobody can read is a
// fault nobody will undo.
func (s *Store) List() ([]chaos.Lease, error) {
	names, err := filepath.Glob(filepath.Join(s.dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	var out []chaos.Lease
	var errs []error
	for _, name := range names {
		l, err := s.Load(strings.TrimSuffix(filepath.Base(name), ".json"))
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the glob: reverted meanwhile
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, errors.Join(errs...)
}

// Delete removes a lease; deleting one that is gone is not an error.
func (s *Store) Delete(id string) error {
	if !validID(id) {
		return fmt.Errorf("lease: bad lease ID %q", id)
	}
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lease %s: %w", id, err)
	}
	return nil
}

// RevertFunc undoes one lease's fault; see chaos.Reverter.
type RevertFunc func(ctx context.Context, l chaos.Lease) error

// Revert undoes l and then deletes it. The lease stays in the store when
// the revert fails, so that a later sweep tries again.
func (s *Store) Revert(ctx context.Context, l chaos.Lease, revert RevertFunc) error {
	if err := revert(ctx, l); err != nil {
		return fmt.Errorf("lease %s: revert %s of %s: %w", l.ID, l.Action, l.Instance.ID, err)
	}
	return s.Delete(l.ID)
}

// Sweep reverts the leases that match (all when match is nil), and that
// have expired at now unless all is true: a monkey that starts sweeps the
// expired ones, the global stop sweeps them all. It returns the leases it
// reverted; it tries every lease and joins the errors.
func (s *Store) Sweep(ctx context.Context, now time.Time, all bool, revert RevertFunc) ([]chaos.Lease, error) {
	ls, err := s.List()
	var done []chaos.Lease
	errs := []error{err}
	for _, l := range ls {
		if !all && !l.Expired(now) {
			continue
		}
		if err := s.Revert(ctx, l, revert); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, l)
	}
	return done, errors.Join(errs...)
}
