use std::net::Ipv4Addr;
use std::time::Instant;

use super::*;

/// `n` backends 10.0.x.y with weight 1.
fn backends(n: u32) -> Vec<(IpAddr, u32)> {
    (0..n).map(|i| (IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 1)).collect()
}

/// The issue's figures: 1,000 backends, 10 removed (every 100th).
fn remove_ten(size: u32) -> Disruption {
    let all = backends(1000);
    let fewer: Vec<_> = all.iter().enumerate().filter(|(i, _)| i % 100 != 0).map(|(_, b)| *b).collect();
    let t0 = Instant::now();
    let before = Table::build(&all, size).unwrap();
    eprintln!("M = {size}, 1000 backends: built in {:?}", t0.elapsed());
    let d = disruption(&before, &Table::build(&fewer, size).unwrap());
    eprintln!("M = {size}: moved {:.3} %, collateral {:.3} % of kept", 100.0 * d.moved, 100.0 * d.collateral_of_kept());
    d
}

#[test]
fn removing_ten_of_a_thousand() {
    let d = remove_ten(65_537);
    assert!(d.exact);
    assert!((0.985..0.995).contains(&d.kept), "{d:?}");
    assert!((0.015..0.035).contains(&d.collateral_of_kept()), "{d:?}");
    let big = remove_ten(655_373);
    assert!((0.003..0.012).contains(&big.collateral_of_kept()), "{big:?}");
    // The tables are pinned (fixed keys): so are the README's figures,
    // 2.483 % and 0.586 % of the flows whose backend stays.
    assert!((d.collateral_of_kept() - 0.02483).abs() < 0.00001, "{d:?}");
    assert!((big.collateral_of_kept() - 0.00586).abs() < 0.00001, "{big:?}");
}

