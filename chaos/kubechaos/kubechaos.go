// Package kubechaos is the Kubernetes backend of troop chaos: its instances
// are the running, ready pods of a namespace that match a group's label
// selector, and it acts on them through the API server with client-go.
//
// Every action deletes a pod and leaves the replacement to its workload's
// controller, the way Chaos Monkey leaves it to an Auto Scaling Group; so a
// pod is only killed when its workload keeps at least its minimum of ready
// pods (see MinReady). Pods without a Deployment, ReplicaSet or StatefulSet
// behind them are never killed: nothing would replace them. A pod that a
// PodDisruptionBudget selects is evicted rather than deleted, so that the
// API server, which keeps the budget's count, has the last word.
//
// Pause and burn-cpu are not supported: the API server has no call that
// freezes a pod's containers, and a burner would need the pods/exec
// streams, which this backend does not open.
package kubechaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/troop-lab/troop/chaos"
)

// Terminator is the Kubernetes backend's chaos.Terminator,
// chaos.RecoveryWaiter and chaos.Addresser. It is safe for concurrent use.
type Terminator struct {
	api kubernetes.Interface

	mu     sync.Mutex
	killed map[string]killed // instance ID -> what was deleted, for AwaitRecovery
}

// killed is what AwaitRecovery needs of a pod deleted by Act.
type killed struct {
	uid      types.UID
	workload Workload
}

var (
	_ chaos.Terminator     = (*Terminator)(nil)
	_ chaos.RecoveryWaiter = (*Terminator)(nil)
	_ chaos.Addresser      = (*Terminator)(nil)
)

// PollInterval is how often AwaitRecovery looks at the workload.
const PollInterval = 250 * time.Millisecond

// New returns a Terminator acting through the clientset.
func New(clientset kubernetes.Interface) *Terminator {
	return &Terminator{api: clientset, killed: map[string]killed{}}
}

// NewFromKubeconfig returns a Terminator for the cluster of a kubeconfig
// file, with its current context. An empty path means what kubectl uses:
// $KUBECONFIG, else ~/.kube/config, else the in-cluster service account.
func NewFromKubeconfig(path string) (*Terminator, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	return New(cs), nil
}

// ErrNotSupported wraps the errors of the chaos types the backend cannot
// apply, with the reason.
var ErrNotSupported = errors.New("not supported by the kubernetes backend")

// ErrRefused is what a RefusedError is: the backend declined to kill the
// pod, and nothing was done. The monkey records it as skipped (refused),
// not failed.
var ErrRefused = chaos.ErrRefused

// RefusedError says why a pod was not killed: its workload would fall
// below its minimum of ready pods, it has no workload to replace it, or the
// API server refused its eviction (Err, a 429 naming the budget).
type RefusedError struct {
	Pod      string   // namespace/name
	Workload Workload // zero when the pod has none
	Ready    int      // ready pods of the workload now
	Min      int      // the minimum of ready pods
	MinFrom  string   // where Min comes from (see MinReady)
	Reason   string   // set when there is no workload, or the API server refused
	Err      error    // the API server's refusal, as it gave it
}

func (e *RefusedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("kubernetes backend: refused to kill %s: %s", e.Pod, e.Reason)
	}
	return fmt.Sprintf("kubernetes backend: refused to kill %s: %s has %d ready pods and must keep at least %d (%s)",
		e.Pod, e.Workload, e.Ready, e.Min, e.MinFrom)
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Unwrap is the API server's refusal, for apierrors.IsTooManyRequests.
func (e *RefusedError) Unwrap() error { return e.Err }

// Instances returns the group's pods that run and are ready, and are not
// being deleted. Exceptions are the caller's to apply
// (chaos.PlannedKill.Choose does). Instance IDs are namespace/name.
func (t *Terminator) Instances(ctx context.Context, g *chaos.Group) ([]chaos.Instance, error) {
	if g.Backend != chaos.Kubernetes {
		return nil, fmt.Errorf("kubernetes backend: group %s has backend %q", g.Name, g.Backend)
	}
	sel, err := labels.Parse(g.Selector.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: group %s: label selector: %w", g.Name, err)
	}
	if sel.Empty() {
		// An empty selector would select every pod of the namespace.
		return nil, fmt.Errorf("kubernetes backend: group %s has an empty label selector", g.Name)
	}
	ns := g.Selector.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	pods, err := t.api.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: list pods of group %s in %s: %w", g.Name, ns, err)
	}
	var out []chaos.Instance
	for i := range pods.Items {
		p := &pods.Items[i]
		if !live(p) {
			continue
		}
		out = append(out, chaos.Instance{ID: p.Namespace + "/" + p.Name, Name: p.Name, Group: g.Name, Labels: p.Labels})
	}
	return out, nil
}

// Addresses returns the pod's IPs: every port at them is the pod's.
func (t *Terminator) Addresses(ctx context.Context, inst chaos.Instance) ([]string, error) {
	ns, name, err := splitID(inst.ID)
	if err != nil {
		return nil, err
	}
	pod, err := t.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %s: %w", inst.ID, err)
	}
	var out []string
	for _, ip := range pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && pod.Status.PodIP != "" {
		out = append(out, pod.Status.PodIP)
	}
	return out, nil
}

