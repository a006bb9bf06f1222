package ldfi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/troop-lab/troop/fit"
)

// A Scenario reproduces one failure set: run Probes requests against Target
// under Scope; more than FailRatio of those that reach an injected point
// fail. `troop ldfi replay FILE` runs it.
type Scenario struct {
	Target    Spec     `json:"target"`
	Scope     string   `json:"scope"`
	Points    []string `json:"points"`
	Probes    int      `json:"probes"`
	FailRatio float64  `json:"fail_ratio"`
	Note      string   `json:"note,omitempty"`
}

// ReadScenario reads a scenario file, checking what replay needs.
func ReadScenario(r io.Reader) (Scenario, error) {
	var s Scenario
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	if _, err := fit.ParseScope(s.Scope); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	if s.Target.Kind == "" {
		return s, fmt.Errorf("scenario: no target kind")
	}
	if s.Probes < 1 || s.FailRatio < 0 || s.FailRatio >= 1 {
		return s, fmt.Errorf("scenario: probes %d, fail ratio %g: want at least 1 probe and a ratio in [0, 1)", s.Probes, s.FailRatio)
	}
	return s, nil
}

// WriteJSON writes the scenario, indented.
func (s Scenario) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// A Replay is the outcome of replaying a scenario.
type Replay struct {
	Experiment Experiment `json:"experiment"`
	Reproduced bool       `json:"reproduced"`
}

// RunScenario replays s against t.
func RunScenario(ctx context.Context, s Scenario, t Target, clock Clock) (Replay, error) {
	scope, err := fit.ParseScope(s.Scope)
	if err != nil {
		return Replay{}, err
	}
	cfg := Config{Probes: s.Probes, FailRatio: s.FailRatio}
	var f Formula
	e, err := experimentScope(ctx, cfg, t, &f, newAtoms([]fit.Fault{{Kind: fit.Error}}), clock, 1, scope)
	if err != nil {
		return Replay{}, err
	}
	return Replay{Experiment: e, Reproduced: e.Outcome == Failed}, nil
}
