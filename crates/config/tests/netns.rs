//! The box file through the real binary on real veths (gen -> dut -> sink):
//! check, diff, apply, show and apply again, a failure in the middle of a
//! multi-function apply that leaves the box exactly as it was (its file
//! and every pinned map's contents), and confirm-within.

use std::path::Path;

use xnf_testrun::cli::{wait_for, xnf, xnf_err, xnf_ok};

mod common;
use common::{pins, Boxed};

#[test]
fn apply_then_show_then_apply_again_changes_nothing() {
    let b = Boxed::new();
    let f = b.file("box.toml", 9999, "198.18.100.1", "");
    assert!(xnf_ok(b.dut(), &["check", &f]).trim().ends_with(": ok"));
    let diff = xnf_ok(b.dut(), &["diff", &f]);
    let (g, s) = (&b.r.line.dut_gen_if, &b.r.line.dut_sink_if);
    for want in [
        format!("filter: attach {g} (native)"),
        "filter: rules: 1 rules, default pass".into(),
        format!("lb: attach {g} (native)"),
        "lb: service web: added".into(),
        format!("decap: attach {s} (native, GUE port 7000)"),
        format!("router: attach {g} (native, fib full)"),
    ] {
        assert!(diff.lines().any(|l| l == want), "{want:?} not in the diff:\n{diff}");
    }
    assert_eq!(xnf_ok(b.dut(), &["apply", &f]), diff, "apply says what diff said");

    // The router forwards, the filter in front of it drops its port.
    b.r.resolve_sink();
    let redir = b.r.redirected();
    assert_eq!(b.r.send_udp(false, 100), 100);
    assert_eq!(b.r.redirected() - redir, 100, "the router did not forward in XDP");

    assert_eq!(xnf_ok(b.dut(), &["apply", &f]).trim(), "nothing to change");
    let status = xnf_ok(b.dut(), &["status", &f]);
    assert!(
        status.contains(&format!("router: {g} (native, fib full), {s} (native, fib full)")) && status.contains("; 1 rules") && status.contains("services web"),
        "{status}"
    );
    assert!(status.contains(": the box runs it"), "{status}");
    let shown = b.show();
    let again = b.files.write("shown.toml", &shown);
    assert_eq!(xnf_ok(b.dut(), &["diff", &again]).trim(), "nothing to change", "show:\n{shown}");
    assert_eq!(xnf_ok(b.dut(), &["apply", &again]).trim(), "nothing to change");
    assert_eq!(b.show(), shown);
    assert!(shown.contains("[[filter.rules.rule]]") && shown.contains("[[lb.services.service]]") && shown.contains("gue_port = 7000"), "{shown}");

    // A file without the lb: it goes, state and all; the rest stays.
    let without = shown.split("[lb]").next().unwrap().to_string() + &shown[shown.find("[decap]").unwrap()..];
    let f2 = b.files.write("nolb.toml", &without);
    assert_eq!(xnf_ok(b.dut(), &["apply", &f2]).trim(), format!("lb: detach {g}"));
    assert!(!b.show().contains("[lb]"));
}

#[test]
fn a_failure_in_the_middle_leaves_the_box_exactly_as_it_was() {
    let b = Boxed::new();
    xnf_ok(b.dut(), &["apply", &b.file("a.toml", 9999, "198.18.100.1", "")]);
    let (show, maps) = (b.show(), pins(b.dut()));
    assert!(maps.keys().any(|k| k.starts_with("filter/")) && maps.keys().any(|k| k.starts_with("lb/")), "{:?}", maps.keys());
    // New rules and services are applied before the router's turn; the
    // router then fails on an interface that does not exist.
    // Backend .12 gives way to .13: re-applying the old file afterwards
    // would hand .12 a new generation; only a restore gives back its own.
    let bad = b.file("b.toml", 7777, "198.18.100.2", ", \"xnfnosuch0\"");
    std::fs::write(&bad, std::fs::read_to_string(&bad).unwrap().replace("198.18.0.12", "198.18.0.13")).unwrap();
    assert!(xnf_ok(b.dut(), &["check", &bad]).contains("ok"), "check does not look at the system's interfaces");
    let err = xnf_err(b.dut(), &["apply", &bad]);
    assert!(err.contains("xnfnosuch0") && err.contains("nothing was changed: every step done was undone"), "{err}");
    assert_eq!(b.show(), show, "the running configuration changed");
    let after = pins(b.dut());
    assert_eq!(after.keys().collect::<Vec<_>>(), maps.keys().collect::<Vec<_>>());
    // The route cache's control word, generations, entries and neighbour
    // stamps move by themselves: the follower renews its lease every 100 ms.
    // The lb's generation only moves on (every write of a service, the
    // undoing ones too: put back, a slot filled before would match again),
    // and its service cache holds what frames filled it with.
    let live = ["router/fib_ctl", "router/fib_kgen", "router/fib_cache", "router/neigh_use", "lb/lb_gen", "lb/svc_cache"];
    for (name, contents) in maps.iter().filter(|(n, _)| !live.contains(&n.as_str())) {
        assert!(after[name] == *contents, "pinned map {name} differs after the rolled-back apply");
    }
    assert!(maps.len() > live.len() + 10, "too few maps compared: {:?}", maps.keys());
}