// live reports whether the pod runs, is ready and is not being deleted.
func live(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func splitID(id string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == "" || name == "" {
		return "", "", fmt.Errorf("kubernetes backend: instance %q: want namespace/name", id)
	}
	return ns, name, nil
}

// Act deletes the pod, after checking that its workload keeps its minimum
// of ready pods (a *RefusedError otherwise, and nothing is deleted). When a
// PodDisruptionBudget selects the pod, the delete is an eviction, which the
// API server refuses with 429 Too Many Requests when the budget allows no
// disruption now: a *RefusedError holding that answer.
//
//   - terminate: delete with a grace period of 0, the pod's kill -9.
//   - stop, restart: delete with the pod's own grace period (its
//     terminationGracePeriodSeconds, SIGTERM then SIGKILL). A pod cannot be
//     stopped and kept, so both end the same way: the controller creates
//     a replacement (a new pod; for a StatefulSet, one with the same name).
//   - pause, burn-cpu: ErrNotSupported.
func (t *Terminator) Act(ctx context.Context, inst chaos.Instance, a chaos.Action) error {
	switch a.Kind {
	case chaos.Pause:
		return fmt.Errorf("kubernetes backend: pause of %s: %w: the API server has no call that freezes a pod's containers", inst.ID, ErrNotSupported)
	case chaos.BurnCPU:
		return fmt.Errorf("kubernetes backend: burn-cpu of %s: %w: it would need a burner run through pods/exec streams, which this backend does not open", inst.ID, ErrNotSupported)
	case chaos.Terminate, chaos.Stop, chaos.Restart:
	default:
		return fmt.Errorf("kubernetes backend: unknown chaos type %q", a.Kind)
	}
	ns, name, err := splitID(inst.ID)
	if err != nil {
		return err
	}
	pod, err := t.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes backend: %s: %w", inst.ID, err)
	}
	w, err := t.WorkloadOf(ctx, pod)
	if err != nil {
		return err
	}
	if w.Kind == "" {
		return &RefusedError{Pod: inst.ID, Reason: "no Deployment, ReplicaSet or StatefulSet would replace it"}
	}
	st, err := t.status(ctx, w)
	if err != nil {
		return err
	}
	after := st.Ready
	if live(pod) {
		after--
	}
	if after < st.Min {
		return &RefusedError{Pod: inst.ID, Workload: w, Ready: st.Ready, Min: st.Min, MinFrom: st.MinFrom}
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	if a.Kind == chaos.Terminate {
		opts.GracePeriodSeconds = new(int64(0))
	}
	t.mu.Lock()
	t.killed[inst.ID] = killed{uid: pod.UID, workload: w}
	t.mu.Unlock()
	if len(st.budgets) == 0 {
		if err := t.api.CoreV1().Pods(ns).Delete(ctx, name, opts); err != nil {
			return fmt.Errorf("kubernetes backend: %s of %s: delete: %w", a.Kind, inst.ID, err)
		}
		return nil
	}
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, DeleteOptions: &opts}
	err = t.api.PolicyV1().Evictions(ns).Evict(ctx, eviction)
	if apierrors.IsTooManyRequests(err) {
		return &RefusedError{Pod: inst.ID, Workload: w, Err: err,
			Reason: fmt.Sprintf("the API server refused its eviction (PodDisruptionBudget %s): %v", strings.Join(st.budgets, ", "), err)}
	}
	if err != nil {
		return fmt.Errorf("kubernetes backend: %s of %s: evict: %w", a.Kind, inst.ID, err)
	}
	return nil
}

// AwaitRecovery waits until the workload of a pod deleted by Act has its
// desired number of ready pods again, none of them the deleted one, and
// returns the time since since. For a pod this Terminator did not delete,
// it looks up the pod's workload and waits for the same. It polls every
// PollInterval until ctx ends.
func (t *Terminator) AwaitRecovery(ctx context.Context, inst chaos.Instance, since time.Time) (time.Duration, error) {
	t.mu.Lock()
	k, ok := t.killed[inst.ID]
	t.mu.Unlock()
	if !ok {
		ns, name, err := splitID(inst.ID)
		if err != nil {
			return 0, err
		}
		pod, err := t.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("kubernetes backend: %s: %w", inst.ID, err)
		}
		if k.workload, err = t.WorkloadOf(ctx, pod); err != nil {
			return 0, err
		}
		if k.workload.Kind == "" {
			return 0, fmt.Errorf("kubernetes backend: %s has no workload to recover it", inst.ID)
		}
	}
	var last error
	for {
		st, err := t.status(ctx, k.workload)
		switch {
		case err != nil:
			last = err
		case st.Ready < st.Desired:
			last = fmt.Errorf("%s has %d of %d pods ready", k.workload, st.Ready, st.Desired)
		case k.uid != "" && st.readyUIDs[k.uid]:
			last = fmt.Errorf("the deleted pod %s is still counted ready", inst.ID)
		default:
			t.mu.Lock()
			delete(t.killed, inst.ID)
			t.mu.Unlock()
			return time.Since(since), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kubernetes backend: %s not recovered after %s: %w (last: %v)",
				inst.ID, time.Since(since).Round(time.Millisecond), ctx.Err(), last)
		case <-time.After(PollInterval):
		}
	}
}

