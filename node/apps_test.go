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

	"github.com/troop-lab/troop/node/consistency"
)

// rqJobs are the job, the enqueuer and the checker of TestRQ. A job
// records its id in the list ran, so a job run twice shows twice; the
// jobs from the 10th on wait (30 s at most) for the key gate, so that a
// test can act while jobs run.
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
print('ran', ' '.join(x.decode() for x in conn.lrange('ran', 0, -1)))
`,
}

// TestRQ runs RQ, Debian's python3-rq, as a new user would: jobs enqueued
// through one node of a 3-rack cluster at DC_QUORUM, burst workers through
// the others, and the results read back through the first. Every job runs
// once, and its result comes back: with two workers through the other two
// nodes at once, and with one worker while the third node is killed once
// jobs have run.
func TestRQ(t *testing.T) {
	if _, err := exec.LookPath("rq"); err != nil {
		t.Skip("RQ (Debian's python3-rq, which make test installs) is not installed")
	}
	t.Run("two workers", func(t *testing.T) { runRQ(t, []int{1, 2}, false) })
	t.Run("a node killed", func(t *testing.T) { runRQ(t, []int{1}, true) })
}

// runRQ enqueues jobs through node 0 and runs a burst worker through each
// of workers; with kill, node 2 is stopped while the 11th job runs.
func runRQ(t *testing.T, workers []int, kill bool) {
	python := "/usr/bin/python3" // Debian's, which python3-rq installs for
	dir := writeFiles(t, rqJobs)
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum, timeout: 5 * time.Second})
	hostPort := func(i int) (string, string) {
		h, p, _ := strings.Cut(tc.nodes[i].cfg.Listen, ":")
		return h, p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	const jobs = 30
	h, p := hostPort(0)
	c := tc.client(0, "")
	if !kill {
		c.must("SET", "gate", "open")
	}
	enqueued := run("", python, filepath.Join(dir, "enqueue.py"), h, p, strconv.Itoa(jobs))
	var wg sync.WaitGroup
	outs := make([]string, len(workers))
	errs := make([]error, len(workers))
	for w, node := range workers {
		wh, wp := hostPort(node)
		cmd := exec.CommandContext(ctx, "rq", "worker", "--burst", "--url", "redis://"+wh+":"+wp, "--name", "troop-"+strconv.Itoa(w), "troop")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[w], errs[w] = string(out), err
		}()
	}
	if kill { // once the 11th job waits at the gate, kill node 2, then open it
		eventually(t, time.Minute, func() string {
			if n := c.do("LLEN", "ran").Int; n < 11 {
				return fmt.Sprintf("%d jobs started, waiting for 11 before the kill", n)
			}
			return ""
		})
		tc.nodes[2].stop()
		c.must("SET", "gate", "open")
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("the worker through %s: %v\n%s", tc.nodes[workers[w]].cfg.Name, err, outs[w])
		}
	}
	checked := run(enqueued, python, filepath.Join(dir, "check.py"), h, p)
	lines := strings.Split(strings.TrimSpace(checked), "\n")
	want := map[string]string{} // id -> the square its job returns
	for _, line := range strings.Split(strings.TrimSpace(enqueued), "\n") {
		f := strings.Fields(line)
		i, _ := strconv.Atoi(f[1])
		want[f[0]] = strconv.Itoa(i * i)
	}
	ran := map[string]int{}
	for _, id := range strings.Fields(strings.TrimPrefix(lines[len(lines)-1], "ran")) {
		ran[id]++
	}
	for _, line := range lines[:len(lines)-1] {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != "finished" || f[2] != want[f[0]] {
			t.Errorf("job %s: %q, want finished with result %s", f[0], line, want[f[0]])
		}
		if ran[f[0]] != 1 {
			t.Errorf("job %s ran %d times, want once", f[0], ran[f[0]])
		}
	}
	if len(lines)-1 != jobs || len(ran) != jobs {
		t.Fatalf("%d jobs checked and %d ran, want %d\nworkers:\n%s", len(lines)-1, len(ran), jobs, strings.Join(outs, "\n"))
	}
}

// celeryApp is the Celery app of TestCelery: a task that records its run
// in the list ran, through the worker's node, and returns a sum; the
// client sends tasks through its node and waits for their results.
var celeryApp = map[string]string{
	"tasks.py": `import os, redis
from celery import Celery
node = os.environ['TROOP_NODE']
app = Celery('tasks', broker='redis://' + node + '/0', backend='redis://' + node + '/0')
app.conf.broker_connection_retry_on_startup = False
ran = redis.Redis.from_url('redis://' + node + '/0')

@app.task(bind=True)
def add(self, x, y):
    ran.rpush('ran', self.request.id)
    return x + y
`,
	"client.py": `import sys
from tasks import add, ran
n = int(sys.argv[1])
results = [add.delay(i, i) for i in range(n)]
for i, r in enumerate(results):
    got = r.get(timeout=60)
    assert got == 2 * i, (i, got)
    print(r.id)
print('ran', ' '.join(x.decode() for x in ran.lrange('ran', 0, -1)))
`,
}

// TestCelery runs Celery, Debian's python3-celery, with troop as its broker
// and result backend: a worker through one node of a 3-rack cluster at
// DC_QUORUM, tasks sent and their results awaited (a subscription to the
// result's channel, published through the worker's node) through another.
// Every task runs once, and its result comes back.
func TestCelery(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := exec.LookPath("celery"); err != nil {
		t.Skip("Celery (Debian's celery, which make test installs) is not installed")
	}
	dir := writeFiles(t, celeryApp)
	tc := startCluster(t, clusterOpts{racks: 3, read: consistency.DCQuorum, write: consistency.DCQuorum, timeout: 5 * time.Second})
	env := func(i int) []string {
		return append(os.Environ(), "PYTHONPATH="+dir, "TROOP_NODE="+tc.nodes[i].cfg.Listen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	worker := exec.CommandContext(ctx, python, "-m", "celery", "-A", "tasks", "worker", "--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=INFO")
	worker.Dir, worker.Env = dir, env(1)
	var log strings.Builder
	worker.Stdout, worker.Stderr = &log, &log
	worker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	worker.Cancel = func() error { return syscall.Kill(-worker.Process.Pid, syscall.SIGKILL) }
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	stopWorker := func() string {
		syscall.Kill(-worker.Process.Pid, syscall.SIGKILL)
		worker.Wait()
		return log.String()
	}
	defer stopWorker()

	const tasks = 20
	client := exec.CommandContext(ctx, python, filepath.Join(dir, "client.py"), strconv.Itoa(tasks))
	client.Dir, client.Env = dir, env(0)
	out, err := client.CombinedOutput()
	if err != nil {
		t.Fatalf("the client: %v\n%s\nthe worker:\n%s", err, out, stopWorker())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	ran := map[string]int{}
	for _, id := range strings.Fields(strings.TrimPrefix(lines[len(lines)-1], "ran")) {
		ran[id]++
	}
	for _, id := range lines[:len(lines)-1] {
		if ran[id] != 1 {
			t.Errorf("task %s ran %d times, want once", id, ran[id])
		}
	}
	if len(lines)-1 != tasks || len(ran) != tasks {
		t.Fatalf("%d results and %d tasks ran, want %d\n%s", len(lines)-1, len(ran), tasks, out)
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
