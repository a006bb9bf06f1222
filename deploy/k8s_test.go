package deploy

// The Kubernetes manifests, decoded strictly with the official API types
// (an unknown or misspelt field is an error) and checked against the node
// configs they carry: the checks are those a cluster would need to hold for
// the nodes to find each other, be probed and serve; and the pods are stood
// up as containers of the image, which pass the quorum checks. They are
// applied to a real API server in k8s_apply_test.go.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/troop-lab/troop/internal/rootfs"
	"github.com/troop-lab/troop/topology"
)

// manifestDoc is one YAML document of a manifest file.
type manifestDoc struct {
	where string // file, document N
	data  []byte
}

// manifestDocs reads every non-empty document of every *.yaml file in dir.
func manifestDocs(t *testing.T, dir string) []manifestDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var docs []manifestDoc
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			docs = append(docs, manifestDoc{where: fmt.Sprintf("%s, document %d", f, i), data: doc})
		}
	}
	return docs
}

// manifests decodes every document of every *.yaml file in dir.
func manifests(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for _, d := range manifestDocs(t, dir) {
		obj, _, err := decoder.Decode(d.data, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", d.where, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

func TestKubernetesManifests(t *testing.T) {
	var (
		namespaces []string
		headless   *corev1.Service
		services   []*corev1.Service
		configMaps = map[string]*corev1.ConfigMap{}
		sets       []*appsv1.StatefulSet
		pdbs       []*policyv1.PodDisruptionBudget
		policies   []*networkingv1.NetworkPolicy
	)
	objs := manifests(t, "k8s")
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			namespaces = append(namespaces, o.Name)
		case *corev1.Service:
			services = append(services, o)
			if o.Spec.ClusterIP == corev1.ClusterIPNone {
				if headless != nil {
					t.Fatalf("two headless Services: %s and %s", headless.Name, o.Name)
				}
				headless = o
			}
		case *corev1.ConfigMap:
			configMaps[o.Name] = o
		case *appsv1.StatefulSet:
			sets = append(sets, o)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, o)
		case *networkingv1.NetworkPolicy:
			policies = append(policies, o)
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	if len(namespaces) != 1 {
		t.Fatalf("namespaces %v: want one", namespaces)
	}
	ns := namespaces[0]
	for _, obj := range objs {
		if m, ok := obj.(metav1.Object); ok && m.GetNamespace() != ns && m.GetName() != ns {
			t.Errorf("%T %s is in namespace %q, want %q", obj, m.GetName(), m.GetNamespace(), ns)
		}
	}
	if headless == nil {
		t.Fatal("no headless Service (clusterIP: None) for the pods' DNS names")
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses is false: nodes starting together could not resolve each other", headless.Name)
	}
	if len(sets) != 3 {
		t.Fatalf("%d StatefulSets, want one per rack, 3", len(sets))
	}

	var nodes []meshNode
	racks := map[string]bool{}
	for _, s := range sets {
		what := "StatefulSet " + s.Name
		rack := s.Labels["troop.dev/rack"]
		if rack == "" || racks[rack] {
			t.Errorf("%s: rack label %q missing or taken by another StatefulSet", what, rack)
		}
		racks[rack] = true
		if s.Spec.ServiceName != headless.Name {
			t.Errorf("%s: serviceName %q, want the headless Service %q", what, s.Spec.ServiceName, headless.Name)
		}
		if s.Spec.Replicas == nil || *s.Spec.Replicas < 1 {
			t.Fatalf("%s: no replicas", what)
		}
		pod := s.Spec.Template
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: its selector does not match its pods' labels (%v)", what, err)
		}
		if !labels.SelectorFromSet(headless.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: Service %s does not select its pods", what, headless.Name)
		}
		for _, svc := range services {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("%s: Service %s does not select its pods", what, svc.Name)
			}
		}
		for _, pdb := range pdbs {
			if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				t.Errorf("%s: PodDisruptionBudget %s does not select its pods", what, pdb.Name)
			}
		}
		if len(policies) != 1 {
			t.Fatalf("%d NetworkPolicies, want one", len(policies))
		}
		checkNetworkPolicy(t, what, policies[0], pod.Labels)
		if len(pod.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want one (the image runs the node and its redis-server)", what, len(pod.Spec.Containers))
		}
		c := pod.Spec.Containers[0]
		if c.Image != "troop-node:latest" {
			t.Errorf("%s: image %q, want troop-node:latest, the node image", what, c.Image)
		}
		mounts := map[string]string{} // volume -> mount path
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		var cm *corev1.ConfigMap
		var cmVolume string
		for _, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil {
				cm, cmVolume = configMaps[v.ConfigMap.Name], v.Name
			}
		}
		if cm == nil || mounts[cmVolume] == "" {
			t.Fatalf("%s: no mounted ConfigMap of this file set holds the node configs", what)
		}
		if !slices.Equal(c.Args, []string{"--config", mounts[cmVolume] + "/$(POD_NAME).yml"}) {
			t.Errorf("%s: args %q: want --config %s/$(POD_NAME).yml", what, c.Args, mounts[cmVolume])
		}
		if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); i < 0 ||
			c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
			t.Errorf("%s: POD_NAME is not the pod's name (fieldRef metadata.name)", what)
		}
		dataMount := ""
		for _, vc := range s.Spec.VolumeClaimTemplates {
			dataMount = mounts[vc.Name]
		}
		if dataMount != DataDir {
			t.Errorf("%s: the volume claim is mounted at %q, want %s, where redis-server keeps its files", what, dataMount, DataDir)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}

		for i := 0; i < int(*s.Spec.Replicas); i++ {
			podName := s.Name + "-" + strconv.Itoa(i)
			key := podName + ".yml"
			text, ok := cm.Data[key]
			if !ok {
				t.Errorf("%s: replica %d has no config %s in ConfigMap %s", what, i, key, cm.Name)
				continue
			}
			cfg, err := topology.Parse([]byte(text), "ConfigMap "+cm.Name+" "+key)
			if err != nil {
				t.Error(err)
				continue
			}
			pw := what + " pod " + podName
			if cfg.Rack != rack {
				t.Errorf("%s: its config's rack is %s, the StatefulSet's label %s", pw, cfg.Rack, rack)
			}
			for name, addr := range map[string]string{"peer": cfg.DynListen, "client": cfg.Listen, "admin": cfg.StatsListen} {
				if strconv.Itoa(int(ports[name])) != portOf(addr) {
					t.Errorf("%s: container port %s is %d, its config listens on %s", pw, name, ports[name], addr)
				}
				if i := slices.IndexFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == name }); i < 0 || headless.Spec.Ports[i].Port != ports[name] {
					t.Errorf("%s: Service %s has no port %s %d", pw, headless.Name, name, ports[name])
				}
			}
			// Ready means the node can serve (/ready); alive only that it
			// answers (/ping): a node waiting for its redis-server or its
			// peers is not restarted.
			for _, pr := range []struct {
				probe, path string
				p           *corev1.Probe
			}{{"readiness", "/ready", c.ReadinessProbe}, {"liveness", "/ping", c.LivenessProbe}} {
				if pr.p == nil || pr.p.HTTPGet == nil {
					t.Errorf("%s: no HTTP %s probe: want GET %s on the admin port", pw, pr.probe, pr.path)
				} else if g := pr.p.HTTPGet; g.Path != pr.path || (g.Port.String() != "admin" && g.Port.String() != portOf(cfg.StatsListen)) {
					t.Errorf("%s: %s probe GET %s on port %s: want GET %s on the admin port %s", pw, pr.probe, g.Path, g.Port.String(), pr.path, portOf(cfg.StatsListen))
				}
			}
			if !strings.HasPrefix(cfg.DataDir, DataDir+"/") {
				t.Errorf("%s: troop_data_dir %q is not on the data volume (%s)", pw, cfg.DataDir, DataDir)
			}
			nodes = append(nodes, meshNode{what: pw, host: podName + "." + headless.Name + "." + ns + ".svc.cluster.local", cfg: cfg})
		}
	}
	checkMesh(t, nodes)
	if len(pdbs) != 1 || pdbs[0].Spec.MaxUnavailable == nil || pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("want one PodDisruptionBudget with maxUnavailable 1 (DC_QUORUM needs 2 of 3 racks)")
	}
}

