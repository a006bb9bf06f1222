package kubechaos

// These tests use client-go's fake clientset (an in-memory object tracker)
// for what needs many shapes of cluster at once: the tables of selection
// and of the minimum of ready pods, and recovery timed by a controller the
// test plays. The fake stores and lists objects, filters by label selector
// and records every call, but carries out no eviction and runs no
// controller. What a real API server decides (evictions under a budget,
// RBAC, grace periods) is tested against one in real_test.go.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/chaostest"
)

// podState is how a test pod looks.
type podState int

const (
	ready podState = iota
	notReady
	pending
	terminating
)

func pod(ns, name string, lbls map[string]string, owner *metav1.OwnerReference, st podState) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, UID: types.UID("uid-" + ns + "-" + name)},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	cond := corev1.ConditionTrue
	switch st {
	case notReady:
		cond = corev1.ConditionFalse
	case pending:
		p.Status.Phase = corev1.PodPending
		cond = corev1.ConditionFalse
	case terminating:
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		p.Finalizers = []string{"test/keep"} // the tracker keeps objects with a deletion time only with a finalizer
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	return p
}

func controller(kind, name string) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: new(true)}
}

// deployment returns a Deployment, its ReplicaSet and pods in the given
// states, all labelled app=name plus extra.
func deployment(ns, name string, replicas int32, annotations map[string]string, states ...podState) []runtime.Object {
	lbls := map[string]string{"app": name}
	sel := &metav1.LabelSelector{MatchLabels: lbls}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel},
	}
	rsName := name + "-7d4b9"
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rsName, UID: types.UID("uid-" + rsName), OwnerReferences: []metav1.OwnerReference{*controller("Deployment", name)}},
		Spec:       appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: sel},
	}
	objs := []runtime.Object{d, rs}
	for i, st := range states {
		objs = append(objs, pod(ns, fmt.Sprintf("%s-%d", rsName, i), lbls, controller("ReplicaSet", rsName), st))
	}
	return objs
}

func statefulSet(ns, name string, replicas int32, annotations map[string]string, states ...podState) []runtime.Object {
	lbls := map[string]string{"app": name}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec:       appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbls}},
	}
	objs := []runtime.Object{ss}
	for i, st := range states {
		objs = append(objs, pod(ns, fmt.Sprintf("%s-%d", name, i), lbls, controller("StatefulSet", name), st))
	}
	return objs
}

func pdb(ns, name string, matchLabels map[string]string, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: matchLabels},
			MinAvailable:   minAvailable,
			MaxUnavailable: maxUnavailable,
		},
	}
}

func ptrInt(i int) *intstr.IntOrString                 { v := intstr.FromInt32(int32(i)); return &v }
func ptrStr(s string) *intstr.IntOrString              { v := intstr.FromString(s); return &v }
func objs(groups ...[]runtime.Object) []runtime.Object { return slices.Concat(groups...) }

func kubeGroup(ns, selector string, exceptions ...string) *chaos.Group {
	return &chaos.Group{Name: "web", Backend: chaos.Kubernetes, Selector: chaos.Selector{Namespace: ns, LabelSelector: selector},
		Exceptions: chaostest.Exceptions(exceptions...)}
}

