//! `xnf nf` / `xnf chain` / `xnf apply` in namespaces with real traffic:
//! gen -> dut -> sink (the line topology), dut being the host whose NFs
//! live in namespaces of their own. Counters are checked on both sides:
//! what arrived at the sink, what the chain counted per hop, and that
//! dut's kernel forwarding counters did not move when XDP steered.

use std::path::PathBuf;

use serde_json::Value;
use xnf_netns::Netns;
use xnf_testrun::cli::{xnf, xnf_err, xnf_ok, RoutedLine};

/// Removes every chain and NF in dut before the namespaces go, even when
/// a test fails half-way.
struct ChainGuard<'a> {
    dut: &'a Netns,
}

impl Drop for ChainGuard<'_> {
    fn drop(&mut self) {
        let Ok(list) = serde_json::from_slice::<Value>(&xnf(self.dut, &["chain", "list", "--json"]).stdout) else { return };
        for c in list["chains"].as_array().into_iter().flatten() {
            let _ = xnf(self.dut, &["chain", "delete", c["name"].as_str().unwrap()]);
        }
        for n in list["nfs"].as_array().into_iter().flatten() {
            let _ = xnf(self.dut, &["nf", "delete", n["name"].as_str().unwrap(), "--force"]);
        }
    }
}

struct Lab {
    nfs: Vec<Netns>,
    line: RoutedLine,
}

impl Lab {
    /// The line with `n` NF namespaces and dut's neighbours for sink resolved.
    fn new(n: usize) -> Lab {
        let line = RoutedLine::new(&[]);
        line.resolve_sink();
        let nfs = (0..n).map(|i| Netns::new(&format!("nf{i}")).expect("NF namespace")).collect();
        Lab { nfs, line }
    }
    fn dut(&self) -> &Netns {
        self.line.dut()
    }
    fn nf(&self, name: &str, ns: usize, extra: &[&str]) {
        let mut args = vec!["nf", "create", name, "--netns", self.nfs[ns].name()];
        args.extend(extra);
        xnf_ok(self.dut(), &args);
    }
    fn chain(&self, name: &str, matches: &[&str], nfs: &[&str]) {
        let (i, o) = (self.line.line.dut_gen_if.clone(), self.line.line.dut_sink_if.clone());
        let mut args = vec!["chain", "create", name, "--ingress", &i, "--egress", &o];
        for m in matches {
            args.extend(["--match", m]);
        }
        for n in nfs {
            args.extend(["--nf", n]);
        }
        xnf_ok(self.dut(), &args);
    }
    fn stats(&self) -> Value {
        serde_json::from_str(&xnf_ok(self.dut(), &["chain", "stats", "--json"])).expect("stats JSON")
    }
    fn list(&self) -> Value {
        serde_json::from_str(&xnf_ok(self.dut(), &["chain", "list", "--json"])).expect("list JSON")
    }
}

fn chain_of<'v>(s: &'v Value, name: &str) -> &'v Value {
    s["chains"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("chain {name} in {s}"))
}

fn num(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a number: {v}"))
}

const N: usize = 400;