// checkNetworkPolicy checks that the policy selects the pods and lets in
// exactly: anyone on the client port, the nodes on the peer port, and pods
// labelled troop.dev/admin on the admin port.
func checkNetworkPolicy(t *testing.T, what string, p *networkingv1.NetworkPolicy, podLabels map[string]string) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: NetworkPolicy %s does not select its pods", what, p.Name)
		return
	}
	from := map[string]string{} // port -> who may reach it
	for _, rule := range p.Spec.Ingress {
		who := "anyone"
		if len(rule.From) > 0 {
			var peers []string
			for _, f := range rule.From {
				s, err := metav1.LabelSelectorAsSelector(f.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case f.NamespaceSelector == nil && s.Matches(labels.Set(podLabels)):
					peers = append(peers, "the nodes")
				case f.NamespaceSelector != nil && s.String() == "troop.dev/admin=true":
					peers = append(peers, "admin pods")
				default:
					peers = append(peers, s.String())
				}
			}
			who = strings.Join(peers, ", ")
		}
		for _, port := range rule.Ports {
			from[port.Port.String()] = who
		}
	}
	want := map[string]string{"8102": "anyone", "8101": "the nodes", "22222": "admin pods"}
	if fmt.Sprint(from) != fmt.Sprint(want) {
		t.Errorf("%s: NetworkPolicy %s lets in %v, want %v", what, p.Name, from, want)
	}
}