func TestInstances(t *testing.T) {
	web := map[string]string{"app": "web", "tier": "front"}
	edge := map[string]string{"app": "web", "tier": "edge"}
	canary := map[string]string{"app": "web", "tier": "front", "canary": "true"}
	back := map[string]string{"app": "web", "tier": "back"}
	cs := fake.NewClientset(
		pod("shop", "web-a", web, nil, ready),
		pod("shop", "web-b", edge, nil, ready),
		pod("shop", "web-c", web, nil, notReady),
		pod("shop", "web-d", web, nil, pending),
		pod("shop", "web-e", web, nil, terminating),
		pod("shop", "web-canary", canary, nil, ready),
		pod("shop", "web-back", back, nil, ready),
		pod("other", "web-a", web, nil, ready),
		pod("default", "web-z", web, nil, ready),
	)
	term := New(cs)
	ctx := context.Background()
	for _, tc := range []struct {
		ns, selector string
		want         []string
	}{
		{"shop", "app=web,tier in (front,edge),!canary", []string{"shop/web-a", "shop/web-b"}},
		{"shop", "app=web", []string{"shop/web-a", "shop/web-b", "shop/web-back", "shop/web-canary"}},
		{"shop", "tier!=front", []string{"shop/web-b", "shop/web-back"}},
		{"shop", "canary", []string{"shop/web-canary"}},
		{"shop", "app=db", nil},
		{"other", "app=web", []string{"other/web-a"}},
		{"", "app=web", []string{"default/web-z"}},
	} {
		got, err := term.Instances(ctx, kubeGroup(tc.ns, tc.selector))
		if err != nil {
			t.Errorf("%s %q: %v", tc.ns, tc.selector, err)
			continue
		}
		if !slices.Equal(chaostest.IDs(got), tc.want) {
			t.Errorf("%s %q: instances %v, want %v", tc.ns, tc.selector, chaostest.IDs(got), tc.want)
		}
		for _, in := range got {
			if in.Group != "web" || strings.Contains(in.Name, "/") || in.Labels["app"] != "web" {
				t.Errorf("instance %+v: want group web, the pod's name and labels", in)
			}
		}
	}

	// Exceptions are the core's to apply, over what Instances returns.
	for _, exc := range []string{"web-b", "shop/web-b", "tier=edge", "*-b"} {
		g := kubeGroup("shop", "app=web,tier in (front,edge)", exc)
		live, err := term.Instances(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		for pick := range uint64(8) {
			if in, ok := (chaos.PlannedKill{Pick: pick}).Choose(g, live); !ok || in.ID == "shop/web-b" {
				t.Errorf("exception %q: pick %d chose %q (ok %v); want never shop/web-b", exc, pick, in.ID, ok)
			}
		}
	}

	for _, tc := range []struct {
		g    *chaos.Group
		want string
	}{
		{kubeGroup("shop", "app in (web"), "label selector"},
		{kubeGroup("shop", ""), "empty label selector"},
		{&chaos.Group{Name: "web", Backend: chaos.Docker}, `backend "docker"`},
	} {
		if _, err := term.Instances(ctx, tc.g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Instances(%+v) = %v, want an error about %s", tc.g.Selector, err, tc.want)
		}
	}
}

func TestMinReady(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation string
		budgets    []Budget
		desired    int
		want       int
		from       string
		err        string
	}{
		{name: "default", desired: 3, want: 2, from: "default"},
		{name: "default of one replica", desired: 1, want: 0, from: "default"},
		{name: "default of zero replicas", desired: 0, want: 0, from: "default"},
		{name: "annotation number", annotation: "3", desired: 5, want: 3, from: "annotation"},
		{name: "annotation zero", annotation: "0", desired: 5, want: 0, from: "annotation"},
		{name: "annotation percentage rounds up", annotation: "50%", desired: 3, want: 2, from: "annotation"},
		{name: "annotation 100%", annotation: "100%", desired: 4, want: 4, from: "annotation"},
		{name: "annotation with spaces", annotation: " 2 ", desired: 4, want: 2, from: "annotation"},
		{name: "annotation beats budgets", annotation: "1", budgets: []Budget{{Name: "pdb", MinAvailable: ptrInt(3)}}, desired: 3, want: 1, from: "annotation"},
		{name: "budget minAvailable", budgets: []Budget{{Name: "pdb", MinAvailable: ptrInt(3)}}, desired: 3, want: 3, from: "PodDisruptionBudget pdb"},
		{name: "budget minAvailable percentage", budgets: []Budget{{Name: "pdb", MinAvailable: ptrStr("34%")}}, desired: 3, want: 2, from: "PodDisruptionBudget pdb"},
		{name: "budget maxUnavailable", budgets: []Budget{{Name: "pdb", MaxUnavailable: ptrInt(2)}}, desired: 5, want: 3, from: "PodDisruptionBudget pdb"},
		{name: "budget maxUnavailable percentage rounds up", budgets: []Budget{{Name: "pdb", MaxUnavailable: ptrStr("30%")}}, desired: 5, want: 3, from: "PodDisruptionBudget pdb"},
		{name: "budget maxUnavailable above replicas", budgets: []Budget{{Name: "pdb", MaxUnavailable: ptrInt(9)}}, desired: 2, want: 0, from: "PodDisruptionBudget pdb"},
		{name: "strictest budget", budgets: []Budget{{Name: "loose", MinAvailable: ptrInt(1)}, {Name: "strict", MaxUnavailable: ptrInt(0)}}, desired: 4, want: 4, from: "PodDisruptionBudget strict"},
		{name: "unparsable budget skipped", budgets: []Budget{{Name: "bad", MinAvailable: ptrStr("lots")}}, desired: 3, want: 2, from: "default"},
		{name: "empty budget skipped", budgets: []Budget{{Name: "empty"}}, desired: 3, want: 2, from: "default"},
		{name: "bad annotation", annotation: "two", desired: 3, err: `troop.dev/min-ready="two": want a whole number`},
		{name: "negative annotation", annotation: "-1", desired: 3, err: "want a whole number"},
		{name: "annotation above 100%", annotation: "101%", desired: 3, err: "want a whole number"},
		{name: "annotation fraction", annotation: "1.5", desired: 3, err: "want a whole number"},
		{name: "annotation bare %", annotation: "%", desired: 3, err: "want a whole number"},
	} {
		got, from, err := MinReady(tc.annotation, tc.budgets, tc.desired)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || !strings.HasPrefix(from, tc.from) {
			t.Errorf("%s: MinReady = %d, %q, %v; want %d from %s", tc.name, got, from, err, tc.want, tc.from)
		}
	}
}

