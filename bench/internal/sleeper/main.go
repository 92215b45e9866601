// Command sleeper is the static binary the isolation benchmark starts, in
// tether's exec root and in runc's container alike: it stays up, doing
// nothing, until it is killed.
package main

import "time"

func main() {
	for {
		time.Sleep(time.Hour)
	}
}
