// Package testkube starts a real Kubernetes API server for tests: etcd,
// kube-apiserver and kwok, built by `make test-k8s` (scripts/k8s-bins) and
// found through $TROOP_K8S_BIN. Each runs on free loopback ports with keys
// and certificates generated in the test's temporary directory, and is
// stopped by PID when the test ends, also when it fails.
//
// There is no kubelet, no scheduler and no controller-manager. kwok stands
// in for the kubelet: it makes the Nodes it manages Ready and the pods bound
// to them Running (their containers run nothing). So a test plays the
// controllers it needs: it binds pods to a node itself, creates the pods of
// a StatefulSet (StatefulSetPods), sets a PodDisruptionBudget's status, and
// creates a namespace's default ServiceAccount (Namespace).
package testkube

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/troop-lab/troop/internal/certs"
	"github.com/troop-lab/troop/internal/freeport"
)

// BinEnv names the directory holding kube-apiserver, etcd, kwok and kwok's
// stage configs (stages/*.yaml).
const BinEnv = "TROOP_K8S_BIN"

// Node is the name of the Node kwok keeps Ready; pods bound to it run.
const Node = "kwok-node-0"

// StartTimeout bounds the start of each server, on a busy machine (the API
// server alone was ready 3.8 s after its start on an idle one).
const StartTimeout = 90 * time.Second

// Cluster is a running API server with kwok.
type Cluster struct {
	Config     *rest.Config // as a cluster administrator (group system:masters)
	Client     kubernetes.Interface
	Kubeconfig string // a file holding Config, as kubectl and kwok read it
}

// Options are what a test may choose of the cluster Start runs.
type Options struct {
	// PodCIDR is the range kwok gives pods their IPs from (kwok --cidr;
	// default 10.0.0.1/24): the first pod gets the address after the one
	// given, the next the one after that, and a deleted pod's IP goes to
	// the next pod created. A range in 127.0.0.0/8 puts the pods at
	// addresses of this host's loopback, where a test can run what the
	// pods would run.
	PodCIDR string
}

// Start runs etcd, kube-apiserver and kwok, waits until the API server is
// ready and kwok has made Node Ready, and stops all three when the test
// ends. It skips the test when the binaries have not been built.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Skipf("no kube-apiserver, etcd and kwok ($%s is not set): `make test-k8s` builds them and runs these tests", BinEnv)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kwok"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("$%s=%s has no %s: `make test-k8s` builds it (scripts/k8s-bins)", BinEnv, bin, name)
		}
	}
	dir := t.TempDir()
	etcdAddr, etcdPeer, apiAddr, kwokAddr := pick(t), pick(t), pick(t), pick(t)

	etcd := start(t, dir, filepath.Join(bin, "etcd"),
		"--name", "test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://"+etcdAddr, "--advertise-client-urls", "http://"+etcdAddr,
		"--listen-peer-urls", "http://"+etcdPeer, "--initial-advertise-peer-urls", "http://"+etcdPeer,
		"--initial-cluster", "test=http://"+etcdPeer, "--unsafe-no-fsync", "--log-level", "warn")
	waitHTTP(t, etcd, http.DefaultClient, "http://"+etcdAddr+"/health")

	ca, err := certs.NewCA("troop test kubernetes CA")
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	caFile := file("ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(apiAddr)
	issue := func(name, cn string, orgs []string, hosts ...string) certs.Leaf {
		leaf, err := ca.IssueOrg(cn, orgs, hosts...)
		if err == nil {
			err = leaf.Write(file(name+".crt"), file(name+".key"))
		}
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	issue("apiserver", "kube-apiserver", nil, host, "localhost")
	admin := issue("admin", "troop-test-admin", []string{"system:masters"})
	issue("service-accounts", "service-accounts", nil) // its key signs the service account tokens

	_, port, _ := net.SplitHostPort(apiAddr)
	apiserver := start(t, dir, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", "http://"+etcdAddr,
		"--bind-address", host, "--secure-port", port,
		// On loopback the server must still advertise an address its
		// Service "kubernetes" can point at: a documentation address, and
		// no endpoint reconciler to write it.
		"--advertise-address", "192.0.2.1", "--endpoint-reconciler-type", "none",
		"--tls-cert-file", file("apiserver.crt"), "--tls-private-key-file", file("apiserver.key"),
		"--client-ca-file", caFile, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", file("service-accounts.key"),
		"--service-account-signing-key-file", file("service-accounts.key"),
		"--service-cluster-ip-range", "10.96.0.0/16")

	cfg := &rest.Config{
		Host:            "https://" + apiAddr,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: admin.CertPEM, KeyData: admin.KeyPEM},
		QPS:             -1, // no client-side throttling: the tests' calls are few and bounded
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, apiserver, httpClient, cfg.Host+"/readyz")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Config: cfg, Client: cs, Kubeconfig: file("kubeconfig")}
	writeKubeconfig(t, cfg, c.Kubeconfig)

	stages, err := filepath.Glob(filepath.Join(bin, "stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		t.Fatalf("no kwok stage configs in %s/stages: run `make test-k8s` again to build them", bin)
	}
	kwok := []string{"--kubeconfig", c.Kubeconfig, "--manage-all-nodes=true", "--server-address", kwokAddr}
	for _, s := range stages {
		kwok = append(kwok, "--config", s)
	}
	if o.PodCIDR != "" {
		kwok = append(kwok, "--cidr", o.PodCIDR)
	}
	c.addNode(t, start(t, dir, filepath.Join(bin, "kwok"), kwok...))
	return c
}