func FuzzMinReadyAnnotation(f *testing.F) {
	for _, s := range []string{"2", "50%", "0", "100%", "-1", "1.5", "%", " 3 ", "+2", "99999999999999999999"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, desired int) {
		if desired < 0 || desired > 1_000_000 {
			return
		}
		n, from, err := MinReady(s, nil, desired)
		if err != nil {
			if n != 0 || from != "" {
				t.Errorf("MinReady(%q) failed but returned %d, %q", s, n, from)
			}
			return
		}
		if n < 0 || from == "" {
			t.Errorf("MinReady(%q, %d) = %d, %q", s, desired, n, from)
		}
		if strings.HasSuffix(strings.TrimSpace(s), "%") && n > desired {
			t.Errorf("MinReady(%q, %d) = %d, above the replicas", s, desired, n)
		}
	})
}

// TestGuard checks that Act kills a pod only when its workload keeps its
// minimum of ready pods, and refuses otherwise with a *RefusedError and
// nothing deleted.
func TestGuard(t *testing.T) {
	const ns = "shop"
	webPDB := func(min, maxU *intstr.IntOrString) []runtime.Object {
		return []runtime.Object{pdb(ns, "web-pdb", map[string]string{"app": "web"}, min, maxU)}
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		victim  string
		refused bool
		min     int
		err     string // an error that is not a refusal
	}{
		{name: "3 of 3 ready, default min 2", objects: deployment(ns, "web", 3, nil, ready, ready, ready), victim: "web-7d4b9-0"},
		{name: "2 of 3 ready, default min 2", objects: deployment(ns, "web", 3, nil, ready, ready, notReady), victim: "web-7d4b9-0", refused: true, min: 2},
		{name: "one not-ready pod does not count", objects: deployment(ns, "web", 3, nil, ready, ready, ready, notReady), victim: "web-7d4b9-0"},
		{name: "terminating pods do not count", objects: deployment(ns, "web", 3, nil, ready, ready, terminating), victim: "web-7d4b9-0", refused: true, min: 2},
		{name: "single replica, default min 0", objects: deployment(ns, "web", 1, nil, ready), victim: "web-7d4b9-0"},
		{name: "annotation 3 of 3", objects: deployment(ns, "web", 3, map[string]string{MinReadyAnnotation: "3"}, ready, ready, ready), victim: "web-7d4b9-1", refused: true, min: 3},
		{name: "annotation 50% of 3", objects: deployment(ns, "web", 3, map[string]string{MinReadyAnnotation: "50%"}, ready, ready, ready), victim: "web-7d4b9-1"},
		{name: "annotation 50% of 3, 2 ready", objects: deployment(ns, "web", 3, map[string]string{MinReadyAnnotation: "50%"}, ready, ready, pending), victim: "web-7d4b9-1", refused: true, min: 2},
		{name: "bad annotation", objects: deployment(ns, "web", 3, map[string]string{MinReadyAnnotation: "most"}, ready, ready, ready), victim: "web-7d4b9-1", err: "troop.dev/min-ready"},
		{name: "PDB minAvailable 3", objects: objs(deployment(ns, "web", 3, nil, ready, ready, ready), webPDB(ptrInt(3), nil)), victim: "web-7d4b9-2", refused: true, min: 3},
		{name: "PDB maxUnavailable 1", objects: objs(deployment(ns, "web", 3, nil, ready, ready, ready), webPDB(nil, ptrInt(1))), victim: "web-7d4b9-2"},
		{name: "PDB maxUnavailable 0", objects: objs(deployment(ns, "web", 3, nil, ready, ready, ready), webPDB(nil, ptrInt(0))), victim: "web-7d4b9-2", refused: true, min: 3},
		{name: "PDB of other pods ignored", objects: objs(deployment(ns, "web", 3, nil, ready, ready, ready), []runtime.Object{pdb(ns, "db", map[string]string{"app": "db"}, ptrInt(3), nil)}), victim: "web-7d4b9-2"},
		{name: "PDB in another namespace ignored", objects: objs(deployment(ns, "web", 3, nil, ready, ready, ready), []runtime.Object{pdb("other", "web", map[string]string{"app": "web"}, ptrInt(3), nil)}), victim: "web-7d4b9-2"},
		{name: "annotation beats PDB", objects: objs(deployment(ns, "web", 3, map[string]string{MinReadyAnnotation: "1"}, ready, ready, ready), webPDB(ptrInt(3), nil)), victim: "web-7d4b9-2"},
		{name: "StatefulSet 3 of 3", objects: statefulSet(ns, "db", 3, nil, ready, ready, ready), victim: "db-1"},
		{name: "StatefulSet 2 of 3", objects: statefulSet(ns, "db", 3, nil, ready, notReady, ready), victim: "db-0", refused: true, min: 2},
		{name: "bare pod", objects: []runtime.Object{pod(ns, "lonely", map[string]string{"app": "web"}, nil, ready)}, victim: "lonely", refused: true},
		{name: "DaemonSet pod", objects: []runtime.Object{pod(ns, "agent-x", map[string]string{"app": "agent"}, controller("DaemonSet", "agent"), ready)}, victim: "agent-x", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []chaos.Kind{chaos.Terminate, chaos.Stop, chaos.Restart} {
				cs := fake.NewClientset(tc.objects...)
				term := New(cs)
				id := ns + "/" + tc.victim
				err := term.Act(context.Background(), chaos.Instance{ID: id, Name: tc.victim}, chaos.Action{Kind: kind})
				// The fake does not carry out an eviction: a recorded one counts.
				_, getErr := cs.CoreV1().Pods(ns).Get(context.Background(), tc.victim, metav1.GetOptions{})
				deleted := apierrors.IsNotFound(getErr) || killOptions(cs) != nil
				var refused *RefusedError
				switch {
				case tc.err != "":
					if err == nil || !strings.Contains(err.Error(), tc.err) || errors.Is(err, ErrRefused) {
						t.Errorf("%s: err = %v, want a non-refusal error about %s", kind, err, tc.err)
					}
				case tc.refused:
					if !errors.As(err, &refused) || !errors.Is(err, ErrRefused) {
						t.Fatalf("%s: err = %v, want a *RefusedError", kind, err)
					}
					if refused.Reason == "" && refused.Min != tc.min {
						t.Errorf("%s: refused with min %d, want %d (%v)", kind, refused.Min, tc.min, err)
					}
				default:
					if err != nil {
						t.Fatalf("%s: %v", kind, err)
					}
				}
				if want := tc.err == "" && !tc.refused; deleted != want {
					t.Errorf("%s: pod deleted = %v, want %v", kind, deleted, want)
				}
				if deleted {
					checkGrace(t, killOptions(cs), kind)
				}
			}
		})
	}
}