// Workload is the controller that owns a pod's replicas.
type Workload struct {
	Kind      string // Deployment, ReplicaSet or StatefulSet; "" for none
	Namespace string
	Name      string
}

func (w Workload) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// WorkloadOf follows the pod's controller references: a ReplicaSet, and
// the Deployment that owns it if one does, or a StatefulSet. A pod with
// no controller, or another kind of one (a DaemonSet, a Job), has no
// workload here: Kind is "".
func (t *Terminator) WorkloadOf(ctx context.Context, pod *corev1.Pod) (Workload, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return Workload{}, nil
	}
	switch ref.Kind {
	case "StatefulSet":
		return Workload{Kind: ref.Kind, Namespace: pod.Namespace, Name: ref.Name}, nil
	case "ReplicaSet":
		rs, err := t.api.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return Workload{}, fmt.Errorf("kubernetes backend: owner of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" {
			return Workload{Kind: d.Kind, Namespace: pod.Namespace, Name: d.Name}, nil
		}
		return Workload{Kind: ref.Kind, Namespace: pod.Namespace, Name: ref.Name}, nil
	}
	return Workload{}, nil
}

// workloadStatus is what the guard and the recovery need of a workload.
type workloadStatus struct {
	Desired   int // spec.replicas
	Ready     int // its pods that run, are ready and are not being deleted
	Min       int // see MinReady
	MinFrom   string
	readyUIDs map[types.UID]bool
	budgets   []string // the PodDisruptionBudgets that select its pods
}

func (t *Terminator) status(ctx context.Context, w Workload) (workloadStatus, error) {
	var (
		replicas    *int32
		sel         *metav1.LabelSelector
		annotations map[string]string
		err         error
	)
	apps := t.api.AppsV1()
	switch w.Kind {
	case "Deployment":
		var d *appsv1.Deployment
		if d, err = apps.Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			replicas, sel, annotations = d.Spec.Replicas, d.Spec.Selector, d.Annotations
		}
	case "ReplicaSet":
		var rs *appsv1.ReplicaSet
		if rs, err = apps.ReplicaSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			replicas, sel, annotations = rs.Spec.Replicas, rs.Spec.Selector, rs.Annotations
		}
	case "StatefulSet":
		var ss *appsv1.StatefulSet
		if ss, err = apps.StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			replicas, sel, annotations = ss.Spec.Replicas, ss.Spec.Selector, ss.Annotations
		}
	default:
		return workloadStatus{}, fmt.Errorf("kubernetes backend: %s: unsupported workload kind", w)
	}
	if err != nil {
		return workloadStatus{}, fmt.Errorf("kubernetes backend: %s: %w", w, err)
	}
	st := workloadStatus{Desired: 1, readyUIDs: map[types.UID]bool{}}
	if replicas != nil {
		st.Desired = int(*replicas)
	}
	podSel, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || podSel.Empty() {
		return workloadStatus{}, fmt.Errorf("kubernetes backend: %s: its pod selector %v is unusable: %v", w, sel, err)
	}
	pods, err := t.api.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podSel.String()})
	if err != nil {
		return workloadStatus{}, fmt.Errorf("kubernetes backend: pods of %s: %w", w, err)
	}
	var podLabels labels.Set
	for i := range pods.Items {
		p := &pods.Items[i]
		podLabels = p.Labels
		if live(p) {
			st.Ready++
			st.readyUIDs[p.UID] = true
		}
	}
	pdbs, err := t.api.PolicyV1().PodDisruptionBudgets(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return workloadStatus{}, fmt.Errorf("kubernetes backend: disruption budgets of %s: %w", w.Namespace, err)
	}
	var budgets []Budget
	if pdbs != nil {
		for _, pdb := range pdbs.Items {
			s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			// A budget selects the workload when it selects its pods; a
			// workload with no pod yet is matched on its pod template's
			// labels, which its selector stands for.
			if err != nil || s.Empty() || (podLabels != nil && !s.Matches(podLabels)) || (podLabels == nil && !s.Matches(labels.Set(sel.MatchLabels))) {
				continue
			}
			budgets = append(budgets, Budget{Name: pdb.Name, MinAvailable: pdb.Spec.MinAvailable, MaxUnavailable: pdb.Spec.MaxUnavailable})
			st.budgets = append(st.budgets, pdb.Name)
		}
	}
	st.Min, st.MinFrom, err = MinReady(annotations[MinReadyAnnotation], budgets, st.Desired)
	if err != nil {
		return workloadStatus{}, fmt.Errorf("kubernetes backend: %s: %w", w, err)
	}
	return st, nil
}
