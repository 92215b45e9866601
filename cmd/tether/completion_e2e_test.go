package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Issue 34: `tether help CMD` prints what `tether CMD -h` prints, for
// every command (today help printed only -h, --help): the same flag set.
func TestHelp_CommandIsWhatDashHPrints(t *testing.T) {
	e := newEnv(t)
	for _, cmd := range commands() {
		if cmd.hidden || cmd.name == "cluster" {
			continue // cluster: tether-fleet's help (cmd/tether-fleet's tests)
		}
		help, dashH := e.must("help", cmd.name), e.must(cmd.name, "-h")
		if help.stdout != dashH.stdout || help.stdout == "" {
			t.Errorf("tether help %s differs from tether %s -h:\n%s\n---\n%s", cmd.name, cmd.name, help.stdout, dashH.stdout)
		}
		// And it lists the command's own flags, not -h alone.
		fs := commandFlags(cmd.name)
		own, _ := fs.Split()
		for _, f := range own {
			if !f.Hidden && !strings.Contains(help.stdout, "--"+f.Name) {
				t.Errorf("tether help %s lacks --%s", cmd.name, f.Name)
			}
		}
	}
	if r := e.must("help", "run"); !strings.Contains(r.stdout, "--kill-timeout") || !strings.Contains(r.stdout, "--replace") {
		t.Errorf("tether help run lists no flags of run's:\n%s", r.stdout)
	}
	if r := e.tether("help", "nosuch"); r.code != exitUsage {
		t.Errorf("help nosuch: %s", r)
	}
}

// completionIn runs the bash completion function on a command line (the
// word being completed last) and returns what it offers.
func completionIn(t *testing.T, e *env, words ...string) []string {
	t.Helper()
	script := `source <(tether completion bash) || exit 9
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _tether; printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command("bash", append([]string{"-c", script, "bash"}, words...)...)
	cmd.Env = append(withoutTether(os.Environ()), "PATH="+filepath.Dir(linkedTether(t))+":"+os.Getenv("PATH"), "TETHER_STATE_DIR="+e.dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("completing %q: %v", words, err)
	}
	return strings.Fields(string(out))
}

func withoutTether(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "TETHER_") })
}

// linkedTether is the binary under test, as `tether` in a directory of
// its own (for $PATH).
func linkedTether(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	link := filepath.Join(dir, "tether")
	if err := os.Symlink(tetherBin, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// The bash script loads (complete -p names its function), and completes
// commands, each command's flags (from the flag sets the parser uses),
// flag values, and the names of tasks, groups and jobs from the state
// directory (the line's --state-dir too).
func TestCompletion_BashLoadsAndCompletes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash: %v", err)
	}
	e := newEnv(t)
	load := exec.Command("bash", "-c", "source <(tether completion bash); complete -p tether")
	load.Env = append(withoutTether(os.Environ()), "PATH="+filepath.Dir(linkedTether(t))+":"+os.Getenv("PATH"))
	if out, err := load.CombinedOutput(); err != nil || !strings.Contains(string(out), "-F _tether tether") {
		t.Fatalf("complete -p tether after loading: %v\n%s", err, out)
	}
	e.must(e.runArgs("start", []string{"--name", "webby"}, "sleep")...)
	e.must("start", "--min-uptime", "0", twoGroupJob(t, e))
	for _, c := range []struct {
		words []string
		want  []string
		not   []string
	}{
		{[]string{"tether", "st"}, []string{"start", "stats", "status", "stop"}, []string{"man"}},
		{[]string{"tether", "stop", "--si"}, []string{"--signal"}, nil},
		{[]string{"tether", "logs", "--"}, []string{"--follow", "--timestamps", "--since", "--stderr", "--state-dir"}, []string{"--replace"}},
		{[]string{"tether", "stop", "--signal", "SIGT"}, []string{"SIGTERM"}, nil},
		{[]string{"tether", "stop", "we"}, []string{"webby"}, nil},
		{[]string{"tether", "logs", "ap"}, []string{"app", "app.web", "app.db"}, nil},
		{[]string{"tether", "--state-dir", e.dir, "stop", "se"}, []string{"server"}, nil},
		{[]string{"tether", "signal", "webby", "SIGU"}, []string{"SIGUSR1", "SIGUSR2"}, nil},
		{[]string{"tether", "completion", ""}, []string{"bash", "zsh", "fish"}, nil},
		{[]string{"tether", "graph", "--format", ""}, []string{"mermaid", "dot"}, nil},
	} {
		got := completionIn(t, e, c.words...)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("completing %q: %v lacks %s", c.words, got, w)
			}
		}
		for _, w := range c.not {
			if slices.Contains(got, w) {
				t.Errorf("completing %q: %v offers %s", c.words, got, w)
			}
		}
	}
	// Every command's every visible flag is offered after it.
	for _, cmd := range commands() {
		if cmd.hidden || cmd.name == "cluster" {
			continue
		}
		got := completionIn(t, e, "tether", cmd.name, "--")
		commandFlags(cmd.name).VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !slices.Contains(got, "--"+f.Name) {
				t.Errorf("tether %s --<TAB> lacks --%s", cmd.name, f.Name)
			}
		})
	}
	e.must("stop", "webby", "app")
}

// The zsh and fish scripts parse in their shells (each skipped, naming
// the shell, where it is not installed).
func TestCompletion_ZshAndFishParse(t *testing.T) {
	e := newEnv(t)
	for _, sh := range []struct {
		name  string
		check func(path string) *exec.Cmd
	}{
		{"zsh", func(p string) *exec.Cmd {
			return exec.Command("zsh", "-c", "autoload -U compinit && compinit -u && source "+p+" && print -r -- ${_comps[tether]}")
		}},
		{"fish", func(p string) *exec.Cmd {
			return exec.Command("fish", "-c", "source "+p+"; and complete -C 'tether sto'")
		}},
	} {
		t.Run(sh.name, func(t *testing.T) {
			if _, err := exec.LookPath(sh.name); err != nil {
				t.Skipf("no %s installed: its script is not checked here", sh.name)
			}
			script := filepath.Join(t.TempDir(), "tether."+sh.name)
			if err := os.WriteFile(script, []byte(e.must("completion", sh.name).stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := sh.check(script)
			cmd.Env = append(withoutTether(os.Environ()), "HOME="+t.TempDir(), "PATH="+filepath.Dir(linkedTether(t))+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), map[string]string{"zsh": "_tether", "fish": "stop"}[sh.name]) {
				t.Fatalf("%s: %v\n%s", sh.name, err, out)
			}
		})
	}
}

// make man's pages: one for tether and one for each command, every flag
// of the command in its page; groff reads each without a warning where it
// is installed.
func TestMan_EveryCommandAndFlag(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.must("man", dir)
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		page, err := os.ReadFile(filepath.Join(dir, "tether-"+cmd.name+".1"))
		if err != nil {
			t.Errorf("no page for %s: %v", cmd.name, err)
			continue
		}
		if fs := commandFlags(cmd.name); fs != nil {
			fs.VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(string(page), `\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)) {
					t.Errorf("tether-%s.1 lacks --%s", cmd.name, f.Name)
				}
			})
		}
	}
	main, err := os.ReadFile(filepath.Join(dir, "tether.1"))
	if err != nil || !strings.Contains(string(main), ".SH COMMANDS") || strings.Contains(string(main), "tether man") {
		t.Fatalf("tether.1: %v\n%s", err, main)
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skipf("no groff: the pages were written, not rendered")
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	for _, p := range pages {
		out, err := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", p).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("groff %s: %v\n%s", filepath.Base(p), err, out)
		}
	}
}