#[test]
fn three_nf_chain_forwards_ipv4_and_ipv6_end_to_end() {
    let lab = Lab::new(3);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("a", 0, &["--forward", "--queues", "2"]);
    lab.nf("b", 1, &["--forward"]);
    lab.nf("c", 2, &["--function", "reflect"]);
    lab.chain("web", &["dst=198.18.1.0/24", "dst=2001:db8:1::/64"], &["a", "b", "c"]);
    // Each CPU transmits on its own queue in the NF (XPS), so a Linux-stack
    // NF's output stays on the peer queue of the CPU it came in on.
    for q in 0..2 {
        let out = lab.nfs[0].exec(&["cat", &format!("/sys/class/net/xnf0/queues/tx-{q}/xps_cpus")]).unwrap();
        let mask = u64::from_str_radix(String::from_utf8_lossy(&out.stdout).trim().replace(',', "").as_str(), 16).unwrap();
        let ncpu = std::thread::available_parallelism().unwrap().get();
        let want: u64 = (0..ncpu).filter(|c| c % 2 == q).map(|c| 1u64 << c).sum();
        assert_eq!(mask, want, "xps_cpus of tx-{q}");
    }
    let before = lab.stats();
    let (f4, f6) = (lab.line.forw_v4(), lab.line.forw_v6());
    assert_eq!(lab.line.send_udp(false, N), N, "IPv4 through a -> b -> c");
    assert_eq!(lab.line.send_udp(true, N), N, "IPv6 through a -> b -> c");
    let after = lab.stats();
    let (b, a) = (chain_of(&before, "web"), chain_of(&after, "web"));
    assert_eq!(num(&a["matched"]) - num(&b["matched"]), 2 * N as i64, "every datagram matched once");
    for (hop, (ha, hb)) in a["hops"].as_array().unwrap().iter().zip(b["hops"].as_array().unwrap()).enumerate() {
        let d_in = num(&ha["in_packets"]) - num(&hb["in_packets"]);
        let d_out = num(&ha["out_packets"]) - num(&hb["out_packets"]);
        // NFs' own stacks may add a frame or two (IPv6 router solicitations).
        assert!((2 * N as i64..2 * N as i64 + 10).contains(&d_in), "hop {hop} in: {d_in}");
        assert!((2 * N as i64..2 * N as i64 + 10).contains(&d_out), "hop {hop} out: {d_out}");
    }
    assert!(num(&a["routed"]) - num(&b["routed"]) >= 2 * N as i64, "routed out in XDP: {a}");
    assert_eq!(lab.line.forw_v4(), f4, "dut's kernel forwarded IPv4 that the chain should have");
    assert_eq!(lab.line.forw_v6(), f6, "dut's kernel forwarded IPv6 that the chain should have");
    // The NFs forwarded with their own kernels (a and b) or reflected in XDP (c).
    for (i, want) in [(0, true), (1, true), (2, false)] {
        let fwd = lab.nfs[i].snmp().unwrap().value("Ip", "ForwDatagrams").unwrap();
        assert_eq!(fwd >= N as u64, want, "NF {i} kernel forwarded {fwd}");
    }
}

#[test]
fn a_filter_in_front_of_the_chain_drops_its_traffic_and_the_chain_steers_the_rest() {
    let lab = Lab::new(1);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("a", 0, &["--forward"]);
    lab.chain("all", &["dst=198.18.1.0/24"], &["a"]);
    let ingress = lab.line.line.dut_gen_if.clone();
    let rules = std::env::temp_dir().join(format!("xnf-chain-filter-{}.toml", std::process::id()));
    // send_udp uses port 9000 for IPv4 and 9001 for IPv6.
    std::fs::write(&rules, "[[rule]]\nname = \"v6\"\nproto = \"udp\"\ndport = 9001\naction = \"drop\"\n").unwrap();
    xnf_ok(lab.dut(), &["filter", "attach", &ingress]);
    xnf_ok(lab.dut(), &["filter", "apply", &rules.display().to_string()]);
    let _ = std::fs::remove_file(&rules);
    let status = xnf_ok(lab.dut(), &["filter", "status"]);
    assert!(status.contains("filter:xnf_filter") && status.contains("forward:xnf_chain"), "stages: {status}");
    let before = lab.stats();
    assert_eq!(lab.line.send_udp(true, N), 0, "the filtered IPv6 datagrams arrived");
    assert_eq!(lab.line.send_udp(false, N), N, "what the filter passed did not get through the chain");
    let after = lab.stats();
    let (b, a) = (chain_of(&before, "all"), chain_of(&after, "all"));
    assert_eq!(num(&a["matched"]) - num(&b["matched"]), N as i64, "the chain saw other traffic than what the filter passed");
    xnf_ok(lab.dut(), &["filter", "detach", &ingress]);
    let status = xnf_ok(lab.dut(), &["chain", "list"]);
    assert!(status.contains("all"), "the chain went with the filter: {status}");
    assert_eq!(lab.line.send_udp(false, N), N, "the chain stopped when the filter left");
}

