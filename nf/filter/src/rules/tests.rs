use super::*;

const EXAMPLE: &str = r#"
default = "pass"

[lists]
blocklist = "/etc/xnf/drop.txt"

[[rule]]
name = "listed sources"
src = "@blocklist"
action = "drop"

[[rule]]
name = "SYN flood"
proto = "tcp"
tcp_flags = "SYN,!ACK"
action = "rate-limit"
pps = 2000
burst = 4000

[[rule]]
proto = "udp"
dport = "1024-65535"
length = "1000-1518"
vlan = 100
action = "count"

[[rule]]
name = "ping6"
proto = "icmpv6"
icmp_type = 128
dst = "2001:db8::/32"
action = "pass"
"#;

#[test]
fn the_documented_example_parses_to_what_it_says() {
    let s = RuleSet::parse(EXAMPLE, "f.toml").unwrap();
    assert!(!s.default_drop);
    assert_eq!(s.lists["blocklist"], "/etc/xnf/drop.txt");
    let r = &s.rules;
    assert_eq!(r.len(), 4);
    assert_eq!((r[0].name.as_str(), r[0].line, r[0].src.clone(), r[0].action), ("listed sources", 7, Some(Addr::List("blocklist".into())), Action::Drop));
    assert_eq!(r[1].tcp_flags, Some(TcpFlags { set: 0x02, clear: 0x10 }));
    assert_eq!(r[1].action, Action::RateLimit { pps: Some(2000), bps: None, burst: 4000 });
    assert!(r[1].needs_l4());
    assert_eq!((r[2].name.as_str(), r[2].proto, r[2].dport, r[2].length, r[2].vlan), ("rule 3", Some(17), Some((1024, 65535)), Some((1000, 1518)), Some(100)));
    assert_eq!(r[2].action, Action::Count);
    assert_eq!((r[3].ipv6, r[3].icmp_type, r[3].proto), (Some(true), Some(128), Some(58)));
    assert!(!r[0].needs_l4());
}

#[test]
fn defaults_ports_and_bursts() {
    let s = RuleSet::parse("default = \"drop\"\n[[rule]]\nproto = \"udp\"\ndport = 53\naction = \"rate-limit\"\nbps = 1000000\n", "f").unwrap();
    assert!(s.default_drop);
    assert_eq!(s.rules[0].dport, Some((53, 53)));
    assert_eq!(s.rules[0].action, Action::RateLimit { pps: None, bps: Some(1_000_000), burst: 1_000_000 });
    assert!(RuleSet::parse("", "empty").unwrap().rules.is_empty());
}

