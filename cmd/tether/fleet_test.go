package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fleetDir returns a directory holding a copy of the tether under test
// and, when fake is set, a tether-fleet beside it: a script that prints
// its pid, its arguments one a line and its open descriptors, then exits
// 7.
func fleetDir(t *testing.T, fake bool) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "tether")
	src, err := os.Open(tetherBin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if fake {
		script := "#!/bin/sh\nprintf 'pid %s\\n' \"$$\"\nfor a in \"$@\"; do printf 'arg %s\\n' \"$a\"; done\n" +
			"printf 'fds '; for f in /proc/$$/fd/*; do printf '%s ' \"${f##*/}\"; done; echo\nexit 7\n"
		writeFile(t, dir, "tether-fleet", script)
		if err := os.Chmod(filepath.Join(dir, "tether-fleet"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, bin
}

// runIn runs bin with args, $PATH set to path only, and extra as its
// descriptor 3.
func runIn(t *testing.T, bin, path string, extra *os.File, args ...string) (stdout, stderr string, code, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir()}
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode(), cmd.Process.Pid
}

// TestFleet_CommandsAreHandedOverAsGiven: `tether cluster …` and `tether
// agent` with a fleet flag become tether-fleet in the same process (the
// same pid, the arguments as given, its exit code, the descriptors tether
// was given); every other command stays tether's.
func TestFleet_CommandsAreHandedOverAsGiven(t *testing.T) {
	_, bin := fleetDir(t, true)
	state := t.TempDir()
	inherited, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer inherited.Close()
	for _, args := range [][]string{
		{"--state-dir", state, "cluster", "--endpoints", "http://127.0.0.1:1", "status", "--json"},
		{"cluster", "events", "web", "-f", "--", "--not-a-flag"},
		{"--log-level", "debug", "agent", "--node=n1", "--cluster", "http://127.0.0.1:1"},
		{"agent", "--config-dir", state, "--lease-ttl", "5s"},
		{"help", "cluster"},
	} {
		stdout, stderr, code, pid := runIn(t, bin, "/nonexistent", inherited, args...)
		if code != 7 {
			t.Errorf("tether %q: exit %d, want tether-fleet's 7\n%s%s", args, code, stdout, stderr)
			continue
		}
		var got []string
		fds := ""
		for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
			switch {
			case strings.HasPrefix(l, "arg "):
				got = append(got, strings.TrimPrefix(l, "arg "))
			case strings.HasPrefix(l, "fds "):
				fds = l
			case l != fmt.Sprintf("pid %d", pid):
				t.Errorf("tether %q: tether-fleet said %q, want pid %d (the same process)", args, l, pid)
			}
		}
		want := args
		if args[0] == "help" {
			want = []string{"cluster", "--help"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("tether %q: tether-fleet got %q", args, got)
		}
		if args[0] != "help" && !strings.Contains(fds, " 3 ") {
			t.Errorf("tether %q: descriptor 3 did not pass to tether-fleet: %s", args, fds)
		}
	}
	for _, args := range [][]string{
		{"--state-dir", state, "status", "agent", "--cluster", "x"}, // a fleet flag, not on agent
		{"--state-dir", state, "agent", "--config-dir", state, "--help"},
		{"--state-dir", state, "status", "--all"},
		{"--state-dir", state, "agent", "--", "--node", "n1"}, // after "--": not a flag
	} {
		stdout, stderr, _, _ := runIn(t, bin, "/nonexistent", nil, args...)
		if strings.Contains(stdout, "arg ") {
			t.Errorf("tether %q was handed to tether-fleet:\n%s%s", args, stdout, stderr)
		}
	}
}

// TestFleet_WithoutTheFleetBinaryTheErrorNamesItAndMakeBuild: without a
// tether-fleet beside tether or on $PATH, a fleet command says which
// binary it needs and how to build it; a link of the name to tether
// itself is not taken for it (it would hand the command to itself for
// ever).
func TestFleet_WithoutTheFleetBinaryTheErrorNamesItAndMakeBuild(t *testing.T) {
	dir, bin := fleetDir(t, false)
	check := func(what string) {
		_, stderr, code, _ := runIn(t, bin, t.TempDir(), nil, "cluster", "--endpoints", "http://127.0.0.1:1", "status")
		for _, want := range []string{"tether cluster needs the tether-fleet binary", "neither beside " + bin + " nor on $PATH", "'make build' builds both"} {
			if code != exitError || !strings.Contains(stderr, want) {
				t.Errorf("%s: exit %d, want 1 and %q:\n%s", what, code, want, stderr)
			}
		}
	}
	check("absent")
	if err := os.Symlink(bin, filepath.Join(dir, "tether-fleet")); err != nil {
		t.Fatal(err)
	}
	check("a link to tether itself")
	_, stderr, code, _ := runIn(t, bin, t.TempDir(), nil, "agent", "--node", "n1")
	if code != exitError || !strings.Contains(stderr, "tether agent --node/--cluster needs the tether-fleet binary") {
		t.Errorf("agent --node without tether-fleet: exit %d:\n%s", code, stderr)
	}
}
