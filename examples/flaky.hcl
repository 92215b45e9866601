# A task that fails and is restarted by its executor, twice, then ends
# with its last exit code (3). Each restart is written ahead and shows in
# `tether events`.
#
#   tether run examples/flaky.hcl
task "flaky" {
  driver = "raw_exec"

  config {
    command = "/bin/sh"
    args    = ["-c", "echo \"run at $(date +%T.%N)\"; exit 3"]
  }

  restart {
    attempts = 2
    interval = "1m"
    delay    = "1s"
    mode     = "fail"
  }
}