// podMembers stands the manifests' pods up as containers: each named by its
// DNS name under the headless Service, with the pod's hostname and
// subdomain (so that its /etc/hosts holds its full name, as the kubelet
// writes it), its args with $(POD_NAME) expanded, its environment and its
// ConfigMap's files at their mount path.
func podMembers(t *testing.T, dir string) []member {
	t.Helper()
	var (
		headless   *corev1.Service
		configMaps = map[string]*corev1.ConfigMap{}
		sets       []*appsv1.StatefulSet
	)
	for _, obj := range manifests(t, dir) {
		switch o := obj.(type) {
		case *corev1.Service:
			if o.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = o
			}
		case *corev1.ConfigMap:
			configMaps[o.Name] = o
		case *appsv1.StatefulSet:
			sets = append(sets, o)
		}
	}
	if headless == nil {
		t.Fatal("no headless Service")
	}
	domain := headless.Name + "." + headless.Namespace + ".svc.cluster.local"
	var out []member
	for _, s := range sets {
		pod := s.Spec.Template.Spec
		c := pod.Containers[0]
		for i := 0; i < int(*s.Spec.Replicas); i++ {
			podName := s.Name + "-" + strconv.Itoa(i)
			m := member{name: podName + "." + domain, hostname: podName, domainname: domain, files: rootfs.New(), env: []string{"POD_NAME=" + podName}}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					m.env = append(m.env, e.Name+"="+e.Value)
				}
			}
			for _, a := range c.Args {
				m.cmd = append(m.cmd, strings.ReplaceAll(a, "$(POD_NAME)", podName))
			}
			for _, v := range pod.Volumes {
				if v.ConfigMap == nil {
					continue
				}
				for _, vm := range c.VolumeMounts {
					if vm.Name != v.Name {
						continue
					}
					for key, text := range configMaps[v.ConfigMap.Name].Data {
						m.files.AddFile(vm.MountPath+"/"+key, []byte(text), 0o644)
						if key == podName+".yml" {
							cfg, err := topology.Parse([]byte(text), key)
							if err != nil {
								t.Fatal(err)
							}
							m.cfg = cfg
						}
					}
				}
			}
			if m.cfg == nil {
				t.Fatalf("pod %s: no config", podName)
			}
			out = append(out, m)
		}
	}
	return out
}

// The manifests' pods, stood up as containers of the image on a Docker
// network that names them as the cluster's DNS would, pass the quorum
// checks: the configs, args and environment the manifests give a pod run.
func TestKubernetesPodsServeQuorumInDocker(t *testing.T) {
	t.Parallel() // the two clusters start at once: most of the time is the engine's
	image := testImage(t)
	checkQuorum(t, startCluster(t, image, podMembers(t, "k8s")))
}

