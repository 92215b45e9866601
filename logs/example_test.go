package logs_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tether-fsm/tether/logs"
)

func ExampleWriter() {
	dir, _ := os.MkdirTemp("", "logs-example")
	defer os.RemoveAll(dir)

	w, err := logs.Open(dir, "stdout.log", logs.Config{MaxFiles: 3, MaxFileSizeMB: 1}, logs.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	line := strings.Repeat("x", 1023) + "\n"
	for range 2500 { // 2.5 MB: two rotations
		w.Write([]byte(line))
	}
	w.Write([]byte("last line\n"))
	w.Close()
	fmt.Println(w.Stats().Rotations, "rotations")

	logs.Tail(dir, "stdout.log", 1, os.Stdout)
	// Output:
	// 2 rotations
	// last line
}

func ExampleFollow() {
	dir, _ := os.MkdirTemp("", "logs-example")
	defer os.RemoveAll(dir)
	w, _ := logs.Open(dir, "stdout.log", logs.DefaultConfig(), logs.Options{})
	defer w.Close()
	w.Write([]byte("old\n"))

	c, _ := logs.NewCursor(dir, "stdout.log")
	defer c.Close()
	c.SeekEnd() // like tail -n 0 -f
	w.Write([]byte("new\n"))

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stop once what is written so far is copied
	if err := logs.Follow(ctx, c, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// new
}

func ExampleConfig_Validate() {
	cfg := logs.DefaultConfig()
	cfg.MaxFiles = 0
	fmt.Println(cfg.Validate())
	// Output:
	// fsm: invalid task spec: logs: max_files = 0: it counts the live file, so it must be at least 1 (Nomad's default is 10)
}
