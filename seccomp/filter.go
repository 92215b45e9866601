package seccomp

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/net/bpf"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

// seccomp(2) filter flags (linux/seccomp.h).
const (
	filterFlagTSync     = 1 << 0
	filterFlagLog       = 1 << 1
	filterFlagSpecAllow = 1 << 2
)

// Filter is a compiled seccomp program for one architecture, ready to
// install (Install) or to evaluate without a kernel (Evaluate). It is
// immutable and safe for concurrent use.
type Filter struct {
	arch   *systab.Arch
	prog   []bpf.Instruction
	defRet uint32
	flags  uintptr // SECCOMP_FILTER_FLAG_LOG, _SPEC_ALLOW from the profile

	vmOnce sync.Once
	vm     *bpf.VM
	vmErr  error
}

// Len is the number of BPF instructions.
func (f *Filter) Len() int { return len(f.prog) }

// Instructions returns a copy of the program.
func (f *Filter) Instructions() []bpf.Instruction { return append([]bpf.Instruction(nil), f.prog...) }

// Arch is the audit architecture value the filter allows (AUDIT_ARCH_*);
// every other architecture gets the default action.
func (f *Filter) Arch() uint32 { return f.arch.Audit }

// Evaluate runs the program on one syscall, as the kernel would: arch is
// the audit architecture (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386), nr the
// syscall's number (for x32, with __X32_SYSCALL_BIT), args its arguments.
// It runs in golang.org/x/net/bpf's VM, so tests can check every syscall
// of every architecture without installing anything.
func (f *Filter) Evaluate(arch, nr uint32, args ...uint64) (Result, error) {
	if len(args) > 6 {
		return Result{}, fmt.Errorf("seccomp: evaluate: %d arguments (a syscall has 6)", len(args))
	}
	f.vmOnce.Do(func() { f.vm, f.vmErr = bpf.NewVM(f.prog) })
	if f.vmErr != nil {
		return Result{}, fmt.Errorf("seccomp: evaluate: %w", f.vmErr)
	}
	// The VM loads words big-endian (it was made for packets); the kernel
	// loads seccomp_data's words in the host's order. Each 32-bit word is
	// written big-endian at the offset the program reads it from.
	var data [64]byte
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		lo, hi := argHalves(uint8(i))
		binary.BigEndian.PutUint32(data[lo:], uint32(a))
		binary.BigEndian.PutUint32(data[hi:], uint32(a>>32))
	}
	v, err := f.vm.Run(data[:])
	if err != nil {
		return Result{}, fmt.Errorf("seccomp: evaluate: %w", err)
	}
	return resultOf(uint32(v)), nil
}

// String is the program, one instruction a line.
func (f *Filter) String() string {
	var b []byte
	for i, in := range f.prog {
		b = fmt.Appendf(b, "%4d  %v\n", i, in)
	}
	return string(b)
}
