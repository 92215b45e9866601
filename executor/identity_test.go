//go:build linux

package executor

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// The identity check, field by field, and the pid recycled under it.

// TestIdentity_WrongBootIDAloneIsRefused gives the executor's identity with
// only its boot id changed (pid, start time and nonce right): a process of
// another boot is gone, whatever runs at its pid now. Nothing is signalled,
// nothing reattached, and no side file of the other boot is believed.
func TestIdentity_WrongBootIDAloneIsRefused(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	id := c.Identity()
	if _, err := c.Launch(ctx, m.taskSpec(t, "sleep")); err != nil {
		t.Fatal(err)
	}
	fake := id
	fake.BootID = "00000000-0000-0000-0000-000000000000"
	if fake.BootID == id.BootID {
		t.Fatal("the fake boot id is this boot's")
	}
	if alive, err := proc.Alive(fake); alive || err != nil {
		t.Errorf("proc.Alive(other boot) = %v %v, want false", alive, err)
	}
	if err := proc.Check(fake); !errors.Is(err, wire.ErrGone) {
		t.Errorf("proc.Check(other boot) = %v, want ErrGone", err)
	}
	if err := proc.Kill(ctx, fake); err != nil {
		t.Errorf("Kill(other boot) = %v, want nil (gone; nothing sent)", err)
	}
	if r, err := Reattach(ctx, filepath.Dir(id.Socket), fake); err == nil {
		r.Close()
		t.Errorf("Reattach(other boot) connected")
	}
	if alive, err := proc.Alive(id); !alive || err != nil {
		t.Fatalf("the executor was hurt by a refused kill: %v %v", alive, err)
	}
	if st, err := c.Status(ctx); err != nil || st.Exited {
		t.Fatalf("the task was hurt by a refused kill: %+v %v", st, err)
	}
	rec := wire.ExitRecord{Nonce: id.Nonce, BootID: id.BootID, PID: 10, StartTime: 20}
	if err := rec.Match(fake, fsm.Proc{PID: 10, StartTime: 20}); !errors.Is(err, wire.ErrSideFileMismatch) {
		t.Errorf("exit record of this boot matched an identity of another: %v", err)
	}
	lrec := wire.LaunchRecord{Nonce: id.Nonce, BootID: id.BootID, PID: 10, StartTime: 20}
	if err := lrec.Match(fake); !errors.Is(err, wire.ErrSideFileMismatch) {
		t.Errorf("launch record of this boot matched an identity of another: %v", err)
	}
}
