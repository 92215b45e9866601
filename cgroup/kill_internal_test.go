//go:build linux

package cgroup

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestWaitAllOr_WakesOnEventsChange: with no pidfd to wait on, a change of
// cgroup.events (populated 1 -> 0) alone wakes the wait, through POLLPRI.
func TestWaitAllOr_WakesOnEventsChange(t *testing.T) {
	h := needCgroups(t)
	u, ok := h.Unified()
	if !ok || !u.Events {
		t.Skip("needs cgroup2 with cgroup.events")
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	s := start(t, m.cmd(t, "cg-ready", cg.Location().String()))
	d, _ := cg.byKey(UnifiedKey)
	efd, err := unix.Open(d.dir+"/cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	buf := make([]byte, 512)
	n, err := unix.Pread(efd, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := kvValue(buf[:n], "populated"); v != 1 {
		t.Fatalf("cgroup.events before: %q", buf[:n])
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitAllOr(testCtx(t), efd, nil); err != nil {
		t.Fatal(err)
	}
	if n, err = unix.Pread(efd, buf, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := kvValue(buf[:n], "populated"); v != 0 {
		t.Fatalf("woken with cgroup.events %q", buf[:n])
	}
	s.wait(t)
}