#[test]
fn the_router_and_a_chain_do_not_take_each_others_forward_stage() {
    let lab = Lab::new(1);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("a", 0, &["--forward"]);
    let (i, o) = (lab.line.line.dut_gen_if.clone(), lab.line.line.dut_sink_if.clone());
    xnf_ok(lab.dut(), &["router", "attach", &i, &o, "--no-follow"]);
    let err = xnf_err(lab.dut(), &["chain", "create", "web", "--ingress", &i, "--egress", &o, "--match", "all", "--nf", "a"]);
    assert!(err.contains("forward stage runs xnf_router"), "{err}");
    assert!(lab.list()["chains"].as_array().unwrap().is_empty(), "the refused chain was created: {}", lab.list());
    lab.line.resolve_sink();
    let redirected = lab.line.redirected();
    assert_eq!(lab.line.send_udp(false, N), N);
    assert_eq!(lab.line.redirected() - redirected, N as u64, "the router lost its stage");
    xnf_ok(lab.dut(), &["router", "detach", &i, &o]);
    lab.chain("web", &["all"], &["a"]);
    let err = xnf_err(lab.dut(), &["router", "attach", &i, &o]);
    assert!(err.contains("forward stage runs xnf_chain"), "{err}");
}

#[test]
fn unmatched_traffic_is_untouched() {
    let lab = Lab::new(1);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("a", 0, &["--forward"]);
    // Only IPv4 UDP to port 9000 (what send_udp uses for IPv4).
    lab.chain("v4only", &["family=ipv4,proto=udp,dport=9000"], &["a"]);
    let f6 = lab.line.forw_v6();
    let before = lab.stats();
    assert_eq!(lab.line.send_udp(true, N), N, "IPv6 takes the kernel path and arrives");
    let after = lab.stats();
    assert!(lab.line.forw_v6() - f6 >= N as u64, "dut's kernel forwarded the unmatched IPv6");
    let (b, a) = (chain_of(&before, "v4only"), chain_of(&after, "v4only"));
    assert_eq!(num(&a["matched"]), num(&b["matched"]), "nothing matched");
    let no_match = |s: &Value| s["ingresses"].as_object().unwrap().values().next().unwrap()["no-match"].as_i64().unwrap();
    assert!(no_match(&after) - no_match(&before) >= N as i64);
    let f4 = lab.line.forw_v4();
    assert_eq!(lab.line.send_udp(false, N), N);
    assert_eq!(lab.line.forw_v4(), f4, "matched IPv4 went through the chain, not the kernel");
}