// killOptions are the options of the pod delete or eviction recorded by
// the fake, nil when there is none.
func killOptions(cs *fake.Clientset) *metav1.DeleteOptions {
	for _, a := range cs.Actions() {
		if a.GetResource().Resource != "pods" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.DeleteActionImpl:
			return &a.DeleteOptions
		case k8stesting.CreateActionImpl:
			if ev, ok := a.GetObject().(*policyv1.Eviction); ok && a.GetSubresource() == "eviction" {
				return ev.DeleteOptions
			}
		}
	}
	return nil
}

// checkGrace checks the kill's options: terminate asks for a grace period
// of 0, stop and restart leave the pod's own.
func checkGrace(t *testing.T, opts *metav1.DeleteOptions, kind chaos.Kind) {
	t.Helper()
	if opts == nil {
		t.Errorf("%s: no pod delete or eviction recorded", kind)
		return
	}
	grace := opts.GracePeriodSeconds
	if kind == chaos.Terminate && (grace == nil || *grace != 0) {
		t.Errorf("terminate deleted with grace %v, want 0", grace)
	}
	if kind != chaos.Terminate && grace != nil {
		t.Errorf("%s deleted with grace %d, want the pod's own", kind, *grace)
	}
	if pre := opts.Preconditions; pre == nil || pre.UID == nil {
		t.Errorf("%s deleted without a UID precondition: a replacement with the same name could be deleted instead", kind)
	}
}

