package chaos

// The process kinds: they act on an instance's process (or container, or
// pod) as a whole.
const (
	Terminate Kind = "terminate" // kill -9, container kill, pod delete
	Stop      Kind = "stop"      // graceful stop
	Pause     Kind = "pause"     // SIGSTOP then SIGCONT, docker pause then unpause
	Restart   Kind = "restart"   // stop and start again
	BurnCPU   Kind = "burn-cpu"  // keep the instance's CPUs busy
)

var (
	terminateKind = KindSpec{Kind: Terminate}
	stopKind      = KindSpec{Kind: Stop}
	pauseKind     = KindSpec{Kind: Pause, Temporary: true,
		Unsupported: map[Backend]string{Kubernetes: "the API server cannot freeze a pod"}}
	restartKind = KindSpec{Kind: Restart}
	burnCPUKind = KindSpec{Kind: BurnCPU, Temporary: true,
		Unsupported: map[Backend]string{Kubernetes: "a burner would need the pods/exec streams"}}
)
