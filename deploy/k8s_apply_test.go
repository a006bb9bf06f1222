package deploy

// The manifests applied to a real API server (internal/testkube: etcd,
// kube-apiserver and kwok). kwok makes the pods Running without running
// anything, and there is no controller-manager or scheduler: the tests
// create the pods the StatefulSet and Job controllers would create, bound
// to kwok's node, and the namespace's default ServiceAccount.

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/kubechaos"
	"github.com/troop-lab/troop/internal/testkube"
)

// warnings records the API server's warnings (deprecated fields and the
// like): an applied manifest must draw none.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// applyManifests applies every document of dir's manifests server-side,
// as `kubectl apply --server-side` does, with strict field validation,
// Namespaces first. It checks that each is stored as written (every field
// the manifest sets has the value it gives) and draws no warning.
func applyManifests(t *testing.T, c *testkube.Cluster, dir string) {
	t.Helper()
	ctx := t.Context()
	var warned warnings
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = &warned
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	docs := manifestDocs(t, dir)
	objs := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		objs[i] = &unstructured.Unstructured{}
		if err := k8syaml.Unmarshal(d.data, &objs[i].Object); err != nil {
			t.Fatalf("%s: %v", d.where, err)
		}
	}
	order := make([]int, len(docs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return boolRank(objs[a].GetKind() != "Namespace") - boolRank(objs[b].GetKind() != "Namespace")
	})
	for _, i := range order {
		obj, where := objs[i], docs[i].where
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s is not served: %v", where, gvk, err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		stored, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "troop-test", Force: new(true), FieldValidation: "Strict"})
		if err != nil {
			t.Fatalf("%s: apply %s %s: %v", where, gvk.Kind, obj.GetName(), err)
		}
		if w := warned.take(); len(w) > 0 {
			t.Errorf("%s: the API server warned: %q", where, w)
		}
		if diff := notStored(obj.Object, stored.Object, ""); diff != "" {
			t.Errorf("%s: %s %s not stored as written: %s", where, gvk.Kind, obj.GetName(), diff)
		}
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// notStored names the first field of want whose value got does not hold,
// "" when every field of want is in got with its value (got may hold more:
// the server's defaults and status).
func notStored(want, got any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %v, want a mapping", path, got)
		}
		for k, v := range w {
			if d := notStored(v, g[k], path+"."+k); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s is %v, want %d items", path, got, len(w))
		}
		for i := range w {
			if d := notStored(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("%s is %v (%T), want %v (%T)", path, got, got, want, want)
		}
	}
	return ""
}

// TestKubernetesManifestsOnAPIServer applies deploy/k8s to a real API server:
// every object is accepted with strict validation and stored as written
// (the PodDisruptionBudget and the NetworkPolicy included), the
// StatefulSets' pods, created from their templates, are admitted and
// reach Running on kwok's node, and the chaos backend sees them as the
// group of docs/run.md and evicts one through the manifests' budget.
func TestKubernetesManifestsOnAPIServer(t *testing.T) {
	c := testkube.Start(t)
	ctx := t.Context()
	pods := manifestPods(t, c)
	replicas := len(pods)
	for _, p := range pods {
		if p.Spec.Hostname != p.Name || p.Spec.Subdomain != "troop" {
			t.Errorf("pod %s: hostname %q subdomain %q, want its name under the headless Service", p.Name, p.Spec.Hostname, p.Spec.Subdomain)
		}
	}

	term := kubechaos.New(c.Client)
	g := &chaos.Group{Name: "store", Backend: chaos.Kubernetes, Selector: chaos.Selector{Namespace: "troop", LabelSelector: "app.kubernetes.io/name=troop"}}
	live, err := term.Instances(ctx, g)
	if err != nil || len(live) != replicas {
		t.Fatalf("the group of docs/run.md: %d instances, %v; want %d", len(live), err, replicas)
	}
	// One disruption allowed, then none.
	budgetAllowsOne(t, c, replicas)
	if err := term.Act(ctx, live[0], chaos.Action{Kind: chaos.Terminate}); err != nil {
		t.Fatalf("evict %s: %v", live[0].ID, err)
	}
	if err := term.Act(ctx, live[1], chaos.Action{Kind: chaos.Terminate}); !errors.Is(err, kubechaos.ErrRefused) || !apierrors.IsTooManyRequests(err) {
		t.Errorf("a second eviction under the budget: %v, want the API server's 429 as a refusal", err)
	}

	t.Run("bench Job", func(t *testing.T) { benchJobApplied(t, c) })
}

