// Command sleeper is the static binary the isolation and CLI benchmarks
// start, in tether's exec root, in runc's containers and as a raw_exec
// task alike: it stays up, doing nothing, until it is killed; with the
// argument "exit" it exits 0 at once (a static true).
//
// With TETHER_BENCH_READY naming a fifo in its environment, it first
// writes its pid and a newline there in one write (atomic: under
// PIPE_BUF), so that a benchmark starting many of them under a supervisor
// (tether's agent, s6, supervisord) learns the moment each one runs
// without asking the supervisor. It takes no argument for that, so a
// service directory's run file can be a link to it.
package main

import (
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exit" {
		return
	}
	if fifo := os.Getenv("TETHER_BENCH_READY"); fifo != "" {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			os.Stderr.WriteString("sleeper: " + err.Error() + "\n")
			os.Exit(1)
		}
		if _, err := f.Write([]byte(strconv.Itoa(os.Getpid()) + "\n")); err != nil {
			os.Stderr.WriteString("sleeper: " + err.Error() + "\n")
			os.Exit(1)
		}
		f.Close()
	}
	for {
		time.Sleep(time.Hour)
	}
}
