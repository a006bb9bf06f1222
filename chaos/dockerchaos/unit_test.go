package dockerchaos

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/troop-lab/troop/chaos"
)

func TestCPUs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hc     container.HostConfig
		engine int
		want   int
	}{
		{"no limit: the engine's CPUs", container.HostConfig{}, 8, 8},
		{"half a CPU rounds up", container.HostConfig{Resources: container.Resources{NanoCPUs: 500_000_000}}, 8, 1},
		{"2.5 CPUs", container.HostConfig{Resources: container.Resources{NanoCPUs: 2_500_000_000}}, 8, 3},
		{"quota over the default period", container.HostConfig{Resources: container.Resources{CPUQuota: 200_000}}, 8, 2},
		{"quota over its period", container.HostConfig{Resources: container.Resources{CPUQuota: 150_000, CPUPeriod: 50_000}}, 8, 3},
		{"cpuset", container.HostConfig{Resources: container.Resources{CpusetCpus: "0-3,6"}}, 8, 5},
		{"bad cpuset: the engine's CPUs", container.HostConfig{Resources: container.Resources{CpusetCpus: "3-1"}}, 8, 8},
		{"never below one", container.HostConfig{}, 0, 1},
	} {
		if got := cpus(&tc.hc, tc.engine); got != tc.want {
			t.Errorf("%s: cpus = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestCpusetSize(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "0-3": 4, "0,2,4": 3, "0-1, 4-5": 4, "": 0, "a": 0, "2-1": 0, "-1": 0, "1-": 0} {
		if got := cpusetSize(s); got != want {
			t.Errorf("cpusetSize(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestRestartsAfterCrash(t *testing.T) {
	for _, tc := range []struct {
		p        container.RestartPolicy
		restarts int
		want     bool
	}{
		{container.RestartPolicy{Name: container.RestartPolicyAlways}, 5, true},
		{container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}, 0, true},
		{container.RestartPolicy{Name: container.RestartPolicyOnFailure}, 9, true},
		{container.RestartPolicy{Name: container.RestartPolicyOnFailure, MaximumRetryCount: 3}, 2, true},
		{container.RestartPolicy{Name: container.RestartPolicyOnFailure, MaximumRetryCount: 3}, 3, false},
		{container.RestartPolicy{Name: container.RestartPolicyDisabled}, 0, false},
		{container.RestartPolicy{}, 0, false},
	} {
		if got := restartsAfterCrash(tc.p, tc.restarts); got != tc.want {
			t.Errorf("restartsAfterCrash(%+v, %d) = %v, want %v", tc.p, tc.restarts, got, tc.want)
		}
	}
}

func TestListFilters(t *testing.T) {
	f := listFilters(map[string]string{"app": "web", "tier": ""})
	var labels []string
	for l := range f["label"] {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"app=web", "tier"}) || !f["status"]["running"] || len(f) != 2 {
		t.Errorf("listFilters = %v; want status=running, label app=web and label tier (present, any value)", f)
	}
}

func TestBurnTagDoesNotMatchLongerIDs(t *testing.T) {
	// The burner's command line holds the tag followed by its arguments.
	cmdline := "/bin/sh-c...troop-burn-cpu:a10:60" + "1"
	if !strings.Contains(cmdline, burnTag("a10")) || strings.Contains(cmdline, burnTag("a1")) {
		t.Errorf("tag a10 must match its own burner and tag a1 must not")
	}
}

// An engine that does not answer is a clear error, for listing instances
// and for a fault alike; no engine is needed for this test.
func TestEngineUnreachable(t *testing.T) {
	term, err := New("tcp://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := &chaos.Group{Name: "g", Backend: chaos.Docker, Selector: chaos.Selector{Labels: map[string]string{"app": "x"}}}
	_, err = term.Instances(ctx, g)
	const want = "Cannot connect to the Docker daemon at tcp://127.0.0.1:1"
	if err == nil || !strings.Contains(err.Error(), "docker backend: list containers of group g: "+want) {
		t.Errorf("instances: %v", err)
	}
	l := chaos.Lease{ID: "l", Instance: chaos.Instance{ID: "c1", Name: "c1"}, Peers: []chaos.Instance{{ID: "c2"}},
		Action: chaos.Action{Kind: chaos.Loss, Duration: time.Minute, Percent: 20}}
	if _, err := term.Begin(ctx, l); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("loss: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	p, err := network.ParsePort("8102/tcp")
	if err != nil {
		t.Fatal(err)
	}
	c := container.InspectResponse{NetworkSettings: &container.NetworkSettings{
		Networks: map[string]*network.EndpointSettings{"a": {IPAddress: netip.MustParseAddr("172.18.0.2")}, "b": {}},
		Ports: network.PortMap{p: {
			{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "8112"},
			{HostPort: "9000"}, // on every address of the host
		}},
	}}
	want := []string{"0.0.0.0:9000", "127.0.0.1:8112", "172.18.0.2"}
	if got := addresses(c); !slices.Equal(got, want) {
		t.Errorf("addresses = %q, want %q", got, want)
	}
	if got := addresses(container.InspectResponse{}); got != nil {
		t.Errorf("addresses without network settings = %q, want none", got)
	}
}
