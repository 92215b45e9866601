package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/tether-fsm/tether/bench/internal/gpexec"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/benchkit"
)

// idleProcs is how many helpers of one kind are alive when memory is read.
var idleProcs = flag.Int("mem.procs", 100, "how many idle helpers of each kind BenchmarkIdleMemory keeps alive at once")

// kind starts one idle helper in dir and returns its pid and its stop.
type kind func(b *testing.B, dir string) (int, func())

func tetherExecutor(command []string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		c, err := executor.Spawn(context.Background(), executor.SpawnConfig{
			Command: command, TaskDir: filepath.Join(dir, "task"),
			Nonce: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36),
		})
		if err != nil {
			b.Fatal(err)
		}
		return c.Identity().PID, func() {
			if err := c.Shutdown(context.Background()); err != nil {
				b.Error(err)
			}
			c.Close()
		}
	}
}

func minHelper(bin string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		h := benchkit.StartHelper(b, bin, dir)
		return h.Cmd.Process.Pid, h.Stop
	}
}

// s6Supervise is s6-supervise of a service directory holding a down file
// (so it starts nothing: idle, as the other kinds are), read once it has
// written its status file.
func s6Supervise(path, sleeper string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		svc := filepath.Join(dir, "svc")
		if err := os.MkdirAll(filepath.Join(svc, "supervise"), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(sleeper, filepath.Join(svc, "run")); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(svc, "down"), nil, 0o600); err != nil {
			b.Fatal(err)
		}
		w, err := watchFor(filepath.Join(svc, "supervise"), "status")
		if err != nil {
			b.Fatal(err)
		}
		defer w.close()
		cmd := exec.Command(path, svc)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if err := w.wait(10 * time.Second); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("s6-supervise %s: %v", svc, err)
		}
		return cmd.Process.Pid, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	}
}

// fileWatch waits, through inotify, for a name to appear in a directory.
type fileWatch struct {
	fd        int
	dir, name string
}

// watchFor starts watching dir for name (created, written or renamed in).
func watchFor(dir, name string) (*fileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &fileWatch{fd: fd, dir: dir, name: name}, nil
}

func (w *fileWatch) close() { unix.Close(w.fd) }

// wait returns once the name exists and is not empty, or after timeout.
func (w *fileWatch) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for {
		if fi, err := os.Stat(filepath.Join(w.dir, w.name)); err == nil && fi.Size() > 0 {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("no %s in %s after %s", w.name, w.dir, timeout)
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			if _, err := unix.Read(w.fd, buf); err != nil && !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	}
}

func goPluginHelper(bin string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		cmd := exec.Command(bin, dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		c := plugin.NewClient(&plugin.ClientConfig{
			HandshakeConfig: gpexec.Handshake, Plugins: gpexec.Plugins(), Cmd: cmd,
			AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, Logger: hclog.NewNullLogger(),
		})
		rc, err := c.Client()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rc.Dispense(gpexec.Name); err != nil {
			b.Fatal(err)
		}
		return c.ReattachConfig().Pid, c.Kill
	}
}

// idleMem starts idleProcs helpers of kind k, lets them settle, and returns
// the sum of their RSS and PSS in kB (PSS shares the common pages between
// them, as on a node running that many tasks).
func idleMem(b *testing.B, k kind) (rss, pss float64) {
	var stops []func()
	var pids []int
	for range *idleProcs {
		dir, err := os.MkdirTemp("", "tb")
		if err != nil {
			b.Fatal(err)
		}
		pid, stop := k(b, dir)
		pids = append(pids, pid)
		stops = append(stops, func() { stop(); os.RemoveAll(dir) })
	}
	// Each kind answered a request before k returned: it is up and idle,
	// and all kinds are read at the same point of their lives.
	for _, pid := range pids {
		r, p := benchkit.MemOf(b, pid)
		rss, pss = rss+r, pss+p
	}
	for _, stop := range stops {
		stop()
	}
	return rss, pss
}

// BenchmarkIdleMemory: RSS and PSS of mem.procs idle executors (tether's
// standalone executor, and the tether binary in executor mode, the
// embedded case) against as many minimal Go helpers, go-plugin helpers
// and s6-supervise processes (skipped, saying why, where s6 cannot be
// had), kinds rotating within each round; each kind is read once all of
// it is up. Targets: standalone <= 1.1x the helper, <= 0.5x go-plugin.
func BenchmarkIdleMemory(b *testing.B) {
	if sizingRun(b) {
		return
	}
	kinds := []kind{
		tetherExecutor([]string{bin(b, "tether-executor")}),
		tetherExecutor([]string{bin(b, "tether"), "executor"}),
		minHelper(bin(b, "minhelper")),
		goPluginHelper(bin(b, "gphelper")),
	}
	names := []string{"standalone", "embedded", "helper", "goplugin", "s6"}
	if s6, why := findTool(b, "s6-supervise", "s6"); s6 != "" {
		kinds = append(kinds, s6Supervise(s6, bin(b, "sleeper")))
	} else {
		b.Logf("s6 unavailable, so its kind is skipped: %s", why)
	}
	rss := make([][]float64, len(kinds))
	pss := make([][]float64, len(kinds))
	for i := 0; i < b.N; i++ {
		for j := range kinds {
			k := (i + j) % len(kinds) // rotate who goes first
			r, p := idleMem(b, kinds[k])
			rss[k], pss[k] = append(rss[k], r), append(pss[k], p)
		}
	}
	b.ReportMetric(float64(*idleProcs), "procs")
	for k := range kinds {
		b.ReportMetric(quantile(rss[k], 0.5)/1024, names[k]+"-rss-MB")
		b.ReportMetric(quantile(pss[k], 0.5)/1024, names[k]+"-pss-MB")
	}
	ratio := func(xs [][]float64, a, f int) float64 { return medianRatio(xs[a], xs[f]) }
	b.ReportMetric(ratio(rss, 0, 2), "rss-ratio-helper")
	b.ReportMetric(ratio(pss, 0, 2), "pss-ratio-helper")
	b.ReportMetric(ratio(rss, 0, 3), "rss-ratio-goplugin")
	b.ReportMetric(ratio(pss, 0, 3), "pss-ratio-goplugin")
	b.ReportMetric(ratio(pss, 2, 3), "helper-pss-ratio-goplugin") // the floor's: the report sets row 3's target from it
	b.ReportMetric(ratio(rss, 1, 2), "embedded-rss-ratio-helper")
	b.ReportMetric(ratio(pss, 1, 2), "embedded-pss-ratio-helper")
	if len(kinds) == 5 {
		b.ReportMetric(ratio(rss, 0, 4), "rss-ratio-s6")
		b.ReportMetric(ratio(pss, 0, 4), "pss-ratio-s6")
	}
}
