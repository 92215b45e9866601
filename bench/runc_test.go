package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkRunVsRunc: `tether run` against `runc run` (both in the
// foreground: each returns once the task has exited and its end is
// recorded or its container deleted) of the same static binary, which
// exits at once, interleaved, each sample after settle:
//
//   - raw: `tether run -- SLEEPER exit` (raw_exec: a cgroup of its own,
//     no isolation) against a plain bundle (runc spec's defaults: PID,
//     mount, IPC, UTS and network namespaces, a read-only root holding
//     the binary, runc's cgroup, no limits).
//   - exec: `tether run task.hcl` (driver exec, resources { memory = 64 },
//     the root of --chroot-env's read-only binds with the binary's
//     directory at /bench) against the bundle of BenchmarkExecLaunchVsRunc
//     (runcBundle: the same root, mounts, namespaces, user nobody,
//     capabilities and memory limit).
//
// crun, installed with apt-get when absent, is tried on the plain bundle
// first; it refuses cgroup hybrid hosts, and the benchmark logs why
// ("note: crun ...") instead of timing it. Target: ratio <= 1 for exec.
func BenchmarkRunVsRunc(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("runc and tether's exec tasks need root")
	}
	runc, why := findRunc(b)
	if runc == "" {
		b.Skipf("runc unavailable, so the row is skipped: %s", why)
	}
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	if err := os.Chmod(filepath.Dir(sleeper), 0o755); err != nil {
		b.Fatal(err)
	}
	base := b.TempDir()
	plain := runcPlain(b, runc, filepath.Join(base, "plain"), sleeper, "exit")
	var crunNote string
	if crun, why := findTool(b, "crun", "crun"); crun == "" {
		crunNote = "note: crun unavailable: " + why
	} else if out, err := exec.Command(crun, "--root", filepath.Join(base, "crun"), "run", "--bundle", plain, "crun-probe").CombinedOutput(); err != nil {
		crunNote = fmt.Sprintf("note: crun %s refuses this host: %v: %s", crunVersion(crun), err, strings.TrimSpace(string(out)))
	} else {
		crunNote = fmt.Sprintf("note: crun %s runs here (not timed)", crunVersion(crun))
	}
	chroot := chrootOf(filepath.Dir(sleeper))
	full := runcBundle(b, filepath.Join(base, "full"), chroot)
	setArgs(b, full, "/bench/sleeper", "exit")
	taskFile := filepath.Join(base, "true.hcl")
	if err := os.WriteFile(taskFile, []byte(`task "true" {
  driver = "exec"
  config {
    command = "/bench/sleeper"
    args    = ["exit"]
  }
  resources {
    memory = 64
  }
}
`), 0o644); err != nil {
		b.Fatal(err)
	}
	state := filepath.Join(base, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		b.Fatal(err)
	}
	runcRoot := filepath.Join(base, "runc")
	n := 0
	runcSide := func(bundle string) func(int) float64 {
		return func(int) float64 {
			n++
			logf := filepath.Join(base, "runc.log")
			r := runCmd(runcCmd(b, runc, runcRoot, logf, "run", "--bundle", bundle, fmt.Sprintf("run-%d", n)))
			if r.failed() {
				msg, _ := os.ReadFile(logf)
				b.Fatalf("runc run: exit %d: %s", r.code, lastLine(msg))
			}
			return r.secs
		}
	}
	tetherSide := func(args ...string) func(int) float64 {
		return func(int) float64 {
			r := runCmd(tetherCmd(tether, state, args...))
			if r.failed() {
				b.Fatalf("tether %s: exit %d: %s", strings.Join(args, " "), r.code, r.errOut)
			}
			return r.secs
		}
	}
	for _, c := range []struct {
		name       string
		tether     func(int) float64
		peerBundle string
	}{
		{"raw", tetherSide("run", "--", sleeper, "exit"), plain},
		{"exec", tetherSide("--chroot-env", strings.Join(chroot, ","), "run", taskFile), full},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.name == "raw" {
				b.Log(crunNote)
			}
			peer := runcSide(c.peerBundle)
			peer(0) // warm both paths
			c.tether(0)
			b.ResetTimer()
			p := interleaveSettled(b, c.tether, peer)
			p.reportMs(b, "tether", "runc", true)
		})
	}
}

func crunVersion(crun string) string {
	out, _ := exec.Command(crun, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(first), "crun version ")
}

// setArgs sets the process args of the bundle in dir.
func setArgs(b *testing.B, dir string, args ...string) {
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		b.Fatal(err)
	}
	cfg["process"].(map[string]any)["args"] = args
	if raw, err = json.Marshal(cfg); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		b.Fatal(err)
	}
}
