//! `[[afxdp]]`: what a good entry runs, every fault of a bad one at its
//! line and field, the interfaces it cannot share, and the daemon's
//! records as `show`, `diff` and `status` read them.

use std::path::Path;

use super::*;
use crate::file::{parse as parse_box, BoxConfig};

fn check(text: &str) -> Result<BoxConfig, Vec<String>> {
    parse_box(text, "xnf.toml", Path::new("/nonexistent"))
}

const GOOD: &str = r#"[router]
interfaces = ["eth0", "eth1"]

[[afxdp]]
name = "echo7"
nf = "echo"
interface = "eth2"
match = ["proto=udp,dport=7", "proto=icmp"]

[[afxdp]]
name = "sink-3"
nf = "rxdrop"
interface = "eth3"
queues = [0, 2]
mode = "skb"
copy = true
busy_poll = 50
"#;

#[test]
fn a_good_section_is_the_command_the_daemon_runs() {
    let c = check(GOOD).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(c.afxdp.len(), 2);
    let (a, b) = (&c.afxdp[0], &c.afxdp[1]);
    assert_eq!((a.line, b.line), (4, 10), "each entry's header line");
    assert_eq!(a.queues, [0], "queue 0 by default");
    assert_eq!(
        a.argv(),
        ["xnf", "afxdp", "run", "echo", "--iface", "eth2", "--queue", "0", "--match", "proto=udp,dport=7", "--match", "proto=icmp", "--interval", "0"]
    );
    assert_eq!(b.run_args(), ["rxdrop", "--iface", "eth3", "--queue", "0,2", "--mode", "skb", "--copy", "--busy-poll", "50"], "every field as its flag");
    assert!(check("").unwrap().afxdp.is_empty());
    let z = check("[[afxdp]]\nname = \"z\"\nnf = \"l2fwd\"\ninterface = \"eth9\"\nzero_copy = true\ncopy = false\n").unwrap();
    assert_eq!(z.afxdp[0].run_args(), ["l2fwd", "--iface", "eth9", "--queue", "0", "--zero-copy"]);
}

#[test]
fn every_bad_field_is_named_with_its_line() {
    let bad = r#"[[afxdp]]
name = "Echo_7"
nf = "reflect"
interface = "a-very-long-interface"
queues = "0"
match = ["proto=udp,dport=7", "proto=udp,dport=x", "colour=red"]
mode = "fast"
copy = 1
busy_poll = -1
colour = "red"

[[afxdp]]
queues = [0]

[[afxdp]]
name = "dup"
nf = "echo"
interface = "eth1"

[[afxdp]]
name = "dup"
nf = "echo"
interface = "eth2"

[[afxdp]]
name = "both"
nf = "l2fwd"
interface = "eth3"
copy = true
zero_copy = true

[[afxdp]]
name = "twice"
nf = "rxdrop"
interface = "eth4"
queues = [1, 1]

[[afxdp]]
name = "far"
nf = "rxdrop"
interface = "eth5"
queues = [4096]
"#;
    let errors = check(bad).unwrap_err();
    let has = |line: usize, label: &str, field: &str, what: &str| {
        let head = format!("xnf.toml: line {line}: [[afxdp]] {label}: {field}: ");
        assert!(errors.iter().any(|e| e.starts_with(&head) && e.contains(what)), "no {head}...{what} in {errors:#?}");
    };
    has(2, "#1", "name", "\"Echo_7\" is not a name");
    has(3, "#1", "nf", "\"reflect\" is not rxdrop, txonly, l2fwd or echo");
    has(4, "#1", "interface", "is not an interface name");
    has(5, "#1", "queues", "is not a list of queue numbers");
    has(6, "#1", "match", "dport=x");
    has(6, "#1", "match", "unknown key \"colour\"");
    has(7, "#1", "mode", "\"fast\" is not native or skb");
    has(8, "#1", "copy", "is not true or false");
    has(9, "#1", "busy_poll", "-1 is not a number of microseconds");
    has(10, "#1", "colour", "not a field of [[afxdp]]");
    for field in ["name", "nf", "interface"] {
        has(12, "#2", field, "missing");
    }
    has(21, "dup", "name", "dup is the name of the [[afxdp]] at line 15 too");
    // xnf afxdp run's own parser and checks.
    has(30, "both", "zero_copy", "cannot be used with");
    has(36, "twice", "queues", "--queue 1 is listed twice");
    has(42, "far", "queues", "--queue 4096");
    assert_eq!(errors.len(), 17, "one line per fault, all of them: {errors:#?}");
    assert!(errors.iter().all(|e| !e.contains('\n')), "one line each: {errors:#?}");
    let table = check("[afxdp]\nname = \"x\"\n").unwrap_err();
    assert!(table[0].starts_with("xnf.toml: line 1: ") && table[0].contains("[[afxdp]]"), "{table:?}");
    let key = check("afxdp = 1\n").unwrap_err();
    assert!(key[0].contains("write each application as an [[afxdp]] table"), "{key:?}");
}

