//! `[[afxdp]]`: user-space network functions on AF_XDP sockets, each an
//! `xnf afxdp run` process that `xnf daemon` starts, restarts and stops.
//!
//! ```toml
//! [[afxdp]]
//! name = "echo7"                 # [a-z0-9-], at most 15 characters
//! nf = "echo"                    # rxdrop | txonly | l2fwd | echo
//! interface = "eth5"
//! queues = [0]                   # the default
//! match = ["proto=udp,dport=7"]  # as --match; without it, all traffic
//! mode = "native"                # native | skb (where the selector runs)
//! copy = false                   # or zero_copy = true; default: zero-copy when possible
//! busy_poll = 50                 # SO_BUSY_POLL microseconds
//! ```
//!
//! An entry is checked by turning it into the command line the daemon runs
//! and parsing that with `xnf afxdp run`'s own parser and checks, so the
//! file and the command never disagree. What runs is what the daemon
//! records under the run folder (`afxdp/<name>.json`: pid, command line,
//! start time, restarts); `xnf show`, `diff` and `status` read that.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use toml::{Spanned, Value};
use xnf_core::files::line_of;

use crate::text;

/// One application of the box file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct App {
    pub name: String,
    pub nf: String,
    pub interface: String,
    pub queues: Vec<u32>,
    #[serde(rename = "match", default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_copy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll: Option<u32>,
    /// The line of its `[[afxdp]]` header (0 when read from a record).
    #[serde(skip)]
    pub line: usize,
}

impl App {
    /// `xnf afxdp run`'s arguments after `run`, as the file's fields say.
    pub fn run_args(&self) -> Vec<String> {
        let queues: Vec<String> = self.queues.iter().map(u32::to_string).collect();
        let mut a = vec![self.nf.clone(), "--iface".into(), self.interface.clone(), "--queue".into(), queues.join(",")];
        for m in &self.matches {
            a.extend(["--match".to_string(), m.clone()]);
        }
        if let Some(m) = &self.mode {
            a.extend(["--mode".to_string(), m.clone()]);
        }
        if self.copy == Some(true) {
            a.push("--copy".into());
        }
        if self.zero_copy == Some(true) {
            a.push("--zero-copy".into());
        }
        if let Some(u) = self.busy_poll {
            a.extend(["--busy-poll".to_string(), u.to_string()]);
        }
        a
    }

    /// The command line the daemon runs it with (`argv[0]` is `xnf`; no live
    /// statistics): what its record and `/proc/PID/cmdline` hold.
    pub fn argv(&self) -> Vec<String> {
        let mut v: Vec<String> = ["xnf", "afxdp", "run"].map(String::from).to_vec();
        v.extend(self.run_args());
        v.extend(["--interval".to_string(), "0".to_string()]);
        v
    }
}

/// `xnf afxdp run` as its own command, for checking an entry's arguments.
#[derive(clap::Parser)]
#[command(name = "xnf afxdp run")]
struct RunCmd {
    #[command(flatten)]
    args: xnf_afxdp::run::RunArgs,
}

const FIELDS: &str = "name, nf, interface, queues, match, mode, copy, zero_copy, busy_poll";
/// Where a message of `xnf afxdp run` points: its flag, the file's field.
const FLAGS: [(&str, &str); 7] = [
    ("--queue", "queues"),
    ("--match", "match"),
    ("--busy-poll", "busy_poll"),
    ("--zero-copy", "zero_copy"),
    ("--copy", "copy"),
    ("--mode", "mode"),
    ("--iface", "interface"),
];

/// The real command's parser and checks over `app`'s arguments: a fault
/// as (field, message).
fn check_args(app: &App) -> Result<(), (&'static str, String)> {
    let field = |msg: &str| FLAGS.iter().find(|(flag, _)| msg.contains(flag)).map_or("arguments", |(_, f)| f);
    let argv = std::iter::once("xnf afxdp run".to_string()).chain(app.argv().into_iter().skip(3));
    let cmd = <RunCmd as clap::Parser>::try_parse_from(argv).map_err(|e| {
        let text = e.render().to_string();
        let msg = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").trim_start_matches("error: ").to_string();
        (field(&msg), msg)
    })?;
    cmd.args.validate().map_err(|e| {
        let msg = format!("{e:#}");
        (field(&msg), msg)
    })
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

type Entry = Spanned<BTreeMap<String, Spanned<Value>>>;

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    afxdp: Vec<Entry>,
}

