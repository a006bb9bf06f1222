package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// Partition cuts the traffic between an instance and the rest of its
// group, in one of the shapes of Jepsen's partitions.
const Partition Kind = "partition"

// PartitionMode is the shape of a partition.
type PartitionMode string

// The partition modes.
const (
	Isolate PartitionMode = "isolate" // the instance alone on one side, both ways
	Halves  PartitionMode = "halves"  // a minority with the instance, a majority without, both ways
	OneWay  PartitionMode = "one-way" // the instance sends to the rest but receives nothing from them
	Bridge  PartitionMode = "bridge"  // two halves that see each other only through the instance
)

// PartitionModes lists the modes in the order the docs name them.
var PartitionModes = []PartitionMode{Isolate, Halves, OneWay, Bridge}

var partitionKind = KindSpec{
	Kind: Partition, Temporary: true,
	Params: []Param{{
		Name:  "partition",
		Usage: "of a partition: isolate, halves, one-way or bridge (default isolate)",
		Set: func(a *Action, v string) error {
			if !slices.Contains(PartitionModes, PartitionMode(v)) {
				return fmt.Errorf("%q: want isolate, halves, one-way or bridge", v)
			}
			a.Partition = PartitionMode(v)
			return nil
		},
	}},
	Default: func(a *Action) {
		if a.Partition == "" {
			a.Partition = Isolate
		}
	},
	Describe:    func(a Action) string { return string(a.Partition) },
	Unsupported: map[Backend]string{Kubernetes: networkUnsupported},
}

// networkUnsupported is why the kubernetes backend has no network faults.
const networkUnsupported = "it does not reach a pod's network namespace"

// Cut is one direction of traffic a partition drops: every packet from
// From to To (instance IDs).
type Cut struct{ From, To string }

// PartitionCuts returns the directions of traffic a partition of mode
// around inst drops, where group holds the IDs of inst's group, inst among
// them. The sides are drawn from the group in ID order starting after
// inst, so that the same group and instance always give the same
// partition:
//
//   - isolate: {inst} and the rest, cut both ways;
//   - halves: a minority of n/2 (rounded down) holding inst and the IDs
//     after it, and the majority, cut both ways;
//   - one-way: inst receives nothing from the rest, and still sends;
//   - bridge: the rest split in two halves (the first one the smaller when
//     odd), cut from each other both ways; inst sees both.
//
// A partition that would leave a side empty is an error.
func PartitionCuts(mode PartitionMode, inst string, group []string) ([]Cut, error) {
	if !slices.Contains(group, inst) {
		return nil, fmt.Errorf("partition: %s is not in its group (%s)", inst, strings.Join(group, ", "))
	}
	ids := slices.Sorted(slices.Values(group))
	ids = slices.Compact(ids)
	i := slices.Index(ids, inst)
	others := append(slices.Clone(ids[i+1:]), ids[:i]...) // after inst, wrapping
	n := len(ids)
	if n < 2 {
		return nil, fmt.Errorf("partition %s of %s: its group has no other instance, so one side would be empty", mode, inst)
	}
	var a, b []string
	oneWay := false
	switch mode {
	case Isolate:
		a, b = []string{inst}, others
	case Halves:
		k := n / 2
		a, b = append([]string{inst}, others[:k-1]...), others[k-1:]
	case OneWay:
		a, b, oneWay = []string{inst}, others, true
	case Bridge:
		if n < 3 {
			return nil, fmt.Errorf("partition bridge of %s: its group has %d instances; a bridge needs one on each side of it, so at least 3", inst, n)
		}
		k := len(others) / 2
		a, b = others[:k], others[k:]
	default:
		return nil, fmt.Errorf("partition: unknown mode %q (want isolate, halves, one-way or bridge)", mode)
	}
	var cuts []Cut
	for _, x := range a {
		for _, y := range b {
			cuts = append(cuts, Cut{From: y, To: x})
			if !oneWay {
				cuts = append(cuts, Cut{From: x, To: y})
			}
		}
	}
	return cuts, nil
}
