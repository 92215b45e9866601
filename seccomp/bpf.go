package seccomp

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"golang.org/x/net/bpf"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

// The layout of struct seccomp_data (linux/seccomp.h).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// maxInsns is the kernel's limit on a filter's length (BPF_MAXINSNS).
const maxInsns = 4096

// littleEndian says how a 64-bit argument's halves lie in seccomp_data:
// the filter runs where it is compiled.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// argHalves gives the offsets of argument i's low and high 32 bits.
func argHalves(i uint8) (lo, hi uint32) {
	off := uint32(offArgs + 8*int(i))
	if littleEndian {
		return off, off + 4
	}
	return off + 4, off
}

// assemble lays out the program:
//
//	load arch; if it is not arch's audit value: return def
//	load nr; if nr has the ABI bit (x32 on x86_64): return def
//	a binary search over the syscall numbers, down to the decision of the
//	interval nr is in: a return, or for a syscall with conditions its
//	rules in order, each ending in a return, then return def.
//
// Every path ends in a return, so each subtree is laid out inline and no
// jump goes backward or out of its subtree. A syscall costs the arch check
// and about log2(intervals) comparisons (8 for Docker's profile) instead
// of a walk down a list of 350 names.
func assemble(arch *systab.Arch, rules map[int][]rule, def uint32) ([]bpf.Instruction, error) {
	nrs := make([]int, 0, len(rules))
	for nr := range rules {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)

	var ivs []interval
	push := func(start uint32, body []bpf.Instruction) {
		if n := len(ivs); n > 0 && constant(ivs[n-1].body) && constant(body) &&
			ivs[n-1].body[0] == body[0] {
			return // the same return as the interval before: one interval
		}
		ivs = append(ivs, interval{start, body})
	}
	retDef := []bpf.Instruction{bpf.RetConstant{Val: def}}
	next := uint32(0)
	for _, nr := range nrs {
		if nr < 0 || nr > math.MaxInt32 {
			return nil, fmt.Errorf("seccomp: syscall number %d out of range", nr)
		}
		if uint32(nr) > next {
			push(next, retDef)
		}
		body, err := decision(rules[nr], def)
		if err != nil {
			return nil, fmt.Errorf("seccomp: syscall %d: %w", nr, err)
		}
		push(uint32(nr), body)
		next = uint32(nr) + 1
	}
	push(next, retDef)

	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch.Audit, SkipTrue: 1},
		bpf.RetConstant{Val: def}, // a foreign architecture: i386's int 0x80 on x86_64
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if arch.ABIBit != 0 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: arch.ABIBit, SkipFalse: 1},
			bpf.RetConstant{Val: def}, // x32's numbers, and anything above
		)
	}
	prog = append(prog, tree(ivs)...)
	if len(prog) > maxInsns {
		return nil, fmt.Errorf("%w: %d instructions (the kernel takes %d)", ErrTooLarge, len(prog), maxInsns)
	}
	if _, err := bpf.Assemble(prog); err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	return prog, nil
}

// interval is the syscall numbers from start up to the next interval's
// start, and the code that decides them (it ends in a return).
type interval struct {
	start uint32
	body  []bpf.Instruction
}

func constant(body []bpf.Instruction) bool {
	_, ok := body[0].(bpf.RetConstant)
	return len(body) == 1 && ok
}

// tree lays out a binary search over ivs (sorted by start, the first
// starting at 0): "if nr >= mid's start, the right half, else the left".
func tree(ivs []interval) []bpf.Instruction {
	if len(ivs) == 1 {
		return ivs[0].body
	}
	mid := len(ivs) / 2
	left, right := tree(ivs[:mid]), tree(ivs[mid:])
	out := make([]bpf.Instruction, 0, len(left)+len(right)+2)
	if len(left) <= math.MaxUint8 {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: ivs[mid].start, SkipTrue: uint8(len(left))})
	} else {
		// A conditional jump reaches 255 instructions; ja reaches further.
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: ivs[mid].start, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(left))})
	}
	out = append(out, left...)
	return append(out, right...)
}

// decision lays out one syscall's rules: each rule's conditions, then its
// return; a failed condition goes on to the next rule; after the last,
// the default. A rule without conditions ends it (later ones cannot be
// reached).
func decision(rules []rule, def uint32) ([]bpf.Instruction, error) {
	var a asm
	for _, r := range rules {
		if len(r.conds) == 0 {
			a.add(bpf.RetConstant{Val: r.ret})
			return a.finish()
		}
		fail := a.label()
		for _, c := range r.conds {
			pass := a.label()
			a.cond(c, pass, fail)
			a.mark(pass)
		}
		a.add(bpf.RetConstant{Val: r.ret})
		a.mark(fail)
	}
	a.add(bpf.RetConstant{Val: def})
	return a.finish()
}

