// Package chaostest has what the backends' tests share: exceptions parsed
// from patterns, and the sorted IDs of a list of instances.
package chaostest

import (
	"slices"

	"github.com/troop-lab/troop/chaos"
)

// Exceptions parses patterns as a config's exceptions; a bad pattern is a
// bug in the test, so it panics.
func Exceptions(patterns ...string) []chaos.Exception {
	var out []chaos.Exception
	for _, p := range patterns {
		e, err := chaos.ParseException(p)
		if err != nil {
			panic(err)
		}
		out = append(out, e)
	}
	return out
}

// IDs returns the instances' IDs, sorted.
func IDs(insts []chaos.Instance) []string {
	var out []string
	for _, in := range insts {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}
