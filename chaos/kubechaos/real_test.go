package kubechaos

// The backend against a real API server (internal/testkube: etcd,
// kube-apiserver and kwok, which makes pods Running without running
// anything). There is no controller-manager: the test creates the
// StatefulSets' pods, sets the disruption budget's status and creates the
// default ServiceAccounts, as its controllers would.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/chaostest"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/monkey"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/internal/testkube"
)

// realStatefulSet creates a StatefulSet of 3 pods labelled lbls and its
// pods, as its controller would.
func realStatefulSet(t *testing.T, c *testkube.Cluster, ns, name string, lbls map[string]string) {
	t.Helper()
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(3)), ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "troop:test"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(t.Context(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.StatefulSetPods(t, ns, name)
}

// gone waits until the pod with the UID is deleted (kwok removes a
// terminating pod at once) or replaced.
func gone(t *testing.T, cs kubernetes.Interface, ns, name string, uid string) {
	t.Helper()
	testkube.Until(t, time.Minute, "pod "+ns+"/"+name+" to be deleted", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && string(p.UID) != uid, err
	})
}

func uidOf(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// setBudgetStatus sets what the disruption controller would: how many
// pods the budget lets go now.
func setBudgetStatus(t *testing.T, cs kubernetes.Interface, ns, name string, allowed int32) {
	t.Helper()
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 3, DesiredHealthy: 3 - allowed, ExpectedPods: 3}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(t.Context(), pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRealAPIServer(t *testing.T) {
	c := testkube.Start(t)
	ctx := t.Context()
	for _, ns := range []string{"shop", "other"} {
		c.Namespace(t, ns)
	}
	realStatefulSet(t, c, "shop", "web", map[string]string{"app": "web", "tier": "front"})
	realStatefulSet(t, c, "shop", "db", map[string]string{"app": "db", "tier": "back"})
	realStatefulSet(t, c, "other", "web", map[string]string{"app": "web", "tier": "front"})
	maxOne := intstr.FromInt32(1)
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, MaxUnavailable: &maxOne},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, budget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.PodsRunning(t, "shop", "app in (web,db)", 6)
	c.PodsRunning(t, "other", "app=web", 3)

	// Everything below runs as the monkey's ServiceAccount, with only the
	// documented rules, in shop.
	sa := c.ServiceAccount(t, "shop", "troop-chaos", testkube.ChaosRole).Client
	term := New(sa)

	t.Run("selection", func(t *testing.T) {
		for _, tc := range []struct {
			selector string
			want     []string
		}{
			{"app=web", []string{"shop/web-0", "shop/web-1", "shop/web-2"}},
			{"app in (web,db),tier!=front", []string{"shop/db-0", "shop/db-1", "shop/db-2"}},
			{"statefulset.kubernetes.io/pod-name in (web-2,db-0)", []string{"shop/db-0", "shop/web-2"}},
			{"app=cache", nil},
		} {
			got, err := term.Instances(ctx, kubeGroup("shop", tc.selector))
			ids := chaostest.IDs(got)
			slices.Sort(ids)
			if err != nil || !slices.Equal(ids, tc.want) {
				t.Errorf("shop %q: %v, %v; want %v", tc.selector, ids, err, tc.want)
			}
		}
		// Another namespace is out of the account's reach, as RBAC says.
		if _, err := term.Instances(ctx, kubeGroup("other", "app=web")); !apierrors.IsForbidden(err) {
			t.Errorf("pods of namespace other as the shop account: %v, want forbidden", err)
		}
		// And the administrator sees that namespace's own pods only.
		got, err := New(c.Client).Instances(ctx, kubeGroup("other", "app=web"))
		if ids := chaostest.IDs(got); err != nil || len(ids) != 3 || !strings.HasPrefix(ids[0], "other/") {
			t.Errorf("pods of namespace other: %v, %v", ids, err)
		}
	})

	t.Run("delete without a budget, then recovery", func(t *testing.T) {
		for _, kind := range []chaos.Kind{chaos.Terminate, chaos.Stop} {
			inst := chaos.Instance{ID: "shop/web-1", Name: "web-1"}
			uid := uidOf(t, sa, "shop", "web-1")
			since := time.Now()
			if err := term.Act(ctx, inst, chaos.Action{Kind: kind}); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			gone(t, sa, "shop", "web-1", uid)
			// The workload is short of a pod until its controller (played
			// here) replaces it and kwok makes the replacement Running. A
			// wait of a second tells so once it has read the StatefulSet; on
			// a busy machine the read itself can outlast the second, which
			// tells nothing, and the wait is tried again (no replacement
			// comes meanwhile).
			var err error
			for try := 0; try < 10; try++ {
				short, cancel := context.WithTimeout(ctx, time.Second)
				_, err = term.AwaitRecovery(short, inst, since)
				cancel()
				if err == nil || strings.Contains(err.Error(), "pods ready") {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), "2 of 3 pods ready") {
				t.Errorf("%s: recovery before the replacement: %v", kind, err)
			}
			c.StatefulSetPods(t, "shop", "web")
			wait, cancel := context.WithTimeout(ctx, time.Minute)
			took, err := term.AwaitRecovery(wait, inst, since)
			cancel()
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			t.Logf("%s of web-1: whole again after %s", kind, took.Round(time.Millisecond))
		}
		// The guard still holds: with web-0 gone, web-2 would leave 1 of 3.
		uid := uidOf(t, sa, "shop", "web-0")
		if err := term.Act(ctx, chaos.Instance{ID: "shop/web-0"}, chaos.Action{Kind: chaos.Terminate}); err != nil {
			t.Fatal(err)
		}
		gone(t, sa, "shop", "web-0", uid)
		var refused *RefusedError
		if err := term.Act(ctx, chaos.Instance{ID: "shop/web-2"}, chaos.Action{Kind: chaos.Terminate}); !errors.As(err, &refused) || refused.Min != 2 {
			t.Errorf("a kill leaving 1 of 3: %v, want refused with min 2", err)
		}
		c.StatefulSetPods(t, "shop", "web")
		c.PodsRunning(t, "shop", "app=web", 3)
	})

	t.Run("eviction under a budget", func(t *testing.T) {
		inst := chaos.Instance{ID: "shop/db-1", Name: "db-1"}
		setBudgetStatus(t, c.Client, "shop", "db", 0)
		err := term.Act(ctx, inst, chaos.Action{Kind: chaos.Terminate})
		var refused *RefusedError
		if !errors.As(err, &refused) || !errors.Is(err, ErrRefused) || !apierrors.IsTooManyRequests(err) ||
			!strings.Contains(err.Error(), "disruption budget") || !strings.Contains(err.Error(), "PodDisruptionBudget db") {
			t.Fatalf("eviction with no disruption allowed: %v, want the API server's 429 as a refusal", err)
		}
		t.Logf("refused: %v", err)
		if p, err := sa.CoreV1().Pods("shop").Get(ctx, "db-1", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the refused pod: %v, deleting %v", err, p.DeletionTimestamp)
		}

		setBudgetStatus(t, c.Client, "shop", "db", 1)
		uid := uidOf(t, sa, "shop", "db-1")
		if err := term.Act(ctx, inst, chaos.Action{Kind: chaos.Stop}); err != nil {
			t.Fatalf("eviction with one disruption allowed: %v", err)
		}
		gone(t, sa, "shop", "db-1", uid)
		// An eviction, not a delete: the API server took it off the budget.
		pdb, err := c.Client.PolicyV1().PodDisruptionBudgets("shop").Get(ctx, "db", metav1.GetOptions{})
		if _, ok := pdb.Status.DisruptedPods["db-1"]; err != nil || pdb.Status.DisruptionsAllowed != 0 || !ok {
			t.Errorf("budget after the eviction: allowed %d, disrupted %v (%v); want 0 and db-1", pdb.Status.DisruptionsAllowed, pdb.Status.DisruptedPods, err)
		}
		c.StatefulSetPods(t, "shop", "db")
		c.PodsRunning(t, "shop", "app=db", 3)
	})

	t.Run("monkey: global stop, refusal and no leases", func(t *testing.T) {
		const cfgText = `leashed: false
on_demand: true
groups:
  - name: db
    backend: kubernetes
    selector: {namespace: shop, label_selector: app=db}
    enabled: true
    min_time_between_kills: 0
    max_terminations_per_day: 100
`
		cfg, err := chaos.ParseConfig([]byte(cfgText), "chaos.yml", nil)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := records.Open(filepath.Join(t.TempDir(), "chaos.db"), cfg.Retention)
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		leases, err := lease.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		m := &monkey.Monkey{Config: cfg, Records: rec, Leases: leases, Seed: 7, RecoverWithin: time.Minute,
			StartWatchdog: func(string) error { return errors.New("no watchdog here: nothing should be leased") },
			Backend:       func(chaos.Backend) (chaos.Terminator, error) { return term, nil }}
		uids := map[string]string{}
		for _, p := range []string{"db-0", "db-1", "db-2"} {
			uids[p] = uidOf(t, sa, "shop", p)
		}
		untouched := func(when string) {
			t.Helper()
			for name, uid := range uids {
				if p, err := sa.CoreV1().Pods("shop").Get(ctx, name, metav1.GetOptions{}); err != nil || string(p.UID) != uid || p.DeletionTimestamp != nil {
					t.Errorf("%s: pod %s was touched (%v)", when, name, err)
				}
			}
		}

		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		setBudgetStatus(t, c.Client, "shop", "db", 1)
		tr, err := m.Kill(ctx, "db", chaos.Action{Kind: chaos.Terminate})
		if err != nil || tr.Outcome != chaos.Skipped || tr.Reason != chaos.Stopped {
			t.Errorf("kill during the global stop: %+v, %v; want skipped, stopped", tr, err)
		}
		untouched("global stop")
		if err := m.Resume(ctx); err != nil {
			t.Fatal(err)
		}

		// A pause cannot be undone here: failed, with no lease and no pod touched.
		tr, err = m.Kill(ctx, "db", chaos.Action{Kind: chaos.Pause, Duration: time.Minute})
		if tr.Outcome != chaos.Failed || !strings.Contains(tr.Error, "no leases") {
			t.Errorf("pause: %+v, %v; want failed: no leases", tr, err)
		}
		if l, _ := leases.List(); len(l) != 0 {
			t.Errorf("leases left: %v", l)
		}
		// The API server's refusal is recorded as a refusal.
		setBudgetStatus(t, c.Client, "shop", "db", 0)
		tr, err = m.Kill(ctx, "db", chaos.Action{Kind: chaos.Terminate})
		if err != nil || tr.Outcome != chaos.Skipped || tr.Reason != chaos.Refused || !strings.Contains(tr.Error, "disruption budget") {
			t.Errorf("kill the budget refuses: %+v, %v; want skipped, refused, with the API's message", tr, err)
		}
		untouched("refused")

		setBudgetStatus(t, c.Client, "shop", "db", 1)
		tr, err = m.Kill(ctx, "db", chaos.Action{Kind: chaos.Terminate})
		if err != nil || tr.Outcome != chaos.Executed {
			t.Fatalf("kill after resume: %+v, %v", tr, err)
		}
		victim := strings.TrimPrefix(tr.Instance.ID, "shop/")
		gone(t, sa, "shop", victim, uids[victim])
		c.StatefulSetPods(t, "shop", "db")
		m.Wait()
	})
}
