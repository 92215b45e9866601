package seccomp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse_Errors: every kind of bad profile is refused with the named
// error, and the message names the file, the rule and the culprit.
func TestParse_Errors(t *testing.T) {
	cases := []struct {
		name     string
		profile  string
		want     error
		mentions []string
	}{
		{"not JSON", `{"defaultAction": `, ErrProfileSyntax, nil},
		{"a misspelt field", `{"defaultActon": "SCMP_ACT_ERRNO", "syscalls": []}`, ErrProfileSyntax, []string{"defaultActon"}},
		{"a misspelt rule field", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "acton": "SCMP_ACT_ALLOW"}]}`, ErrProfileSyntax, []string{"acton"}},
		{"empty", `{}`, ErrEmptyProfile, []string{"unconfined"}},
		{"a deny list", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]}`, ErrDenyList, []string{"SCMP_ACT_ALLOW"}},
		{"a deny list that logs", `{"defaultAction": "SCMP_ACT_LOG"}`, ErrDenyList, nil},
		{"an unknown syscall", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "wrtie"], "action": "SCMP_ACT_ALLOW"}]}`, ErrUnknownSyscall, []string{`"wrtie"`, "syscalls[0]"}},
		{"an unknown syscall in a conditional rule", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}, {"names": ["mountt"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}`, ErrUnknownSyscall, []string{`"mountt"`, "syscalls[1]"}},
		{"an unknown action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOWED"}]}`, ErrUnknownAction, []string{"SCMP_ACT_ALLOWED"}},
		{"an unknown default action", `{"defaultAction": "EPERM"}`, ErrUnknownAction, []string{"EPERM"}},
		{"an empty action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"]}]}`, ErrUnknownAction, nil},
		{"trace", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_TRACE"}]}`, ErrUnsupportedAction, []string{"SCMP_ACT_TRACE"}},
		{"notify", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}`, ErrUnsupportedAction, nil},
		{"an unknown architecture", `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_46"]}`, ErrUnknownArch, []string{"SCMP_ARCH_X86_46"}},
		{"an unknown archMap architecture", `{"defaultAction": "SCMP_ACT_ERRNO", "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_Z80"]}]}`, ErrUnknownArch, []string{"SCMP_ARCH_Z80"}},
		{"an unknown condition architecture", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd46"]}}]}`, ErrUnknownArch, []string{"amd46"}},
		{"an unknown capability", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIM"]}}]}`, ErrUnknownCapability, []string{"CAP_SYS_ADMIM"}},
		{"an unknown operator", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQUAL"}]}]}`, ErrUnknownOperator, []string{"SCMP_CMP_EQUAL"}},
		{"argument 6", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`, ErrBadRule, []string{"index 6"}},
		{"an errno on allow", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1}]}`, ErrBadRule, []string{"errnoRet"}},
		{"errno 0", `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 0}`, ErrBadRule, []string{"defaultErrnoRet"}},
		{"errno 4096", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 4096}]}`, ErrBadRule, []string{"4096"}},
		{"no names", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}`, ErrBadRule, []string{"names"}},
		{"name and names", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"name": "read", "names": ["write"], "action": "SCMP_ACT_ALLOW"}]}`, ErrBadRule, nil},
		{"a listener", `{"defaultAction": "SCMP_ACT_ERRNO", "listenerPath": "/run/x.sock"}`, ErrBadRule, []string{"listener"}},
		{"an unknown flag", `{"defaultAction": "SCMP_ACT_ERRNO", "flags": ["SECCOMP_FILTER_FLAG_NEW_LISTENER"]}`, ErrBadRule, []string{"SECCOMP_FILTER_FLAG_NEW_LISTENER"}},
		{"trailing data", `{"defaultAction": "SCMP_ACT_ERRNO"} {}`, ErrProfileSyntax, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/etc/tether/p.json", []byte(c.profile))
			if !errors.Is(err, c.want) {
				t.Fatalf("Parse: %v, want %v", err, c.want)
			}
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("%v is not a *ProfileError", err)
			}
			for _, m := range append(c.mentions, "/etc/tether/p.json") {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not mention %q", err, m)
				}
			}
		})
	}
}

// TestParse_Accepts: what Docker's profiles contain is accepted, names of
// other architectures included (chown32, arm's breakpoint).
func TestParse_Accepts(t *testing.T) {
	for _, p := range []string{
		`{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1, "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"], "syscalls": [{"names": ["read", "chown32", "breakpoint"], "action": "SCMP_ACT_ALLOW", "comment": "x"}]}`,
		`{"defaultAction": "SCMP_ACT_KILL_PROCESS", "flags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"], "syscalls": [{"name": "read", "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["s390x"], "minKernel": "4.8"}}]}`,
		`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["sys_admin"]}}]}`,
	} {
		pr, err := Parse("p.json", []byte(p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := Compile(pr, Options{}); err != nil {
			t.Fatalf("compile %s: %v", p, err)
		}
	}
}

// TestLoad_File reads a file, names it in errors, and travels as JSON.
func TestLoad_File(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.IsDefault() || p.Source() != good {
		t.Fatalf("Load: %+v", p)
	}
	// Through JSON, as the executor hands it to its shim.
	b, err := json.Marshal(struct{ P *Profile }{p})
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ P *Profile }
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.P.Source() != good || back.P.IsDefault() ||
		mustCompile(t, back.P, Options{}).String() != mustCompile(t, p, Options{}).String() {
		t.Fatalf("round trip: %+v", back.P)
	}
	b, _ = json.Marshal(struct{ P *Profile }{Default()})
	if err := json.Unmarshal(b, &back); err != nil || !back.P.IsDefault() {
		t.Fatalf("default round trip: %s %v", b, err)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["nosuch"], "action": "SCMP_ACT_ALLOW"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); !errors.Is(err, ErrUnknownSyscall) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Load bad: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load missing: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, maxProfileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, ErrProfileSyntax) || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Fatalf("Load of a file a byte over the limit: %v, want ErrProfileSyntax saying it is larger than 1048576 bytes", err)
	}
	// A valid profile of exactly the limit (padded with spaces) loads.
	body := `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`
	exact := filepath.Join(dir, "exact.json")
	if err := os.WriteFile(exact, []byte(body+strings.Repeat(" ", maxProfileSize-len(body))), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(exact); err != nil {
		t.Fatalf("Load of a profile of exactly %d bytes: %v", maxProfileSize, err)
	}
}

// TestChoice parses the task option and checks it against the operator's
// allow list in both directions: listed is allowed, unlisted refused.
func TestChoice(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Choice
	}{
		{"", Choice{Kind: ChoiceDefault}},
		{"default", Choice{Kind: ChoiceDefault}},
		{"unconfined", Choice{Kind: ChoiceUnconfined}},
		{"/etc/p/../p/x.json", Choice{Kind: ChoiceProfile, Path: "/etc/p/x.json"}},
	} {
		got, err := ParseChoice(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseChoice(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"Unconfined", "p.json", "./p.json", "none"} {
		if _, err := ParseChoice(bad); !errors.Is(err, ErrBadChoice) {
			t.Errorf("ParseChoice(%q): %v, want ErrBadChoice", bad, err)
		}
	}
	def, _ := ParseChoice("default")
	unc, _ := ParseChoice("unconfined")
	if p, err := unc.Profile(); p != nil || err != nil {
		t.Errorf("unconfined's profile: %v %v", p, err)
	}
	if p, err := def.Profile(); err != nil || !p.IsDefault() {
		t.Errorf("default's profile: %v %v", p, err)
	}
}
