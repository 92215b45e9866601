package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// tether check on a store that opens but whose logs are damaged in shapes
// other than a flipped record (issue 15; store/damage_test.go plants the
// same shapes under the store's own Check): the command exits 1, names the
// damaged task and sequence on stdout, blames no other task, and says on
// stderr that the store is damaged and what to do.

// plantInTask changes task id's bucket in the store file directly, as a
// bad sector or a buggy writer would, past every check of the store.
func plantInTask(t *testing.T, dbPath, id string, damage func(b *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		tasks := tx.Bucket([]byte("tasks"))
		if tasks == nil {
			return fmt.Errorf("no tasks bucket")
		}
		b := tasks.Bucket([]byte(id))
		if b == nil {
			return fmt.Errorf("no bucket for task %s", id)
		}
		return damage(b)
	}); err != nil {
		t.Fatal(err)
	}
}

// twoTasks runs two quick tasks to their end and returns their ids: one to
// damage, one that must not be blamed. The store is checked clean first.
func twoTasks(t *testing.T, e *env) (hurt, fine string) {
	t.Helper()
	hurt = taskID(t, e.must("run", "-v", "--name", "hurt", "--", "/bin/true").stderr)
	fine = taskID(t, e.must("run", "-v", "--name", "fine", "--", "/bin/true").stderr)
	if r := e.tether("check"); r.code != exitOK || !strings.Contains(r.stdout, "0 problems") {
		t.Fatalf("check of the store before any damage: %s", r)
	}
	return hurt, fine
}

// checkNames runs tether check and requires exit 1, the task and sequence
// on stdout (with want in the same line), no other task blamed, and the
// damage said on stderr.
func checkNames(t *testing.T, e *env, hurt, fine string, seq uint64, want string) {
	t.Helper()
	r := e.tether("check")
	if r.code != exitError {
		t.Fatalf("check of a damaged store: exit %d, want %d\n%s", r.code, exitError, r)
	}
	named := fmt.Sprintf("task %q seq %d", hurt, seq)
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, named) {
			line = l
			break
		}
	}
	if line == "" || !strings.Contains(line, want) {
		t.Fatalf("check does not name %s (%q) on stdout:\n%s", named, want, r)
	}
	if strings.Contains(r.stdout, fmt.Sprintf("task %q", fine)) {
		t.Errorf("check blames the undamaged task %s:\n%s", fine, r)
	}
	if !strings.Contains(r.stderr, "is damaged") || !strings.Contains(r.stderr, "--salvage") {
		t.Errorf("check does not say on stderr that the store is damaged and what to do:\n%s", r)
	}
	t.Logf("%s", strings.TrimSpace(line))
}

// A record removed from the middle of a task's log (the records around it
// intact, each with a good checksum): a gap in the sequence.
func TestCheck_RecordRemovedFromTheMiddleExits1NamingTaskAndSeq(t *testing.T) {
	e := newEnv(t)
	hurt, fine := twoTasks(t, e)
	e.offline(func() {
		plantInTask(t, filepath.Join(e.dir, "tether.db"), hurt, func(b *bolt.Bucket) error {
			key := binary.BigEndian.AppendUint64(nil, 3)
			if b.Get(key) == nil || b.Get(binary.BigEndian.AppendUint64(nil, 4)) == nil {
				return fmt.Errorf("task %s has no records 3 and 4", hurt)
			}
			return b.Delete(key)
		})
	})
	checkNames(t, e, hurt, fine, 3, "missing record")
}

// A task's head (the cached version and state the store keeps beside the
// log) damaged by one bit: its checksum no longer matches.
func TestCheck_DamagedTaskHeadExits1NamingTheTask(t *testing.T) {
	e := newEnv(t)
	hurt, fine := twoTasks(t, e)
	e.offline(func() {
		plantInTask(t, filepath.Join(e.dir, "tether.db"), hurt, func(b *bolt.Bucket) error {
			key := []byte("\xffhead")
			v := bytes.Clone(b.Get(key))
			if len(v) < 4 {
				return fmt.Errorf("task %s has no head", hurt)
			}
			v[3] ^= 0x01
			return b.Put(key, v)
		})
	})
	checkNames(t, e, hurt, fine, 0, "head")
}

// TestDamagedStore_EveryCommandNamesSalvageAndRecordsNothing: with the
// store cut short under a live task, every command that needs the store
// fails, naming `tether check --salvage`; a start records nothing and
// spawns nothing (no task directory, no executor); then check --salvage
// accounts for the live task and the commands work again.
func TestDamagedStore_EveryCommandNamesSalvageAndRecordsNothing(t *testing.T) {
	e := newDaemonlessEnv(t, "the store cut short under no agent (an agent holds the file open)")
	live := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "live"}, "sleep")...).stdout)
	db := filepath.Join(e.dir, "tether.db")
	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(filepath.Join(e.dir, "tasks"))
	for _, args := range [][]string{
		{"status"}, {"status", "--all"}, {"events", live}, {"stop", live}, {"wait", live},
		{"start", "--", "/bin/sleep", "100"}, {"run", "--", "/bin/true"}, {"recover"}, {"gc"},
	} {
		r := e.tether(args...)
		if r.code == exitOK {
			t.Errorf("tether %s on a store cut short exited 0:\n%s", strings.Join(args, " "), r)
		}
		if !strings.Contains(r.stderr, "tether check --salvage") {
			t.Errorf("tether %s does not name `tether check --salvage`:\n%s", strings.Join(args, " "), r)
		}
	}
	if after, _ := os.ReadDir(filepath.Join(e.dir, "tasks")); len(after) != len(before) {
		t.Errorf("commands on the damaged store made task directories: %d before, %d after", len(before), len(after))
	}
	r := e.tether("check", "--salvage")
	if r.code != exitOK || !strings.Contains(r.stdout, "lost task "+live) && !strings.Contains(r.stdout, "copied 1 tasks") {
		t.Fatalf("salvage: %s", r)
	}
	if s := e.status("--all", live); len(s) != 1 {
		t.Fatalf("status of %s after the salvage: %+v", live, s)
	} else if s[0].State != "lost" {
		e.must("stop", live)
	}
}
