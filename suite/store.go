package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/troop-lab/troop/client"
)

// The stores a run names.
const (
	storeTroop    = "troop"
	storeDynomite = "Dynomite"
)

// Store is the store a run checked, as it names itself, and the levels its
// nodes apply to clients that set none.
type Store struct {
	Name    string `json:"name"`              // troop, Dynomite, redis-server, or Redis-protocol endpoints
	Version string `json:"version,omitempty"` // "" when the store does not say
	// Levels are its nodes' own levels ("DC_QUORUM", or "read DC_ONE,
	// write DC_QUORUM"), and LevelsFrom where the run learnt them: a
	// node's admin API, or --level. "" when nothing says.
	Levels     string `json:"levels,omitempty"`
	LevelsFrom string `json:"levels_from,omitempty"`
}

// String is "Dynomite 2046b05, at DC_QUORUM (its admin API at HOST:PORT)".
func (s Store) String() string {
	out := s.Name
	if s.Version != "" {
		out += " " + s.Version
	} else {
		out += " (version not given)"
	}
	switch {
	case s.Name == storeTroop:
		out += ", the level set per request by the run's clients"
		if s.Levels != "" {
			out += fmt.Sprintf(" (its own: %s)", s.Levels)
		}
	case s.Levels != "":
		out += fmt.Sprintf(", at %s (%s)", s.Levels, s.LevelsFrom)
	default:
		out += ", at a level nothing says (give it with --level)"
	}
	return out
}

// troopNodes says whether the cluster's nodes are troop's: they take the
// level per connection (TROOP CONSISTENCY), delays between nodes (TROOP
// FIT), a clock skew and lineage through their admin API. A lab's or a
// --cluster's nodes are, unless they are Dynomite's.
func (c *cluster) troopNodes() bool {
	return (c.kind == kindLab || c.kind == kindTroop) && len(c.nodes) > 0 && !c.nodes[0].Dynomite
}

// ownLevel is the level the cluster runs its clients' requests at where
// the client cannot choose one: its nodes' own, or OwnLevel when nothing
// said which.
func (c *cluster) ownLevel() string {
	if c.store.Levels == "" {
		return OwnLevel
	}
	return c.store.Levels
}

// readStore names the store behind the cluster and the levels it runs at:
// from a node's admin API where there is one (adminAddr, else the first
// node's), else from INFO over the client port, and the level from
// --level (cfg.Level) where nothing else says. A --level the admin API
// contradicts is an error.
func (c *cluster) readStore(ctx context.Context, cfg Config, adminAddr string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if adminAddr == "" && len(c.nodes) > 0 {
		adminAddr = c.nodes[0].Admin
	}
	if adminAddr != "" {
		name, version, err := client.Store(ctx, adminAddr)
		if err != nil {
			return err
		}
		levels, err := client.GetLevels(ctx, adminAddr)
		if err != nil {
			return err
		}
		c.store = Store{Name: name, Version: version, Levels: levels.String(), LevelsFrom: "its admin API at " + adminAddr}
		if name == storeTroop && c.kind == kindLab {
			c.store.Version = cfg.Version // the lab's nodes run this troop
		}
	} else {
		c.store = c.infoStore(ctx)
	}
	level := cfg.Level
	if level != "" {
		if level, err = client.ParseLevel(level); err != nil {
			return fmt.Errorf("--level: %w", err)
		}
	}
	switch {
	case level == "":
	case c.troopNodes():
		return fmt.Errorf("--level %s: troop nodes take the level per request, and the run sets each of its levels (levels: in --config)", cfg.Level)
	case c.store.Levels == "":
		c.store.Levels, c.store.LevelsFrom = level, "--level"
	case c.store.Levels != level:
		return fmt.Errorf("--level %s, but the cluster says it runs at %s (%s)", cfg.Level, c.store.Levels, c.store.LevelsFrom)
	}
	return nil
}

// infoStore names the store behind the first node's client port by its
// answer to INFO server: redis-server and its version, or a troop node
// (which gives the version of Redis it is compatible with, not its own).
// Endpoints that do not answer INFO (nutcracker) are named as such.
func (c *cluster) infoStore(ctx context.Context) Store {
	if c.kind == kindDynomite {
		// Described as Dynomite describes its cluster, with no admin
		// address to ask: INFO would reach its redis-servers.
		return Store{Name: storeDynomite}
	}
	unknown := Store{Name: "Redis-protocol endpoints"}
	if len(c.nodes) == 0 {
		return unknown
	}
	p, err := client.NewPlain([]string{c.nodes[0].Addr}, client.PlainOptions{Timeout: 5 * time.Second, Dial: c.dial})
	if err != nil {
		return unknown
	}
	defer p.Close()
	raw, err := p.Do(ctx, []byte("INFO"), []byte("server"))
	if err != nil || len(raw) == 0 || raw[0] != '$' {
		return unknown
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	switch {
	case fields["troop_node"] != "":
		return Store{Name: storeTroop}
	case fields["redis_version"] != "" && c.kind == kindRESP:
		return Store{Name: "redis-server", Version: fields["redis_version"]}
	}
	return unknown
}
