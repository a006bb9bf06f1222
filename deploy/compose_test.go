package deploy

// The Compose file, run by the Docker harness: its services, with their
// command, hostname, bind-mounted config files and healthcheck.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"gopkg.in/yaml.v3"

	"github.com/troop-lab/troop/internal/rootfs"
	"github.com/troop-lab/troop/topology"
)

// composeFile is what the test reads of the Compose file.
type composeFile struct {
	Services map[string]struct {
		Image       string   `yaml:"image"`
		Profiles    []string `yaml:"profiles"`
		Hostname    string   `yaml:"hostname"`
		Restart     string   `yaml:"restart"`
		Command     []string `yaml:"command"`
		Volumes     []string `yaml:"volumes"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// composeMembers reads the Compose file's services that `docker compose
// up` starts (those of no profile): each with its command, hostname,
// healthcheck and the files of its bind mounts.
func composeMembers(t *testing.T, path string) []member {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []member
	for name, s := range cf.Services {
		if len(s.Profiles) > 0 {
			continue
		}
		m := member{name: name, hostname: s.Hostname, cmd: s.Command, files: rootfs.New(), restart: container.RestartPolicyMode(s.Restart)}
		for _, a := range s.Healthcheck.Test {
			m.health = append(m.health, strings.ReplaceAll(a, "$$", "$")) // Compose reads $$ as a literal $
		}
		host := map[string]string{} // container path -> host path
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], ".") {
				continue // a named volume: the container's own files stand in
			}
			src := filepath.Join(filepath.Dir(path), parts[0])
			entries, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				data, err := os.ReadFile(filepath.Join(src, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				m.files.AddFile(parts[1]+"/"+e.Name(), data, 0o644)
				host[parts[1]+"/"+e.Name()] = filepath.Join(src, e.Name())
			}
		}
		i := slices.Index(s.Command, "--config")
		if i < 0 || i+1 == len(s.Command) || host[s.Command[i+1]] == "" {
			t.Fatalf("%s: service %s: command %q: want --config naming a file of a bind mount", path, name, s.Command)
		}
		if m.cfg, err = topology.Load(host[s.Command[i+1]]); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// The image runs the Compose file's 3-rack cluster, which passes the
// quorum checks.
func TestComposeClusterServesQuorum(t *testing.T) {
	t.Parallel() // the two clusters start at once: most of the time is the engine's
	image := testImage(t)
	members := composeMembers(t, "compose/docker-compose.yml")
	if len(members) != 3 {
		t.Fatalf("%d services, want 3 (one per rack)", len(members))
	}
	checkQuorum(t, startCluster(t, image, members))
}

// The Compose file's node configs make one 3-rack cluster whose nodes find
// each other by service name (checked without Docker; the Docker test runs
// them).
func TestComposeConfigsMesh(t *testing.T) {
	var nodes []meshNode
	for i := 1; i <= 3; i++ {
		path := fmt.Sprintf("compose/conf/node%d.yml", i)
		cfg, err := topology.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, meshNode{what: path, host: fmt.Sprintf("node%d", i), cfg: cfg})
	}
	checkMesh(t, nodes)
}

// The Compose file's nodes run the node image and its bench the troop
// image, each named by a variable whose default is what make image tags.
func TestComposeImages(t *testing.T) {
	data, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatal(err)
	}
	for name, s := range cf.Services {
		want := "${TROOP_NODE_IMAGE:-troop-node:latest}"
		if slices.Contains(s.Profiles, "bench") {
			want = "${TROOP_IMAGE:-troop:latest}"
		}
		if s.Image != want {
			t.Errorf("service %s: image %q, want %q", name, s.Image, want)
		}
	}
}
