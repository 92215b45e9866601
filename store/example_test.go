package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "tether-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := store.Open(filepath.Join(dir, "state", "tether.db"), store.Options{})
	if err != nil {
		fmt.Println(err) // store.ErrLocked: another tether process holds it
		return
	}
	defer s.Close()

	// Step the task, persist the events, and only then act on the effects.
	task := fsm.Task{ID: "web"}
	evs, _, err := fsm.Step(task, fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{Command: "/bin/sleep", Args: []string{"30"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := s.Append(ctx, task.ID, task.Version, evs...)
	fmt.Println("version", v, err)

	// A second writer that folded the same version loses.
	_, err = s.Append(ctx, task.ID, task.Version, evs...)
	fmt.Println("conflict:", errors.Is(err, store.ErrConflict))

	// Recovery reads the live tasks only.
	_ = s.Live(ctx, func(id string) error {
		t, err := s.LoadTask(ctx, id)
		fmt.Println(t.ID, t.State, t.Version, err)
		return nil
	})
	// Output:
	// version 1 <nil>
	// conflict: true
	// web created 1 <nil>
}

func ExampleOpenShared() {
	dir, err := os.MkdirTemp("", "tether-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// Nothing is opened yet: each operation opens the store and closes it
	// when it (and any operation overlapping it) ends, so a command holds
	// nothing while it spawns or waits.
	sh, err := store.OpenShared(filepath.Join(dir, "tether.db"), store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sh.Close()
	spec := &fsm.Spec{Driver: "raw_exec", Command: "/bin/true"}
	v, err := sh.Append(ctx, "web", 0, fsm.Event{Type: fsm.EventCreated, Spec: spec})
	fmt.Println("version", v, err)

	// Another process (here: this one) can take the store between them.
	s, err := store.Open(sh.Path(), store.Options{ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	scan, err := s.LoadTasks(ctx, store.AllTasks)
	s.Close()
	for _, t := range scan.Tasks {
		fmt.Println(t.ID, t.State, err)
	}
	// Output:
	// version 1 <nil>
	// web created <nil>
}
