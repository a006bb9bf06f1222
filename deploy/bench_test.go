package deploy

// troop bench as shards in containers: the Compose file's bench service,
// three replicas of the troop image on the Docker Engine, driving a lab of
// this host's processes; their results merged.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"gopkg.in/yaml.v3"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// benchService is the Compose file's bench service, as the test runs it.
type benchService struct {
	Profiles    []string          `yaml:"profiles"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

// composeBench reads the bench service of the Compose file, with its
// command as the container gets it (Compose reads $$ as $).
func composeBench(t *testing.T, path string) benchService {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Services map[string]benchService `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	s, ok := cf.Services["bench"]
	if !ok || len(s.Profiles) == 0 {
		t.Fatalf("%s: no bench service in a profile of its own", path)
	}
	for i, c := range s.Command {
		s.Command[i] = strings.ReplaceAll(c, "$$", "$")
	}
	if len(s.Volumes) != 1 || !strings.HasSuffix(s.Volumes[0], ":/results") {
		t.Fatalf("%s: bench volumes %q: want one at /results", path, s.Volumes)
	}
	return s
}

// Three shards, each a replica of the Compose file's bench service (its
// own script picks its shard), drive a lab on this host for a few seconds
// from the same start; troop bench merge adds them up. The merged counts,
// Errors and Fails are the sum of the shards', and the merged histograms
// are exactly the shards' added (the same buckets, so the same p99), and
// the keys the shards wrote are disjoint ranges that cover the key set.
func TestBenchShardsInContainers(t *testing.T) {
	image := testTroopImage(t)
	svc := composeBench(t, "compose/docker-compose.yml")
	l := testlab.Start(t, lab.Spec{Troop: troopBin})
	dir := t.TempDir()
	const shards, keys = 3, 3000
	// Time for the three to start on a busy engine, where each start takes
	// seconds: a shard that arrives after START_AT refuses to run.
	start := time.Now().Add(15 * time.Second).UTC().Format(time.RFC3339)
	env := []string{
		"START_AT=" + start,
		fmt.Sprintf("SHARDS=%d", shards),
		// The lab listens on this host's loopback, which the containers
		// share (host network).
		fmt.Sprintf("BENCH_ARGS=mixed --cluster %s --duration 3s --readers 3 --writers 3 --keys %d --seed 7 --consistency DC_QUORUM", l.Nodes()[0].StatsListen, keys),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := make([]string, shards)
	for i := range ids {
		ids[i] = createBenchContainer(ctx, t, image, svc, dir, fmt.Sprintf("troop-deploy-test-%s-bench-%d", runID, i+1), env)
	}
	runToEnd(ctx, t, ids)

	files, err := filepath.Glob(filepath.Join(dir, start+"-shard-*.json"))
	if err != nil || len(files) != shards {
		t.Fatalf("results %q: want %d", files, shards)
	}
	merged := filepath.Join(dir, "merged.json")
	out, err := exec.CommandContext(ctx, troopBin, append([]string{"bench", "merge", "--out", merged}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("troop bench merge: %v\n%s", err, out)
	}
	m := readResult(t, merged)
	parts := make([]*bench.Result, len(files))
	for i, f := range files {
		parts[i] = readResult(t, f)
	}
	if m.Shards != shards || len(m.Totals) == 0 {
		t.Fatalf("merged %d shards, %d tasks", m.Shards, len(m.Totals))
	}
	for ti, tot := range m.Totals {
		var count, errs, fails int64
		first := decodeHist(t, parts[0].Totals[ti].ResponseHist)
		resp := hdr.New(first.LowestTrackableValue(), first.HighestTrackableValue(), int(first.SignificantFigures()))
		svcHist := hdr.New(first.LowestTrackableValue(), first.HighestTrackableValue(), int(first.SignificantFigures()))
		for _, p := range parts {
			pt := p.Totals[ti]
			count, errs, fails = count+pt.Count, errs+pt.Errors, fails+pt.Fails
			resp.Merge(decodeHist(t, pt.ResponseHist))
			svcHist.Merge(decodeHist(t, pt.ServiceHist))
		}
		if tot.Count != count || tot.Errors != errs || tot.Fails != fails || count == 0 {
			t.Errorf("%s: merged %d ops, %d errors, %d fails; the shards %d, %d, %d", tot.Task, tot.Count, tot.Errors, tot.Fails, count, errs, fails)
		}
		if fails != 0 {
			t.Errorf("%s: %d fails: %v", tot.Task, fails, tot.FailSamples)
		}
		got := decodeHist(t, tot.ResponseHist)
		if !got.Equals(resp) || !decodeHist(t, tot.ServiceHist).Equals(svcHist) {
			t.Errorf("%s: the merged histograms are not the shards' added", tot.Task)
		}
		if p99 := float64(resp.ValueAtQuantile(99)) / 1000; got.TotalCount() != count || p99 != tot.Response.P99 {
			t.Errorf("%s: merged p99 %v ms of %d, the added histograms' %v ms of %d", tot.Task, tot.Response.P99, got.TotalCount(), p99, count)
		}
	}
	// Shard I's keys begin at its share of the key set.
	for _, p := range parts {
		first := p.Config.Key(nil, uint64(keys*(p.Config.Shard.Index-1)/shards))
		if p.Setup.FirstKey != string(first) || p.Setup.Keys != keys/shards {
			t.Errorf("shard %s: %d keys from %s, want %d from %s", p.Config.Shard, p.Setup.Keys, p.Setup.FirstKey, keys/shards, first)
		}
	}
}

// runToEnd starts the containers together and waits for each to exit with
// status 0; a failure shows the container's output.
func runToEnd(ctx context.Context, t *testing.T, ids []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() {
			if _, err := api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
				errs[i] = err
				return
			}
			w := api.ContainerWait(ctx, id, client.ContainerWaitOptions{})
			select {
			case r := <-w.Result:
				if r.StatusCode != 0 {
					errs[i] = fmt.Errorf("exit status %d", r.StatusCode)
				}
			case err := <-w.Error:
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		var logs []byte
		if rc, lerr := api.ContainerLogs(context.Background(), ids[i], client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}); lerr == nil {
			logs, _ = io.ReadAll(rc)
			rc.Close()
		}
		t.Errorf("bench replica %d: %v\n%s", i+1, err, logs)
	}
	if t.Failed() {
		t.FailNow()
	}
}

func readResult(t *testing.T, path string) *bench.Result {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := bench.ReadResult(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

func decodeHist(t *testing.T, s string) *hdr.Histogram {
	t.Helper()
	h, err := bench.DecodeHist(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// createBenchContainer creates one replica of the bench service on the
// host's network, with dir as its /results, and removes it when the test
// ends.
func createBenchContainer(ctx context.Context, t *testing.T, image string, svc benchService, dir, name string, env []string) string {
	t.Helper()
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{Image: image, Entrypoint: svc.Entrypoint, Cmd: svc.Command, Env: env,
			Labels: map[string]string{runLabel: runID}, StopTimeout: new(2)},
		HostConfig: &container.HostConfig{NetworkMode: "host", Binds: []string{dir + ":/results"}},
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := api.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove container %s: %v", name, err)
		}
	})
	return res.ID
}