#[test]
fn nf_drop_and_rewrite_are_respected() {
    let lab = Lab::new(2);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("fw", 0, &["--forward"]);
    lab.nf("refl", 1, &["--function", "reflect"]);
    lab.chain("c", &["all"], &["fw", "refl"]);
    // fw drops IPv6 UDP to port 9001 (send_udp's IPv6 port) in its forward hook.
    let nft =
        "add table inet xnf\nadd chain inet xnf xfwd { type filter hook forward priority 0; }\nadd rule inet xnf xfwd meta l4proto udp udp dport 9001 drop\n";
    let out = lab.nfs[0].command("nft").args(["-f", "-"]).stdin(std::process::Stdio::piped()).spawn().and_then(|mut c| {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(nft.as_bytes())?;
        c.wait_with_output()
    });
    assert!(out.as_ref().is_ok_and(|o| o.status.success()), "nft in the NF (is nftables installed?): {out:?}");
    // What gen's veth drops never reaches dut (its ring full: a loaded
    // emulated guest); counted, so that a shortfall names its place.
    let (before, lost0) = (lab.stats(), lab.line.dropped_before_dut());
    assert_eq!(lab.line.send_udp(true, N), 0, "the NF dropped IPv6 to port 9001: nothing may arrive");
    let lost = (lab.line.dropped_before_dut() - lost0) as i64;
    assert_eq!(lab.line.send_udp(false, N), N, "IPv4 passes the firewall NF");
    let after = lab.stats();
    let hop = |s: &Value, i: usize| chain_of(s, "c")["hops"][i].clone();
    let dropped = num(&hop(&after, 0)["dropped_by_nf"]) - num(&hop(&before, 0)["dropped_by_nf"]);
    assert!(
        (N as i64 - lost - 5..=N as i64 + 5).contains(&dropped),
        "hop 1 dropped {dropped} of {N} ({lost} dropped on gen's veth before dut); hop 1 before {}, after {}; ingress before {}, after {}",
        hop(&before, 0),
        hop(&after, 0),
        before["ingresses"],
        after["ingresses"]
    );

    // Rewrite: fw's kernel decrements the TTL. With TTL 2 from gen, fw makes
    // it 1, so the exit must hand it to the kernel (time exceeded), not route it.
    let ttl_before = chain_of(&lab.stats(), "c")["to_kernel"]["ttl"].as_i64().unwrap_or(0);
    let rx = lab.line.sink_socket(false, 9000);
    let tx = lab.line.gen_socket(false);
    tx.set_ttl(3).unwrap(); // gen's own stack does not decrement; dut's chain is not a hop
    let to = lab.line.sink_addr(false, 9000);
    for i in 0..50u32 {
        tx.send_to(&i.to_be_bytes(), to).unwrap();
    }
    assert_eq!(xnf_testrun::cli::count_received(&rx, 50), 50, "TTL 3: fw makes it 2, the exit 1: delivered");
    tx.set_ttl(2).unwrap();
    for i in 0..50u32 {
        tx.send_to(&i.to_be_bytes(), to).unwrap();
    }
    assert_eq!(xnf_testrun::cli::count_received(&rx, 0), 0, "TTL 2: fw makes it 1, it must expire at the exit");
    let ttl_after = chain_of(&lab.stats(), "c")["to_kernel"]["ttl"].as_i64().unwrap_or(0);
    assert_eq!(ttl_after - ttl_before, 50, "the exit saw the rewritten TTL");
}

#[test]
fn deleting_a_middle_nf_is_refused_and_other_chains_keep_flowing() {
    let lab = Lab::new(3);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("a", 0, &["--forward"]);
    lab.nf("b", 1, &["--forward"]);
    lab.nf("c", 2, &["--forward"]);
    lab.chain("four", &["family=ipv4"], &["a", "b"]);
    lab.chain("six", &["family=ipv6"], &["c"]);
    let e = xnf_err(lab.dut(), &["nf", "delete", "b"]);
    assert!(e.contains("in chain(s) four") && e.contains("--force"), "{e}");
    assert_eq!(lab.line.send_udp(false, N), N, "chain four still complete");
    assert_eq!(lab.line.send_udp(true, N), N, "chain six unaffected");
    xnf_ok(lab.dut(), &["nf", "delete", "b", "--force"]);
    let l = lab.list();
    let four = l["chains"].as_array().unwrap().iter().find(|c| c["name"] == "four").unwrap();
    assert_eq!(four["state"], "down");
    let f4 = lab.line.forw_v4();
    assert_eq!(lab.line.send_udp(false, N), 0, "a chain missing an NF fails closed: no bypass");
    assert_eq!(lab.line.forw_v4(), f4, "nor through the kernel");
    assert_eq!(lab.line.send_udp(true, N), N, "the other chain is not blackholed");
    // The NF comes back under its name: the chain is whole again.
    lab.nf("b", 1, &["--forward", "--ifname", "xnf1"]);
    assert_eq!(lab.line.send_udp(false, N), N, "chain four back up");
}