#[test]
fn shares_and_balance() {
    let b: Vec<(IpAddr, u32)> = backends(100).into_iter().enumerate().map(|(i, (a, _))| (a, 1 + i as u32 % 4)).collect();
    let t = Table::build(&b, 10_007).unwrap();
    let shares = t.shares();
    assert_eq!(shares.iter().map(|s| s.entries).sum::<u32>(), 10_007);
    assert!((shares.iter().map(|s| s.ideal).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(shares.iter().all(|s| (s.share / s.ideal - 1.0).abs() < 0.01), "{shares:?}");
    let bal = t.balance().unwrap();
    assert!(bal.max < 1.01 && bal.min > 0.99 && bal.min <= 1.0 && bal.max >= 1.0, "{bal:?}");
    // Σ weights = 250: weight 4 asks for 10,007 · 4/250 = 160.1 entries.
    assert!(shares[3].weight == 4 && (160..=161).contains(&shares[3].entries), "{:?}", shares[3]);
    assert_eq!(t.owner(0), Some(b[t.entries()[0] as usize].0));
    // Nothing weighted: no balance, every share 0.
    let drained = Table::build(&[(b[0].0, 0)], 13).unwrap();
    assert_eq!(drained.balance(), None);
    assert_eq!((drained.shares()[0].share, drained.owner(0)), (0.0, None));
}

#[test]
fn draining_moves_only_the_drained_backends_flows() {
    let mut b = backends(100);
    let before = Table::build(&b, 10_007).unwrap();
    b[7].1 = 0;
    let d = disruption(&before, &Table::build(&b, 10_007).unwrap());
    assert!((d.kept - 0.99).abs() < 0.001, "{d:?}");
    assert!(d.collateral_of_kept() < 0.02 && (d.moved - (1.0 - d.kept) - d.collateral).abs() < 1e-9, "{d:?}");
    // Back again: the same entries return.
    assert_eq!(disruption(&before, &Table::build(&backends(100), 10_007).unwrap()).moved, 0.0);
}

#[test]
fn adding_a_backend_takes_its_share_and_little_more() {
    let before = Table::build(&backends(100), 10_007).unwrap();
    let d = disruption(&before, &Table::build(&backends(101), 10_007).unwrap());
    assert_eq!(d.kept, 1.0);
    // 1/101 of the space goes to the new backend; the rest is collateral.
    assert!(d.moved > 1.0 / 101.0 - 0.001 && d.moved < 1.0 / 101.0 + 0.02, "{d:?}");
}

#[test]
fn a_new_table_size_moves_almost_everything() {
    let before = Table::build(&backends(10), 4099).unwrap();
    let d = disruption(&before, &Table::build(&backends(10), 4111).unwrap());
    assert!(!d.exact);
    // A flow stays only by chance: 1/10 of the time.
    assert!((d.moved - 0.9).abs() < 0.001 && (d.kept - 1.0).abs() < 1e-9 && (d.collateral - 0.9).abs() < 0.001, "{d:?}");
}

/// Two instances given the same file, backends in another order, send
/// 100,000 random flows to the same backends.
#[test]
fn two_instances_agree() {
    let b: Vec<(IpAddr, u32)> = backends(37).into_iter().enumerate().map(|(i, (a, _))| (a, i as u32 % 5)).collect();
    let mut other = b.clone();
    other.rotate_left(11);
    let (t1, t2) = (Table::build(&b, 65_537).unwrap(), Table::build(&other, 65_537).unwrap());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100_000 {
        // xorshift64: the flows' hashes.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let e = (x as u32 % 65_537) as usize;
        assert_eq!(t1.owner(e), t2.owner(e));
        assert!(t1.owner(e).is_some_and(|a| b.iter().any(|&(x, w)| x == a && w > 0)));
    }
}

fn config(text: &str) -> Config {
    Config::parse(text, "lb.toml").unwrap().0
}

const OLD: &str = r#"
[[service]]
name = "web"
vip = "198.18.0.10"
proto = "tcp"
port = 80
backend = [{ address = "198.18.1.1" }, { address = "198.18.1.2" }, { address = "198.18.1.3" }, { address = "198.18.1.4" }]

[[service]]
name = "dns"
vip = "198.18.0.53"
proto = "udp"
backend = [{ address = "198.18.2.1" }]

[[service]]
name = "old"
vip = "198.18.0.99"
proto = "tcp"
backend = [{ address = "198.18.9.1" }]
"#;

#[test]
fn plans_say_what_changes() {
    let new = OLD
        .replace("{ address = \"198.18.1.4\" }]", "{ address = \"198.18.1.4\", weight = 0 }, { address = \"198.18.1.5\", weight = 2 }]")
        .replace("{ address = \"198.18.1.1\" }, ", "")
        .replace("name = \"old\"\nvip = \"198.18.0.99\"", "name = \"new\"\nvip = \"198.18.0.98\"");
    let p = plan(&config(OLD), &config(&new)).unwrap();
    let summary: Vec<_> = p.iter().map(|s| (s.name.as_str(), s.change)).collect();
    assert_eq!(summary, [("web", Change::Changed), ("dns", Change::Unchanged), ("new", Change::Added), ("old", Change::Removed)]);
    assert_eq!(p[0].notes, ["backend 198.18.1.4: weight 0 (was 1)", "backend 198.18.1.5: added, weight 2", "backend 198.18.1.1: removed"]);
    // .1 and .4 leave and .5 (weight 2) comes: .2 and .3 had half the
    // space and keep it, yet a third of their entries move. Maglev's
    // collateral is small only for many backends; this is what plan is for.
    let d = p[0].disruption.unwrap();
    assert!(d.exact && (d.kept - 0.5).abs() < 0.001 && (0.25..0.4).contains(&d.collateral_of_kept()), "{d:?}");
    assert_eq!(p[0].shares.iter().map(|s| s.entries).sum::<u32>(), 65_537);
    assert!(p[0].balance.unwrap().max < 1.001);
    assert_eq!(p[1].disruption, Some(Disruption { moved: 0.0, kept: 1.0, collateral: 0.0, exact: true }));
    assert_eq!((p[2].notes.as_slice(), p[2].disruption), (&["takes 198.18.0.98 tcp all ports".to_owned()][..], None));
    assert_eq!((p[3].notes.as_slice(), p[3].shares.len()), (&["no longer takes 198.18.0.99 tcp all ports".to_owned()][..], 0));
}

#[test]
fn rehashing_changes_are_expected_values() {
    let new = OLD
        .replace("port = 80", "port = 80\nhash = \"3-tuple\"\ntable_size = 65521\nmode = \"gue\"")
        .replace("proto = \"udp\"", "proto = \"udp\"\ndrain = true");
    let p = plan(&config(OLD), &config(&new)).unwrap();
    assert_eq!(p[0].notes, ["hash 3-tuple (was 5-tuple)", "mode gue (port 6080) (was ipip)", "table_size 65521 (was 65537)"]);
    let d = p[0].disruption.unwrap();
    assert!(!d.exact && (d.moved - 0.75).abs() < 0.001, "{d:?}");
    // Drained whole: everything moves (to no backend), nothing is kept.
    assert_eq!(p[1].notes, ["drain true (was false)"]);
    assert_eq!(p[1].disruption, Some(Disruption { moved: 1.0, kept: 0.0, collateral: 0.0, exact: true }));
    assert_eq!(p[1].balance, None);
}

/// Any change of what a flow hashes over (the hash fields, the VIP) moves
/// flows to other entries, table size kept: expected values, not entry by
/// entry. Four equal backends: a flow stays with probability 4 × 1/16.
#[test]
fn hashing_changes_alone_are_expected_values() {
    for (what, new) in [("hash", OLD.replace("port = 80", "port = 80\nhash = \"3-tuple\"")), ("vip", OLD.replace("198.18.0.10", "198.18.0.11"))] {
        let d = plan(&config(OLD), &config(&new)).unwrap()[0].disruption.unwrap();
        assert!(!d.exact && (d.moved - 0.75).abs() < 1e-4 && d.kept == 1.0 && (d.collateral - 0.75).abs() < 1e-4, "{what}: {d:?}");
    }
    // Rehashed with a backend gone: the three left kept 3/4 of the flows,
    // a third of each of their shares lands on them again.
    let new = OLD.replace("port = 80", "port = 80\nhash = \"3-tuple\"").replace(", { address = \"198.18.1.4\" }", "");
    let d = plan(&config(OLD), &config(&new)).unwrap()[0].disruption.unwrap();
    assert!((d.kept - 0.75).abs() < 1e-4 && (d.moved - 0.75).abs() < 1e-4 && (d.collateral - 0.5).abs() < 1e-4, "{d:?}");
}

/// A dsr backend that changes its MAC changes no table entry, but the plan
/// says so.
#[test]
fn a_new_mac_is_a_change() {
    let dsr = |mac: &str| {
        format!("[[service]]\nname = \"web\"\nvip = \"198.18.0.10\"\nproto = \"tcp\"\nmode = \"dsr\"\nbackend = [{{ address = \"198.18.1.1\", mac = \"{mac}\" }}]\n")
    };
    let p = plan(&config(&dsr("02:00:00:00:00:01")), &config(&dsr("02:00:00:00:00:02"))).unwrap();
    assert_eq!((p[0].change, p[0].notes.clone()), (Change::Changed, vec!["backend 198.18.1.1: mac changed".to_string()]));
    assert_eq!(p[0].disruption.unwrap().moved, 0.0);
}

/// `xnf lb plan --json` prints the plans as they are.
#[test]
fn plans_serialize() {
    let p = plan(&Config::default(), &config(OLD)).unwrap();
    let v = serde_json::to_value(&p[1]).unwrap();
    assert_eq!(v["change"], "added");
    assert_eq!(v["shares"][0]["address"], "198.18.2.1");
    assert_eq!(v["shares"][0]["entries"], 65_537);
    let c = serde_json::to_value(config(OLD).services[0].clone()).unwrap();
    assert_eq!((c["proto"].as_str(), c["hash"].as_str(), c["mode"].as_str()), (Some("tcp"), Some("5-tuple"), Some("ipip")));
}
