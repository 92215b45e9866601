package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/store"
)

// completionMore is tether completion's help text after its flags.
const completionMore = `Load it in the shell you use:

  bash: source <(tether completion bash)    (or save it in /etc/bash_completion.d/tether)
  zsh:  source <(tether completion zsh)     (or save it as _tether in a directory of $fpath)
  fish: tether completion fish | source     (or save it in ~/.config/fish/completions/tether.fish)

The scripts complete commands and their flags (from the tables the
parser uses, so they cannot drift), files where a command takes a task
file, signals, and the names of tasks, groups (JOB.GROUP), jobs and
desired entries, which they ask of 'tether completion names' (from the
agent, or the store daemonless; the --state-dir on the line being
completed is passed on).`

// cmdCompletion prints a shell's completion script, or (names) the names
// the scripts complete where a command takes a task.
func (c *cli) cmdCompletion(args []string) int {
	fs := c.flags("completion")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("completion takes the shell: tether completion bash, zsh or fish")
		return exitUsage
	}
	switch fs.Arg(0) {
	case "bash":
		writeBashCompletion(c.stdout, false)
	case "zsh":
		writeBashCompletion(c.stdout, true)
	case "fish":
		writeFishCompletion(c.stdout)
	case "names":
		return c.completionNames()
	default:
		c.errorf("completion %s: give bash, zsh or fish", clikit.Printable(fs.Arg(0)))
		return exitUsage
	}
	return exitOK
}

// completable is what a completed name may be: a word a shell takes as it
// is (names with spaces, quotes or escapes are left out).
var completable = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@+=\[\]-]*$`)

// completionNames prints the names a command that takes a task may be
// given: every task's name (ended ones too), every group's JOB.GROUP and
// job's name, and the desired entries', one a line, sorted.
func (c *cli) completionNames() int {
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	set := map[string]bool{}
	scan, err := s.svc.LoadTasks(ctx, store.AllTasks)
	if err != nil {
		return c.fail(err)
	}
	for _, t := range scan.Tasks {
		if t.Spec == nil {
			continue
		}
		set[t.Spec.Name] = true
		if t.Spec.Job != "" {
			set[t.Spec.Job] = true
			set[t.Spec.Job+"."+t.Spec.Group] = true
		}
	}
	if st, err := s.svc.Status(ctx); err == nil {
		for _, e := range st.Entries {
			set[e.Name] = true
		}
	}
	var names []string
	for n := range set {
		if completable.MatchString(n) {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, clikit.NaturalCompare)
	for _, n := range names {
		fmt.Fprintln(c.stdout, n)
	}
	return exitOK
}

// takesNames are the commands whose arguments are task names (restart
// and the like); signal's last is a signal, exec's after the name a
// command line; taskFiles those that take a task file.
var (
	takesNames = []string{"stop", "restart", "signal", "logs", "events", "wait", "status", "stats", "exec", "disable"}
	taskFiles  = []string{"run", "start", "enable"}
)

// signalNames are the signals completed for signal and --signal.
var signalNames = []string{"SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGWINCH"}

// flagKind says what a flag's value is, for completion: a directory, a
// file, a signal, one of a few words, or anything ("").
func flagKind(f *pflag.Flag) (kind string, words []string) {
	switch f.Name {
	case "state-dir", "config-dir", "dir":
		return "dir", nil
	case "signal", "kill-signal":
		return "words", signalNames
	case "log-level":
		return "words", []string{"trace", "debug", "info", "warn", "error", "off"}
	case "format":
		return "words", []string{"mermaid", "dot"}
	case "var-file":
		return "file", nil
	}
	return "", nil
}

// completionCommand is one command as the scripts see it.
type completionCommand struct {
	name, summary string
	flags         []*pflag.Flag // its own and the global ones, visible
}

func completionCommands() []completionCommand {
	var out []completionCommand
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		cc := completionCommand{name: cmd.name, summary: cmd.summary}
		if fs := commandFlags(cmd.name); fs != nil {
			fs.VisitAll(func(f *pflag.Flag) {
				if !f.Hidden {
					cc.flags = append(cc.flags, f)
				}
			})
		}
		cc.flags = append(cc.flags, clikit.HelpFlag)
		out = append(out, cc)
		if cmd.alias != "" {
			alias := cc
			alias.name = cmd.alias
			out = append(out, alias)
		}
	}
	return out
}

// flagWords are a flag's forms on a command line.
func flagWords(f *pflag.Flag) []string {
	w := []string{"--" + f.Name}
	if f.Shorthand != "" {
		w = append(w, "-"+f.Shorthand)
	}
	return w
}

func takesValue(f *pflag.Flag) bool { return f.Value.Type() != "bool" }

// writeBashCompletion writes the bash script (zsh: the same, through
// zsh's bashcompinit, which runs bash completion functions).
func writeBashCompletion(w io.Writer, zsh bool) {
	cmds := completionCommands()
	var b strings.Builder
	if zsh {
		b.WriteString("#compdef tether\n# zsh completion for tether (tether completion zsh): the bash completion,\n# through zsh's bashcompinit.\nautoload -U +X bashcompinit && bashcompinit\n")
	} else {
		b.WriteString("# bash completion for tether (tether completion bash)\n")
	}
	b.WriteString(`
