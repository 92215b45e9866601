// Command tether runs and supervises tasks through executor processes on an
// embedded event log. The CLI lands with issue 5.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "tether: the CLI is not built yet (issue 5)")
	os.Exit(2)
}
