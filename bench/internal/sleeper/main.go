// Command sleeper is the static binary the isolation and CLI benchmarks
// start, in tether's exec root, in runc's containers and as a raw_exec
// task alike: it stays up, doing nothing, until it is killed; with the
// argument "exit" it exits 0 at once (a static true).
package main

import (
	"os"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exit" {
		return
	}
	for {
		time.Sleep(time.Hour)
	}
}