# _tether_names lists the names of tasks, groups, jobs and desired entries,
# from the state directory the line being completed names, if it does.
_tether_names() {
    local i sd=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --state-dir) sd=(--state-dir "${COMP_WORDS[i+1]}") ;;
            --state-dir=*) sd=("${COMP_WORDS[i]}") ;;
        esac
    done
    command tether "${sd[@]}" completion names 2>/dev/null
}

_tether() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local i cmd="" dash=0 npos=0
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        local w="${COMP_WORDS[i]}"
        if [[ $w == -- ]]; then dash=1; continue; fi
        if [[ -z $cmd ]]; then
            case "$w" in
`)
	var names []string
	for _, cc := range cmds {
		names = append(names, cc.name)
	}
	fmt.Fprintf(&b, "                %s) cmd=\"$w\" ;;\n", strings.Join(append(names, "help"), "|"))
	b.WriteString(`            esac
        elif [[ $w != -* ]]; then
            case "${COMP_WORDS[i-1]}" in
`)
	// A flag's value is no positional argument.
	var valued []string
	seen := map[string]bool{}
	for _, cc := range cmds {
		for _, f := range cc.flags {
			if takesValue(f) && !seen[f.Name] {
				seen[f.Name] = true
				valued = append(valued, flagWords(f)...)
			}
		}
	}
	slices.Sort(valued)
	valued = slices.Compact(valued)
	fmt.Fprintf(&b, "                %s) ;;\n", strings.Join(valued, "|"))
	b.WriteString(`                *) npos=$((npos + 1)) ;;
            esac
        fi
    done
    case "$prev" in
`)
	byKind := map[string][]string{}
	wordsOf := map[string][]string{}
	for _, cc := range cmds {
		for _, f := range cc.flags {
			if !takesValue(f) {
				continue
			}
			kind, words := flagKind(f)
			for _, fw := range flagWords(f) {
				if kind == "words" {
					wordsOf[strings.Join(words, " ")] = append(wordsOf[strings.Join(words, " ")], fw)
				} else {
					byKind[kind] = append(byKind[kind], fw)
				}
			}
		}
	}
	for _, kind := range []string{"dir", "file"} {
		if fl := compactSorted(byKind[kind]); len(fl) > 0 {
			opt := "-d"
			if kind == "file" {
				opt = "-f"
			}
			fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen %s -- \"$cur\")); return ;;\n", strings.Join(fl, "|"), opt)
		}
	}
	for _, words := range slices.Sorted(maps.Keys(wordsOf)) {
		fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(compactSorted(wordsOf[words]), "|"), words)
	}
	if fl := compactSorted(byKind[""]); len(fl) > 0 {
		fmt.Fprintf(&b, "        %s) return ;;\n", strings.Join(fl, "|"))
	}
	b.WriteString(`    esac
    if [[ $dash == 1 ]]; then
        COMPREPLY=($(compgen -c -- "$cur"))
        return
    fi
    if [[ $cur == -* ]]; then
        case "$cmd" in
`)
	for _, cc := range cmds {
		var words []string
		for _, f := range cc.flags {
			words = append(words, flagWords(f)...)
		}
		slices.Sort(words)
		fmt.Fprintf(&b, "            %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", cc.name, strings.Join(words, " "))
	}
	var global []string
	(&cli{logLevel: "warn"}).flags("help").VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			global = append(global, flagWords(f)...)
		}
	})
	global = append(global, "--help", "-h", "--version")
	slices.Sort(global)
	fmt.Fprintf(&b, "            *) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(global, " "))
	b.WriteString(`        esac
        return
    fi
    case "$cmd" in
