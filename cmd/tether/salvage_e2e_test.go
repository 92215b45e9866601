package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/store"
)

// TestSalvage_LostTaskIsKilledByItsDirectorysProof: check --salvage of a
// store where a live task's head and the record with its spawn nonce are
// damaged (nothing readable of its log proves which processes are its
// own): its executor's identity file, proven against the live process,
// does. The salvage kills the executor and everything of its task by that
// identity, records the task lost in the new store, copies the readable
// task, and exits 0: everything is accounted for.
func TestSalvage_LostTaskIsKilledByItsDirectorysProof(t *testing.T) {
	e := newDaemonlessEnv(t, "a store damaged under its tasks while no process holds it")
	dbPath := filepath.Join(e.dir, "tether.db")
	hurt := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "hurt"}, "sleep")...).stdout)
	fine := taskID(t, e.must("run", "-v", "--name", "fine", "--", "/bin/true").stderr)
	before := loadTask(t, dbPath, hurt)
	if before.Executor == nil {
		t.Fatalf("the started task has no executor recorded: %+v", before)
	}
	t.Cleanup(func() { killUnknownTask(t, hurt, before.Nonce, before.Executor.PID, before.Executor.Cgroup) })
	execStart, alive := proc.Live(before.Executor.PID)
	if !alive {
		t.Fatal("the executor is not alive before the salvage")
	}

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
	if r.code != exitOK {
		t.Fatalf("salvage that could kill the lost task by its directory's proof: exit %d, want 0\n%s", r.code, r)
	}
	for _, want := range []string{"lost task " + hurt, "killed by proven identity", "recorded lost", "copied 1 tasks", "salvage: 1 copied, 1 lost"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the salvage does not say %q:\n%s", want, r)
		}
	}
	if start, ok := proc.Live(before.Executor.PID); ok && start == execStart {
		t.Errorf("the lost task's executor %d is alive after the salvage", before.Executor.PID)
	}
	if s := e.status(fine); len(s) != 1 || s[0].State != "exited" {
		t.Fatalf("the readable task after the salvage: %+v", s)
	}
	if s := e.status(hurt); len(s) != 1 || s[0].State != "lost" {
		t.Fatalf("the lost task after the salvage: %+v, want recorded lost", s)
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

// TestSalvage_TruncatedAtEveryPageStrandsNoExecutor: a store with live
// tasks (real executors: two lone tasks and a job file's group task, and
// some ended ones) is cut at every page boundary, each cut on a fresh
// state directory with fresh tasks, and check --salvage run on it,
// daemonless and through an agent (the agent's store replaced under it by
// the cut file, as a disk would give it back). Every live executor is then
// either carried into the new store, and stopped by `tether stop`, or
// killed and recorded lost (`tether status --all` says lost); the salvage
// exits 0 having accounted for all of them, and nothing is left running
// (the cleanup's leak check). The cut at the file's end leaves it whole:
// that salvage says the store was sound.
func TestSalvage_TruncatedAtEveryPageStrandsNoExecutor(t *testing.T) {
	t.Run("daemonless", func(t *testing.T) { salvageEveryCut(t, false) })
	t.Run("agent", func(t *testing.T) { salvageEveryCut(t, true) })
}

func salvageEveryCut(t *testing.T, viaAgent bool) {
	ps := os.Getpagesize()
	size := math.MaxInt
	for cut := 0; cut <= size; cut += ps {
		t.Run(fmt.Sprintf("cut-%d", cut), func(t *testing.T) {
			e := newDaemonlessEnv(t, "")
			if viaAgent {
				e.agent = e.serveAgent()
			}
			live := salvageFixture(t, e)
			db := filepath.Join(e.dir, "tether.db")
			good, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			size = len(good)
			damaged := cut < size
			if damaged {
				// Daemonless the file is cut where it is; an agent holds it
				// open, and is given the cut file in its place.
				tmp := db + ".cut"
				if err := os.WriteFile(tmp, good[:cut], 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, db); err != nil {
					t.Fatal(err)
				}
			}
			r := e.tether("check", "--salvage")
			if r.code != exitOK {
				t.Fatalf("salvage of the store cut at %d of %d bytes:\n%s", cut, size, r)
			}
			if !damaged && !strings.Contains(r.stdout, "the store was sound") {
				t.Errorf("the salvage of a whole store does not say it was sound:\n%s", r)
			}
			after := map[string]taskStatus{}
			for _, s := range e.statusAll() {
				after[s.ID] = s
			}
			var outcome []string
			for _, l := range live {
				a, ok := after[l.ID]
				outcome = append(outcome, l.Name+":"+a.State)
				switch {
				case !ok:
					t.Errorf("live task %s (%s) is in no list after the salvage, its executor %d alive: %v\n%s", l.ID, l.Name, l.ExecutorPID, l.alive(), r)
				case a.State == "lost":
					if l.alive() {
						t.Errorf("task %s recorded lost, its executor %d alive\n%s", l.ID, l.ExecutorPID, r)
					}
					if !strings.Contains(r.stdout, "lost task "+l.ID) {
						t.Errorf("the salvage does not name lost task %s:\n%s", l.ID, r)
					}
				case !terminalState(a.State):
					if sr := e.tether("stop", l.ID); sr.code != exitOK {
						t.Errorf("carried task %s (%s): stop: %s", l.ID, a.State, sr)
					}
					if l.alive() {
						t.Errorf("carried task %s stopped, its executor %d alive", l.ID, l.ExecutorPID)
					}
				default:
					t.Errorf("live task %s is %s after the salvage, its executor %d alive: %v\n%s", l.ID, a.State, l.ExecutorPID, l.alive(), r)
				}
			}
			t.Logf("cut at %d of %d bytes: %s", cut, size, strings.Join(outcome, " "))
		})
		if t.Failed() {
			return
		}
	}
}

// liveTask is a live task before the salvage, and its executor's identity.
type liveTask struct {
	taskStatus
	execStart uint64
}

// alive reports whether the task's executor (the very process) is alive.
func (l liveTask) alive() bool {
	start, ok := proc.Live(l.ExecutorPID)
	return ok && start == l.execStart
}

func terminalState(s string) bool {
	st, err := fsm.ParseState(s)
	return err == nil && st.Terminal()
}

// salvageFixture starts two lone tasks and a job file's group task that
// run until stopped, and three that end, and returns the live ones.
func salvageFixture(t *testing.T, e *env) []liveTask {
	t.Helper()
	e.must(e.runArgs("start", []string{"--name", "one"}, "sleep")...)
	e.must(e.runArgs("start", nil, "sleep")...)
	for range 3 {
		e.must("run", "--", "/bin/true")
	}
	h := e.helper("sleep")
	args, _ := json.Marshal(h[1:])
	job := writeFile(t, t.TempDir(), "svc.nomad", fmt.Sprintf(`job "svc" {
  group "g" {
    task "work" {
      driver = "raw_exec"
      config {
        command = %q
        args    = %s
      }
    }
  }
}
`, h[0], args))
	e.must("start", job)
	var live []liveTask
	for _, s := range e.status() {
		start, ok := proc.Live(s.ExecutorPID)
		if !ok || s.State != "running" {
			t.Fatalf("task %s: %s, executor %d alive %v", s.ID, s.State, s.ExecutorPID, ok)
		}
		live = append(live, liveTask{s, start})
	}
	if len(live) != 3 {
		t.Fatalf("%d live tasks, want 3: %+v", len(live), live)
	}
	return live
}
