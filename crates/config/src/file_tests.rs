//! The box file's checks: what a good file becomes, and every error of a
//! bad one, each naming file, line and field.

use std::path::Path;

use super::*;

fn check(text: &str) -> Result<BoxConfig, Vec<String>> {
    parse(text, "xnf.toml", Path::new("/nonexistent"))
}

const GOOD: &str = r#"# the whole box
[router]
interfaces = ["eth0", "eth1"]
fib = "full"
byte_counters = false

[filter]
interfaces = ["eth0"]

[filter.rules]
default = "pass"
[[filter.rules.rule]]
name = "no-telnet"
proto = "tcp"
dport = 23
action = "drop"

[lb]
interfaces = ["eth2"]
mode = "skb"
[lb.services.encap]
source_v4 = "198.18.200.0/24"
[[lb.services.service]]
name = "web"
vip = "198.18.100.1"
proto = "tcp"
port = 80
[[lb.services.service.backend]]
address = "198.18.0.11"

[decap]
interfaces = ["eth3"]
gue_port = 7000

[[nf]]
name = "fw"
netns = "fw"

[[chain]]
name = "web"
ingress = "eth4"
nfs = ["fw"]
[[chain.match]]
dst = "198.18.16.0/24"
"#;

#[test]
fn a_good_file_says_what_each_function_runs() {
    let c = check(GOOD).unwrap_or_else(|e| panic!("{e:?}"));
    let r = c.router.unwrap();
    assert_eq!(r.interfaces, ["eth0", "eth1"]);
    assert_eq!((r.opts.fib, r.opts.no_bytes, r.mode), (xnf_router::program::FibMode::Full, true, XdpMode::Native));
    let (f, rules) = c.filter.unwrap();
    assert_eq!(f.interfaces, ["eth0"]);
    let rs = xnf_filter::rules::RuleSet::parse(&rules.text, &rules.origin).unwrap();
    assert_eq!((rs.rules.len(), rs.rules[0].line), (1, 12), "the rule's line is the box file's");
    let (l, services) = c.lb.unwrap();
    assert_eq!(l.mode, XdpMode::Skb);
    let (cfg, _) = xnf_lb::Config::parse(&services.text, &services.origin).unwrap();
    assert_eq!(cfg.services[0].name, "web");
    assert_eq!(c.decap.unwrap().opts, 7000);
    assert_eq!((c.chains.nf.len(), c.chains.chain.len()), (1, 1));
    assert_eq!(c.daemon.listen.to_string(), "127.0.0.1:9460", "the default address");
    let d = check("[daemon]\nlisten = \"0.0.0.0:9999\"\n").unwrap();
    assert_eq!(d.daemon.listen.to_string(), "0.0.0.0:9999");
    assert!(check("[daemon]\nlisten = \"localhost\"\n").unwrap_err()[0].contains("[daemon] listen"));
}

#[test]
fn an_empty_file_runs_nothing_and_a_chain_file_is_a_box_file() {
    let c = check("").unwrap();
    assert!(c.router.is_none() && c.filter.is_none() && c.lb.is_none() && c.decap.is_none());
    assert_eq!(c.chains, xnf_chain::ChainFile::default());
    let c = check("[[nf]]\nname = \"a\"\nnetns = \"a\"\n").unwrap();
    assert_eq!(c.chains.nf[0].name, "a");
}

