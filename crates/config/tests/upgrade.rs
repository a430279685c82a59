//! Upgrades in place on real veths (gen -> dut -> sink), through the real
//! binaries: this build's `xnf` and `xnf-layout-bump`, the same source
//! built with one more field in the lb's connection value and the
//! filter's bucket (`make test` builds it). Under traffic through filter,
//! lb and router: no frame lost, none slow-pathed, no lb connection moved;
//! an upgrade killed half way leaves the old programs forwarding, and a
//! rerun completes it.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};

use xnf_netns::Netns;
use xnf_testrun::cli::{wait_for, xnf_bin, xnf_ok};

mod common;
use common::{pins, Boxed};

/// The other build: the same source with the bumped layouts.
fn bumped() -> PathBuf {
    let bin = xnf_bin().with_file_name("xnf-layout-bump");
    assert!(bin.exists(), "{} is missing: this test upgrades to it; build it with `make layout-bump` (make test does)", bin.display());
    bin
}

fn run(bin: &PathBuf, ns: &Netns, args: &[&str], die_at: Option<&str>) -> Output {
    let mut c = std::process::Command::new(bin);
    c.arg("--netns").arg(ns.name()).args(args);
    if let Some(point) = die_at {
        c.env("XNF_UPGRADE_DIE_AT", point);
    }
    c.output().expect("running an xnf binary")
}

