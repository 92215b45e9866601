package proptest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/store"
)

// store returns the bbolt store in use once no maintenance is under way
// (waiting for it to end otherwise), or nil.
func (h *Harness) store() *store.Store {
	for {
		h.mu.Lock()
		gate, st := h.gate, h.st
		h.mu.Unlock()
		if gate == nil {
			return st
		}
		<-gate
	}
}

func (h *Harness) setStore(st *store.Store) {
	h.mu.Lock()
	h.st = st
	h.mu.Unlock()
}

// Maintenance kinds for MaintainCall.
const (
	// MaintainSalvage is check --salvage: driver.SalvageStore.
	MaintainSalvage = "salvage"
	// MaintainGC is gc: every ended task removed, then a compaction.
	MaintainGC = "gc"
)

// errNeedsBolt: a maintenance of the MemLog.
var errNeedsBolt = errors.New("proptest: a maintenance needs the bbolt store (Options.Bolt)")

// MaintainCall is a maintenance of the store beside the step's other
// calls, run as an agent runs one on the store it holds open (store/doc.go,
// "Maintenance"): its requests paused (every other call of the step waits
// for the store until it is over), store.Store.Suspend, the maintenance,
// Maintenance.Reopen. kind is MaintainSalvage or MaintainGC. The
// maintenance is one turn: its durable steps (store.CrashPoints,
// driver.PointSalvageSettled) are crash points of the plan, and a crash
// there leaves the files as the process would (the lock let go, as the
// kernel does). Needs Options.Bolt.
func (h *Harness) MaintainCall(kind string) Call {
	return Call{Do: func(ctx context.Context, _ *driver.Driver) error { return h.maintain(ctx, kind) }}
}

func (h *Harness) maintain(ctx context.Context, kind string) error {
	g, onCrash := h.gen, h.onCrash
	g.enter("maintain", kind)
	if h.mem != nil {
		return errNeedsBolt
	}
	h.mu.Lock()
	st, gate := h.st, make(chan struct{})
	h.gate = gate
	h.mu.Unlock()
	defer func() { // also when the process dies at a crash point (Goexit)
		h.mu.Lock()
		h.gate = nil
		h.mu.Unlock()
		close(gate)
	}()
	if st == nil {
		return store.ErrClosed
	}
	if kind == MaintainGC {
		// The ended tasks gc removes: forgotten by the ledger first (their
		// events are meant to go), and held to the rule of a terminal
		// task from here.
		var ended []string
		if err := st.All(ctx, func(id string) error {
			t, err := st.LoadTask(ctx, id)
			if err == nil && t.State.Terminal() {
				ended = append(ended, id)
			}
			return err
		}); err != nil {
			return err
		}
		h.mu.Lock()
		if h.gcRemoved == nil {
			h.gcRemoved = map[string]bool{}
		}
		for _, id := range ended {
			delete(h.ledger, id)
			delete(h.verified, id)
			h.gcRemoved[id] = true
		}
		h.mu.Unlock()
		after := time.Unix(1<<33, 0) // after every event (year 2242; its UnixNano still fits)
		if _, err := st.Remove(ctx, after); err != nil {
			return err
		}
	}
	m, err := st.Suspend()
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.st = nil // closed; a crash from here leaves the next generation to open what is in place
	h.mu.Unlock()
	defer m.Release() // the kernel's part, if the process dies
	var merr error
	switch kind {
	case MaintainGC:
		_, _, merr = m.Compact()
	case MaintainSalvage:
		var rep driver.Salvaged
		rep, merr = driver.SalvageStore(ctx, m, h.World.View(g), driver.Hooks{Crash: func(p, _ string) { onCrash(p) }})
		if merr == nil && !rep.Done() {
			merr = fmt.Errorf("proptest: salvage of an undamaged store not done: %+v", rep)
		}
	default:
		merr = fmt.Errorf("proptest: unknown maintenance %q", kind)
	}
	st2, err := m.Reopen()
	if err != nil {
		return errors.Join(merr, err)
	}
	h.mu.Lock()
	h.st = st2
	h.mu.Unlock()
	return merr
}

// removedByGC reports whether a maintenance removed the task (it had
// ended).
func (h *Harness) removedByGC(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gcRemoved[id]
}
