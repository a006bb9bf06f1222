// Package consistency holds troop's consistency levels and the quorum
// arithmetic that decides when a replicated request is done. Everything here
// is a pure function of its inputs.
package consistency

import (
	"fmt"
	"strings"
)

// Level is a consistency level, as in Dynomite.
type Level int

const (
	// DCOne waits for the replica in the coordinator's rack only.
	DCOne Level = iota
	// DCQuorum waits for a quorum of the local datacenter's replicas.
	DCQuorum
	// DCSafeQuorum waits for a quorum that agrees, and fails on any error.
	DCSafeQuorum
)

var levelNames = [...]string{DCOne: "DC_ONE", DCQuorum: "DC_QUORUM", DCSafeQuorum: "DC_SAFE_QUORUM"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("Level(%d)", int(l))
	}
	return levelNames[l]
}

// ParseLevel accepts a level's name in any case (DC_ONE, dc_quorum, ...).
func ParseLevel(s string) (Level, error) {
	for i, name := range levelNames {
		if strings.EqualFold(s, name) {
			return Level(i), nil
		}
	}
	return 0, fmt.Errorf("unknown consistency level %q (want DC_ONE, DC_QUORUM or DC_SAFE_QUORUM)", s)
}

// MarshalText and UnmarshalText let levels appear by name in JSON and YAML.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
