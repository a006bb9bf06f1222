package kubechaos

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// MinReadyAnnotation, on a Deployment, ReplicaSet or StatefulSet, sets the
// least number of ready pods troop chaos leaves it with: a whole number
// ("2") or a percentage of its replicas ("50%", rounded up).
const MinReadyAnnotation = "troop.dev/min-ready"

// Budget is the part of a PodDisruptionBudget that MinReady reads.
type Budget struct {
	Name           string
	MinAvailable   *intstr.IntOrString
	MaxUnavailable *intstr.IntOrString
}

// MinReady is the least number of ready pods a workload with desired
// replicas must keep, and where it comes from:
//
//  1. the workload's troop.dev/min-ready annotation, when set;
//  2. else the strictest PodDisruptionBudget selecting its pods: its
//     minAvailable, or desired minus its maxUnavailable (percentages of
//     desired rounded up, as Kubernetes' disruption controller rounds
//     them);
//  3. else desired - 1: one pod may be down at a time.
//
// A bad annotation is an error naming it; a budget that does not parse is
// skipped, as the disruption controller would not enforce it either.
func MinReady(annotation string, budgets []Budget, desired int) (minReady int, from string, err error) {
	if annotation != "" {
		n, err := parseMinReady(annotation, desired)
		if err != nil {
			return 0, "", err
		}
		return n, fmt.Sprintf("annotation %s=%s", MinReadyAnnotation, annotation), nil
	}
	found := false
	for _, b := range budgets {
		var n int
		switch {
		case b.MinAvailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(b.MinAvailable, desired, true)
			if err != nil || v < 0 {
				continue
			}
			n = v
		case b.MaxUnavailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(b.MaxUnavailable, desired, true)
			if err != nil || v < 0 {
				continue
			}
			n = max(desired-v, 0)
		default:
			continue
		}
		if !found || n > minReady {
			minReady, from, found = n, "PodDisruptionBudget "+b.Name, true
		}
	}
	if found {
		return minReady, from, nil
	}
	return max(desired-1, 0), fmt.Sprintf("default: replicas - 1 = %d - 1", desired), nil
}

// parseMinReady reads the annotation's value against desired replicas.
func parseMinReady(s string, desired int) (int, error) {
	bad := fmt.Errorf("annotation %s=%q: want a whole number (2) or a percentage of the replicas (50%%)", MinReadyAnnotation, clip(s))
	v := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 || p != strings.TrimSpace(p) || strings.HasPrefix(p, "+") {
			return 0, bad
		}
		return (n*desired + 99) / 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || strings.HasPrefix(v, "+") {
		return 0, bad
	}
	return n, nil
}

// clip shortens what an error quotes back.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