#[test]
fn confirm_within_rolls_back_by_itself_unless_confirmed() {
    let b = Boxed::new();
    xnf_ok(b.dut(), &["apply", &b.file("a.toml", 9999, "198.18.100.1", "")]);
    let before = b.show();
    let next = b.file("b.toml", 7777, "198.18.100.2", "");
    let out = xnf_ok(b.dut(), &["apply", &next, "--confirm-within", "2"]);
    assert!(out.contains("lb: service web: changed") && out.contains("rolls back in 2 s"), "{out}");
    assert!(b.show().contains("dport = 7777"));
    let err = xnf_err(b.dut(), &["apply", &next]);
    assert!(err.contains("awaits confirmation"), "{err}");
    wait_for("the unconfirmed change to roll back", || b.show() == before);

    xnf_ok(b.dut(), &["apply", &next, "--confirm-within", "60"]);
    assert_eq!(xnf_ok(b.dut(), &["rollback"]).trim(), "rolled back");
    assert_eq!(b.show(), before);

    xnf_ok(b.dut(), &["apply", &next, "--confirm-within", "60"]);
    assert_eq!(xnf_ok(b.dut(), &["confirm"]).trim(), "confirmed");
    assert!(xnf_err(b.dut(), &["rollback"]).contains("no change awaits confirmation"));
    assert!(b.show().contains("dport = 7777"), "the confirmed change stays");
}

#[test]
fn a_bad_file_changes_nothing_and_names_every_fault() {
    let b = Boxed::new();
    let f = b.files.write("bad.toml", "[router]\ninterfaces = [\"eth0\"]\nfib = \"fast\"\n[decap]\ngue_port = \"x\"\n[bgp]\n");
    let out = xnf(b.dut(), &["apply", &f]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "three faults and the summary:\n{err}");
    assert!(lines[3].ends_with("bad.toml: 3 error(s), nothing changed"), "{err}");
    assert!(err.contains("fib: \"fast\"") && err.contains("line 5") && err.contains("[bgp]"), "{err}");
    assert_eq!(b.show(), "", "nothing runs");
}

