// Package benchkit holds what tether's benchmarks share across packages:
// the minimal Go helper started the way an executor is, the bare bbolt
// appends of a floor, and a process's memory. Benchmarks only.
package benchkit

import (
	"bufio"
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
