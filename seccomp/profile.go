package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

// Profile is a seccomp profile in Docker's format (the JSON that
// github.com/moby/profiles/seccomp's Seccomp type decodes, a superset of
// the OCI runtime spec's linux.seccomp): the default profile, or one read
// by Load or Parse and validated. It is immutable, and it travels as its
// JSON (MarshalJSON/UnmarshalJSON), so an executor can read the file and
// hand the profile to its shim, which compiles it after it can no longer
// see the host's paths.
type Profile struct {
	source string // the path, or defaultSource
	data   []byte // the JSON as read; nil for the default profile
}

const defaultSource = "the default profile"

// maxProfileSize bounds a profile file (Docker's default is 18 KiB).
const maxProfileSize = 1 << 20

// Default returns Docker's default profile, as
// github.com/moby/profiles/seccomp defines it.
func Default() *Profile { return &Profile{source: defaultSource} }

// IsDefault reports whether p is the default profile.
func (p *Profile) IsDefault() bool { return p.data == nil }

// Source is the path p was loaded from, or "the default profile".
func (p *Profile) Source() string { return p.source }

// Load reads and validates the profile at path.
func Load(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seccomp: read the profile: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxProfileSize+1)); err != nil {
		return nil, fmt.Errorf("seccomp: read the profile %s: %w", path, err)
	}
	if buf.Len() > maxProfileSize {
		return nil, &ProfileError{Source: path, Rule: -1, Err: fmt.Errorf("%w: larger than %d bytes", ErrProfileSyntax, maxProfileSize)}
	}
	return Parse(path, buf.Bytes())
}

// Parse validates data as a profile; source names it in errors (its
// path). Every problem is a *ProfileError wrapping one of the named
// errors: the file, the rule's index and the field, and what to do.
func Parse(source string, data []byte) (*Profile, error) {
	cfg, err := decode(source, data)
	if err != nil {
		return nil, err
	}
	if err := validate(source, cfg); err != nil {
		return nil, err
	}
	return &Profile{source: source, data: bytes.Clone(data)}, nil
}

// MarshalJSON gives the profile's JSON ("default" for the default one).
func (p *Profile) MarshalJSON() ([]byte, error) {
	if p.IsDefault() {
		return []byte(`"default"`), nil
	}
	return json.Marshal(struct {
		Source  string          `json:"source"`
		Profile json.RawMessage `json:"profile"`
	}{p.source, p.data})
}

