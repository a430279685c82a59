//! `xnf lab scrape` through the binary: a small box built, scraped, and
//! removed; the page it measured holds every function's families.

use xnf_testrun::cli::{lab, namespaces_of};

#[test]
fn a_small_box_is_scraped_and_removed() {
    let dir = xnf_testrun::cli::TempFiles::new("scrape");
    let json = dir.dir().join("scrape.json");
    let (out, pid) =
        lab("scrape", &["--rules", "3", "--services", "2", "--backends", "2", "--chains", "1", "--scrapes", "3", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("scrape of a box with 3 rules, 2 services x 2 backends, 1 chains") && stdout.contains("ms per scrape over 3"), "{stdout}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["ms"].as_array().unwrap().len(), 3);
    // The build info, 3 rules + the default x 3 families, 2 services x 3,
    // 4 backends x 2, the router's families on 2 interfaces: well over 50.
    assert!(r["samples"].as_u64().unwrap() > 50, "{r}");
    assert!(namespaces_of(pid).is_empty(), "namespaces left: {:?}", namespaces_of(pid));
}
