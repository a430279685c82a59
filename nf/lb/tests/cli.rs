//! `xnf lb plan` as a user runs it: a plan of a change between two files,
//! and a bad file refused with one line naming file, line and field.

use std::process::Command;

use xnf_testrun::cli::{xnf_bin, TempFiles};

const FILE: &str = r#"[[service]]
name = "web"
vip = "198.18.0.10"
proto = "tcp"
port = 80
[[service.backend]]
address = "198.18.1.1"
[[service.backend]]
address = "198.18.1.2"
weight = 2
[[service.backend]]
address = "198.18.1.3"
"#;

fn plan(files: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let dir = TempFiles::new(&format!("lb-cli-{}", files[0].0));
    for (name, text) in files {
        dir.write(name, text);
    }
    Command::new(xnf_bin()).args(["lb", "plan"]).args(args).current_dir(dir.dir()).output().unwrap()
}

#[test]
fn draining_a_backend_moves_its_share_and_almost_nothing_else() {
    let drained = FILE.replace("weight = 2", "weight = 0");
    let out = plan(&[("new.toml", &drained), ("old.toml", FILE)], &["new.toml", "--from", "old.toml", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p[0]["change"], "changed");
    let d = &p[0]["disruption"];
    let moved = d["moved"].as_f64().unwrap();
    assert!((0.5..0.51).contains(&moved), "the drained backend had half the table: {d}");
    assert!(d["collateral"].as_f64().unwrap() < 0.01, "{d}");
    assert_eq!(d["exact"], true);
}

#[test]
fn a_bad_file_is_refused_with_one_line_naming_file_line_and_field() {
    let bad = FILE.replace("198.18.1.3", "198.18.1.300");
    let out = plan(&[("bad.toml", &bad)], &["bad.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("bad.toml: line 11") && err.contains("address"), "{err}");
    assert!(out.stdout.is_empty(), "nothing planned: {}", String::from_utf8_lossy(&out.stdout));
}