/// The `[[afxdp]]` entries of a box file, every fault of every entry one
/// line each (`FILE: line N: [[afxdp]] NAME: FIELD: what`).
pub fn parse(text: &str, origin: &str) -> Result<Vec<App>, Vec<String>> {
    let Some(t) = text::extract(text, |t| (t == "afxdp" || t.starts_with("afxdp.")).then(|| t.to_string())) else {
        return match text.parse::<toml::Table>().ok().and_then(|d| d.get("afxdp").cloned()) {
            Some(_) => Err(vec![format!("{origin}: afxdp: write each application as an [[afxdp]] table")]),
            None => Ok(Vec::new()),
        };
    };
    let raw: RawFile = toml::from_str(&t).map_err(|e| vec![format!("{} [[afxdp]]", text::toml_error(origin, &t, &e))])?;
    let (mut apps, mut faults) = (Vec::new(), Vec::new());
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, entry) in raw.afxdp.iter().enumerate() {
        let line = line_of(&t, entry.span().start);
        let fields = entry.get_ref();
        let label = fields.get("name").and_then(|v| v.get_ref().as_str()).filter(|n| is_name(n)).map_or(format!("#{}", i + 1), String::from);
        let before = faults.len();
        let mut fault = |at: usize, field: &str, msg: String| faults.push(format!("{origin}: line {at}: [[afxdp]] {label}: {field}: {msg}"));
        let mut app = App { line, queues: vec![0], ..App::default() };
        for (key, v) in fields {
            let at = line_of(&t, v.span().start);
            let value = v.get_ref();
            let string = |what: &str| value.as_str().map(String::from).ok_or(format!("{value} is not a string ({what})"));
            let flag = || value.as_bool().ok_or(format!("{value} is not true or false"));
            let r: Result<(), String> = match key.as_str() {
                "name" => string("[a-z0-9-], at most 15 characters").and_then(|n| {
                    if !is_name(&n) {
                        return Err(format!("{n:?} is not a name: [a-z0-9-], 1 to 15 characters"));
                    }
                    if let Some(first) = names.insert(n.clone(), line) {
                        return Err(format!("{n} is the name of the [[afxdp]] at line {first} too"));
                    }
                    app.name = n;
                    Ok(())
                }),
                "nf" => string("rxdrop, txonly, l2fwd or echo").and_then(|n| match n.as_str() {
                    "rxdrop" | "txonly" | "l2fwd" | "echo" => {
                        app.nf = n;
                        Ok(())
                    }
                    _ => Err(format!("{n:?} is not rxdrop, txonly, l2fwd or echo")),
                }),
                "interface" => string("an interface name").and_then(|n| {
                    if n.is_empty() || n.len() > 15 || n.contains(['/', ' ']) {
                        return Err(format!("{n:?} is not an interface name"));
                    }
                    app.interface = n;
                    Ok(())
                }),
                "queues" => match value.as_array() {
                    Some(a) if !a.is_empty() => a
                        .iter()
                        .map(|q| q.as_integer().and_then(|q| u32::try_from(q).ok()).ok_or(format!("{q} is not a queue number")))
                        .collect::<Result<Vec<u32>, String>>()
                        .map(|q| app.queues = q),
                    Some(_) => Err("name at least one queue".into()),
                    None => Err(format!("{value} is not a list of queue numbers (like [0, 1])")),
                },
                "match" => match value.as_array() {
                    Some(a) => {
                        let mut bad = Vec::new();
                        for m in a {
                            match m.as_str().map(xnf_core::class::MatchSpec::parse) {
                                Some(Ok(_)) => app.matches.push(m.as_str().unwrap_or_default().to_string()),
                                Some(Err(e)) => bad.push(format!("{e:#}")),
                                None => bad.push(format!("{m} is not a string like \"proto=udp,dport=7\"")),
                            }
                        }
                        // Each bad class its own line.
                        bad.into_iter().for_each(|b| fault(at, "match", b));
                        Ok(())
                    }
                    None => Err(format!("{value} is not a list of classes (like [\"proto=udp,dport=7\"])")),
                },
                "mode" => string("native or skb").and_then(|m| match m.as_str() {
                    "native" | "skb" => {
                        app.mode = Some(m);
                        Ok(())
                    }
                    _ => Err(format!("{m:?} is not native or skb")),
                }),
                "copy" => flag().map(|b| app.copy = Some(b)),
                "zero_copy" => flag().map(|b| app.zero_copy = Some(b)),
                "busy_poll" => match value.as_integer().and_then(|u| u32::try_from(u).ok()) {
                    Some(u) => {
                        app.busy_poll = Some(u);
                        Ok(())
                    }
                    None => Err(format!("{value} is not a number of microseconds")),
                },
                _ => Err(format!("not a field of [[afxdp]] (fields: {FIELDS})")),
            };
            if let Err(msg) = r {
                fault(at, key, msg);
            }
        }
        for required in ["name", "nf", "interface"] {
            if !fields.contains_key(required) {
                fault(line, required, "missing".into());
            }
        }
        if faults.len() > before {
            continue;
        }
        match check_args(&app) {
            Ok(()) => apps.push(app),
            Err((field, msg)) => {
                let at = fields.get(if field == "arguments" { "nf" } else { field }).map_or(line, |v| line_of(&t, v.span().start));
                faults.push(format!("{origin}: line {at}: [[afxdp]] {label}: {field}: {msg}"));
            }
        }
    }
    if faults.is_empty() {
        Ok(apps)
    } else {
        Err(faults)
    }
}

