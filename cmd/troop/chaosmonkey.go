package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/monkey"
	"github.com/troop-lab/troop/chaos/records"
)

// openMonkey loads the config and opens what the acting chaos verbs share:
// the records database (db, or the config's db key), the lease directory
// next to it (DB.leases), the backends and the outage source. close
// closes the records.
func openMonkey(configPath, db string, opts backendOptions, seed uint64, log *slog.Logger) (m *monkey.Monkey, close func(), err error) {
	if configPath == "" {
		return nil, nil, errors.New("--config FILE is required")
	}
	cfg, err := chaos.LoadConfig(configPath)
	if err != nil {
		return nil, nil, err
	}
	if db == "" {
		db = cfg.Path(cfg.DB)
	}
	rec, err := records.Open(db, cfg.Retention)
	if err != nil {
		return nil, nil, err
	}
	leases, err := lease.Open(db + ".leases")
	if err != nil {
		rec.Close()
		return nil, nil, err
	}
	m = &monkey.Monkey{
		Config: cfg, Records: rec, Leases: leases, Seed: seed, Logger: log,
		Outage:        monkey.NewOutageChecker(cfg),
		Backend:       func(b chaos.Backend) (chaos.Terminator, error) { return newBackend(b, opts) },
		StartWatchdog: func(id string) error { return startWatchdog(leases.Dir(), id, opts) },
	}
	return m, func() { rec.Close() }, nil
}

// describe says what became of a termination, in one line.
func describe(t chaos.Termination) string {
	switch t.Outcome {
	case chaos.Executed:
		return fmt.Sprintf("%s %s of group %s (record %d)", t.Action, t.Instance.ID, t.Group, t.ID)
	case chaos.Skipped:
		if t.Reason == chaos.Leashed {
			return fmt.Sprintf("leashed (dry run): would %s %s of group %s; set leashed: false to act", t.Action, t.Instance.ID, t.Group)
		}
		return fmt.Sprintf("skipped %s in group %s: %s", t.Action, t.Group, t.Reason)
	}
	return fmt.Sprintf("%s of %s in group %s failed: %s", t.Action, t.Instance.ID, t.Group, t.Error)
}
