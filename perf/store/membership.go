package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/troop-lab/troop/bench"
)

// membershipResult is the membership experiment: a node added to rack1 of
// a three-rack lab at DC_QUORUM, holding Keys keys of 1 KB, while a mixed
// workload runs at a share of the lab's closed-loop throughput (half, by
// default).
type membershipResult struct {
	Keys          int         `json:"keys"`
	ClosedLoop    float64     `json:"closed_loop_ops_per_sec"`
	Rate          float64     `json:"rate"` // the workload's operations a second, before and during
	ChangeSeconds float64     `json:"change_seconds"`
	Before        []bench.Row `json:"before"` // the workload's totals per task before the change
	During        []bench.Row `json:"during"` // and from its start to its end
}

// membershipExperiment drives the troop binary as a user would: troop lab
// up, troop bench write to load the keys, troop bench mixed for the closed
// loop and then at cfg.MembershipLoad of it, before and during troop lab
// add-node. The
// lab is stopped at the end, also on an error.
func membershipExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	dir := filepath.Join(ps.dir, "membership")
	logFile, err := os.Create(filepath.Join(ps.dir, "membership.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	troop := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bins.troop, args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		return cmd
	}
	lab := []string{"--lab", dir, "--consistency", "DC_QUORUM", "--keys", strconv.Itoa(cfg.MembershipKeys)}
	if err := troop(ctx, "lab", "up", "--dir", dir, "--read-consistency", "DC_QUORUM", "--write-consistency", "DC_QUORUM").Run(); err != nil {
		return fmt.Errorf("membership: troop lab up: %w (log: %s)", err, logFile.Name())
	}
	defer func() { // also after Ctrl-C: the lab is the harness's to stop
		stop, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		troop(stop, "lab", "down", "--dir", dir).Run()
	}()
	load := append([]string{"bench", "write", "--pipeline", "10", "--seed", "7", "--requests", strconv.Itoa(2 * cfg.MembershipKeys)}, lab...)
	if err := troop(ctx, load...).Run(); err != nil {
		return fmt.Errorf("membership: loading the keys: %w (log: %s)", err, logFile.Name())
	}
	mixed := func(ctx context.Context, name string, seed int, extra ...string) (*exec.Cmd, string) {
		out := filepath.Join(ps.dir, "membership-"+name+".json")
		args := append(append([]string{"bench", "mixed", "--seed", strconv.Itoa(seed), "--out", out}, lab...), extra...)
		return troop(ctx, args...), out
	}
	m := &membershipResult{Keys: cfg.MembershipKeys}
	res.Membership = m

	closed, out := mixed(ctx, "closed", 8, "--duration", time.Duration(cfg.MembershipWindow).String())
	if err := closed.Run(); err != nil {
		return fmt.Errorf("membership: closed loop: %w (log: %s)", err, logFile.Name())
	}
	rows, err := benchTotals(out)
	if err != nil {
		return err
	}
	var rate string
	m.ClosedLoop, m.Rate, rate = loadAt(rows, cfg.MembershipLoad)
	before, out := mixed(ctx, "before", 9, "--rate", rate, "--duration", time.Duration(cfg.MembershipWindow).String())
	if err := before.Run(); err != nil {
		return fmt.Errorf("membership: before the change: %w (log: %s)", err, logFile.Name())
	}
	if m.Before, err = benchTotals(out); err != nil {
		return err
	}

	// During: the workload runs until the change is done, then is stopped
	// as Ctrl-C stops it, keeping what it measured.
	during, out := mixed(ctx, "during", 10, "--rate", rate, "--duration", "1h")
	if err := during.Start(); err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			during.Process.Kill()
			during.Wait()
		}
	}()
	select {
	case <-time.After(2 * time.Second): // its connections made and its rate steady
	case <-ctx.Done():
		return ctx.Err()
	}
	start := time.Now()
	if err := troop(ctx, "lab", "add-node", "--dir", dir, "--rack", "rack1").Run(); err != nil {
		return fmt.Errorf("membership: troop lab add-node: %w (log: %s)", err, logFile.Name())
	}
	m.ChangeSeconds = time.Since(start).Seconds()
	during.Process.Signal(syscall.SIGINT)
	stopped = true
	// troop bench, interrupted, writes what it measured and exits 130.
	if err := during.Wait(); err != nil && during.ProcessState.ExitCode() != 130 {
		return fmt.Errorf("membership: the workload during the change: %w (log: %s)", err, logFile.Name())
	}
	if m.During, err = benchTotals(out); err != nil {
		return err
	}
	fmt.Fprintf(log, "membership  %d keys, closed loop %.0f ops/s, workload at %.0f: add-node took %.1f s\n", m.Keys, m.ClosedLoop, m.Rate, m.ChangeSeconds)
	for _, phase := range []struct {
		name string
		rows []bench.Row
	}{{"before", m.Before}, {"during", m.During}} {
		for _, r := range phase.rows {
			fmt.Fprintf(log, "membership  %-6s  %-4s  %8.0f ops/s  p50 %7.1f ms  p99 %7.1f ms  errors %d  fails %d\n",
				phase.name, r.Task, r.ReqPerSec, r.Response.P50, r.Response.P99, r.Errors, r.Fails)
		}
	}
	return ctx.Err()
}

// benchTotals reads the per-task totals of a troop bench JSON result.
// loadAt is the closed loop's throughput, the sum of its rows', and share
// of it in whole operations a second: the open-loop rate of a workload at
// that share of the load, also as troop bench's --rate takes it.
func loadAt(closed []bench.Row, share float64) (saturating, rate float64, rateArg string) {
	for _, r := range closed {
		saturating += r.ReqPerSec
	}
	rate = max(1, float64(int(saturating*share)))
	return saturating, rate, strconv.FormatFloat(rate, 'f', 0, 64)
}

func benchTotals(path string) ([]bench.Row, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	var r bench.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("membership: %s: %w", path, err)
	}
	if len(r.Totals) == 0 {
		return nil, fmt.Errorf("membership: %s has no totals", path)
	}
	for i := range r.Totals { // the histograms are in the bench file; the figures suffice here
		r.Totals[i].ResponseHist, r.Totals[i].ServiceHist, r.Totals[i].Series = "", "", nil
	}
	return r.Totals, nil
}