`)
	fmt.Fprintf(&b, "        \"\"|help) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(names, " "))
	fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen -f -X '!*.@(hcl|nomad)' -- \"$cur\") $(compgen -d -- \"$cur\")) ;;\n", strings.Join(taskFiles, "|"))
	b.WriteString(`        signal)
            if ((npos >= 1)); then
                COMPREPLY=($(compgen -W "$(_tether_names) ` + strings.Join(signalNames, " ") + `" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_tether_names)" -- "$cur"))
            fi ;;
        exec)
            if ((npos >= 1)); then COMPREPLY=($(compgen -c -- "$cur")); else COMPREPLY=($(compgen -W "$(_tether_names)" -- "$cur")); fi ;;
`)
	var named []string
	for _, n := range takesNames {
		if n != "signal" && n != "exec" {
			named = append(named, n)
		}
	}
	fmt.Fprintf(&b, "        %s|ps) COMPREPLY=($(compgen -W \"$(_tether_names)\" -- \"$cur\")) ;;\n", strings.Join(named, "|"))
	b.WriteString(`        completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
        debug) COMPREPLY=($(compgen -W "crashpoints faultpoints host" -- "$cur")) ;;
    esac
}
complete -o default -F _tether tether
`)
	_, _ = io.WriteString(w, b.String())
}

// writeFishCompletion writes the fish script.
func writeFishCompletion(w io.Writer) {
	cmds := completionCommands()
	var b strings.Builder
	b.WriteString(`# fish completion for tether (tether completion fish)

# The names of tasks, groups, jobs and desired entries, from the state
# directory the command line names, if it does.
function __tether_names
    set -l args (commandline -opc)
    set -l sd
    for i in (seq (count $args))
        switch $args[$i]
            case --state-dir
                set sd --state-dir $args[(math $i + 1)]
            case '--state-dir=*'
                set sd $args[$i]
        end
    end
    command tether $sd completion names 2>/dev/null
end

complete -c tether -f
`)
	var names []string
	for _, cc := range cmds {
		names = append(names, cc.name)
	}
	for _, cc := range cmds {
		fmt.Fprintf(&b, "complete -c tether -n '__fish_use_subcommand' -a %s -d %s\n", cc.name, fishQuote(cc.summary))
	}
	for _, cc := range cmds {
		for _, f := range cc.flags {
			_, usage := pflag.UnquoteUsage(f)
			line := fmt.Sprintf("complete -c tether -n '__fish_seen_subcommand_from %s' -l %s", cc.name, f.Name)
			if f.Shorthand != "" {
				line += " -s " + f.Shorthand
			}
			if takesValue(f) {
				line += " -r"
				switch kind, words := flagKind(f); kind {
				case "dir":
					line += " -a '(__fish_complete_directories)'"
				case "file":
					line += " -F"
				case "words":
					line += " -a " + fishQuote(strings.Join(words, " "))
				}
			}
			fmt.Fprintf(&b, "%s -d %s\n", line, fishQuote(firstSentence(usage)))
		}
	}
	fmt.Fprintf(&b, "complete -c tether -n '__fish_seen_subcommand_from %s ps' -a '(__tether_names)'\n", strings.Join(takesNames, " "))
	fmt.Fprintf(&b, "complete -c tether -n '__fish_seen_subcommand_from signal' -a %s\n", fishQuote(strings.Join(signalNames, " ")))
	fmt.Fprintf(&b, "complete -c tether -n '__fish_seen_subcommand_from %s' -F\n", strings.Join(taskFiles, " "))
	fmt.Fprintf(&b, "complete -c tether -n '__fish_seen_subcommand_from help' -a %s\n", fishQuote(strings.Join(names, " ")))
	b.WriteString("complete -c tether -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	b.WriteString("complete -c tether -n '__fish_seen_subcommand_from debug' -a 'crashpoints faultpoints host'\n")
	_, _ = io.WriteString(w, b.String())
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `\'`) + "'"
}

// firstSentence is a usage's first sentence or clause, for a completion's
// one-line description.
func firstSentence(s string) string {
	if i := strings.IndexAny(s, ";("); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func compactSorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
