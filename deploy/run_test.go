package deploy

// troop run on the Compose file's cluster, which troop did not start, with
// its faults through the chaos monkey's Docker backend.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/internal/netns"
	"github.com/troop-lab/troop/suite"
)

// troop run --cluster FILE --chaos-config F on the Compose file's 3-rack
// cluster: the chaos group selects its containers by label, they are
// matched to the nodes by address, the failure phase kills one of them
// (its restart policy brings it back) and the audit reads back every
// write; one nemesis fault, a partition, runs through the same backend.
func TestRunWithDockerChaos(t *testing.T) {
	image := testImage(t)
	svcs := startCluster(t, image, composeMembers(t, "compose/docker-compose.yml"))
	c, err := api.ContainerInspect(context.Background(), svcs[0].id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	network := c.Container.Config.Labels[networkLabel]
	dir := t.TempDir()

	// The nodes describe one another by their service names, which only
	// Docker's DNS on the cluster's network resolves: the run reads the
	// answer from a file with the containers' addresses in their place,
	// as a user outside that network would write it.
	res, err := http.Get("http://" + svcs[0].node.StatsListen + "/cluster_describe")
	if err != nil {
		t.Fatal(err)
	}
	described, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("cluster_describe: %s, %v", res.Status, err)
	}
	for _, s := range svcs {
		ip := s.node.Listen[:strings.LastIndexByte(s.node.Listen, ':')]
		described = []byte(strings.ReplaceAll(string(described), `"`+s.name+`:`, `"`+ip+`:`))
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	describe := write("cluster.json", string(described))
	chaosConfig := write("chaos.yml", fmt.Sprintf(`leashed: false
groups:
  - name: store
    backend: docker
    selector:
      labels: {%s: %s}
    probability: 1
`, networkLabel, network))
	runConfig := func(fault, nemesisFault time.Duration) string {
		return write("run.yml", fmt.Sprintf(`keys: 1000
readers_per_node: 2
writers_per_node: 2
baseline: 1s
fault: %s
kill_at: 2s
levels: [DC_QUORUM]
ldfi_max_faults: 0
register:
  duration: 1s
nemesis:
  faults: [partition]
  levels: [DC_QUORUM]
  fault: %s
  lead: 1s
  settle: 2s
`, fault, nemesisFault))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	troopRun := func(config, out string) *exec.Cmd {
		return exec.CommandContext(ctx, troopBin, "run", "--quick", "--config", config, "--out", out,
			"--cluster", describe, "--chaos-config", chaosConfig)
	}
	out := filepath.Join(dir, "out")
	output, err := troopRun(runConfig(12*time.Second, 2*time.Second), out).CombinedOutput()
	t.Logf("troop run:\n%s", output)
	if err != nil {
		t.Fatalf("troop run: %v", err)
	}
	rep := readReport(t, out)
	fp := rep.Failure
	if fp == nil || rep.Durability == nil {
		t.Fatalf("the failure phase or the audit did not run; not run: %q", rep.Skipped)
	}
	victim := ""
	for _, s := range svcs {
		if strings.HasPrefix(fp.Node, s.node.Name+" (docker "+network+"-"+s.name+")") {
			victim = s.id
		}
	}
	if victim == "" || fp.RecoverySeconds <= 0 || len(fp.Events) != 2 {
		t.Errorf("failure phase on %q (want a node and its container), recovered in %.1f s, events %+v", fp.Node, fp.RecoverySeconds, fp.Events)
	} else if vc, err := api.ContainerInspect(ctx, victim, client.ContainerInspectOptions{}); err != nil || vc.Container.RestartCount < 1 {
		t.Errorf("the victim's container was not restarted by its policy: %v", err)
	}
	if rep.Durability.Keys == 0 {
		t.Errorf("the audit read back no key: %+v", rep.Durability)
	}
	if n := rep.Nemesis; n == nil || len(n.Rounds) != 1 || n.Rounds[0].Error != "" || n.Rounds[0].Healed <= 0 || n.ReplicasNote == "" {
		t.Errorf("nemesis: %+v", n)
	}
	if len(rep.Verdict.Held)+len(rep.Verdict.Broke) == 0 {
		t.Errorf("no verdict: %+v", rep.Verdict)
	}
	for _, s := range []string{"failure under load", "durability", "nemesis, partition"} {
		found := false
		for _, v := range append(rep.Verdict.Held, rep.Verdict.Broke...) {
			found = found || strings.HasPrefix(v, s)
		}
		if !found {
			t.Errorf("no verdict on %s: %+v", s, rep.Verdict)
		}
	}
	if strings.Contains(rep.Cleanup, "could not") {
		t.Errorf("cleanup: %s", rep.Cleanup)
	}
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(kill -9 of the container&#39;s process)", "its container&#39;s restart policy brought it back", "<td>not compared</td>"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html does not say %q", want)
		}
	}
	if left := faultChains(t, svcs); len(left) > 0 {
		t.Errorf("a fault's rules are left in %q", left)
	}

	// Interrupted while the nemesis's partition holds: the run undoes it
	// at once, not at its lease's end, and still writes its report.
	out = filepath.Join(dir, "interrupted")
	cmd := troopRun(runConfig(4*time.Second, 2*time.Minute), out)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && !strings.Contains(lines.Text(), "] nemesis: partition") {
		seen.WriteString(lines.Text() + "\n")
	}
	waitFor(t, 30*time.Second, "the partition's rules in a container", func() bool { return len(faultChains(t, svcs)) > 0 })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	t.Logf("interrupted troop run:\n%s%s", seen.String(), rest)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("interrupted troop run: %v, exit status %d, want 130", err, code)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the interrupted run took %s to end: it waited for the fault's end", d)
	}
	if rep := readReport(t, out); !strings.Contains(rep.Stopped, "phase 5 of 7 (nemesis)") {
		t.Errorf("the interrupted run's report says it stopped %q", rep.Stopped)
	}
	if left := faultChains(t, svcs); len(left) > 0 {
		t.Errorf("a fault's rules are left in %q", left)
	}
}

func readReport(t *testing.T, out string) *suite.Report {
	t.Helper()
	f, err := os.Open(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := suite.ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// faultChains lists the containers whose network namespace holds a chain
// of a network fault (package fault names them troop-...).
func faultChains(t *testing.T, svcs []service) []string {
	t.Helper()
	var out []string
	for _, s := range svcs {
		c, err := api.ContainerInspect(context.Background(), s.id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := netns.Open("/proc/"+strconv.Itoa(c.Container.State.Pid)+"/ns/net", 0)
		if err != nil {
			t.Fatal(err)
		}
		rules, err := netns.Run(ns, "", nil, "iptables", "-S")
		ns.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rules, "troop-") {
			out = append(out, s.name)
		}
	}
	return out
}