// writeKubeconfig writes cfg (its server, CA, client certificate and
// impersonation) to path, as kubectl and troop's --kubeconfig read it.
func writeKubeconfig(t testing.TB, cfg *rest.Config, path string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

// ChaosRole is the Role docs/chaos.md gives the chaos monkey's account
// (troop chaos, and troop run's kubernetes group), and no more.
var ChaosRole = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
	{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "deployments", "statefulsets"}, Verbs: []string{"get"}},
	{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list"}},
}

// ServiceAccount creates the ServiceAccount ns/name, bound to a Role of
// rules in ns, and returns the cluster as that account sees it: the
// administrator's credentials impersonating it (in Config and in a
// kubeconfig file of its own), so that RBAC allows exactly what the rules
// allow. It returns once the authorizer allows every rule.
func (c *Cluster) ServiceAccount(t testing.TB, ns, name string, rules []rbacv1.PolicyRule) *Cluster {
	t.Helper()
	ctx := context.Background()
	rbac := c.Client.RbacV1()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding from its informers, a moment
	// after it is created: wait until it allows every rule.
	user := "system:serviceaccount:" + ns + ":" + name
	for _, r := range rules {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, verb := range r.Verbs {
				Until(t, time.Minute, user+" to be allowed to "+verb+" "+res, func() (bool, error) {
					review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
						ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: r.APIGroups[0], Resource: resource, Subresource: sub}}}
					got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
					return err == nil && got.Status.Allowed, err
				})
			}
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	as := &Cluster{Config: cfg, Client: cs, Kubeconfig: filepath.Join(filepath.Dir(c.Kubeconfig), "kubeconfig-"+ns+"-"+name)}
	writeKubeconfig(t, cfg, as.Kubeconfig)
	return as
}

// addNode creates Node and waits until kwok reports it Ready.
func (c *Cluster) addNode(t testing.TB, kwok *server) {
	t.Helper()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: Node, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	Until(t, StartTimeout, "kwok to make node "+Node+" Ready", func() (bool, error) {
		kwok.running(t)
		n, err := c.Client.CoreV1().Nodes().Get(ctx, Node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// Namespace creates a namespace and its default ServiceAccount, which
// the controller-manager would create and without which the API server
// admits no pod in it.
func (c *Cluster) Namespace(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.DefaultServiceAccount(t, name)
}

// DefaultServiceAccount creates the namespace's default ServiceAccount.
func (c *Cluster) DefaultServiceAccount(t testing.TB, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// PodsRunning waits until n pods of the namespace match the selector and
// are Running and Ready, and returns them.
func (c *Cluster) PodsRunning(t testing.TB, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	Until(t, StartTimeout, fmt.Sprintf("%d running pods %s in %s", n, selector, ns), func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		running = running[:0]
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && ready(&p) {
				running = append(running, p)
			}
		}
		return len(running) == n, nil
	})
	return running
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Until polls done every 100 ms until it holds, and fails the test,
// naming what it waited for and the last error, after timeout.
func Until(t testing.TB, timeout time.Duration, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := done()
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s (last error: %v)", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pick(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// server is a process start runs.
type server struct {
	name, log string
	exited    chan struct{}
}

// start runs a server with its output in dir/NAME.log, and kills it by PID
// when the test ends; when the test failed, the log's end is in the
// test's output.
func start(t testing.TB, dir, path string, args ...string) *server {
	t.Helper()
	s := &server{name: filepath.Base(path), exited: make(chan struct{})}
	s.log = filepath.Join(dir, s.name+".log")
	log, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", s.name, err)
	}
	go func() { cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.exited
		log.Close()
		if t.Failed() {
			t.Logf("%s log (end):\n%s", s.name, tail(s.log))
		}
	})
	return s
}

// running fails the test, with the end of its log, when the server has
// exited: waiting on it would only time out.
func (s *server) running(t testing.TB) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("%s exited:\n%s", s.name, tail(s.log))
	default:
	}
}

// tail is the last 40 lines of a file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitHTTP waits until the server answers 200 OK at url.
func waitHTTP(t testing.TB, s *server, client *http.Client, url string) {
	t.Helper()
	Until(t, StartTimeout, s.name+" to answer "+url, func() (bool, error) {
		s.running(t)
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", url, resp.Status)
		}
		return true, nil
	})
}

// StatefulSetPods creates the missing pods of a StatefulSet read back from
// the API server, as its controller would and bound to Node as the
// scheduler would:
// POD-0 to POD-(replicas-1), from its template, with the controller's
// labels, owner reference, hostname and subdomain, and a volume for each of
// its claims (the claims themselves are not created: kwok mounts nothing).
func (c *Cluster) StatefulSetPods(t testing.TB, ns, name string) {
	t.Helper()
	ctx := context.Background()
	ss, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := int32(1)
	if ss.Spec.Replicas != nil {
		replicas = *ss.Spec.Replicas
	}
	for i := range replicas {
		tmpl := ss.Spec.Template.DeepCopy()
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Namespace, pod.Name = ns, fmt.Sprintf("%s-%d", name, i)
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels["statefulset.kubernetes.io/pod-name"] = pod.Name
		pod.Labels["apps.kubernetes.io/pod-index"] = fmt.Sprint(i)
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ss, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
		pod.Spec.Hostname, pod.Spec.Subdomain = pod.Name, ss.Spec.ServiceName
		pod.Spec.NodeName = Node
		for _, claim := range ss.Spec.VolumeClaimTemplates {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + pod.Name},
			}})
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create pod %s of StatefulSet %s: %v", pod.Name, name, err)
		}
	}
}
