package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The application tests run job frameworks from Debian's packages, unchanged,
// on a lab of three troop processes (one per rack) at DC_QUORUM: jobs are
// pushed through one node and run by workers through the others. Each job
// records its id in the list ran as it starts, so a job run twice shows
// twice, and the jobs from the 10th on wait (30 s at most) for the key gate,
// so that a test can act while jobs run.
//
// With "a node killed", the third node's troop process is killed (SIGKILL)
// once 11 jobs have started, so at least one job is running and the rest
// wait in the queue, and the gate opens after the kill. The killed node is
// one the applications do not connect to: every key loses one of its three
// replicas, and DC_QUORUM goes on with the two left. None of the
// framework's connections breaks, so each promises what it promises on a
// healthy Redis: every job taken off the queue once, run once, its result
// kept. What each promises when its own connection breaks or its worker
// dies is weaker, and not tested here: RQ marks a job whose worker died
// failed (at most once); Celery acknowledges a task as its worker receives
// it (acks_late off, the default: at most once); Sidekiq's open-source
// fetch (BRPOP) loses the jobs of a worker that dies, and pushes back
// those of one stopped cleanly (at least once).

// appLab starts the application tests' lab.
func appLab(t *testing.T) (*lab.Lab, []lab.Node) {
	l := testlab.Start(t, lab.Spec{ReplaceAfter: time.Hour, ReadConsistency: "DC_QUORUM", WriteConsistency: "DC_QUORUM"})
	return l, l.Nodes()
}