#[test]
fn apply_converges_and_twice_is_a_no_op() {
    let lab = Lab::new(2);
    let _g = ChainGuard { dut: lab.dut() };
    let (i, o) = (lab.line.line.dut_gen_if.clone(), lab.line.line.dut_sink_if.clone());
    let dir = tempdir();
    let file = dir.join("chains.toml");
    let full = format!(
        "[[nf]]\nname = \"a\"\nnetns = \"{}\"\nforward = true\n\n[[nf]]\nname = \"b\"\nnetns = \"{}\"\nfunction = \"reflect\"\n\n\
         [[chain]]\nname = \"web\"\ningress = \"{i}\"\negress = [\"{o}\"]\nnfs = [\"a\", \"b\"]\n[[chain.match]]\ndst = \"198.18.1.0/24\"\n",
        lab.nfs[0].name(),
        lab.nfs[1].name()
    );
    std::fs::write(&file, &full).unwrap();
    let f = file.to_str().unwrap();
    let out = xnf_ok(lab.dut(), &["apply", f]);
    assert!(out.contains("nf a: created") && out.contains("chain web: created"), "{out}");
    let links_before = lab.dut().ip(&["-d", "link"]).unwrap().stdout;
    assert_eq!(lab.line.send_udp(false, N), N);
    let matched = num(&chain_of(&lab.stats(), "web")["matched"]);
    assert!(matched >= N as i64);
    assert_eq!(xnf_ok(lab.dut(), &["apply", f]).trim(), "nothing to change");
    assert_eq!(lab.dut().ip(&["-d", "link"]).unwrap().stdout, links_before, "a second apply touched interfaces");
    assert_eq!(num(&chain_of(&lab.stats(), "web")["matched"]), matched, "counters kept");
    // A changed class: the chain is changed in place, the NFs stay.
    std::fs::write(&file, full.replace("198.18.1.0/24", "198.18.1.2/32")).unwrap();
    let out = xnf_ok(lab.dut(), &["apply", f]);
    assert_eq!(out.trim(), "chain web: changed", "{out}");
    assert_eq!(lab.line.send_udp(false, N), N);
    // Without the chain and NF b in the file, both go.
    let only_a = format!("[[nf]]\nname = \"a\"\nnetns = \"{}\"\nforward = true\n", lab.nfs[0].name());
    std::fs::write(&file, only_a).unwrap();
    let out = xnf_ok(lab.dut(), &["apply", f]);
    assert!(out.contains("chain web: deleted") && out.contains("nf b: deleted") && !out.contains("nf a"), "{out}");
    let l = lab.list();
    assert_eq!(l["chains"].as_array().unwrap().len(), 0);
    assert_eq!(l["nfs"].as_array().unwrap().len(), 1);
    // An empty file removes everything, pins and ports included.
    std::fs::write(&file, "").unwrap();
    xnf_ok(lab.dut(), &["apply", f]);
    let links = String::from_utf8_lossy(&lab.dut().ip(&["-o", "link"]).unwrap().stdout).to_string();
    assert!(!links.lines().any(|l| l.split_whitespace().nth(1).is_some_and(|n| n.starts_with("xnf-"))), "an NF port is left: {links}");
    assert!(chain_pins(lab.dut()).is_empty(), "pins left: {:?}", chain_pins(lab.dut()));
}