/// Every bad file names the file, the line of the rule and the field.
#[test]
fn bad_files_say_file_line_and_field() {
    let rule = |body: &str| format!("default = \"pass\"\n[lists]\nbl = \"x\"\n\n[[rule]]\n{body}\n");
    for (body, field, why) in [
        ("action = \"reject\"", "action", "not drop, pass, count, rate-limit or syn-cookie"),
        ("action = \"syn-cookie\"", "action", "syn-cookie needs proto = \"tcp\""),
        ("action = \"syn-cookie\"\nproto = \"tcp\"\ntcp_flags = \"SYN\"", "tcp_flags", "looks at the flags itself"),
        ("action = \"syn-cookie\"\nproto = \"tcp\"\nmss = 100", "mss", "not 536-9000"),
        ("action = \"drop\"\nmss = 1400", "mss", "only syn-cookie rules"),
        ("action = \"drop\"\nsrc = \"198.18.0.1/15\"", "src", "host bits"),
        ("action = \"drop\"\nsrc = \"@nope\"", "src", "not in [lists]"),
        ("action = \"drop\"\ndport = 80", "dport", "ports need proto"),
        ("action = \"drop\"\nproto = \"udp\"\ntcp_flags = \"SYN\"", "tcp_flags", "need proto = \"tcp\""),
        ("action = \"drop\"\nproto = \"tcp\"\ntcp_flags = \"SYN,FOO\"", "tcp_flags", "unknown TCP flag"),
        ("action = \"drop\"\nproto = \"tcp\"\ntcp_flags = \"SYN,!SYN\"", "tcp_flags", "named twice"),
        ("action = \"drop\"\nicmp_type = 8", "icmp_type", "needs proto"),
        ("action = \"drop\"\nproto = \"udp\"\ndport = \"90-80\"", "dport", "empty"),
        ("action = \"drop\"\nproto = \"udp\"\nsport = 70000", "sport", "out of range"),
        ("action = \"drop\"\nproto = \"bogus\"", "proto", "not a protocol"),
        ("action = \"drop\"\nvlan = 4095", "vlan", "not 1-4094"),
        ("action = \"drop\"\nsrc = \"198.18.0.0/15\"\ndst = \"2001:db8::/32\"", "dst", "mixes IPv4 and IPv6"),
        ("action = \"drop\"\nproto = \"icmpv6\"\nsrc = \"198.18.0.0/15\"", "proto", "mixes IPv4 and IPv6"),
        ("action = \"drop\"\nfamily = \"ipv5\"", "family", "not ipv4 or ipv6"),
        ("action = \"rate-limit\"", "action", "needs pps"),
        ("action = \"rate-limit\"\npps = 0", "pps", "rate of 0"),
        ("action = \"rate-limit\"\npps = 10\nburst = 0", "burst", "burst of 0"),
        ("action = \"drop\"\npps = 10", "pps", "only rate-limit rules"),
    ] {
        let e = format!("{:#}", RuleSet::parse(&rule(body), "rules.toml").unwrap_err());
        assert!(e.contains("rules.toml: line 5: rule 1: ") && e.contains(&format!("{field}: ")) && e.contains(why), "{body:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Syntax errors and unknown fields come from the TOML reader, with the line.
    let e = RuleSet::parse("[[rule]]\naction = \"drop\"\ncolour = \"red\"\n", "r.toml").unwrap_err().to_string();
    assert!(e.contains("r.toml") && e.contains("colour") && e.contains("line 3"), "{e}");
    let e = RuleSet::parse("[[rule]]\nname = \"a\"\naction = \"drop\"\n[[rule]]\nname = \"a\"\naction = \"pass\"\n", "r.toml").unwrap_err().to_string();
    assert!(e.contains("line 4") && e.contains("used twice"), "{e}");
    let e = RuleSet::parse("default = \"allow\"\n", "r.toml").unwrap_err().to_string();
    assert!(e.contains("default") && e.contains("pass or drop"), "{e}");
    let e = RuleSet::parse("[lists]\n\"a b\" = \"x\"\n", "r.toml").unwrap_err().to_string();
    assert!(e.contains("not a list name"), "{e}");
}

#[test]
fn too_many_rules_are_refused() {
    let text: String = (0..=MAX_RULES).map(|_| "[[rule]]\naction = \"drop\"\n").collect();
    let e = RuleSet::parse(&text, "big.toml").unwrap_err().to_string();
    assert!(e.contains(&format!("{} rules; at most {MAX_RULES}", MAX_RULES + 1)), "{e}");
}

#[test]
fn too_many_lists_are_refused() {
    let lists: String = (0..=MAX_LISTS).map(|i| format!("l{i} = \"l{i}.txt\"\n")).collect();
    let e = RuleSet::parse(&format!("[lists]\n{lists}"), "lists.toml").unwrap_err().to_string();
    assert_eq!(e, "lists.toml: [lists]: 9 lists; at most 8");
}

#[test]
fn every_bad_rule_is_named_one_per_line() {
    let text =
        "[[rule]]\nname = \"a\"\naction = \"reject\"\n[[rule]]\nname = \"ok\"\naction = \"drop\"\n[[rule]]\nname = \"b\"\ndport = 80\naction = \"drop\"\n";
    let e = RuleSet::parse(text, "r.toml").unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(lines[0].starts_with("r.toml: line 1: a: action") && lines[1].starts_with("r.toml: line 7: b: dport"), "{e}");
}