// killWhenStarted waits until 11 jobs have started (the 11th waits at the
// gate), kills victim's troop process, and opens the gate, through c.
func killWhenStarted(t *testing.T, l *lab.Lab, victim lab.Node, c *client) {
	t.Helper()
	eventually(t, 2*time.Minute, func() string {
		if n := c.do("LLEN", "ran").Int; n < 11 {
			return fmt.Sprintf("%d jobs started, waiting for 11 before the kill", n)
		}
		return ""
	})
	if _, err := l.Kill(victim.Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	c.must("SET", "gate", "open")
}

// countRuns counts each id of the reply of LRANGE ran.
func countRuns(ids []string) map[string]int {
	ran := map[string]int{}
	for _, id := range ids {
		ran[id]++
	}
	return ran
}

// checkOnce checks that each job of want (id to the result it returns)
// ran once and that nothing else ran.
func checkOnce(t *testing.T, want map[string]string, ran map[string]int) {
	t.Helper()
	checkRuns(t, want, ran, 0)
}

// checkRuns checks that each job of want ran, that nothing else ran, and
// that the jobs ran at most extra times more than once each, in all.
func checkRuns(t *testing.T, want map[string]string, ran map[string]int, extra int) {
	t.Helper()
	again := 0
	for id := range want {
		if ran[id] == 0 {
			t.Errorf("job %s never ran", id)
		}
		again += max(ran[id]-1, 0)
	}
	if again > extra {
		t.Errorf("jobs ran %d times more than once each (%v), want at most %d", again, ran, extra)
	}
	for id := range ran {
		if _, ok := want[id]; !ok {
			t.Errorf("job %s ran, and was never pushed", id)
		}
	}
}

// lrange is the list key's elements, read through c.
func lrange(c *client, key string) []string {
	var out []string
	for _, e := range c.do("LRANGE", key, "0", "-1").Elems {
		out = append(out, string(e.Str))
	}
	return out
}

// appProcess is a framework's process in a group of its own, killed with
// the group when the test ends.
func appProcess(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

const appJobs = 30 // jobs per run

// rqJobs are the job, the enqueuer and the checker of TestRQ.
var rqJobs = map[string]string{
	"jobs.py": `import time
from rq import get_current_job

def square(i):
    job = get_current_job()
    job.connection.rpush('ran', job.id)
    if i >= 10:
        for _ in range(600):
            if job.connection.exists('gate'):
                break
            time.sleep(0.05)
    return i * i
`,
	"enqueue.py": `import sys, redis
from rq import Queue
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
q = Queue('troop', connection=redis.Redis(host=host, port=port))
for i in range(n):
    print(q.enqueue('jobs.square', i).id, i)
`,
	"check.py": `import sys, redis
from rq.job import Job
host, port = sys.argv[1], int(sys.argv[2])
conn = redis.Redis(host=host, port=port)
for line in sys.stdin:
    id, i = line.split()
    job = Job.fetch(id, connection=conn)
    print(id, job.get_status(), job.result)
`,
}

// TestRQ runs RQ, Debian's python3-rq: jobs enqueued through the first node,
// burst workers through the others, and the results read back through the
// first. Every job runs once, and its result comes back: with two workers
// through the other two nodes at once, and with one worker while the third
// node is killed.
func TestRQ(t *testing.T) {
	if _, err := exec.LookPath("rq"); err != nil {
		t.Skip("RQ (Debian's python3-rq, which make test installs) is not installed")
	}
	t.Run("two workers", func(t *testing.T) { runRQ(t, []int{1, 2}, false) })
	t.Run("a node killed", func(t *testing.T) { runRQ(t, []int{1}, true) })
}

// runRQ enqueues jobs through node 0 and runs a burst worker through each
// of workers; with kill, node 2 is killed while the 11th job runs.
func runRQ(t *testing.T, workers []int, kill bool) {
	python := "/usr/bin/python3" // Debian's, which python3-rq installs for
	dir := writeFiles(t, rqJobs)
	l, nodes := appLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := appProcess(ctx, dir, []string{"PYTHONPATH=" + dir}, args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	h, p, _ := strings.Cut(nodes[0].Listen, ":")
	c := dial(t, nodes[0].Listen)
	if !kill {
		c.must("SET", "gate", "open")
	}
	enqueued := run("", python, filepath.Join(dir, "enqueue.py"), h, p, strconv.Itoa(appJobs))
	var wg sync.WaitGroup
	outs := make([]string, len(workers))
	errs := make([]error, len(workers))
	for w, node := range workers {
		cmd := appProcess(ctx, dir, []string{"PYTHONPATH=" + dir}, "rq", "worker", "--burst", "--url", "redis://"+nodes[node].Listen, "--name", "troop-"+strconv.Itoa(w), "troop")
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[w], errs[w] = string(out), err
		}()
	}
	if kill {
		killWhenStarted(t, l, nodes[2], c)
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("the worker through %s: %v\n%s", nodes[workers[w]].Name, err, outs[w])
		}
	}
	want := map[string]string{} // id -> the square its job returns
	for _, line := range strings.Split(strings.TrimSpace(enqueued), "\n") {
		f := strings.Fields(line)
		i, _ := strconv.Atoi(f[1])
		want[f[0]] = strconv.Itoa(i * i)
	}
	checked := strings.Split(strings.TrimSpace(run(enqueued, python, filepath.Join(dir, "check.py"), h, p)), "\n")
	for _, line := range checked {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != "finished" || f[2] != want[f[0]] {
			t.Errorf("job %q: want finished with result %s", line, want[f[0]])
		}
	}
	checkOnce(t, want, countRuns(lrange(c, "ran")))
	if len(want) != appJobs || len(checked) != appJobs {
		t.Fatalf("%d jobs enqueued and %d checked, want %d\nworkers:\n%s", len(want), len(checked), appJobs, strings.Join(outs, "\n"))
	}
}

// celeryApp is the Celery app of TestCelery: a task that records its run
// in the list ran, through the worker's node, and returns a sum; the
// client sends tasks through its node and waits for their results.
var celeryApp = map[string]string{
	"tasks.py": `import os, time, redis
from celery import Celery
node = os.environ['TROOP_NODE']
app = Celery('tasks', broker='redis://' + node + '/0', backend='redis://' + node + '/0')
app.conf.broker_connection_retry_on_startup = False
ran = redis.Redis.from_url('redis://' + node + '/0')

@app.task(bind=True)
def add(self, x, y):
    ran.rpush('ran', self.request.id)
    if x >= 10:
        for _ in range(600):
            if ran.exists('gate'):
                break
            time.sleep(0.05)
    return x + y
`,
	"client.py": `import logging, sys
# The publishes' retries (kombu's, on an error reply or a broken
# connection) on stderr, which the test shows when it fails.
logging.basicConfig(level=logging.WARNING, format='%(asctime)s %(name)s %(levelname)s %(message)s')
logging.getLogger('kombu.connection').setLevel(logging.DEBUG)
from tasks import add
n = int(sys.argv[1])
results = [add.delay(i, i) for i in range(n)]
for i, r in enumerate(results):
    got = r.get(timeout=120)
    print(r.id, got)
`,
}

// TestCelery runs Celery, Debian's python3-celery, with troop as its broker
// and result backend: a worker through the second node, tasks sent and
// their results awaited (a subscription to the result's channel, published
// through the worker's node) through the first. Every task runs once, and
// its result comes back: on the healthy lab, and while the third node is
// killed.
func TestCelery(t *testing.T) {
	if _, err := exec.LookPath("celery"); err != nil {
		t.Skip("Celery (Debian's celery, which make test installs) is not installed")
	}
	t.Run("healthy", func(t *testing.T) { runCelery(t, false) })
	t.Run("a node killed", func(t *testing.T) { runCelery(t, true) })
}

func runCelery(t *testing.T, kill bool) {
	python := "/usr/bin/python3"
	dir := writeFiles(t, celeryApp)
	l, nodes := appLab(t)
	env := func(i int) []string { return []string{"PYTHONPATH=" + dir, "TROOP_NODE=" + nodes[i].Listen} }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	worker := appProcess(ctx, dir, env(1), python, "-m", "celery", "-A", "tasks", "worker", "--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=INFO")
	var log strings.Builder
	worker.Stdout, worker.Stderr = &log, &log
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	stopWorker := func() string {
		syscall.Kill(-worker.Process.Pid, syscall.SIGKILL)
		worker.Wait()
		return log.String()
	}
	defer stopWorker()

	c := dial(t, nodes[0].Listen)
	if !kill {
		c.must("SET", "gate", "open")
	}
	client := appProcess(ctx, dir, append(env(0), "KOMBU_LOG_CONNECTION=1"), python, filepath.Join(dir, "client.py"), strconv.Itoa(appJobs))
	var clientErr strings.Builder
	client.Stderr = &clientErr
	var out []byte
	var err error
	sent := make(chan struct{})
	go func() { out, err = client.Output(); close(sent) }()
	if kill {
		killWhenStarted(t, l, nodes[2], c)
	}
	<-sent
	if err != nil {
		t.Fatalf("the client: %v\n%s%s\nthe worker:\n%s", err, out, clientErr.String(), stopWorker())
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("the client printed %q, want a task id and its result\n%s", line, out)
		}
		want[f[0]] = f[1]
	}
	i := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") { // in the order sent
		if f := strings.Fields(line); f[1] != strconv.Itoa(2*i) {
			t.Errorf("task %s returned %s, want %d", f[0], f[1], 2*i)
		}
		i++
	}
	// Kombu publishes again after an error reply, whatever it says: an
	// "outcome unknown" of a push that was applied (a consensus round that
	// gave up on a busy machine) then queues the task twice, which Celery
	// runs twice. That is Celery's publish retry, which it documents, not
	// troop running a job twice: each such retry allows one more run.
	retries := strings.Count(clientErr.String(), "ensure connection error: ResponseError") // kombu's log line
	if retries > 0 {
		t.Logf("the client's publishes were retried %d times after an error reply", retries)
	}
	checkRuns(t, want, countRuns(lrange(c, "ran")), retries)
	if len(want) != appJobs {
		t.Errorf("%d results, want %d", len(want), appJobs)
	}
	if t.Failed() {
		t.Logf("the client:\n%s%s\nthe worker:\n%s", out, clientErr.String(), stopWorker())
		for i, n := range nodes {
			log, _ := os.ReadFile(n.NodeLog())
			t.Logf("%s's log:\n%s", n.Name, log)
			if i < 2 { // the third was killed
				t.Logf("%s's INFO stats:\n%s", n.Name, dial(t, n.Listen).must("INFO", "stats"))
			}
		}
	}
}

