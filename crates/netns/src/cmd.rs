//! Running external commands (`ip netns`, the `ip` escape hatch, programs
//! inside namespaces) with errors that show the full command line and what
//! the command printed.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, bail, Context, Result};

/// The command line of `cmd` as a shell-like string, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `cmd` to completion, feeding it `stdin` if given.
///
/// Fails unless the command exits with status 0; the error contains the full
/// command line, the exit status, stderr (or stdout if stderr is empty) and,
/// for batches, the input that was fed.
pub(crate) fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<Output> {
    let line = describe(cmd);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped()).env("LC_ALL", "C");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start `{line}`: is {} installed and in PATH? (iproute2 provides `ip`)", cmd.get_program().to_string_lossy()))?;
    // Feed stdin from a helper thread so a chatty child can never deadlock
    // against a full stdout pipe.
    let feeder = match (stdin, child.stdin.take()) {
        (Some(input), Some(mut pipe)) => {
            let input = input.to_owned();
            Some(std::thread::spawn(move || pipe.write_all(input.as_bytes())))
        }
        _ => None,
    };
    let out = child.wait_with_output().with_context(|| format!("waiting for `{line}`"))?;
    let fed = feeder.map(|t| t.join().unwrap_or(Ok(())));
    if out.status.success() {
        if let Some(Err(e)) = fed {
            return Err(anyhow!(e).context(format!("writing stdin of `{line}`")));
        }
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = if stderr.trim().is_empty() { stdout.trim() } else { stderr.trim() };
    let hint = if said.contains("Operation not permitted") || said.contains("Permission denied") {
        "\nhint: xnf-netns needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    } else {
        ""
    };
    let input = match stdin {
        Some(text) => format!("\nbatch input:\n{}", numbered(text)),
        None => String::new(),
    };
    bail!("`{line}` failed ({}): {said}{hint}{input}", out.status)
}

/// `text` with 1-based line numbers, matching `ip -batch`'s "Command failed -:N".
fn numbered(text: &str) -> String {
    text.lines().enumerate().map(|(i, l)| format!("{:>4}: {l}\n", i + 1)).collect()
}