#[test]
fn an_application_owns_its_interfaces_xdp_hook() {
    let app = |name: &str, iface: &str| format!("[[afxdp]]\nname = \"{name}\"\nnf = \"echo\"\ninterface = \"{iface}\"\n");
    let text = format!(
        "[router]\ninterfaces = [\"eth0\"]\n[decap]\ninterfaces = [\"eth1\"]\n[[nf]]\nname = \"fw\"\nnetns = \"fw\"\n[[chain]]\nname = \"web\"\ningress = \"eth2\"\negress = [\"eth3\"]\nnfs = [\"fw\"]\n{}{}{}{}{}",
        app("a", "eth0"),
        app("b", "eth1"),
        app("c", "eth2"),
        app("d", "eth3"),
        app("e", "eth3"),
    );
    let errors = check(&text).unwrap_err();
    let want = [
        "xnf.toml: line 13: [[afxdp]] a: interface: eth0 is [router]'s too",
        "xnf.toml: line 17: [[afxdp]] b: interface: eth1 is [decap]'s too",
        "xnf.toml: line 21: [[afxdp]] c: interface: eth2 is chain web's ingress too",
        "xnf.toml: line 25: [[afxdp]] d: interface: eth3 is chain web's egress too",
        "xnf.toml: line 29: [[afxdp]] e: interface: eth3 is chain web's egress too",
        "xnf.toml: line 29: [[afxdp]] e: interface: eth3 is [[afxdp]] d's (line 25) too",
    ];
    for w in want {
        assert!(errors.iter().any(|e| e.starts_with(w) && e.ends_with("owns the interface's XDP hook")), "no {w} in {errors:#?}");
    }
    assert_eq!(errors.len(), want.len(), "{errors:#?}");
    assert!(check(&format!("[filter]\ninterfaces = [\"eth0\"]\n{}", app("f", "eth0"))).unwrap_err()[0].contains("[filter]'s too"));
    assert!(check(&format!("[lb]\ninterfaces = [\"eth0\"]\n{}", app("l", "eth0"))).unwrap_err()[0].contains("[lb]'s too"));
}

fn record(app: &App, pid: u32) -> Record {
    Record { app: app.clone(), argv: app.argv(), pid, started: 0, restarts: 2 }
}

#[test]
fn the_daemons_records_as_the_box_commands_show_them() {
    let apps = check(GOOD).unwrap().afxdp;
    let running = vec![record(&apps[0], u32::MAX)];
    assert!(!running[0].up(), "no such process");
    let me: Vec<String> = std::env::args().collect();
    assert!(alive(std::process::id(), &me), "this very process, by its command line");
    assert!(!alive(std::process::id(), &apps[0].argv()) && !alive(0, &[]), "another command line, or no pid");
    assert_eq!(summary(&running), "afxdp: echo7 (echo on eth2, down, 2 restarts)");
    assert_eq!(summary(&[]), "afxdp: none");
    // What runs, as a file: applying it changes nothing.
    let shown = show(&[record(&apps[0], 1), record(&apps[1], 1)]).unwrap();
    let back = check(&shown).unwrap_or_else(|e| panic!("{e:#?}\n{shown}"));
    assert_eq!(back.afxdp.iter().map(App::argv).collect::<Vec<_>>(), apps.iter().map(App::argv).collect::<Vec<_>>(), "{shown}");
    assert!(changes(&[record(&apps[0], 1), record(&apps[1], 1)], &back.afxdp).is_empty());
    // Started, restarted with other arguments, stopped.
    let mut other = apps[0].clone();
    other.matches.pop();
    assert_eq!(changes(&running, &apps), ["afxdp: start sink-3 (rxdrop on eth3; under xnf daemon)"]);
    assert_eq!(changes(&running, std::slice::from_ref(&other)), ["afxdp: echo7: restart with other arguments (under xnf daemon)"]);
    assert_eq!(changes(&running, &[]), ["afxdp: stop echo7 (under xnf daemon)"]);
}