// --- what the daemon runs, as it records it ---

/// What `xnf daemon` records of an application it supervises, in
/// `/run/xnf/<netns>/afxdp/<name>.json`, from its start until it is
/// removed from the file: so that a daemon started again adopts the
/// process, and the box's commands see what runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub app: App,
    /// Its command line, exactly (`/proc/PID/cmdline` of the process).
    pub argv: Vec<String>,
    /// The last process started (or adopted) for it.
    pub pid: u32,
    /// Seconds since the epoch when that process started.
    pub started: u64,
    /// Times the daemon started it again after it exited.
    pub restarts: u64,
}

impl Record {
    /// Whether its process runs: `pid` lives with `argv` as its command line.
    pub fn up(&self) -> bool {
        alive(self.pid, &self.argv)
    }
}

/// Whether process `pid` runs with the command line `argv` (a zombie's
/// is empty; another program that took the pid has another).
pub fn alive(pid: u32, argv: &[String]) -> bool {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    pid > 0 && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want)
}

/// The folder of the records.
pub fn run_dir() -> Result<PathBuf> {
    Ok(xnf_core::state::run_dir()?.join("afxdp"))
}

/// Every record, by name.
pub fn records() -> Result<Vec<Record>> {
    let dir = run_dir()?;
    let Ok(rd) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".json") && !name.starts_with('.') {
            out.extend(xnf_core::state::read_json::<Record>(&dir, &name)?);
        }
    }
    out.sort_by(|a, b| a.app.name.cmp(&b.app.name));
    Ok(out)
}

pub fn write_record(r: &Record) -> Result<()> {
    xnf_core::state::write_json(&run_dir()?, &format!("{}.json", r.app.name), r)
}

pub fn remove_record(name: &str) -> Result<()> {
    match std::fs::remove_file(run_dir()?.join(format!("{name}.json"))) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// What the daemon does when it runs `want` instead of `running`, one
/// line each (`xnf apply` starts no process; the daemon does).
pub fn changes(running: &[Record], want: &[App]) -> Vec<String> {
    let mut out = Vec::new();
    for a in want {
        match running.iter().find(|r| r.app.name == a.name) {
            None => out.push(format!("afxdp: start {} ({} on {}; under xnf daemon)", a.name, a.nf, a.interface)),
            Some(r) if r.argv != a.argv() => out.push(format!("afxdp: {}: restart with other arguments (under xnf daemon)", a.name)),
            Some(_) => {}
        }
    }
    let gone = running.iter().filter(|r| !want.iter().any(|a| a.name == r.app.name));
    out.extend(gone.map(|r| format!("afxdp: stop {} (under xnf daemon)", r.app.name)));
    out
}

/// The records as `xnf status` shows them, on one line.
pub fn summary(running: &[Record]) -> String {
    let v: Vec<String> = running
        .iter()
        .map(|r| {
            let state = if r.up() { format!("up, pid {}", r.pid) } else { "down".to_string() };
            format!("{} ({} on {}, {state}, {} restarts)", r.app.name, r.app.nf, r.app.interface, r.restarts)
        })
        .collect();
    format!("afxdp: {}", if v.is_empty() { "none".to_string() } else { v.join(", ") })
}

/// The records' applications as `[[afxdp]]` tables of a box file.
pub fn show(running: &[Record]) -> Result<String> {
    #[derive(Serialize)]
    struct File<'a> {
        afxdp: Vec<&'a App>,
    }
    if running.is_empty() {
        return Ok(String::new());
    }
    Ok(toml::to_string(&File { afxdp: running.iter().map(|r| &r.app).collect() })?)
}

#[cfg(test)]
#[path = "afxdp_tests.rs"]
mod tests;
