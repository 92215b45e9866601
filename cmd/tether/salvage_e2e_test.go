package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// TestSalvage_UnprovableLostTaskExits1: check --salvage of a store where a
// live task's head and the record with its spawn nonce are damaged (so
// nothing readable proves which processes are its own) puts the salvaged
// store in place but exits 1 and says on stdout that the task's processes
// were NOT killed: a partial result is never reported as success. The
// test then kills them itself, by what the store knew before the damage.
func TestSalvage_UnprovableLostTaskExits1(t *testing.T) {
	e := newDaemonlessEnv(t, "a store damaged under its tasks while no process holds it")
	dbPath := filepath.Join(e.dir, "tether.db")
	hurt := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "hurt"}, "sleep")...).stdout)
	fine := taskID(t, e.must("run", "-v", "--name", "fine", "--", "/bin/true").stderr)
	before := loadTask(t, dbPath, hurt)
	if before.Executor == nil {
		t.Fatalf("the started task has no executor recorded: %+v", before)
	}
	t.Cleanup(func() { killUnknownTask(t, hurt, before.Nonce, before.Executor.PID, before.Executor.Cgroup) })

	// Record 2 is the spawn intent: the readable prefix is then only
	// task-created, and with the head gone no nonce is known.
	damageRecord(t, dbPath, hurt, 2)
	plantInTask(t, dbPath, hurt, func(b *bolt.Bucket) error {
		key := []byte("\xffhead")
		v := bytes.Clone(b.Get(key))
		if len(v) < 4 {
			return errors.New("no head")
		}
		v[3] ^= 0x01
		return b.Put(key, v)
	})
	r := e.tether("check", "--salvage")
	if r.code != exitError {
		t.Fatalf("salvage that could not kill a lost live task: exit %d, want %d\n%s", r.code, exitError, r)
	}
	if !strings.Contains(r.stdout, "lost task "+hurt) || !strings.Contains(r.stdout, "NOT killed") {
		t.Fatalf("salvage does not say that %s's processes were not killed:\n%s", hurt, r)
	}
	if !strings.Contains(r.stdout, "copied 1 tasks") || !strings.Contains(r.stdout, "salvaged store is in place") {
		t.Fatalf("salvage did not copy the readable task and put the new store in place:\n%s", r)
	}
	if s := e.status(fine); len(s) != 1 || s[0].State != "exited" {
		t.Fatalf("the readable task after the salvage: %+v", s)
	}
}

// loadTask reads a task's folded state from the store file.
func loadTask(t *testing.T, dbPath, id string) fsm.Task {
	t.Helper()
	s, err := store.Open(dbPath, store.Options{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tk, err := s.LoadTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// killUnknownTask kills a task the store no longer knows: its executor by
// pid (a pidfd, waited on) and its cgroup by the recorded location.
func killUnknownTask(t *testing.T, id, nonce string, executorPID int, loc string) {
	t.Helper()
	if fd, err := unix.PidfdOpen(executorPID, 0); err == nil {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000)
		unix.Close(fd)
	}
	if loc == "" {
		return
	}
	h, err := cgroup.Probe()
	if err != nil {
		t.Error(err)
		return
	}
	cg, err := cgroup.OpenRecorded(h, loc, id, nonce)
	if err != nil {
		t.Error(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.Kill(ctx); err != nil {
		t.Errorf("killing the lost task's cgroup: %v", err)
	}
	if err := cg.Remove(); err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Errorf("removing the lost task's cgroup: %v", err)
	}
}
