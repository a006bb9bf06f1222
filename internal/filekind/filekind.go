// Package filekind tells troop's JSON files apart, so that a verb given the
// wrong kind of file says what it was given and which verb reads it,
// instead of reading it as an empty one.
package filekind

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The kinds, as files name themselves in their "kind" key.
const (
	BenchResult = "troop bench result"
	RunReport   = "troop run report"
)

// readers say which verb reads each kind.
var readers = map[string]string{
	BenchResult: "troop bench compare",
	RunReport:   "troop run compare",
}

// Sniff says what kind of troop file data holds: its "kind" key, or for
// files written before it had one, the keys only that kind has. It is ""
// for JSON that is none of them, and an error for what is not a JSON object.
func Sniff(data []byte) (string, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return "", fmt.Errorf("not JSON (at byte %d: %v)", se.Offset, err)
		}
		return "", errors.New("not a JSON object")
	}
	if k, ok := keys["kind"]; ok {
		var kind string
		if json.Unmarshal(k, &kind) == nil && kind != "" {
			return kind, nil
		}
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := keys[n]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has("config", "rows", "totals", "client_cpu"):
		return BenchResult, nil
	case has("config", "verdict", "baseline"):
		return RunReport, nil
	}
	return "", nil
}

// Expect checks that data is a file of kind want, and otherwise says what
// it is instead, and which verb reads that.
func Expect(data []byte, want string) error {
	kind, err := Sniff(data)
	switch {
	case err != nil:
		return fmt.Errorf("not a %s: %w", want, err)
	case kind == want:
		return nil
	case kind == "":
		return fmt.Errorf("not a %s: it has none of its keys", want)
	case readers[kind] != "":
		return fmt.Errorf("not a %s but a %s: compare those with %s", want, kind, readers[kind])
	}
	return fmt.Errorf("not a %s but a %q file", want, kind)
}
