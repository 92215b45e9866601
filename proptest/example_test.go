package proptest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/proptest"
)

// A stranger takes a dead executor's pid: the identity check refuses to
// signal it, and the signal log proves nothing was sent.
func ExampleWorld() {
	ctx := context.Background()
	w := proptest.NewWorld()
	g := w.NewGeneration(1)
	ex := w.View(g)

	h, _ := ex.Spawn(ctx, "web", "nonce-1")
	id := h.Identity()
	w.KillProc(id.PID) // the executor dies behind the driver's back
	w.ReusePID(id.PID) // and a stranger takes its pid

	err := ex.Kill(ctx, "web", id)
	fmt.Println(errors.Is(err, driver.ErrNotOurs))
	fmt.Println(len(w.Signals()), "signals sent")
	fmt.Println(w.Refusals()[0].Via, "refused")
	_ = h.Close()
	g.Kill()
	// Output:
	// true
	// 0 signals sent
	// kill refused
}

// Every enumerated run prints as a seed that replays it.
func ExampleParseScenario() {
	sc, err := proptest.ParseScenario("stop x2 | op crash=after-append:stop-requested#1 faults=[] | recover crash=- faults=[effect:kill-executor#1]")
	if err != nil {
		panic(err)
	}
	fmt.Println(sc.Op, sc.Tasks, sc.Plan.Crash.Name, sc.Recover.Faults[0])
	// Output: stop 2 after-append:stop-requested effect:kill-executor#1
}
