//! Every run-time feature probe against the kernel it runs on (the host's,
//! and each kernel of the matrix, scripts/kernels.sh). A probe's answer must
//! equal what using the feature another way shows; the features upstream
//! Linux has had since before 6.1 must be there; in the matrix's Debian
//! guests, which build everything xnf uses, every feature must be; and a
//! missing feature must read as the promised one-line message.

use std::io::Write;

use xnf_core::features::{drop_program, kernel_release, tracefs, Feature};
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::{ifname, veth, Netns};

/// (major, minor) of the running kernel.
fn version() -> (u32, u32) {
    let r = kernel_release();
    let mut it = r.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn map_creates(t: libbpf_sys::bpf_map_type) -> bool {
    // SAFETY: plain map creation; NULL name and opts are allowed.
    let fd = unsafe { libbpf_sys::bpf_map_create(t, std::ptr::null(), 4, 4, 1, std::ptr::null()) };
    if fd >= 0 {
        // SAFETY: our new fd.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

fn ip_ok(ns: &Netns, args: &[&str]) -> bool {
    ns.ip(args).map(|o| o.status.success()).unwrap_or(false)
}

/// Whether the kernel has `f`, found by using it, not by the probe's path.
fn used(f: Feature, ns: &Netns, dev: &str) -> bool {
    match f {
        Feature::XdpLink => {
            let prog = drop_program().expect("loading a two-instruction XDP program");
            let ifindex = ns.ifindex(dev).unwrap();
            ns.run(|| XdpLink::create(&prog, ifindex, dev, XdpMode::Skb).map(|l| l.detach())).unwrap().is_ok()
        }
        Feature::DevmapHash => map_creates(libbpf_sys::BPF_MAP_TYPE_DEVMAP_HASH),
        Feature::Xskmap => map_creates(libbpf_sys::BPF_MAP_TYPE_XSKMAP),
        // Upstream features, in every kernel since: the release decides.
        Feature::LiveFrames => version() >= (5, 18),
        Feature::SyncookieHelpers => version() >= (6, 0),
        Feature::Tracepoints => {
            let root = tracefs().expect("tracefs");
            let events = std::fs::read_to_string(format!("{root}/available_events")).unwrap_or_default();
            ["napi:napi_poll", "net:netif_receive_skb", "net:napi_gro_receive_entry", "skb:kfree_skb", "xdp:xdp_redirect"]
                .iter()
                .all(|e| events.lines().any(|l| l == *e))
        }
        Feature::Kprobes => {
            let root = tracefs().expect("tracefs");
            let events = format!("{root}/kprobe_events");
            let write = |s: &str| std::fs::OpenOptions::new().append(true).open(&events).and_then(|mut f| f.write_all(s.as_bytes())).is_ok();
            let made = write("p:xnf_feature_probe netif_receive_skb\n");
            if made {
                assert!(write("-:xnf_feature_probe\n"), "removing the test kprobe");
            }
            made
        }
        Feature::Vlan => ip_ok(ns, &["link", "add", "link", dev, "name", "xnfvlan5", "type", "vlan", "id", "5"]),
        Feature::Ipvs => {
            let _ = std::process::Command::new("modprobe").arg("ip_vs").output();
            ns.exec(&["cat", "/proc/net/ip_vs"]).map(|o| o.status.success()).unwrap_or(false)
        }
        Feature::Ipip => ip_ok(ns, &["link", "add", "xnfipip", "type", "ipip", "local", "198.18.0.1", "remote", "198.18.0.2"]),
    }
}

#[test]
fn every_probe_answers_what_using_the_feature_shows() {
    let ns = Netns::new("feat").expect("a namespace (run as root)");
    let (a, b) = (ifname("fa"), ifname("fb"));
    veth(&ns, &a, &ns, &b, None).unwrap();
    let mut report = Vec::new();
    for f in Feature::ALL {
        let probed = f.probe();
        let truth = used(f, &ns, &a);
        report.push(format!("{:<18} probe {:<5} used {}", f.name(), probed.is_ok(), truth));
        assert_eq!(probed.is_ok(), truth, "Linux {}: probe of {} says {probed:?}, using it says {truth}", kernel_release(), f.name());
    }
    println!("Linux {}:\n  {}", kernel_release(), report.join("\n  "));
    // The kernel matrix's Debian guests (scripts/kernels.sh sets
    // XNF_GUEST) build kprobes, 802.1Q, IPVS and ipip: all must be there.
    if let Ok(guest) = std::env::var("XNF_GUEST") {
        for f in Feature::ALL {
            assert!(f.probe().is_ok(), "Debian {guest} guest, Linux {}: {} missing: {:?}", kernel_release(), f.name(), f.probe());
        }
    }
}

#[test]
fn kernels_xnf_claims_have_every_upstream_feature() {
    assert!(version() >= (6, 1), "Linux {}: xnf claims 6.1 and newer", kernel_release());
    for f in [Feature::XdpLink, Feature::DevmapHash, Feature::Xskmap, Feature::LiveFrames, Feature::SyncookieHelpers] {
        assert!(f.probe().is_ok(), "Linux {} lacks {}: {:?}", kernel_release(), f.name(), f.probe());
    }
}

#[test]
fn a_missing_feature_is_one_line_naming_it_and_the_kernel() {
    for f in Feature::ALL {
        let Err(e) = f.require() else { continue };
        let msg = format!("{e:#}");
        assert!(!msg.contains('\n'), "{msg}");
        for part in [f.name(), f.provided_by(), f.used_by(), &kernel_release(), "xnf features"] {
            assert!(msg.contains(part), "{:?} missing from: {msg}", part);
        }
    }
    // The explanation replaces a failure only when a needed feature is missing.
    let err = xnf_core::features::explain(anyhow::anyhow!("E2BIG"), &[Feature::DevmapHash]);
    assert_eq!(err.to_string(), "E2BIG");
}