// sidekiqApp is the Sidekiq app of TestSidekiq: a job that records its run
// in the list ran and its result in the hash results (Sidekiq keeps no
// results), and a script that pushes jobs and prints their ids.
var sidekiqApp = map[string]string{
	"jobs.rb": `require 'sidekiq'
Redis.silence_deprecations = true

class Square
  include Sidekiq::Worker
  sidekiq_options queue: 'troop', retry: false

  def perform(i)
    Sidekiq.redis { |r| r.rpush('ran', jid) }
    if i >= 10
      600.times do
        break if Sidekiq.redis { |r| r.exists?('gate') }
        sleep 0.05
      end
    end
    Sidekiq.redis { |r| r.hset('results', jid, i * i) }
  end
end
`,
	"push.rb": `require_relative 'jobs'
ARGV[0].to_i.times { |i| puts "#{Square.perform_async(i)} #{i}" }
`,
}

// TestSidekiq runs Sidekiq, Debian's ruby-sidekiq: jobs pushed through the
// first node, a worker (5 threads) through the second. Every job runs once,
// and its result is kept: on the healthy lab, and while the third node is
// killed. The worker is then stopped (SIGTERM, Sidekiq's clean stop) and
// the queue is empty.
func TestSidekiq(t *testing.T) {
	if _, err := exec.LookPath("sidekiq"); err != nil {
		t.Skip("Sidekiq (Debian's ruby-sidekiq, which make test installs) is not installed")
	}
	t.Run("healthy", func(t *testing.T) { runSidekiq(t, false) })
	t.Run("a node killed", func(t *testing.T) { runSidekiq(t, true) })
}