/// State another version of xnf could have left — a pinned map alike in
/// type, sizes, entries and flags, but whose key and value are other
/// types — is never read nor written: every command that would touch it
/// refuses in one line naming the map and both layout versions, and the
/// box stays exactly as it was (an apply that changed the filter before
/// reaching the lb puts it back).
#[test]
fn a_pin_of_another_layout_is_refused_and_nothing_changes() {
    let b = Boxed::new();
    let f = b.file("box.toml", 9999, "198.18.100.1", "");
    xnf_ok(b.dut(), &["apply", &f]);
    let (show, mut before) = (b.show(), pins(b.dut()));
    let path = b
        .dut()
        .run(|| {
            use std::os::unix::fs::MetadataExt;
            let key = format!("net-{}", std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino());
            Path::new("/sys/fs/bpf/xnf").join(key).join("lb/conntrack")
        })
        .unwrap();
    let original = xnf_testrun::layout::pin_foreign_layout(&path).expect("a map of another layout pinned in place of lb/conntrack");
    let changed = b.file("changed.toml", 9998, "198.18.100.2", "");
    for args in [&["lb", "stats"][..], &["lb", "status"], &["apply", &changed]] {
        let e = xnf_err(b.dut(), args);
        assert!(e.contains("lb/conntrack has layout") && e.contains("this xnf expects"), "{args:?}: {e}");
    }
    let e = xnf_err(b.dut(), &["lb", "stats"]);
    eprintln!("xnf lb stats: {e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    let mut after = pins(b.dut());
    // The route cache's and neighbour stamps' maps move by themselves
    // (the follower), as in the test above.
    for p in [&mut before, &mut after] {
        p.retain(|n, _| !["lb/conntrack", "router/fib_ctl", "router/fib_kgen", "router/fib_cache", "router/neigh_use"].contains(&n.as_str()));
    }
    assert_eq!(before, after, "a pinned map changed");
    xnf_testrun::layout::restore(&path, &original).unwrap();
    assert_eq!(b.show(), show, "the box changed");
    xnf_ok(b.dut(), &["lb", "stats"]);
}

/// Every function changed at once under traffic through them — the
/// filter's rules, the lb's service and backends, the router's
/// interfaces — and back: not one frame lost, not one slow-pathed (each
/// change is one map update or one stage-slot update; an instance with
/// other options replaces the old one in its slot).
#[test]
fn a_whole_box_change_under_traffic_loses_no_frame_and_slow_paths_none() {
    let b = Boxed::new();
    let a = b.file("a.toml", 9999, "198.18.100.1", "");
    xnf_ok(b.dut(), &["apply", &a]);
    for args in [&["link", "add", "xnfcx0", "type", "veth", "peer", "name", "xnfcx1"][..], &["link", "set", "xnfcx0", "up"]] {
        b.dut().ip(args).unwrap();
    }
    let changed = b.file("b.toml", 7777, "198.18.100.2", ", \"xnfcx0\"");
    std::fs::write(&changed, std::fs::read_to_string(&changed).unwrap().replace("198.18.0.12", "198.18.0.13")).unwrap();
    b.r.resolve_sink();
    let (redir, forwarded) = (b.r.redirected(), b.r.forw_v4());
    // About 5 s of traffic (paced): both applies end well inside it.
    const N: usize = 300_000;
    let received = std::thread::scope(|s| {
        let traffic = s.spawn(|| b.r.send_udp(false, N));
        wait_for("the traffic to flow", || b.r.redirected() > redir + 1000);
        let there = xnf_ok(b.dut(), &["apply", &changed]);
        assert!(there.contains("xnfcx0") && there.contains("service web"), "{there}");
        xnf_ok(b.dut(), &["apply", &a]);
        assert!(!traffic.is_finished(), "the traffic ended before both applies did: the test saw nothing");
        traffic.join().unwrap()
    });
    assert_eq!(received, N, "frames lost");
    assert_eq!(b.r.redirected() - redir, N as u64, "frames not forwarded in XDP");
    assert_eq!(b.r.forw_v4(), forwarded, "the kernel forwarded some");
}

/// An interface attached by hand with other options than its section's:
/// `show` says so in a comment (a section has one mode and options), and
/// its file, applied, gives that interface the section's options back.
#[test]
fn show_names_an_interface_running_other_options_than_its_section() {
    let b = Boxed::new();
    xnf_ok(b.dut(), &["apply", &b.file("a.toml", 9999, "198.18.100.1", "")]);
    let s = b.r.line.dut_sink_if.clone();
    xnf_ok(b.dut(), &["router", "attach", &s, "--fib", "cache"]);
    let shown = b.show();
    let note = format!("# {s} runs native, fib cache: one section has one mode and options, and an apply of it gives {s} these");
    assert!(shown.lines().any(|l| l == note), "{shown}");
    let f = b.files.write("shown.toml", &shown);
    assert_eq!(xnf_ok(b.dut(), &["diff", &f]).trim(), format!("router: {s}: native, fib cache -> native, fib full"));
    xnf_ok(b.dut(), &["apply", &f]);
    assert!(!b.show().contains("# "), "{}", b.show());
}

/// A mode change of a function's only interface, in an apply that then
/// fails: the function moves to the new mode and back with its state —
/// a detach of its last interface would have taken its rules with it.
#[test]
fn a_mode_change_rolled_back_keeps_the_functions_state() {
    let b = Boxed::new();
    let (g, s) = (&b.r.line.dut_gen_if, &b.r.line.dut_sink_if);
    let file = |name: &str, mode: &str, extra: &str| {
        b.files.write(
            name,
            &format!(
                "[filter]\ninterfaces = [\"{g}\"]\nmode = \"{mode}\"\n[filter.rules]\ndefault = \"pass\"\n[[filter.rules.rule]]\nname = \"no-9999\"\n\
                 proto = \"udp\"\ndport = 9999\naction = \"drop\"\n\n[router]\ninterfaces = [\"{s}\"{extra}]\n"
            ),
        )
    };
    xnf_ok(b.dut(), &["apply", &file("a.toml", "native", "")]);
    let (show, maps) = (b.show(), pins(b.dut()));
    let err = xnf_err(b.dut(), &["apply", &file("b.toml", "skb", ", \"xnfnosuch0\"")]);
    assert!(err.contains("xnfnosuch0") && err.contains("nothing was changed"), "{err}");
    assert_eq!(b.show(), show, "the running configuration changed");
    let after = pins(b.dut());
    let live = ["router/fib_ctl", "router/fib_kgen", "router/fib_cache", "router/neigh_use"];
    for (name, contents) in maps.iter().filter(|(n, _)| !live.contains(&n.as_str())) {
        assert!(after.get(name) == Some(contents), "pinned map {name} differs after the rolled-back mode change");
    }
    // And forward: the mode changes, the rules stay.
    xnf_ok(b.dut(), &["apply", &file("c.toml", "skb", "")]);
    let shown = b.show();
    assert!(shown.contains("mode = \"skb\"") && shown.contains("no-9999"), "{shown}");
}