// UnmarshalJSON reads what MarshalJSON wrote, validating the profile
// again.
func (p *Profile) UnmarshalJSON(b []byte) error {
	if string(b) == `"default"` {
		*p = *Default()
		return nil
	}
	var v struct {
		Source  string          `json:"source"`
		Profile json.RawMessage `json:"profile"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: %w", ErrProfileSyntax, err)
	}
	q, err := Parse(v.Source, v.Profile)
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

// decode reads data strictly: a field the format does not know (a
// misspelt "defaultAction") is an error, not a silent default.
func decode(source string, data []byte) (*mobyseccomp.Seccomp, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg mobyseccomp.Seccomp
	if err := dec.Decode(&cfg); err != nil {
		return nil, &ProfileError{Source: source, Rule: -1, Err: fmt.Errorf("%w: %w", ErrProfileSyntax, err)}
	}
	if dec.More() {
		return nil, &ProfileError{Source: source, Rule: -1, Err: fmt.Errorf("%w: data after the profile's object", ErrProfileSyntax)}
	}
	return &cfg, nil
}

// validate checks every rule, whatever its conditions: a profile is
// refused for a typo in a rule that this task's capabilities happen to
// leave out.
func validate(source string, cfg *mobyseccomp.Seccomp) error {
	top := func(field string, err error) error {
		return &ProfileError{Source: source, Rule: -1, Field: field, Err: err}
	}
	if cfg.DefaultAction == "" && len(cfg.Syscalls) == 0 {
		return top("", fmt.Errorf("%w: no defaultAction and no syscalls (run without a filter with seccomp = \"unconfined\", if the operator allows it)", ErrEmptyProfile))
	}
	def, err := parseAction(cfg.DefaultAction)
	if err != nil {
		return top("defaultAction", err)
	}
	if def.allows() {
		return top("defaultAction", fmt.Errorf("%w: %s lets every syscall the profile does not name through; use SCMP_ACT_ERRNO and list the syscalls to allow", ErrDenyList, cfg.DefaultAction))
	}
	if err := checkErrno(def, cfg.DefaultErrnoRet); err != nil {
		return top("defaultErrnoRet", err)
	}
	if len(cfg.Architectures) != 0 && len(cfg.ArchMap) != 0 {
		return top("archMap", fmt.Errorf("%w: both architectures and archMap; use one", ErrBadRule))
	}
	for _, a := range cfg.Architectures {
		if err := checkArch(a); err != nil {
			return top("architectures", err)
		}
	}
	for _, m := range cfg.ArchMap {
		for _, a := range append([]specs.Arch{m.Arch}, m.SubArches...) {
			if err := checkArch(a); err != nil {
				return top("archMap", err)
			}
		}
	}
	for _, f := range cfg.Flags {
		switch f {
		case specs.LinuxSeccompFlagLog, specs.LinuxSeccompFlagSpecAllow, "SECCOMP_FILTER_FLAG_TSYNC":
		default:
			return top("flags", fmt.Errorf("%w: flag %q (tether supports SECCOMP_FILTER_FLAG_LOG and SECCOMP_FILTER_FLAG_SPEC_ALLOW)", ErrBadRule, f))
		}
	}
	if cfg.ListenerPath != "" || cfg.ListenerMetadata != "" {
		return top("listenerPath", fmt.Errorf("%w: a seccomp listener (SCMP_ACT_NOTIFY) is not supported", ErrBadRule))
	}
	for i, r := range cfg.Syscalls {
		if err := validateRule(r); err != nil {
			var pe *ProfileError
			if errors.As(err, &pe) {
				pe.Source, pe.Rule = source, i
				return pe
			}
			return &ProfileError{Source: source, Rule: i, Err: err}
		}
	}
	return nil
}

func validateRule(r *mobyseccomp.Syscall) error {
	field := func(f string, err error) error { return &ProfileError{Field: f, Err: err} }
	if r == nil {
		return fmt.Errorf("%w: null rule", ErrBadRule)
	}
	names := r.Names
	//lint:ignore SA1019 older profiles still say "name", which Docker and moby accept
	if single := r.Name; single != "" {
		if len(r.Names) != 0 {
			return field("name", fmt.Errorf("%w: both name and names; use names", ErrBadRule))
		}
		names = []string{single}
	}
	if len(names) == 0 {
		return field("names", fmt.Errorf("%w: a rule names no syscall", ErrBadRule))
	}
	for _, n := range names {
		if !systab.Known(n) {
			return field("names", fmt.Errorf("%w %q: no Linux architecture has it (check the spelling)", ErrUnknownSyscall, n))
		}
	}
	act, err := parseAction(r.Action)
	if err != nil {
		return field("action", err)
	}
	if err := checkErrno(act, r.ErrnoRet); err != nil {
		return field("errnoRet", err)
	}
	for _, a := range r.Args {
		if a.Index > 5 {
			return field("args", fmt.Errorf("%w: argument index %d (a syscall has arguments 0 to 5)", ErrBadRule, a.Index))
		}
		if _, err := parseOp(a.Op); err != nil {
			return field("args", err)
		}
	}
	for _, f := range []struct {
		name string
		f    *mobyseccomp.Filter
	}{{"includes", r.Includes}, {"excludes", r.Excludes}} {
		if f.f == nil {
			continue
		}
		for _, c := range f.f.Caps {
			if _, ok := capByName(c); !ok {
				return field(f.name+".caps", fmt.Errorf("%w %q (write CAP_SYS_ADMIN, as Docker does)", ErrUnknownCapability, c))
			}
		}
		for _, a := range f.f.Arches {
			if !slices.Contains(conditionArches, a) {
				return field(f.name+".arches", fmt.Errorf("%w %q (Docker's names: %s)", ErrUnknownArch, a, strings.Join(conditionArches, ", ")))
			}
		}
	}
	return nil
}

// checkErrno checks a rule's errno: only an errno action returns one, and
// the kernel takes 1 to 4095.
func checkErrno(a Action, e *uint) error {
	if e == nil {
		return nil
	}
	if a != ActErrno {
		return fmt.Errorf("%w: an errno on action %s, which returns none", ErrBadRule, a)
	}
	if *e == 0 || *e > 4095 {
		return fmt.Errorf("%w: errno %d out of range 1 to 4095", ErrBadRule, *e)
	}
	return nil
}

// seccompArches are the architecture names of the OCI runtime spec.
var seccompArches = []specs.Arch{
	specs.ArchX86, specs.ArchX86_64, specs.ArchX32, specs.ArchARM, specs.ArchAARCH64,
	specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32, specs.ArchMIPSEL, specs.ArchMIPSEL64,
	specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64, specs.ArchPPC64LE, specs.ArchS390,
	specs.ArchS390X, specs.ArchPARISC, specs.ArchPARISC64, specs.ArchRISCV64, specs.ArchLOONGARCH64,
	specs.ArchM68K, specs.ArchSH, specs.ArchSHEB,
}

// conditionArches are the names Docker's includes/excludes use (libseccomp's).
var conditionArches = []string{
	"x86", "amd64", "x32", "arm", "arm64", "loongarch64", "mips64", "mips64n32", "mipsel64",
	"mips3l64n32", "mipsel", "mips", "ppc", "ppc64", "ppc64le", "riscv64", "s390", "s390x",
}

func checkArch(a specs.Arch) error {
	if slices.Contains(seccompArches, a) {
		return nil
	}
	return fmt.Errorf("%w %q (the OCI names are SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_AARCH64, ...)", ErrUnknownArch, a)
}

// capByName maps "CAP_SYS_ADMIN" (any case, with or without the prefix)
// to the capability.
func capByName(name string) (capability.Cap, bool) {
	n := strings.TrimPrefix(strings.ToLower(name), "cap_")
	for _, c := range capability.ListKnown() {
		if c.String() == n {
			return c, true
		}
	}
	return 0, false
}

// capName is Docker's name of c: "CAP_SYS_ADMIN".
func capName(c capability.Cap) string { return "CAP_" + strings.ToUpper(c.String()) }