func runSidekiq(t *testing.T, kill bool) {
	dir := writeFiles(t, sidekiqApp)
	l, nodes := appLab(t)
	env := func(i int) []string { return []string{"REDIS_URL=redis://" + nodes[i].Listen + "/0"} }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dial(t, nodes[0].Listen)
	if !kill {
		c.must("SET", "gate", "open")
	}
	push := appProcess(ctx, dir, env(0), "ruby", filepath.Join(dir, "push.rb"), strconv.Itoa(appJobs))
	var pushErr strings.Builder
	push.Stderr = &pushErr
	pushed, err := push.Output()
	if err != nil {
		t.Fatalf("push.rb: %v\n%s%s", err, pushed, pushErr.String())
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(pushed)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("push.rb printed %q, want a job id and its number\n%s", line, pushed)
		}
		i, _ := strconv.Atoi(f[1])
		want[f[0]] = strconv.Itoa(i * i)
	}

	worker := appProcess(ctx, dir, env(1), "sidekiq", "-r", filepath.Join(dir, "jobs.rb"), "-q", "troop", "-c", "5", "-t", "10")
	var log strings.Builder
	worker.Stdout, worker.Stderr = &log, &log
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	defer func() {
		syscall.Kill(-worker.Process.Pid, syscall.SIGKILL)
		<-exited
	}()
	if kill {
		killWhenStarted(t, l, nodes[2], c)
	}
	eventually(t, 2*time.Minute, func() string {
		if n := c.do("HLEN", "results").Int; n < appJobs {
			return fmt.Sprintf("%d of %d jobs done\nthe worker:\n%s", n, appJobs, log.String())
		}
		return ""
	})
	syscall.Kill(worker.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("Sidekiq did not stop within a minute of SIGTERM\n%s", log.String())
	}
	exited <- nil // for the deferred kill
	results := c.do("HGETALL", "results").Elems
	for i := 0; i+1 < len(results); i += 2 {
		if id, got := string(results[i].Str), string(results[i+1].Str); got != want[id] {
			t.Errorf("job %s kept %s, want %s", id, got, want[id])
		}
	}
	checkOnce(t, want, countRuns(lrange(c, "ran")))
	if n := c.do("LLEN", "queue:troop").Int; n != 0 {
		t.Errorf("%d jobs left in the queue after the worker's clean stop", n)
	}
	if len(want) != appJobs {
		t.Fatalf("%d jobs pushed, want %d", len(want), appJobs)
	}
}

// writeFiles writes files (name to text) into a new temporary directory,
// and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