func TestPauseAndBurnNotSupported(t *testing.T) {
	cs := fake.NewClientset(deployment("shop", "web", 3, nil, ready, ready, ready)...)
	term := New(cs)
	for _, a := range []chaos.Action{{Kind: chaos.Pause, Duration: time.Minute}, {Kind: chaos.BurnCPU, Duration: time.Minute}} {
		err := term.Act(context.Background(), chaos.Instance{ID: "shop/web-7d4b9-0"}, a)
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("Act(%s) = %v, want ErrNotSupported", a, err)
		}
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("an unsupported action deleted something: %v", a)
		}
	}
}

// replicaSetController plays the ReplicaSet (or StatefulSet) controller and
// the kubelet on the fake clientset: for each deleted pod it creates a
// replacement after createAfter, not ready, and marks it ready after
// readyAfter more. It returns when the replacement is ready, through done.
type replicaSetController struct {
	cs                      *fake.Clientset
	createAfter, readyAfter time.Duration
	sameName                bool // StatefulSet: the replacement keeps the name

	mu      sync.Mutex
	readyAt time.Time
	done    chan struct{}
}

func (c *replicaSetController) install() {
	c.done = make(chan struct{})
	c.cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		ns := a.GetNamespace()
		old, err := c.cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), ns, name)
		if err != nil {
			return false, nil, nil
		}
		go c.replace(old.(*corev1.Pod).DeepCopy())
		return false, nil, nil // the tracker deletes it
	})
}

