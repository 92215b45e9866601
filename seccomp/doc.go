// Package seccomp is the syscall filter of tether's exec tasks: Docker's
// default profile (or an operator's Docker/OCI profile) compiled in pure
// Go into a seccomp BPF program, with a floor no profile can lower, and
// installed by the init shim just before it execs the task. A syscall the
// filter refuses fails with EPERM; nothing is killed.
//
// # Using it
//
// The executor, before the shim (the shim pivots into the task's root and
// can no longer read the operator's paths):
//
//	choice, err := seccomp.ParseChoice(task.Seccomp)   // "default" | "unconfined" | "/abs/path.json"
//	// (whether the operator allows the choice is its policy's to say)
//	if choice.Kind != seccomp.ChoiceUnconfined {
//		err = seccomp.CheckHost()                       // ErrUnsupported: say so, refuse the task
//	}
//	profile, err := choice.Profile()                    // nil for unconfined; *ProfileError names the problem
//	f, err := seccomp.Compile(profile, seccomp.Options{Caps: caps, HostPID: pidModeHost})
//	b, err := f.MarshalBinary()                         // into the shim's config
//
// The shim, last, after the user and capability switch:
//
//	var f seccomp.Filter
//	err := f.UnmarshalBinary(b)
//	err = f.Install()                                   // no_new_privs, then seccomp(2) with TSYNC
//	syscall.Exec(path, argv, env)
//
// # The filter
//
// It is an allow list: the profile's default action refuses (a profile
// whose default is SCMP_ACT_ALLOW or SCMP_ACT_LOG is refused as a deny
// list, ErrDenyList), and the program is laid out as
//
//  1. the architecture: only this binary's (AUDIT_ARCH_X86_64 on amd64)
//     goes on; i386's int 0x80 ABI, and every other, gets the default;
//  2. the ABI bit: an x86_64 number with __X32_SYSCALL_BIT (x32) gets the
//     default, so x32 numbers never meet x86_64's rules;
//  3. a binary search over syscall numbers (about 8 comparisons for
//     Docker's profile, where a list would walk up to 350);
//  4. per syscall, the floor's rules, then the profile's in order: the
//     first whose argument comparisons all hold decides; none, the default.
//
// Arguments are compared on all 64 bits (two 32-bit halves), as
// libseccomp does on 64-bit architectures: a value with garbage in the
// high half does not equal the value the kernel would truncate it to,
// which errs on the side of refusing.
//
// A profile's includes/excludes conditions are evaluated by
// github.com/moby/profiles/seccomp's own code, as Docker evaluates them:
// capabilities against Options.Caps (the task's bounding set), the
// architecture against this binary's, minKernel against the running
// kernel. Names of other architectures (chown32 on x86_64) are left out,
// as libseccomp leaves them out; a name no architecture has is an error.
//
// # The floor
//
// Refused to every task, whatever its capabilities and its profile (the
// operator's `--allow-seccomp unconfined` is the only way past it):
// keyctl, add_key, request_key; unshare, setns; mount, umount, umount2,
// pivot_root, fsopen, fsmount, fsconfig, fspick, open_tree,
// open_tree_attr, move_mount, mount_setattr; bpf, perf_event_open,
// kexec_load, kexec_file_load, init_module, finit_module, delete_module,
// iopl, ioperm, userfaultfd, open_by_handle_at; acct, swapon, swapoff,
// reboot, settimeofday, stime, clock_settime. And, by argument:
//
//   - clone with any of CLONE_NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID,
//     NEWNET, NEWCGROUP (threads, fork and vfork stay);
//   - clone3 returns ENOSYS, as in Docker's profile: its flags are in a
//     struct the filter cannot read, and ENOSYS (unlike EPERM) makes
//     glibc 2.34 and later fall back to clone, whose flags it can;
//   - mknod and mknodat of a character or block device (FIFOs, sockets
//     and regular files stay);
//   - personality, but for Docker's values (PER_LINUX, PER_LINUX32,
//     UNAME26, UNAME26|PER_LINUX32 and the query 0xffffffff);
//   - adjtimex, clock_adjtime when the task holds CAP_SYS_TIME: what they
//     do is in a struct the filter cannot see, and without the capability
//     the kernel lets them only read the clock;
//   - with Options.HostPID (the task shares the host's PID namespace):
//     ptrace, process_vm_readv, process_vm_writev, process_madvise,
//     pidfd_getfd, kcmp.
//
// ptrace: Docker's profile allows ptrace (and process_vm_readv/writev) on
// kernels from 4.8, where a tracer can no longer change a syscall after
// the filter saw it. An exec task has a PID namespace of its own, so the
// only processes it can name are its own; the kernel's ptrace access
// check (same user, no capability the target has and it lacks, the
// target dumpable) and no_new_privs apply on top. When the task shares
// the host's PID namespace that no longer holds, and HostPID refuses them.
//
// # Why not github.com/elastic/go-seccomp-bpf
//
// It was judged first (v1.6.0) and does not fit: its compiler reloads the
// syscall number only at the start, so after a rule's argument check
// fails, the next syscall comparison reads the argument instead, and a
// syscall whose argument equals another allowed syscall's number gets that
// syscall's verdict (with Docker's rules, socket(AF_VSOCK=40) is let
// through because sendfile is syscall 40); its operators have no masked
// equality with a value (SCMP_CMP_MASKED_EQ); a policy has one
// architecture, set from runtime.GOARCH in an unexported field; an errno
// other than EPERM is only expressible by an undocumented raw Action
// value; x32 is hard-wired to ENOSYS; and its groups are searched as a
// list. Its syscall tables end at Linux 6.15. The emitter here is about
// 250 lines; TestAssemble_MatchesReference checks it against a direct
// reading of the rules. golang.org/x/net/bpf supplies the instructions,
// their assembly and the VM the tests run the program in.
//
// # Threads
//
// Install uses SECCOMP_FILTER_FLAG_TSYNC: a filter belongs to a thread,
// execve keeps the calling thread's, and a goroutine not locked to its
// thread may move between Install and exec. With TSYNC every thread of
// the process is filtered, so the exec'ing one is, whichever it is. The
// shim locks its thread anyway (its capabilities are per thread too).
//
// # Tests
//
// testdata/verdicts_x86_64.txt holds the verdict of every x86_64, i386 and
// x32 syscall number for four capability sets; `go test ./seccomp -run
// TestFilter_Verdicts -update` rewrites it. The census (internal/census,
// docs/seccomp.md) compares the filter, live, with runc's under Docker's
// default profile.
package seccomp
