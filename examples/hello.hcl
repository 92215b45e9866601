# The smallest task: print a greeting and exit 0.
#
#   tether run examples/hello.hcl
task "hello" {
  driver = "raw_exec"

  config {
    command = "/bin/echo"
    args    = ["hello from tether"]
  }
}
