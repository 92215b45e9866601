// Package systab holds Linux's syscall tables for the architectures the
// seccomp package compiles filters for, generated from golang.org/x/sys
// (see mksystab.go), and the set of every syscall name Linux knows on any
// architecture, which a profile's names are checked against.
package systab

import (
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

//go:generate go run mksystab.go

// Syscall is one entry of a table.
type Syscall struct {
	Name string
	Nr   int
}

// Arch is one architecture: its audit value (seccomp_data.arch), its
// table, and the bit that marks a second ABI sharing the audit value (x32
// on x86_64).
type Arch struct {
	Name  string // Linux's name, as audit and libseccomp print it
	Audit uint32
	// ABIBit, when not zero, is a bit of the syscall number that selects
	// another ABI with the same audit value (__X32_SYSCALL_BIT on
	// x86_64): a number with it set is not in Table.
	ABIBit   uint32
	Table    []Syscall
	byName   map[string]int
	byNumber map[int][]string
	once     sync.Once
}

// The architectures with a table.
var (
	X86_64  = &Arch{Name: "x86_64", Audit: unix.AUDIT_ARCH_X86_64, ABIBit: 0x40000000, Table: x86_64}
	I386    = &Arch{Name: "i386", Audit: unix.AUDIT_ARCH_I386, Table: i386}
	AArch64 = &Arch{Name: "aarch64", Audit: unix.AUDIT_ARCH_AARCH64, Table: aarch64}
)

// ByGOARCH returns the architecture of a Go GOARCH, or nil.
func ByGOARCH(goarch string) *Arch {
	switch goarch {
	case "amd64":
		return X86_64
	case "386":
		return I386
	case "arm64":
		return AArch64
	}
	return nil
}

func (a *Arch) index() {
	a.once.Do(func() {
		a.byName = make(map[string]int, len(a.Table))
		a.byNumber = make(map[int][]string, len(a.Table))
		for _, s := range a.Table {
			a.byName[s.Name] = s.Nr
			a.byNumber[s.Nr] = append(a.byNumber[s.Nr], s.Name)
		}
	})
}

// Number returns the number of the syscall name on a, and whether a has it.
func (a *Arch) Number(name string) (int, bool) {
	a.index()
	nr, ok := a.byName[name]
	return nr, ok
}

// Names returns the names of syscall number nr on a (none when a has no
// such syscall).
func (a *Arch) Names(nr int) []string {
	a.index()
	return a.byNumber[nr]
}

// Numbers returns every syscall number of a, ascending, once each.
func (a *Arch) Numbers() []int {
	a.index()
	out := make([]int, 0, len(a.byNumber))
	for nr := range a.byNumber {
		out = append(out, nr)
	}
	slices.Sort(out)
	return out
}

// Known reports whether name is a syscall of any Linux architecture.
func Known(name string) bool {
	_, ok := slices.BinarySearch(knownNames, name)
	return ok
}