func (c *replicaSetController) replace(old *corev1.Pod) {
	ctx := context.Background()
	time.Sleep(c.createAfter)
	p := old.DeepCopy()
	p.ResourceVersion = ""
	p.UID = old.UID + "-new"
	if !c.sameName {
		p.Name = old.Name + "-new"
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	pods := c.cs.CoreV1().Pods(p.Namespace)
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		panic(err)
	}
	time.Sleep(c.readyAfter)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	c.mu.Lock()
	c.readyAt = time.Now()
	c.mu.Unlock()
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		panic(err)
	}
	close(c.done)
}

func TestRecovery(t *testing.T) {
	for _, tc := range []struct {
		name     string
		objects  []runtime.Object
		victim   string
		sameName bool
	}{
		{"Deployment", deployment("shop", "web", 3, nil, ready, ready, ready), "web-7d4b9-1", false},
		{"StatefulSet", statefulSet("shop", "db", 3, nil, ready, ready, ready), "db-1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objects...)
			ctrl := &replicaSetController{cs: cs, createAfter: 200 * time.Millisecond, readyAfter: 500 * time.Millisecond, sameName: tc.sameName}
			ctrl.install()
			term := New(cs)
			inst := chaos.Instance{ID: "shop/" + tc.victim, Name: tc.victim}
			since := time.Now()
			if err := term.Act(context.Background(), inst, chaos.Action{Kind: chaos.Terminate}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			took, err := term.AwaitRecovery(ctx, inst, since)
			if err != nil {
				t.Fatal(err)
			}
			<-ctrl.done
			ctrl.mu.Lock()
			readyAt := ctrl.readyAt
			ctrl.mu.Unlock()
			if since.Add(took).Before(readyAt) {
				t.Errorf("recovered after %s, before the replacement was ready (%s after the kill)", took, readyAt.Sub(since))
			}
			if took < 700*time.Millisecond {
				t.Errorf("recovery time %s, want at least the controller's 700ms", took)
			}
			t.Logf("%s: whole again after %s (replacement ready after %s)", tc.name, took.Round(time.Millisecond), readyAt.Sub(since).Round(time.Millisecond))
		})
	}
}

func TestRecoveryTimesOutWithoutController(t *testing.T) {
	cs := fake.NewClientset(deployment("shop", "web", 3, nil, ready, ready, ready)...)
	term := New(cs)
	inst := chaos.Instance{ID: "shop/web-7d4b9-0", Name: "web-7d4b9-0"}
	if err := term.Act(context.Background(), inst, chaos.Action{Kind: chaos.Stop}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	_, err := term.AwaitRecovery(ctx, inst, time.Now())
	if err == nil || !strings.Contains(err.Error(), "2 of 3 pods ready") {
		t.Errorf("AwaitRecovery with nothing replacing the pod = %v, want a timeout naming 2 of 3 ready", err)
	}
}

func TestNewFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/config"
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: shop}
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	term, err := NewFromKubeconfig(path)
	if err != nil || term == nil {
		t.Fatalf("NewFromKubeconfig(a valid file) = %v, %v", term, err)
	}
	if _, err := NewFromKubeconfig(dir + "/missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("NewFromKubeconfig(a missing file) = %v, want an error naming it", err)
	}
}

func TestAddresses(t *testing.T) {
	dual := pod("store", "troop-0", nil, nil, ready)
	dual.Status.PodIP, dual.Status.PodIPs = "10.1.0.5", []corev1.PodIP{{IP: "10.1.0.5"}, {IP: "fd00::5"}}
	old := pod("store", "troop-1", nil, nil, ready)
	old.Status.PodIP = "10.1.0.6" // a cluster that fills podIP only
	tm := New(fake.NewClientset(dual, old))
	for id, want := range map[string][]string{"store/troop-0": {"10.1.0.5", "fd00::5"}, "store/troop-1": {"10.1.0.6"}} {
		got, err := tm.Addresses(context.Background(), chaos.Instance{ID: id})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Addresses(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	if _, err := tm.Addresses(context.Background(), chaos.Instance{ID: "store/gone"}); err == nil {
		t.Error("Addresses of a pod that does not exist: no error")
	}
}
