package deploy

// troop run --cluster ... --chaos-config with the kubernetes group of
// docs/run.md, through a real API server (internal/testkube: etcd,
// kube-apiserver and kwok). kwok's pods run nothing, so the cluster's nodes
// are a lab on this host whose nodes listen at the pods' IPs (kwok gives
// them from a range of 127.0.0.0/8, all of it this host's loopback). There
// is no kubelet and no controller-manager: the test plays the pod's death
// (it kills the lab node at the pod's IP; the lab's supervisor starts it
// again) and the StatefulSet controller (it creates the pod anew), the
// disruption controller (the budget's status) and the default
// ServiceAccount, as the other tests on the API server do.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/troop-lab/troop/internal/testkube"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/suite"
)

// podCIDR is where kwok gives the pods their IPs: the first pod gets
// 127.77.0.2.
const podCIDR = "127.77.0.1/24"

// troop run on the manifests' three pods, as their chaos group and with
// the documented Role only: each pod is matched to the lab node at its IP,
// the failure phase evicts the pod the seed picks, waits until its
// StatefulSet has it ready again and its node answers, and the audit
// reads back every write; the nemesis's faults are listed as not run,
// since the backend only deletes pods.
func TestRunWithKubernetesChaosOnAPIServer(t *testing.T) {
	troop := testTroop(t)
	c := testkube.StartWith(t, testkube.Options{PodCIDR: podCIDR})
	pods := manifestPods(t, c)
	budgetAllowsOne(t, c, len(pods))
	hosts := make([]string, len(pods))
	for i, p := range pods {
		hosts[i] = p.Status.PodIP
	}
	// Position i of the lab (dc1-rack<i+1>-1) is pod i (troop-rack<i+1>-0).
	l := testlab.Start(t, lab.Spec{Troop: troop, Hosts: hosts, ReplaceAfter: time.Second})
	nodes := l.Nodes()
	account := c.ServiceAccount(t, "troop", "troop-chaos", testkube.ChaosRole)

	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// The group of docs/run.md, as written there.
	chaosConfig := write("chaos-k8s.yml", `groups:
  - name: store
    backend: kubernetes
    selector:
      namespace: troop
      label_selector: app.kubernetes.io/name=troop
    probability: 1
`)
	runConfig := write("run.yml", `keys: 1000
readers_per_node: 2
writers_per_node: 2
baseline: 1s
fault: 12s
kill_at: 2s
levels: [DC_QUORUM]
ldfi_max_faults: 0
register:
  duration: 1s
nemesis:
  faults: [partition, clock-skew]
  levels: [DC_QUORUM]
  fault: 2s
`)
	const seed = 3
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "out")
	cmd := exec.CommandContext(ctx, troop, "run", "--quick", "--config", runConfig, "--out", out, "--seed", fmt.Sprint(seed),
		"--cluster", nodes[0].StatsListen, "--chaos-config", chaosConfig, "--kubeconfig", account.Kubeconfig)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	replaced, err := playPodDeaths(t, c, l, pods, exited)
	t.Logf("troop run:\n%s", output.String())
	if err != nil {
		t.Fatalf("troop run: %v", err)
	}

	// The run's choice: among the nodes in their order, the seed's.
	want := pods[suite.FailureVictim(seed, len(pods))]
	if len(replaced) != 1 || replaced[0].pod != want.Name {
		t.Fatalf("pods deleted during the run: %+v; want %s alone, the seed's", replaced, want.Name)
	}
	r := replaced[0]
	if r.ip != r.newIP {
		t.Errorf("%s was at %s and its replacement at %s: kwok did not give it its predecessor's IP", r.pod, r.ip, r.newIP)
	}
	// An eviction, not a bare delete: the API server took the pod off the
	// budget (no disruption controller puts it back).
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets("troop").Get(t.Context(), "troop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pdb.Status.DisruptedPods[want.Name]; !ok || pdb.Status.DisruptionsAllowed != 0 {
		t.Errorf("budget after the run: allowed %d, disrupted %v; want %s evicted through it", pdb.Status.DisruptionsAllowed, pdb.Status.DisruptedPods, want.Name)
	}

	rep := readReport(t, out)
	fp := rep.Failure
	if fp == nil || rep.Durability == nil {
		t.Fatalf("the failure phase or the audit did not run; not run: %q", rep.Skipped)
	}
	node := nodes[slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == want.Name })]
	if wantNode := node.Name + " (kubernetes " + want.Name + ")"; fp.Node != wantNode || fp.How != "its pod deleted with no grace period" {
		t.Errorf("failure phase on %q (%s), want %q", fp.Node, fp.How, wantNode)
	}
	if fp.RecoverySeconds <= 0 || len(fp.Events) != 2 || !strings.Contains(fp.Events[1].What, "its workload replaced the pod") {
		t.Errorf("failure phase: recovered in %.1f s, events %+v", fp.RecoverySeconds, fp.Events)
	}
	if d := rep.Durability; d.Keys == 0 || !d.OK() {
		t.Errorf("durability audit: %+v", d)
	}
	if !slices.ContainsFunc(rep.Verdict.Held, func(v string) bool { return strings.HasPrefix(v, "durability: all ") }) {
		t.Errorf("the verdict does not hold durability: %+v", rep.Verdict)
	}
	if rep.Nemesis != nil {
		t.Errorf("the nemesis ran: %+v", rep.Nemesis)
	}
	for _, f := range []string{"partition", "clock-skew"} {
		reason := "nemesis, " + f + ": the kubernetes backend of chaos group store cannot put it in place: its only faults are pod deletions"
		if !slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.HasPrefix(s, reason) }) {
			t.Errorf("not run: %q; want %q", rep.Skipped, reason)
		}
	}
}

