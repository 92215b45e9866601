# A long-running service: a static file server on 127.0.0.1:8080. It keeps
# running after the CLI returns; stop it with `tether stop web`.
#
#   tether start examples/service.hcl
#   tether status
#   tether logs web --stderr -f
#   tether stop web
task "web" {
  driver       = "raw_exec"
  kill_signal  = "SIGINT"
  kill_timeout = "5s"

  config {
    command  = "/usr/bin/python3"
    args     = ["-m", "http.server", "8080", "--bind", "127.0.0.1"]
    work_dir = "/tmp"
  }

  env {
    PYTHONUNBUFFERED = "1"
  }
}
