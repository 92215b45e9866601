// Package benchkit holds what tether's benchmarks share across packages:
// the minimal Go helper started the way an executor is, the bare bbolt
// appends of a floor, a task started in a cgroup of its own the cheapest
// way the kernel allows, and a process's memory. Benchmarks only.
package benchkit

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/cgroup"
)

// Helper is a running minimal Go helper (executor/internal/minhelper).
type Helper struct {
	Cmd *exec.Cmd
	RPC *rpc.Client
}

// StartHelper starts the helper binary bin the way executor.Spawn starts an
// executor (Setsid, a ready pipe on fd 3), dials its socket in dir and
// makes one RPC.
func StartHelper(tb testing.TB, bin, dir string) *Helper {
	tb.Helper()
	sock := filepath.Join(dir, "h.sock")
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, sock)
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w.Close()
	if _, err := io.ReadAll(r); err != nil {
		tb.Fatal(err)
	}
	r.Close()
	c, err := rpc.Dial("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	var out int
	if err := c.Call("Helper.Ping", 1, &out); err != nil || out != 2 {
		tb.Fatalf("Ping = %d, %v", out, err)
	}
	return &Helper{Cmd: cmd, RPC: c}
}

// Stop kills the helper and reaps it.
func (h *Helper) Stop() {
	h.RPC.Close()
	_ = h.Cmd.Process.Kill()
	_ = h.Cmd.Wait()
}

// BoltSteps are a floor's durable appends: bare bbolt Updates of one
// 96-byte record each, in a file in dir (the same disk as tether's store).
type BoltSteps struct {
	db  *bolt.DB
	seq uint64
	val []byte
}

// OpenBoltSteps opens dir/name as a bare bbolt file; closed at cleanup.
func OpenBoltSteps(tb testing.TB, dir, name string) *BoltSteps {
	tb.Helper()
	db, err := bolt.Open(filepath.Join(dir, name), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("floor")); return err }); err != nil {
		tb.Fatal(err)
	}
	return &BoltSteps{db: db, val: make([]byte, 96)}
}

// Append is one durable bbolt Update.
func (s *BoltSteps) Append(tb testing.TB) {
	s.seq++
	k := binary.BigEndian.AppendUint64(nil, s.seq)
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("floor")).Put(k, s.val) }); err != nil {
		tb.Fatal(err)
	}
}

// MemOf returns VmRSS (from /proc/PID/status) and Pss (from smaps_rollup)
// of pid, in kB.
func MemOf(tb testing.TB, pid int) (rss, pss float64) {
	tb.Helper()
	field := func(file, key string) float64 {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			tb.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
				n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				return n
			}
		}
		tb.Fatalf("no %s in /proc/%d/%s", key, pid, file)
		return 0
	}
	return field("status", "VmRSS"), field("smaps_rollup", "Pss")
}

// Contained is a process started in a cgroup of its own by StartContained.
type Contained struct {
	Cmd    *exec.Cmd
	Cgroup *cgroup.Cgroup
}

// StartContained is a floor's contained launch: it creates the cgroup at
// tether's location for task and nonce on host h (every hierarchy, no
// limits: cgroup.Create), fork/execs argv in a process group of its own,
// and moves it into the cgroup right after the fork (cgroup.Add: one
// migration, the way runc's and Nomad's cgroup managers place a process;
// on cgroup v1 the first write waits for an RCU grace period). Stop it
// with Kill.
func StartContained(tb testing.TB, h cgroup.Host, task, nonce string, argv ...string) *Contained {
	tb.Helper()
	cg, err := CreateCgroup(h, task, nonce)
	if err != nil {
		tb.Fatal(err)
	}
	return StartIn(tb, cg, argv...)
}

// CreateCgroup creates the cgroup at tether's location for task and nonce
// on host h, in every hierarchy, with no limits.
func CreateCgroup(h cgroup.Host, task, nonce string) (*cgroup.Cgroup, error) {
	loc, err := cgroup.LocationFor(h, task, nonce)
	if err != nil {
		return nil, err
	}
	return cgroup.Create(h, loc, cgroup.Limits{})
}

// StartIn fork/execs argv in a process group of its own and moves it into
// cg right after the fork (see StartContained).
func StartIn(tb testing.TB, cg *cgroup.Cgroup, argv ...string) *Contained {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = cg.Remove()
		tb.Fatal(err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = cg.Remove()
		tb.Fatal(err)
	}
	return &Contained{Cmd: cmd, Cgroup: cg}
}

// PrimeMigration moves the calling process into the cgroup it is already
// in (in the first hierarchy it may write to): a migration that changes
// nothing but takes the kernel's cgroup threadgroup rwsem for writing, so
// the RCU grace period its rcu_sync waits for starts now, and a real
// migration within about a grace period after this returns waits for
// none. It blocks for that grace period (call it from a goroutine, after
// creating the cgroups: the kernel holds cgroup_mutex while it waits, so
// a mkdir of a cgroup meanwhile waits too).
func PrimeMigration(h cgroup.Host) error {
	for _, hi := range h.Hierarchies {
		if !hi.Writable || hi.ReadOnly {
			continue
		}
		rel := strings.TrimPrefix(hi.Path, hi.Root)
		dir := filepath.Join(hi.Mount, rel)
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	return fmt.Errorf("benchkit: no writable cgroup hierarchy to prime")
}

// Kill kills everything in the cgroup, confirms it empty, removes it and
// reaps the process.
func (c *Contained) Kill(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Cgroup.Kill(ctx); err != nil {
		tb.Fatal(err)
	}
	_ = c.Cmd.Wait()
	if err := c.Cgroup.Remove(); err != nil {
		tb.Fatal(err)
	}
}

// WriteIdentity is an executor's identity write: data to a temporary file
// in dir, fsync, rename to dir/identity.json, fsync of the directory.
func WriteIdentity(tb testing.TB, dir string, data []byte) {
	tb.Helper()
	tmp := filepath.Join(dir, ".identity.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		tb.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "identity.json")); err != nil {
		tb.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		tb.Fatal(err)
	}
}
