package taskfile_test

import (
	"fmt"

	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/taskfile"
)

func ExampleParse() {
	src := []byte(`
job "web" {
  datacenters = ["dc1"]
  group "web" {
    count = 2
    task "server" {
      driver = "raw_exec"
      config {
        command = "local/server"
        args    = ["--listen", "${NOMAD_ADDR_http}", "--data", "${NOMAD_ALLOC_DIR}/data"]
      }
    }
    network {
      port "http" {}
    }
  }
}`)
	f, diags := taskfile.Parse("web.nomad", src, taskfile.Options{})
	if diags.HasErrors() {
		fmt.Println(diags)
		return
	}
	for _, n := range f.Notices {
		fmt.Println(n)
	}
	task, _ := f.Find("server")
	host := &taskfile.Host{Attrs: map[string]string{"kernel.name": "linux"}, Node: map[string]string{"datacenter": "dc1"}, IP: "127.0.0.1"}
	in, err := f.Instantiate(task, taskfile.Alloc{ID: "a1", Index: 1, Host: host,
		Ports: []taskfile.Port{{Label: "http", Value: 21000, IP: "127.0.0.1"}}},
		taskdir.Layout{TaskDir: "/state/allocs/a1/server", AllocDir: "/state/allocs/a1/alloc"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(in.Name, in.Spec.Dir, in.Spec.Command, in.Spec.Args)
	// Output:
	// ignores the "datacenters" attribute (a scheduler concern)
	// server[1] /state/allocs/a1/server local/server [--listen 127.0.0.1:21000 --data /state/allocs/a1/alloc/data]
}
