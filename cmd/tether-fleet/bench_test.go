package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkExec_TetherWithoutAndWithTheEtcdClient measures what the split
// of tether and tether-fleet keeps off every task start: the exec of
// `tether version`, of `tether executor` (to its usage error: the runtime,
// the package initialisers and the flag parse) and of a whole `tether run
// -- /bin/true` (the CLI, the executor and the task), for the plain
// tether as built, and for the same tether with package cluster linked in
// (a build overlay adds one blank import of it to cmd/tether: the design
// the split replaced). Each round runs every command once, in a rotating
// order; the medians are reported, with the binaries' sizes and their
// package initialisers (GODEBUG=inittrace=1), and tether-fleet's own
// `version`.
//
//	go test -run '^$' -bench Exec_ -benchtime 200x ./cmd/tether-fleet/
func BenchmarkExec_TetherWithoutAndWithTheEtcdClient(b *testing.B) {
	linked := buildLinked(b)
	fleetBin := filepath.Join(binDir, "tether-fleet")
	state := filepath.Join(b.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		b.Fatal(err)
	}
	type figure struct {
		name string
		argv []string
		ms   []float64
	}
	var figs []*figure
	for _, bin := range []struct{ name, path string }{{"tether", tetherBin}, {"linked", linked}} {
		figs = append(figs,
			&figure{name: bin.name + "-version", argv: []string{bin.path, "version"}},
			&figure{name: bin.name + "-executor", argv: []string{bin.path, "executor", "-h"}},
			&figure{name: bin.name + "-run", argv: []string{bin.path, "--state-dir", state, "run", "--", "/bin/true"}})
	}
	figs = append(figs, &figure{name: "fleet-version", argv: []string{fleetBin, "version"}})
	for i := 0; i < b.N; i++ {
		for j := range figs {
			f := figs[(i+j)%len(figs)]
			cmd := exec.Command(f.argv[0], f.argv[1:]...)
			start := time.Now()
			err := cmd.Run()
			elapsed := time.Since(start)
			if _, exited := err.(*exec.ExitError); err != nil && !(exited && strings.HasSuffix(f.name, "-executor")) {
				b.Fatalf("%s: %v", strings.Join(f.argv, " "), err)
			}
			f.ms = append(f.ms, float64(elapsed)/float64(time.Millisecond))
		}
	}
	b.StopTimer()
	for _, f := range figs {
		slices.Sort(f.ms)
		b.ReportMetric(f.ms[len(f.ms)/2], f.name+"-p50-ms")
	}
	for _, bin := range []struct{ name, path string }{{"tether", tetherBin}, {"linked", linked}, {"fleet", fleetBin}} {
		fi, err := os.Stat(bin.path)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size())/1e6, bin.name+"-MB")
		b.ReportMetric(float64(inits(b, bin.path)), bin.name+"-inits")
	}
}

// buildLinked builds cmd/tether with package cluster linked in.
func buildLinked(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	pkg, err := filepath.Abs("../tether")
	if err != nil {
		b.Fatal(err)
	}
	link := filepath.Join(dir, "link.go")
	if err := os.WriteFile(link, []byte("package main\n\nimport _ \"github.com/tether-fsm/tether/cluster\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(pkg, "zz_link_cluster.go"), link)), 0o644); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build tether with cluster linked: %v\n%s", err, msg)
	}
	return out
}

// inits counts the package initialisers a binary runs at its start.
func inits(b *testing.B, bin string) int {
	b.Helper()
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s version: %v", bin, err)
	}
	return strings.Count(stderr.String(), "init ")
}