// benchJob decodes the bench Job (k8s/bench).
func benchJob(t *testing.T) *batchv1.Job {
	t.Helper()
	objs := manifests(t, "k8s/bench")
	if len(objs) != 1 {
		t.Fatalf("%d objects, want one Job", len(objs))
	}
	job, ok := objs[0].(*batchv1.Job)
	if !ok {
		t.Fatalf("a %T, want a Job", objs[0])
	}
	return job
}

// benchScript runs the bench Job's script as the kubelet would hand it
// to bash, with env, and a troop that records its arguments: it returns
// them.
func benchScript(t *testing.T, c corev1.Container, env []string) []string {
	t.Helper()
	if len(c.Command) != 2 || c.Command[0] != "/usr/bin/bash" || c.Command[1] != "-c" || len(c.Args) != 1 {
		t.Fatalf("command %q args %q: want bash -c SCRIPT", c.Command, c.Args)
	}
	script := strings.ReplaceAll(c.Args[0], "$$", "$") // the kubelet's $$ is $
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	fake := "#!/usr/bin/bash\nprintf '%s\\n' \"$@\" > " + argsFile + "\n"
	if err := os.WriteFile(filepath.Join(dir, "troop"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append([]string{"PATH=" + dir + ":/usr/bin:/bin"}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	got, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(got)), "\n")
}

// checkShardArgs checks troop's arguments: bench, shard SHARD, beginning
// at START.
func checkShardArgs(t *testing.T, args []string, shard, start string) {
	t.Helper()
	for flag, want := range map[string]string{"--shard": shard, "--start-at": start, "--out": "-", "--cluster": "troop-rack1-0.troop.troop.svc.cluster.local:22222"} {
		if i := slices.Index(args, flag); i < 0 || i+1 == len(args) || args[i+1] != want {
			t.Errorf("troop %q: want %s %s", args, flag, want)
		}
	}
	if args[0] != "bench" {
		t.Errorf("troop %q: want troop bench", args)
	}
}

// The bench Job (k8s/bench), decoded strictly: an Indexed Job of N pods
// that run once, whose script, run by bash as the kubelet hands it over,
// makes pod I shard I+1 of N, beginning at the ConfigMap's time, with its
// result on standard output, against the cluster's admin API that the
// NetworkPolicy opens to it.
func TestKubernetesBenchJob(t *testing.T) {
	job := benchJob(t)
	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode %v: want Indexed, which gives each pod its index", s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism {
		t.Fatalf("completions %v, parallelism %v: want the same N, all shards at once", s.Completions, s.Parallelism)
	}
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 || s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("backoffLimit %v, restartPolicy %s: want 0 and Never: a retried shard starts after the others", s.BackoffLimit, s.Template.Spec.RestartPolicy)
	}
	if job.Namespace != "troop" || s.Template.Labels["troop.dev/admin"] != "true" {
		t.Errorf("namespace %q, labels %v: want troop, and troop.dev/admin for the admin port", job.Namespace, s.Template.Labels)
	}
	if len(s.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want one", len(s.Template.Spec.Containers))
	}
	c := s.Template.Spec.Containers[0]
	if c.Image != "troop:latest" {
		t.Errorf("image %q, want troop:latest, the image with troop bench", c.Image)
	}
	env := map[string]string{}
	var startRef *corev1.ConfigMapKeySelector
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			startRef = e.ValueFrom.ConfigMapKeyRef
		}
	}
	if env["SHARDS"] != strconv.Itoa(int(*s.Completions)) {
		t.Errorf("SHARDS %q, completions %d: want the same N", env["SHARDS"], *s.Completions)
	}
	if startRef == nil || startRef.Name != "troop-bench-start" || startRef.Key != "start-at" {
		t.Errorf("START_AT from %+v: want the ConfigMap troop-bench-start's key start-at", startRef)
	}
	// Pod 1 of 3 is shard 2/3.
	args := benchScript(t, c, []string{"JOB_COMPLETION_INDEX=1", "SHARDS=" + env["SHARDS"], "START_AT=2030-01-02T03:04:05Z"})
	checkShardArgs(t, args, "2/"+env["SHARDS"], "2030-01-02T03:04:05Z")
}
