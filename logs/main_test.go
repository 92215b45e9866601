package logs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The test binary is also the helper process, dispatched on os.Args[1]:
//
//	logs-helper lines N         writes lines 0..N-1 (testLine) to stdout
//	logs-helper phases A B      writes lines 0..A-1, reads a byte from
//	                            stdin, writes lines A..A+B-1
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "logs-helper" {
		os.Exit(helper(os.Args[2:]))
	}
	// Helper processes built with -race would otherwise sleep 1s at exit.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}

func helper(args []string) int {
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "logs-helper:", err)
			os.Exit(2)
		}
		return n
	}
	out := bufio.NewWriterSize(os.Stdout, 16<<10)
	write := func(from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := out.WriteString(testLine(i)); err != nil {
				fmt.Fprintln(os.Stderr, "logs-helper:", err)
				os.Exit(3)
			}
		}
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "logs-helper:", err)
			os.Exit(3)
		}
	}
	switch args[0] {
	case "lines":
		write(0, num(args[1]))
	case "phases":
		a, b := num(args[1]), num(args[2])
		write(0, a)
		var one [1]byte
		if _, err := io.ReadFull(os.Stdin, one[:]); err != nil {
			fmt.Fprintln(os.Stderr, "logs-helper: waiting for phase two:", err)
			return 4
		}
		write(a, b)
	default:
		fmt.Fprintln(os.Stderr, "logs-helper: unknown mode", args[0])
		return 2
	}
	return 0
}

// helperCmd runs the test binary as a helper.
func helperCmd(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command(exe, append([]string{"logs-helper"}, args...)...)
}

// testLine is line i of the helpers' and tests' output: numbered, of
// lengths from 9 to 121 bytes, so that lines straddle every boundary.
func testLine(i int) string {
	return fmt.Sprintf("%07d %s\n", i, strings.Repeat(string(rune('a'+i%26)), i*7%113))
}

// testLines returns lines from..from+n-1.
func testLines(from, n int) []byte {
	var b bytes.Buffer
	for i := from; i < from+n; i++ {
		b.WriteString(testLine(i))
	}
	return b.Bytes()
}

// linesOf returns at least size bytes of whole lines starting at from,
// and the number of lines.
func linesOf(from, size int) ([]byte, int) {
	var b bytes.Buffer
	i := from
	for b.Len() < size {
		b.WriteString(testLine(i))
		i++
	}
	return b.Bytes(), i - from
}
