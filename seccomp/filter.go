package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
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

// The binary form's header: magic, audit architecture, default return,
// flags, instruction count (each a little-endian uint32).
const (
	binaryMagic  = 0x54534331 // "TSC1"
	binaryHeader = 20
)

// MarshalBinary gives the compiled program as the kernel loads it (struct
// sock_filter entries) behind a small header: how an executor that
// compiled a task's filter hands it to the shim that installs it, so that
// the shim compiles nothing.
func (f *Filter) MarshalBinary() ([]byte, error) {
	raw, err := bpf.Assemble(f.prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	b := make([]byte, binaryHeader, binaryHeader+8*len(raw))
	le := binary.LittleEndian
	le.PutUint32(b[0:], binaryMagic)
	le.PutUint32(b[4:], f.arch.Audit)
	le.PutUint32(b[8:], f.defRet)
	le.PutUint32(b[12:], uint32(f.flags))
	le.PutUint32(b[16:], uint32(len(raw)))
	for _, r := range raw {
		b = le.AppendUint16(b, r.Op)
		b = append(b, r.Jt, r.Jf)
		b = le.AppendUint32(b, r.K)
	}
	return b, nil
}

// UnmarshalBinary reads what MarshalBinary wrote, for the architecture this
// binary runs on (anything else is ErrBadBinary).
func (f *Filter) UnmarshalBinary(b []byte) error {
	le := binary.LittleEndian
	if len(b) < binaryHeader || le.Uint32(b) != binaryMagic {
		return fmt.Errorf("%w: no header", ErrBadBinary)
	}
	arch := systab.ByGOARCH(runtime.GOARCH)
	if arch == nil || le.Uint32(b[4:]) != arch.Audit {
		return fmt.Errorf("%w: architecture %#x", ErrBadBinary, le.Uint32(b[4:]))
	}
	n := int(le.Uint32(b[16:]))
	if n < 1 || n > maxInsns || len(b) != binaryHeader+8*n {
		return fmt.Errorf("%w: %d instructions in %d bytes", ErrBadBinary, n, len(b))
	}
	flags := uintptr(le.Uint32(b[12:]))
	if flags&^(filterFlagLog|filterFlagSpecAllow) != 0 {
		return fmt.Errorf("%w: flags %#x", ErrBadBinary, flags)
	}
	raw := make([]bpf.RawInstruction, n)
	for i := range raw {
		e := b[binaryHeader+8*i:]
		raw[i] = bpf.RawInstruction{Op: le.Uint16(e), Jt: e[2], Jf: e[3], K: le.Uint32(e[4:])}
	}
	prog, _ := bpf.Disassemble(raw) // what it cannot decode stays raw, and assembles as is
	*f = Filter{arch: arch, prog: prog, defRet: le.Uint32(b[8:]), flags: flags}
	return nil
}