// asm assembles a small block with forward jumps to labels.
type asm struct {
	ins    []bpf.Instruction
	jumps  []pendingJump
	at     []int // label -> instruction index; label 0 is "the next one"
	labels int
}

type label int

const next label = 0

type pendingJump struct {
	index int
	t, f  label
}

func (a *asm) label() label {
	a.labels++
	a.at = append(a.at, -1)
	return label(a.labels)
}

func (a *asm) mark(l label) { a.at[l-1] = len(a.ins) }

func (a *asm) add(i bpf.Instruction) { a.ins = append(a.ins, i) }

func (a *asm) jump(c bpf.JumpTest, v uint32, t, f label) {
	a.jumps = append(a.jumps, pendingJump{len(a.ins), t, f})
	a.add(bpf.JumpIf{Cond: c, Val: v})
}

func (a *asm) load(off uint32) { a.add(bpf.LoadAbsolute{Off: off, Size: 4}) }

func (a *asm) and(m uint32) { a.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: m}) }

// cond lays out one comparison of a 64-bit argument as two of 32 bits:
// the high halves decide unless they are equal, then the low halves.
func (a *asm) cond(c cond, pass, fail label) {
	lo, hi := argHalves(c.arg)
	vlo, vhi := uint32(c.value), uint32(c.value>>32)
	mlo, mhi := uint32(c.mask), uint32(c.mask>>32)
	switch c.op {
	case opEq:
		a.load(hi)
		a.jump(bpf.JumpEqual, vhi, next, fail)
		a.load(lo)
		a.jump(bpf.JumpEqual, vlo, pass, fail)
	case opNe:
		a.load(hi)
		a.jump(bpf.JumpEqual, vhi, next, pass)
		a.load(lo)
		a.jump(bpf.JumpEqual, vlo, fail, pass)
	case opGt, opGe:
		a.load(hi)
		a.jump(bpf.JumpGreaterThan, vhi, pass, next)
		a.jump(bpf.JumpEqual, vhi, next, fail)
		a.load(lo)
		if c.op == opGt {
			a.jump(bpf.JumpGreaterThan, vlo, pass, fail)
		} else {
			a.jump(bpf.JumpGreaterOrEqual, vlo, pass, fail)
		}
	case opLt, opLe:
		a.load(hi)
		a.jump(bpf.JumpGreaterThan, vhi, fail, next)
		a.jump(bpf.JumpEqual, vhi, next, pass)
		a.load(lo)
		if c.op == opLt {
			a.jump(bpf.JumpGreaterOrEqual, vlo, fail, pass)
		} else {
			a.jump(bpf.JumpGreaterThan, vlo, fail, pass)
		}
	case opMaskedEq:
		a.load(hi)
		a.and(mhi)
		a.jump(bpf.JumpEqual, vhi, next, fail)
		a.load(lo)
		a.and(mlo)
		a.jump(bpf.JumpEqual, vlo, pass, fail)
	case opMaskedNe:
		a.load(hi)
		a.and(mhi)
		a.jump(bpf.JumpEqual, vhi, next, pass)
		a.load(lo)
		a.and(mlo)
		a.jump(bpf.JumpEqual, vlo, fail, pass)
	default:
		panic(fmt.Sprintf("seccomp: op %d", c.op)) // condOf makes only the ops above
	}
}

// finish resolves the jumps.
func (a *asm) finish() ([]bpf.Instruction, error) {
	for _, j := range a.jumps {
		ji := a.ins[j.index].(bpf.JumpIf)
		var err error
		if ji.SkipTrue, err = a.skip(j.index, j.t); err != nil {
			return nil, err
		}
		if ji.SkipFalse, err = a.skip(j.index, j.f); err != nil {
			return nil, err
		}
		a.ins[j.index] = ji
	}
	return a.ins, nil
}

func (a *asm) skip(from int, l label) (uint8, error) {
	if l == next {
		return 0, nil
	}
	to := a.at[l-1]
	n := to - from - 1
	if to < 0 || n < 0 || n > math.MaxUint8 {
		return 0, fmt.Errorf("%w: a rule too long to jump over (%d instructions)", ErrTooLarge, n)
	}
	return uint8(n), nil
}
