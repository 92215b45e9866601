package taskfile

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host is what tether knows of this host for ${attr.*}, ${node.*} and
// ${meta.*} (the node's meta) and for constraints.
type Host struct {
	Attrs map[string]string // "kernel.name" for ${attr.kernel.name}
	Node  map[string]string // "unique.name" for ${node.unique.name}
	Meta  map[string]string // the node's meta
	// IP is the address ports are given on (NOMAD_IP_<label>).
	IP string
}

// HostConfig is what cannot be read from the host: Nomad's client
// configuration. Zero fields take Nomad's defaults.
type HostConfig struct {
	Datacenter string // node.datacenter, "dc1"
	Region     string // node.region, "global"
	Class      string // node.class, ""
	Pool       string // node.pool, "default"
	Name       string // node.unique.name, the host name
	Meta       map[string]string
	// IP overrides the address ports are given on (default: the address of
	// the interface holding the default route, else 127.0.0.1).
	IP string
}

// DetectHost reads this host's attributes: kernel.name, kernel.version
// (the leading x.y.z of uname -r), kernel.arch, cpu.arch, cpu.numcores,
// cpu.frequency and cpu.totalcompute (MHz, where /proc/cpuinfo says),
// cpu.modelname, memory.totalbytes, os.name and os.version
// (/etc/os-release), unique.hostname, unique.network.ip-address,
// driver.exec and driver.raw_exec ("1"); and node.unique.id
// (/etc/machine-id), node.unique.name, node.datacenter, node.region,
// node.class, node.pool from cfg.
func DetectHost(cfg HostConfig) *Host {
	h := &Host{Attrs: map[string]string{}, Node: map[string]string{}, Meta: map[string]string{}}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Attrs["kernel.name"] = strings.ToLower(unix.ByteSliceToString(u.Sysname[:]))
		rel := unix.ByteSliceToString(u.Release[:])
		if m := kernelVersion.FindString(rel); m != "" {
			h.Attrs["kernel.version"] = m
		}
		h.Attrs["kernel.arch"] = unix.ByteSliceToString(u.Machine[:])
	} else {
		h.Attrs["kernel.name"] = runtime.GOOS
	}
	h.Attrs["cpu.arch"] = runtime.GOARCH
	h.Attrs["cpu.numcores"] = strconv.Itoa(runtime.NumCPU())
	if mhz, model := cpuInfo(); mhz > 0 {
		h.Attrs["cpu.frequency"] = strconv.Itoa(mhz)
		h.Attrs["cpu.totalcompute"] = strconv.Itoa(mhz * runtime.NumCPU())
		if model != "" {
			h.Attrs["cpu.modelname"] = model
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.Attrs["memory.totalbytes"] = strconv.FormatUint(uint64(si.Totalram)*uint64(si.Unit), 10)
	}
	if osr, err := os.ReadFile("/etc/os-release"); err == nil {
		vals := parseOSRelease(osr)
		if v := vals["ID"]; v != "" {
			h.Attrs["os.name"] = v
		}
		if v := vals["VERSION_ID"]; v != "" {
			h.Attrs["os.version"] = v
		}
	}
	host, _ := os.Hostname()
	if host != "" {
		h.Attrs["unique.hostname"] = host
	}
	h.IP = cfg.IP
	if h.IP == "" {
		h.IP = defaultIP()
	}
	if h.IP != "127.0.0.1" {
		h.Attrs["unique.network.ip-address"] = h.IP
	}
	h.Attrs["driver.exec"] = "1"
	h.Attrs["driver.raw_exec"] = "1"

	if id, err := os.ReadFile("/etc/machine-id"); err == nil {
		if s := strings.TrimSpace(string(id)); s != "" {
			h.Node["unique.id"] = s
		}
	}
	name := cfg.Name
	if name == "" {
		name = host
	}
	h.Node["unique.name"] = name
	h.Node["datacenter"] = or(cfg.Datacenter, "dc1")
	h.Node["region"] = or(cfg.Region, "global")
	h.Node["class"] = cfg.Class
	h.Node["pool"] = or(cfg.Pool, "default")
	for k, v := range cfg.Meta {
		h.Meta[k] = v
	}
	return h
}

var kernelVersion = regexp.MustCompile(`^\d+(\.\d+){0,2}`)

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cpuInfo() (mhz int, model string) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "cpu MHz":
			if mhz == 0 {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					mhz = int(f)
				}
			}
		case "model name":
			if model == "" {
				model = v
			}
		}
	}
	return mhz, model
}

func parseOSRelease(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		out[k] = v
	}
	return out
}

// defaultIP is the first IPv4 address of the interface the default route
// leaves through (/proc/net/route), else 127.0.0.1. Nothing is sent.
func defaultIP() string {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "127.0.0.1"
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		ifc, err := net.InterfaceByName(f[0])
		if err != nil {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func (h *Host) attrNames() []string {
	if h == nil {
		return nil
	}
	out := make([]string, 0, len(h.Attrs))
	for k := range h.Attrs {
		out = append(out, "attr."+k)
	}
	sort.Strings(out)
	return out
}

func (h *Host) nodeNames() []string {
	if h == nil {
		return nil
	}
	out := make([]string, 0, len(h.Node))
	for k := range h.Node {
		out = append(out, "node."+k)
	}
	sort.Strings(out)
	return out
}