// podDeath is a pod the run deleted, and its replacement.
type podDeath struct {
	pod, ip, newIP string
}

// playPodDeaths plays, until the run has exited, what the cluster lacks
// when a pod of pods is deleted: the kubelet's part (the pod's node dies:
// the lab node at its IP is killed, and the lab's supervisor starts it
// again after its delay) and its StatefulSet controller's (once the node
// answers again, the pod is created anew, and kwok makes it ready). It
// returns the run's exit and the pods it replaced.
func playPodDeaths(t *testing.T, c *testkube.Cluster, l *lab.Lab, pods []corev1.Pod, exited <-chan error) ([]podDeath, error) {
	t.Helper()
	ctx := t.Context()
	type watched struct {
		pod         corev1.Pod
		node        lab.Node
		killedPID   int  // the node's process killed with the pod; 0 while it lives
		recreated   bool // its replacement created, its IP not yet seen
		replaced    *podDeath
		statefulSet string
	}
	var ws []*watched
	for i, p := range pods {
		ws = append(ws, &watched{pod: p, node: l.Nodes()[i], statefulSet: metav1.GetControllerOf(&p).Name})
	}
	var deaths []podDeath
	deadline := time.Now().Add(5 * time.Minute) // past the run's own bound
	for {
		select {
		case err := <-exited:
			for _, w := range ws {
				if w.replaced != nil { // deleted, and not (yet) replaced
					deaths = append(deaths, *w.replaced)
				}
			}
			return deaths, err
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("troop run has not exited after 5 minutes")
		}
		for _, w := range ws {
			cur, err := c.Client.CoreV1().Pods("troop").Get(ctx, w.pod.Name, metav1.GetOptions{})
			gone := apierrors.IsNotFound(err)
			if err != nil && !gone {
				t.Fatal(err)
			}
			switch {
			case w.killedPID == 0:
				if gone || cur.UID != w.pod.UID || cur.DeletionTimestamp != nil {
					// Its containers die with it.
					if w.killedPID, err = l.Kill(w.node.Name, lab.NodeProc); err != nil {
						t.Fatalf("%s deleted: kill its node %s: %v", w.pod.Name, w.node.Name, err)
					}
					w.replaced = &podDeath{pod: w.pod.Name, ip: w.pod.Status.PodIP}
				}
			case !w.recreated:
				st, err := l.Status().Node(w.node.Name)
				if err != nil {
					t.Fatal(err)
				}
				if gone && st.NodePID != 0 && st.NodePID != w.killedPID && lab.Ping(ctx, w.node.Listen) == nil {
					c.StatefulSetPods(t, "troop", w.statefulSet)
					w.recreated = true
				}
			case !gone && cur.Status.PodIP != "":
				w.replaced.newIP = cur.Status.PodIP
				deaths = append(deaths, *w.replaced)
				w.pod, w.killedPID, w.recreated, w.replaced = *cur, 0, false, nil
			}
		}
	}
}