#[test]
fn bad_input_is_refused_with_nothing_half_built() {
    let lab = Lab::new(2);
    let _g = ChainGuard { dut: lab.dut() };
    let i = lab.line.line.dut_gen_if.clone();
    lab.nf("a", 0, &[]);
    let links = || String::from_utf8_lossy(&lab.dut().ip(&["-o", "link"]).unwrap().stdout).lines().count();
    let n_links = links();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["chain", "create", "x", "--ingress", &i, "--match", "all", "--nf", "nope"], "unknown NF \"nope\""),
        (vec!["chain", "create", "x", "--ingress", &i, "--match", "all", "--nf", "a", "--nf", "a"], "cycle"),
        (vec!["chain", "create", "x", "--ingress", "xnfnosuch", "--match", "all", "--nf", "a"], "ingress \"xnfnosuch\" does not exist"),
        (vec!["chain", "create", "x", "--ingress", &i, "--match", "dst=198.18.1.1/24", "--nf", "a"], "host bits"),
        (vec!["chain", "create", "x", "--ingress", &i, "--match", "colour=red", "--nf", "a"], "unknown key"),
        (vec!["chain", "create", "x", "--ingress", "xnf-a", "--match", "all", "--nf", "a"], "is an NF's port"),
        (vec!["nf", "create", "b", "--netns", "xnf-no-such-ns"], "not found"),
        (vec!["nf", "create", "a", "--netns", lab.nfs[1].name()], "exists already"),
        (vec!["nf", "create", "Bad", "--netns", lab.nfs[1].name()], "NF name"),
        (vec!["nf", "create", "b", "--netns", lab.nfs[0].name()], "already has an interface xnf0"),
        (vec!["nf", "delete", "nope"], "no NF named"),
        // Without docker/podman installed the error says so; with one, it says no such container.
        (vec!["nf", "create", "d", "--container", "xnf-no-such-container"], "docker"),
        (vec!["chain", "delete", "nope"], "no chain named"),
    ];
    for (args, want) in cases {
        let e = xnf_err(lab.dut(), &args);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(lab.list()["chains"].as_array().unwrap().len(), 0, "{args:?} left a chain");
        assert_eq!(links(), n_links, "{args:?} left an interface");
    }
    // An NF whose namespace vanished cannot join a chain.
    let gone = Netns::new("nfgone").unwrap();
    xnf_ok(lab.dut(), &["nf", "create", "g", "--netns", gone.name()]);
    gone.delete().unwrap();
    // The kernel dismantles a deleted namespace (and the veth with it) from
    // a work queue: wait until xnf sees the NF gone before using it.
    let t0 = std::time::Instant::now();
    while lab.list()["nfs"].as_array().unwrap().iter().any(|n| n["name"] == "g" && n["state"] != "gone") {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the deleted namespace's veth never went away");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let e = xnf_err(lab.dut(), &["chain", "create", "x", "--ingress", &i, "--match", "all", "--nf", "g"]);
    assert!(e.contains("namespace is gone"), "{e}");
    let l = lab.list();
    let g = l["nfs"].as_array().unwrap().iter().find(|n| n["name"] == "g").unwrap();
    assert_eq!(g["state"], "gone");
    xnf_ok(lab.dut(), &["nf", "delete", "g"]);
    xnf_ok(lab.dut(), &["nf", "delete", "a"]);
    assert!(chain_pins(lab.dut()).is_empty(), "delete left pins: {:?}", chain_pins(lab.dut()));
}

