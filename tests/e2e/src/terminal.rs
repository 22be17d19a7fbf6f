//! A pseudo-terminal for what a test runs, as an operator's shell gives one: the program's
//! standard input, output and error are a new terminal, which is also its controlling
//! terminal. Python's `pty` does the work; everything the terminal received comes out on the
//! wrapper's standard output, and the wrapper exits as the program did.

use std::process::Command;

/// `python3 -c UNDER_A_TERMINAL PROGRAM ARGS…` runs `PROGRAM ARGS…` under a new terminal, its
/// output read to the end (the program closing the terminal ends the read).
pub const UNDER_A_TERMINAL: &str = "import os, pty, sys\n\
pid, fd = pty.fork()\n\
if pid == 0:\n    os.execvp(sys.argv[1], sys.argv[1:])\n\
while True:\n    try:\n        data = os.read(fd, 65536)\n    except OSError:\n        break\n    \
if not data:\n        break\n    sys.stdout.buffer.write(data)\n\
_, status = os.waitpid(pid, 0)\n\
sys.exit(os.waitstatus_to_exitcode(status))\n";

/// The arguments that make `python3` run `program_and_args` under a terminal.
pub fn terminal_args<'a>(program_and_args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["-c", UNDER_A_TERMINAL];
    all.extend_from_slice(program_and_args);
    all
}

/// `program_and_args` under a terminal, as a `python3` command the caller finishes (its
/// environment, directory and pipes).
pub fn under_a_terminal(program_and_args: &[&str]) -> Command {
    let mut command = Command::new("python3");
    command.args(terminal_args(program_and_args));
    command
}
