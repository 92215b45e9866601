//go:build linux

package cgroup

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOpenMember_ProvesMembership: the kill that signals a cgroup's
// members one by one (killEach, where cgroup.kill is missing or did not
// empty it) signals only processes whose membership it proved after
// pinning them: openMember opens a pidfd on a listed pid, then reads
// /proc/PID/cgroup, and refuses (errNotMember, nothing signalled) a
// process that is not in the cgroup or below it, in the hierarchy that
// listed it: one in a sibling cgroup whose name begins with the cgroup's
// own, one in the cgroup's parent. A process in a cgroup below it is a
// member.
func TestOpenMember_ProvesMembership(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	nonce := "n" + randHex(t, 8)
	createAt := func(task, nonce string) *Cgroup {
		loc, err := LocationFor(h, task, nonce)
		if err != nil {
			t.Fatal(err)
		}
		cg, err := Create(h, loc, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cg.Kill(ctx); err != nil {
				t.Errorf("cleanup kill: %v", err)
			}
			if err := cg.Remove(); err != nil {
				t.Errorf("cleanup remove: %v", err)
			}
		})
		return cg
	}
	task := "t" + randHex(t, 3)
	cg := createAt(task, nonce)
	sibling := createAt(task, nonce+"9") // its path begins with cg's
	in := start(t, m.cmd(t, "cg-ready", cg.Location().String()))
	next := start(t, m.cmd(t, "cg-ready", sibling.Location().String()))
	// A process in a cgroup below cg, in every hierarchy of it.
	below := start(t, m.cmd(t, "cg-ready"))
	belowPID := below.cmd.Process.Pid
	for _, d := range cg.dirs {
		sub := d.dir + "/sub"
		if err := unix.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} { // v1 cpuset: none until set
			if v, err := readString(d.dir, f); err == nil {
				if err := writeFile(sub, f, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := writeFile(sub, "cgroup.procs", strconv.Itoa(belowPID)); err != nil {
			t.Fatal(err)
		}
	}
	parent := start(t, m.cmd(t, "cg-ready")) // in the cgroups this test runs in: cg's parent's, or above
	for _, d := range cg.dirs {
		for _, tc := range []struct {
			name   string
			pid    int
			member bool
		}{
			{"in the cgroup", in.cmd.Process.Pid, true},
			{"below it", belowPID, true},
			{"in a sibling whose name begins with its own", next.cmd.Process.Pid, false},
			{"outside it", parent.cmd.Process.Pid, false},
		} {
			fd, err := openMember(member{pid: tc.pid, key: d.key, path: d.path, dir: d.dir})
			if fd >= 0 {
				unix.Close(fd)
			}
			switch {
			case tc.member && err != nil:
				t.Errorf("%s hierarchy: a process %s refused: %v", d.key, tc.name, err)
			case !tc.member && !errors.Is(err, errNotMember):
				t.Errorf("%s hierarchy: a process %s taken for a member (err %v): it would be signalled", d.key, tc.name, err)
			}
		}
	}
	below.reap() // it leaves the sub-cgroups empty, for the cleanup's removal
}