/// Pins of the chain program in `ns`'s bpffs folder.
fn chain_pins(ns: &Netns) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(ns.path()).unwrap().ino();
    let dir = PathBuf::from(format!("/sys/fs/bpf/xnf/net-{ino}/chain"));
    std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("xnf-chain-test-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// NFs and chains made under `ip netns exec` (a private mount namespace
/// that hides bpffs) are the same state `--netns` sees, and traffic takes them.
#[test]
fn ip_netns_exec_manages_the_same_nfs_and_chains() {
    use xnf_testrun::cli::xnf_ip_netns_exec_ok;
    let lab = Lab::new(1);
    let _g = ChainGuard { dut: lab.dut() };
    let (i, o) = (lab.line.line.dut_gen_if.clone(), lab.line.line.dut_sink_if.clone());
    xnf_ip_netns_exec_ok(lab.dut(), &["nf", "create", "a", "--netns", lab.nfs[0].name(), "--forward"]);
    xnf_ip_netns_exec_ok(lab.dut(), &["chain", "create", "web", "--ingress", &i, "--egress", &o, "--match", "dst=198.18.1.0/24", "--nf", "a"]);
    let list = lab.list();
    assert_eq!(list["chains"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["nfs"][0]["state"], "up", "{list}");
    let before = lab.stats();
    assert_eq!(lab.line.send_udp(false, N), N);
    let after = lab.stats();
    assert!(num(&chain_of(&after, "web")["matched"]) - num(&chain_of(&before, "web")["matched"]) >= N as i64);
    let seen: Value = serde_json::from_str(&xnf_ip_netns_exec_ok(lab.dut(), &["chain", "list", "--json"])).unwrap();
    assert_eq!(seen, lab.list(), "ip netns exec and --netns list the same state");
    xnf_ip_netns_exec_ok(lab.dut(), &["chain", "delete", "web"]);
    xnf_ip_netns_exec_ok(lab.dut(), &["nf", "delete", "a"]);
    let list = lab.list();
    assert!(list["chains"].as_array().unwrap().is_empty() && list["nfs"].as_array().unwrap().is_empty(), "{list}");
}

/// Sends `frames` as they are from gen's interface (AF_PACKET), paced.
fn send_raw(lab: &Lab, frames: Vec<Vec<u8>>) {
    let dev = lab.line.line.gen_if.clone();
    lab.line
        .line
        .gen()
        .run(move || {
            let s = xnf_netns::packet_socket(&dev).unwrap();
            for (i, f) in frames.iter().enumerate() {
                xnf_netns::send_frame(&s, f).unwrap();
                if i % 32 == 31 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        })
        .unwrap();
}

/// A chain for UDP port 5000 through a firewall NF must take every frame
/// that may be UDP to 5000 — also IPv6 datagrams behind a destination
/// options header and IPv4 fragments after the first, whose ports are
/// not in them. Both used to reach the destination around the NF, routed
/// by dut's kernel.
#[test]
fn frames_whose_ports_are_hidden_still_go_through_the_nf() {
    use xnf_packet::{IpProtocol, PacketBuilder};
    let lab = Lab::new(1);
    let _g = ChainGuard { dut: lab.dut() };
    lab.nf("fw", 0, &["--forward"]);
    lab.chain("web", &["proto=udp,dport=5000"], &["fw"]);
    let nft =
        "add table inet xnf\nadd chain inet xnf xfwd { type filter hook forward priority 0; }\nadd rule inet xnf xfwd meta l4proto udp udp dport 5000 drop\n";
    let out = lab.nfs[0].command("nft").args(["-f", "-"]).stdin(std::process::Stdio::piped()).spawn().and_then(|mut c| {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(nft.as_bytes())?;
        c.wait_with_output()
    });
    assert!(out.as_ref().is_ok_and(|o| o.status.success()), "nft in the NF (is nftables installed?): {out:?}");
    let l = &lab.line.line;
    let rx6 = lab.line.sink_socket(true, 5000);
    let (f4, f6) = (lab.line.forw_v4(), lab.line.forw_v6());
    let fw_forwarded = || lab.nfs[0].snmp().unwrap().value("Ip", "ForwDatagrams").unwrap();
    let fw_before = fw_forwarded();
    let before = lab.stats();
    let dstopts: Vec<Vec<u8>> = (0..50u32)
        .map(|i| {
            PacketBuilder::ethernet(l.gen_mac, l.dut_gen_mac)
                .ipv6(l.gen_v6, l.sink_v6)
                .ipv6_ext(IpProtocol::DSTOPTS, &[0; 6])
                .udp(40000, 5000)
                .payload(&i.to_be_bytes())
                .build()
        })
        .collect();
    let fragments: Vec<Vec<u8>> = (0..50u32)
        .map(|i| {
            PacketBuilder::ethernet(l.gen_mac, l.dut_gen_mac)
                .ipv4(l.gen_v4, l.sink_v4)
                .fragment(185, false)
                .ident(i)
                .protocol(IpProtocol::UDP)
                .payload(&[0; 64])
                .build()
        })
        .collect();
    send_raw(&lab, dstopts);
    send_raw(&lab, fragments);
    assert_eq!(xnf_testrun::cli::count_received(&rx6, 0), 0, "an IPv6 datagram to udp/5000 got past the firewall NF");
    let after = lab.stats();
    let (b, a) = (chain_of(&before, "web"), chain_of(&after, "web"));
    let into = num(&a["hops"][0]["in_packets"]) - num(&b["hops"][0]["in_packets"]);
    assert_eq!(into, 100, "every frame that may be udp/5000 entered the NF");
    let ingress = |s: &Value, k: &str| s["ingresses"].as_object().unwrap().values().next().unwrap()[k].as_i64().unwrap();
    assert_eq!(ingress(&after, "l4-unknown-steered") - ingress(&before, "l4-unknown-steered"), 50, "the fragments, counted apart");
    assert_eq!(lab.line.forw_v4(), f4, "dut's kernel routed IPv4 fragments around the NF");
    assert_eq!(lab.line.forw_v6(), f6, "dut's kernel routed IPv6 around the NF");
    // What the firewall does with fragments is its business (without
    // conntrack it forwards them): what matters is that it decided.
    assert!(fw_forwarded() - fw_before >= 50, "the NF's kernel handled the fragments");
}