// manifestPods applies deploy/k8s, creates its StatefulSets' pods as their
// controller would and the namespace's default ServiceAccount, and returns
// the pods, sorted by name, once they run.
func manifestPods(t *testing.T, c *testkube.Cluster) []corev1.Pod {
	t.Helper()
	applyManifests(t, c, "k8s")
	c.DefaultServiceAccount(t, "troop")
	replicas := 0
	for _, obj := range manifests(t, "k8s") {
		if s, ok := obj.(*appsv1.StatefulSet); ok {
			c.StatefulSetPods(t, "troop", s.Name)
			replicas += int(*s.Spec.Replicas)
		}
	}
	pods := c.PodsRunning(t, "troop", "app.kubernetes.io/name=troop", replicas)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// budgetAllowsOne sets the manifests' budget (maxUnavailable 1) as the
// disruption controller would count it with all its n pods ready: one
// disruption allowed.
func budgetAllowsOne(t *testing.T, c *testkube.Cluster, n int) {
	t.Helper()
	ctx := t.Context()
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets("troop").Get(ctx, "troop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status.ObservedGeneration, pdb.Status.DisruptionsAllowed = pdb.Generation, 1
	pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy, pdb.Status.ExpectedPods = int32(n), int32(n-1), int32(n)
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("troop").UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// benchJobApplied creates the bench Job on the server, then its pods as
// the Job controller would (one per completion index, with the index in
// the annotation batch.kubernetes.io/job-completion-index and
// JOB_COMPLETION_INDEX read from it), and runs each pod's script with the
// environment the kubelet would resolve from the pod as stored: pod I is
// shard I+1 of N. kwok runs nothing: it only moves the pods through their
// phases.
func benchJobApplied(t *testing.T, c *testkube.Cluster) {
	ctx := t.Context()
	const start = "2030-01-02T03:04:05Z"
	startCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "troop", Name: "troop-bench-start"}, Data: map[string]string{"start-at": start}}
	if _, err := c.Client.CoreV1().ConfigMaps("troop").Create(ctx, startCM, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyManifests(t, c, "k8s/bench")
	job, err := c.Client.BatchV1().Jobs("troop").Get(ctx, benchJob(t).Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The server gave the Job its selector and its pods' labels.
	if job.Spec.Selector == nil || job.Spec.Template.Labels["batch.kubernetes.io/job-name"] != job.Name {
		t.Fatalf("stored Job: selector %v, template labels %v: want the server's", job.Spec.Selector, job.Spec.Template.Labels)
	}
	n := int(*job.Spec.Completions)
	for i := range n {
		index := strconv.Itoa(i)
		tmpl := job.Spec.Template.DeepCopy()
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Namespace, pod.Name = job.Namespace, job.Name+"-"+index
		pod.Labels["batch.kubernetes.io/job-completion-index"] = index
		pod.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": index}
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		pod.Spec.Hostname, pod.Spec.NodeName = pod.Name, testkube.Node
		for ci := range pod.Spec.Containers {
			pod.Spec.Containers[ci].Env = append(pod.Spec.Containers[ci].Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"},
			}})
		}
		if _, err := c.Client.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s of the Job: %v", pod.Name, err)
		}
	}
	// kwok runs a Job's pods to completion at once: Succeeded.
	testkube.Until(t, testkube.StartTimeout, fmt.Sprintf("%d pods of the Job to succeed", n), func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
		if err != nil {
			return false, err
		}
		done := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded {
				done++
			}
		}
		return done == n, nil
	})
	for i := range n {
		pod, err := c.Client.CoreV1().Pods(job.Namespace).Get(ctx, job.Name+"-"+strconv.Itoa(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctr := pod.Spec.Containers[0]
		args := benchScript(t, ctr, resolveEnv(t, c, pod, ctr))
		checkShardArgs(t, args, fmt.Sprintf("%d/%d", i+1, n), start)
	}
}

// resolveEnv is the container's environment as the kubelet would set it
// from the pod as stored: values, the pod's annotations and labels, and
// ConfigMap keys read from the server.
func resolveEnv(t *testing.T, c *testkube.Cluster, pod *corev1.Pod, ctr corev1.Container) []string {
	t.Helper()
	var env []string
	for _, e := range ctr.Env {
		v := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
		case from.FieldRef != nil:
			var ok bool
			path := from.FieldRef.FieldPath
			if key, found := strings.CutPrefix(path, "metadata.annotations['"); found {
				v, ok = pod.Annotations[strings.TrimSuffix(key, "']")]
			} else if key, found := strings.CutPrefix(path, "metadata.labels['"); found {
				v, ok = pod.Labels[strings.TrimSuffix(key, "']")]
			}
			if !ok {
				t.Fatalf("pod %s: env %s from %s: not resolved", pod.Name, e.Name, path)
			}
		case from.ConfigMapKeyRef != nil:
			cm, err := c.Client.CoreV1().ConfigMaps(pod.Namespace).Get(t.Context(), from.ConfigMapKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("pod %s: env %s: %v", pod.Name, e.Name, err)
			}
			v = cm.Data[from.ConfigMapKeyRef.Key]
		default:
			t.Fatalf("pod %s: env %s: a source this test does not resolve", pod.Name, e.Name)
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}
