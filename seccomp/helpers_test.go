package seccomp

import (
	"flag"
	"os"
	"testing"

	"github.com/moby/sys/capability"

	"github.com/tether-fsm/tether/internal/testproc"
)

var update = flag.Bool("update", false, "rewrite testdata/verdicts_x86_64.txt from the compiled filters")

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{
		helperLive:   runLive,
		helperCensus: runCensus,
		helperBench:  runBench,
	})
	os.Exit(m.Run())
}

// dockerCaps is Docker's default capability set for a container (moby's
// oci/caps DefaultCapabilities).
var dockerCaps = []capability.Cap{
	capability.CAP_CHOWN, capability.CAP_DAC_OVERRIDE, capability.CAP_FSETID, capability.CAP_FOWNER,
	capability.CAP_MKNOD, capability.CAP_NET_RAW, capability.CAP_SETGID, capability.CAP_SETUID,
	capability.CAP_SETFCAP, capability.CAP_SETPCAP, capability.CAP_NET_BIND_SERVICE,
	capability.CAP_SYS_CHROOT, capability.CAP_KILL, capability.CAP_AUDIT_WRITE,
}

// allCaps is every capability Linux has.
func allCaps() []capability.Cap {
	last, err := capability.LastCap()
	if err != nil {
		panic(err)
	}
	var out []capability.Cap
	for _, c := range capability.ListKnown() {
		if c <= last {
			out = append(out, c)
		}
	}
	return out
}

// mustCompile compiles p for x86_64 (the verdicts are x86_64's).
func mustCompile(t testing.TB, p *Profile, o Options) *Filter {
	t.Helper()
	f, err := Compile(p, o)
	if err != nil {
		t.Fatalf("compile %s: %v", p.Source(), err)
	}
	return f
}
