package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/dockerchaos"
	"github.com/troop-lab/troop/chaos/kubechaos"
	"github.com/troop-lab/troop/chaos/labchaos"
)

// backendOptions is what the chaos verbs know about where the backends'
// instances live. The detached watchdog gets the same options on its
// command line (args), so that it can build the backend its lease names.
type backendOptions struct {
	LabDir     string
	DockerHost string // "" = DOCKER_HOST, or the default socket
	Kubeconfig string // "" = $KUBECONFIG, then ~/.kube/config, then in-cluster
}

// addBackendFlags adds the backends' flags to a chaos verb.
func addBackendFlags(f *pflag.FlagSet, o *backendOptions) {
	f.StringVar(&o.LabDir, "lab", ".troop/lab", "the lab's directory, for lab groups (a lab started with troop lab up)")
	f.StringVar(&o.DockerHost, "docker-host", "", "the Docker Engine of docker groups (default: $DOCKER_HOST, else the local socket)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "the kubeconfig of kubernetes groups (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
}

// args returns o as flags for a child troop chaos process.
func (o backendOptions) args() []string {
	return []string{"--lab", o.LabDir, "--docker-host", o.DockerHost, "--kubeconfig", o.Kubeconfig}
}

// chaosBackends maps each backend to the constructor of its Terminator.
// A backend whose faults are leased also implements chaos.Leaser; one
// that measures recovery, chaos.RecoveryWaiter.
var chaosBackends = map[chaos.Backend]func(backendOptions) (chaos.Terminator, error){}

// registerChaosBackend registers a backend's constructor; each backend
// registers itself in an init function.
func registerChaosBackend(b chaos.Backend, newTerminator func(backendOptions) (chaos.Terminator, error)) {
	chaosBackends[b] = newTerminator
}

func init() {
	registerChaosBackend(chaos.Lab, func(o backendOptions) (chaos.Terminator, error) {
		return labchaos.New(o.LabDir), nil
	})
	registerChaosBackend(chaos.Docker, func(o backendOptions) (chaos.Terminator, error) {
		return dockerchaos.New(o.DockerHost)
	})
	registerChaosBackend(chaos.Kubernetes, func(o backendOptions) (chaos.Terminator, error) {
		return kubechaos.NewFromKubeconfig(o.Kubeconfig)
	})
}

// newBackend builds the Terminator of backend b.
func newBackend(b chaos.Backend, o backendOptions) (chaos.Terminator, error) {
	newT, ok := chaosBackends[b]
	if !ok {
		var have []string
		for name := range chaosBackends {
			have = append(have, string(name))
		}
		sort.Strings(have)
		return nil, fmt.Errorf("the %s backend is not built into this troop (have %s)", b, strings.Join(have, ", "))
	}
	return newT(o)
}