#[test]
fn every_error_is_reported_with_its_line_and_field() {
    let bad = "[router]\ninterfaces = [\"eth0\"]\nfib = \"fast\"\n\n[filter]\ninterfaces = [\"eth1\"]\n[filter.rules]\n[[filter.rules.rule]]\nname = \"x\"\naction = \"drop\"\nproto = \"tcp\"\ndport = 70000\n[[filter.rules.rule]]\nname = \"y\"\naction = \"reject\"\n\n[lb]\ninterfaces = [\"eth1\", \"eth1\"]\n\n[decap]\ninterfaces = [\"eth0\"]\ncolour = \"red\"\n\n[bgp]\nx = 1\n";
    let errors = check(bad).unwrap_err();
    let has = |s: &str| errors.iter().any(|e| e.starts_with("xnf.toml") && e.contains(s));
    assert!(has("[router] fib: \"fast\" is not cache, full or direct"), "{errors:#?}");
    assert!(has("line 8: x: dport: 70000"), "the filter's own checker, at the box file's line of the rule: {errors:#?}");
    assert!(has("[lb] interfaces: eth1 is named twice"), "{errors:#?}");
    assert!(has("line 13: y: action"), "the filter's second fault too: {errors:#?}");
    assert!(has("line 22") && has("colour"), "{errors:#?}");
    assert!(has("[bgp]: not a section"), "{errors:#?}");
    assert_eq!(errors.len(), 6, "one error per fault, all of them: {errors:#?}");
    assert!(errors.iter().all(|e| !e.contains('\n')), "one line each: {errors:#?}");
}

#[test]
fn two_functions_in_one_stage_or_two_modes_on_one_interface_are_refused() {
    let errors = check("[lb]\ninterfaces = [\"eth0\"]\n[decap]\ninterfaces = [\"eth0\"]\n[filter]\ninterfaces = [\"eth0\"]\nmode = \"skb\"\n").unwrap_err();
    assert!(errors.iter().any(|e| e.contains("eth0: [lb] and [decap] both want its lb stage")), "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("different XDP modes")), "{errors:#?}");
    let errors = check("[router]\ninterfaces = [\"eth0\"]\n[[nf]]\nname = \"a\"\nnetns = \"a\"\n[[chain]]\nname = \"c\"\ningress = \"eth0\"\nnfs = [\"a\"]\n")
        .unwrap_err();
    assert!(errors.iter().any(|e| e.contains("[router] and a [[chain]] ingress both want its forward stage")), "{errors:#?}");
}

#[test]
fn a_rule_file_by_path_or_pasted_but_not_both() {
    let dir = std::env::temp_dir().join(format!("xnf-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.toml"), "default = \"drop\"\n").unwrap();
    let c = parse("[filter]\ninterfaces = [\"eth0\"]\nrules_file = \"rules.toml\"\n", "xnf.toml", &dir).unwrap();
    let (_, rules) = c.filter.unwrap();
    assert_eq!((rules.text.as_str(), rules.origin.clone()), ("default = \"drop\"\n", dir.join("rules.toml").display().to_string()));
    let both = parse("[filter]\ninterfaces = [\"eth0\"]\nrules_file = \"rules.toml\"\n[filter.rules]\ndefault = \"pass\"\n", "xnf.toml", &dir).unwrap_err();
    assert!(both[0].contains("rules_file and [filter.rules] both"), "{both:?}");
    let missing = parse("[filter]\ninterfaces = [\"eth0\"]\nrules_file = \"nope.toml\"\n", "xnf.toml", &dir).unwrap_err();
    assert!(missing[0].contains("rules_file: reading") && missing[0].contains("nope.toml"), "{missing:?}");
    let orphan = check("[filter.rules]\ndefault = \"drop\"\n").unwrap_err();
    assert!(orphan[0].contains("[filter.rules] without [filter]"), "{orphan:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The README's example box file checks (with its two files made here).
#[test]
fn the_readmes_example_checks() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let start = readme.find("```toml\n[router]").expect("the README's example box file") + "```toml\n".len();
    let text = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = std::env::temp_dir().join(format!("xnf-config-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bogons.txt"), "198.18.99.0/24\n").unwrap();
    std::fs::write(
        dir.join("services.toml"),
        "[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nproto = \"tcp\"\nport = 80\n[[service.backend]]\naddress = \"198.18.0.11\"\n",
    )
    .unwrap();
    let text = text.replace("/etc/xnf/bogons.txt", &dir.join("bogons.txt").display().to_string());
    let c = parse(&text, "README.md", &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let c = c.unwrap_or_else(|e| panic!("{e:#?}"));
    assert!(c.router.is_some() && c.filter.is_some() && c.lb.is_some() && c.decap.is_some() && c.chains.chain.len() == 1 && c.afxdp.len() == 1);
}
