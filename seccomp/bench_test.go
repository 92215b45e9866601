//go:build linux

package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkCompile is the cost of compiling the default profile for a
// task (moby's evaluation of the conditions, the floor, the emitter), as
// the shim pays it before each exec.
func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := Compile(Default(), Options{Caps: dockerCaps}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstall is the cost of compiling and installing the default
// filter in a fresh single-goroutine process, as the shim does before its
// exec: each iteration starts the test binary as a helper, which times
// Compile and Install (TSYNC over the runtime's threads) and prints the
// two; the benchmark reports their means. The process start itself is
// not counted (the shim pays it with or without a filter).
func BenchmarkInstall(b *testing.B) {
	if err := CheckHost(); err != nil {
		b.Skipf("this kernel has no seccomp filter: %v", err)
	}
	var compile, install time.Duration
	n := 0
	for b.Loop() {
		out, err := exec.Command(os.Args[0], helperBench).CombinedOutput()
		if err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		var c, i int64
		if _, err := fmt.Sscan(string(out), &c, &i); err != nil {
			b.Fatalf("helper said %q: %v", out, err)
		}
		compile += time.Duration(c)
		install += time.Duration(i)
		n++
	}
	b.ReportMetric(float64(compile.Microseconds())/float64(n), "compile-µs")
	b.ReportMetric(float64(install.Microseconds())/float64(n), "install-µs")
}

const helperBench = "seccomp-bench"

// runBench compiles and installs the filter and prints how long each took
// (ns).
func runBench([]string) int {
	t0 := time.Now()
	f, err := Compile(Default(), Options{Caps: dockerCaps})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	t1 := time.Now()
	if err := f.Install(); err != nil {
		fmt.Println(err)
		return 1
	}
	t2 := time.Now()
	fmt.Println(t1.Sub(t0).Nanoseconds(), t2.Sub(t1).Nanoseconds())
	return 0
}