fn ok(bin: &PathBuf, ns: &Netns, args: &[&str]) -> String {
    let o = run(bin, ns, args, None);
    assert!(o.status.success(), "{} {args:?} failed: {}", bin.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The box with a rate-limit rule the stream meets (buckets to move) and
/// a UDP service on the VIP (connections to move), and gen's route to it.
fn upgrade_box(b: &Boxed) -> String {
    let f = b.file("box.toml", 9999, "198.18.100.1", "");
    let rule = "[[filter.rules.rule]]\nname = \"paced\"\nproto = \"udp\"\ndport = 9000\naction = \"rate-limit\"\npps = 1000000\n\n[lb]";
    let service = "[[lb.services.service]]\nname = \"dns\"\nvip = \"198.18.100.1\"\nproto = \"udp\"\nport = 53\n\
                   [[lb.services.service.backend]]\naddress = \"198.18.0.11\"\n[[lb.services.service.backend]]\naddress = \"198.18.0.12\"\n\n[decap]";
    let text = std::fs::read_to_string(&f).unwrap().replacen("\n[lb]", &format!("\n{rule}"), 1).replacen("\n[decap]", &format!("\n{service}"), 1);
    std::fs::write(&f, text).unwrap();
    let via = b.r.line.dut_gen_v4.to_string();
    b.r.line.gen().ip(&["route", "add", "198.18.100.0/24", "via", &via]).unwrap();
    f
}

/// Opens lb connections from gen to the VIP, one per socket (a source
/// port each), kept open so that no port is reused.
struct Flows {
    sockets: Vec<UdpSocket>,
}

impl Flows {
    fn open(&mut self, b: &Boxed, n: usize) {
        let from = b.r.line.gen_v4;
        for _ in 0..n {
            let s = b.r.line.gen().run(move || UdpSocket::bind((from, 0))).unwrap().unwrap();
            s.send_to(b"q", ("198.18.100.1", 53)).unwrap();
            self.sockets.push(s);
        }
    }
}

/// The lb's connection table: flow key -> (backend id, generation and flow hash, rest).
fn connections(ns: &Netns) -> BTreeMap<Vec<u8>, (Vec<u8>, Vec<u8>)> {
    let all = pins(ns);
    let ct = all.get("lb/conntrack").expect("the lb's connection table is pinned");
    // id, generation and flow hash (12 bytes), then what the bumped build adds.
    ct.iter().map(|(k, v)| (k.clone(), (v[..12].to_vec(), v[12..].to_vec()))).collect()
}

fn value_size(ns: &Netns, map: &str) -> usize {
    pins(ns).get(map).and_then(|m| m.first().map(|(_, v)| v.len())).unwrap_or_else(|| panic!("{map} has no entry"))
}

/// Upgraded under a stream through filter, lb and router while new lb
/// connections keep opening; and back (a downgrade drops the field).
#[test]
fn an_upgrade_to_a_changed_layout_under_traffic_loses_no_frame_and_moves_no_connection() {
    let b = Boxed::new();
    let f = upgrade_box(&b);
    xnf_ok(b.dut(), &["apply", &f]);
    b.r.resolve_sink();
    let mut flows = Flows { sockets: Vec::new() };
    flows.open(&b, 200);
    wait_for("the lb to record 200 connections", || connections(b.dut()).len() == 200);
    let (before, show) = (connections(b.dut()), b.show());
    let (redir, forwarded) = (b.r.redirected(), b.r.forw_v4());
    let (before_dut0, buffer0) = (b.r.dropped_before_dut(), socket_buffer_drops(&b));
    // About 10 s of traffic (paced): the upgrade ends well inside it.
    const N: usize = 600_000;
    let stop = AtomicBool::new(false);
    let (received, out) = std::thread::scope(|s| {
        let traffic = s.spawn(|| b.r.send_udp(false, N));
        let opener = s.spawn(|| {
            let mut more = Flows { sockets: Vec::new() };
            // Within the open files allowed (1024): a socket per connection.
            while !stop.load(Ordering::Relaxed) && more.sockets.len() < 600 {
                more.open(&b, 1);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            more.sockets.len()
        });
        wait_for("the traffic to flow", || b.r.redirected() > redir + 1000);
        let out = ok(&bumped(), b.dut(), &["upgrade"]);
        stop.store(true, Ordering::Relaxed);
        let opened = opener.join().unwrap();
        assert!(!traffic.is_finished(), "the traffic ended before the upgrade did: the test saw nothing");
        (traffic.join().unwrap(), (out, opened))
    });
    let (out, opened) = out;
    eprintln!("{out}");
    assert!(out.contains("made afresh: rule_sets"), "the report does not say the filter's rule set was compiled anew: {out}");
    // What gen's veth dropped never reached dut (its ring full while the
    // two CPUs were busy elsewhere, the upgrade's verifier among them), and
    // what the sink's full socket buffer dropped had arrived: neither is
    // the data plane's to lose. Every frame that reached dut is judged.
    let before_dut = (b.r.dropped_before_dut() - before_dut0) as usize;
    let buffer = (socket_buffer_drops(&b) - buffer0) as usize;
    assert!(before_dut * 1000 < N, "{before_dut} of {N} frames dropped on gen's veth before dut: too few reached it");
    let reached = N - before_dut;
    assert_eq!(b.r.redirected() - redir, reached as u64, "frames not forwarded in XDP ({before_dut} dropped before dut)");
    assert_eq!(received + buffer, reached, "frames lost ({before_dut} dropped before dut, {buffer} by the sink's full socket buffer)");
    // The lb's connection datagrams, encapsulated, go to the kernel's
    // forwarding (no backend is there to resolve); the stream's none.
    let by_kernel = b.r.forw_v4() - forwarded;
    assert!(by_kernel <= opened as u64, "the kernel forwarded {by_kernel} frames: more than the {opened} connections opened");
    assert!(out.contains("conntrack ("), "the lb's connections were not copied: {out}");
    assert!(out.contains("buckets ("), "the filter's buckets were not moved: {out}");
    let after = connections(b.dut());
    assert_eq!(after.len(), 200 + opened, "connections lost in the upgrade (opened {opened} during it)");
    for (k, (backend, _)) in &before {
        assert_eq!(&after[k].0, backend, "a connection moved to another backend");
        assert_eq!(after[k].1, vec![0; 12], "the new field (after 4 bytes of padding) starts at zero");
    }
    assert_eq!(value_size(b.dut(), "filter/buckets"), 32, "the buckets have this build's layout");
    assert_eq!(ok(&bumped(), b.dut(), &["show"]), show, "the box changed");
    assert!(ok(&bumped(), b.dut(), &["upgrade"]).contains("nothing to upgrade"), "a second upgrade changed something");
    // And back: the field dropped, the connections kept.
    let back = xnf_ok(b.dut(), &["upgrade"]);
    assert!(back.contains("conntrack ("), "{back}");
    let again = connections(b.dut());
    assert!(before.iter().all(|(k, (backend, rest))| rest.is_empty() && &again[k].0 == backend), "a connection moved on the way back");
    assert_eq!(b.show(), show, "the box changed on the way back");
}

/// Frames through gen -> dut -> sink, all forwarded in XDP.
/// Datagrams the sink's kernel dropped for a full socket buffer.
fn socket_buffer_drops(b: &Boxed) -> u64 {
    b.r.line.sink().snmp().unwrap().value("Udp", "RcvbufErrors").unwrap()
}

fn forwards(b: &Boxed) {
    let (redir, forwarded) = (b.r.redirected(), b.r.forw_v4());
    assert_eq!(b.r.send_udp(false, 2000), 2000, "frames lost");
    assert_eq!(b.r.redirected() - redir, 2000, "frames not forwarded in XDP");
    assert_eq!(b.r.forw_v4(), forwarded, "the kernel forwarded some");
}

/// Killed after the copy, before any swap: the old programs forward on,
/// and a rerun starts over. Killed after the first swap: the rerun
/// finishes what it started.
#[test]
fn an_upgrade_killed_half_way_leaves_the_old_forwarding_and_a_rerun_completes_it() {
    let b = Boxed::new();
    let f = upgrade_box(&b);
    xnf_ok(b.dut(), &["apply", &f]);
    b.r.resolve_sink();
    let show = b.show();
    let killed = run(&bumped(), b.dut(), &["upgrade"], Some("copied"));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.status.signal(), Some(9), "the upgrade was not killed at the copy: {}", String::from_utf8_lossy(&killed.stderr));
    // This build still reads everything: nothing was swapped.
    assert_eq!(b.show(), show, "the box changed");
    forwards(&b);
    assert!(!ok(&bumped(), b.dut(), &["upgrade"]).contains("half done"), "nothing was swapped: the rerun starts over");
    forwards(&b);
    let killed = run(&xnf_bin(), b.dut(), &["upgrade"], Some("swapped"));
    assert_eq!(killed.status.signal(), Some(9), "the downgrade was not killed at the swap: {}", String::from_utf8_lossy(&killed.stderr));
    forwards(&b);
    let done = xnf_ok(b.dut(), &["upgrade"]);
    assert!(done.contains("half done"), "the rerun did not finish the swap: {done}");
    assert_eq!(b.show(), show, "the box changed");
    forwards(&b);
    // Entry programs of a build that recorded none: replaced in place too.
    let records = b.dut().run(|| std::path::Path::new("/run/xnf").join(netns_key()).join("entry-builds.json")).unwrap();
    std::fs::remove_file(records).unwrap();
    let entries = xnf_ok(b.dut(), &["upgrade"]);
    assert!(entries.contains("entry: 2 interface(s) swapped"), "{entries}");
    forwards(&b);
}

fn netns_key() -> String {
    use std::os::unix::fs::MetadataExt;
    format!("net-{}", std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino())
}
