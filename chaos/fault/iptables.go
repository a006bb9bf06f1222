package fault

import (
	"fmt"
	"os"
	"strings"

	"github.com/troop-lab/troop/internal/netns"
)

// addChain creates the iptables chain name in the namespace ns with rules,
// and makes each of the built-in chains hooks (INPUT, OUTPUT) jump to it
// first. It is one iptables-restore: all of it or nothing.
func addChain(ns *os.File, name string, hooks, rules []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", name)
	for _, r := range rules {
		fmt.Fprintf(&b, "-A %s %s\n", name, r)
	}
	for _, h := range hooks {
		fmt.Fprintf(&b, "-I %s 1 -j %s\n", h, name)
	}
	b.WriteString("COMMIT\n")
	_, err := netns.Run(ns, b.String(), nil, "iptables-restore", "--noflush", "--wait")
	return err
}

// deleteChain removes the chain name and every jump to it from the
// namespace ns, in one iptables-restore; a chain that is not there is no
// error. Nothing else is touched.
func deleteChain(ns *os.File, name string) error {
	out, err := netns.Run(ns, "", nil, "iptables", "--wait", "-S")
	if err != nil {
		return err
	}
	var b strings.Builder
	exists := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && f[1] == name:
			exists = true
		case len(f) >= 4 && f[0] == "-A" && f[len(f)-2] == "-j" && f[len(f)-1] == name:
			fmt.Fprintf(&b, "-D%s\n", strings.TrimPrefix(line, "-A"))
		}
	}
	if !exists && b.Len() == 0 {
		return nil
	}
	if exists {
		fmt.Fprintf(&b, "-F %s\n-X %s\n", name, name)
	}
	_, err = netns.Run(ns, "*filter\n"+b.String()+"COMMIT\n", nil, "iptables-restore", "--noflush", "--wait")
	return err
}

// hasChain reports whether the namespace ns has the chain name.
func hasChain(ns *os.File, name string) (bool, error) {
	out, err := netns.Run(ns, "", nil, "iptables", "--wait", "-S")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "-N "+name {
			return true, nil
		}
	}
	return false, nil
}
