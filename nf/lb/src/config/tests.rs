use super::*;

const EXAMPLE: &str = r#"
[[service]]
name = "web"
vip = "198.18.0.10"
proto = "tcp"
port = 80

[[service.backend]]
address = "198.18.1.1"

[[service.backend]]
address = "198.18.1.2"
weight = 3

[[service]]
name = "dns6"
vip = "2001:db8::53"
proto = "udp"
port = 53
table_size = 655373
hash = "3-tuple"
mode = "gue"
gue_port = 7000
backend = [{ address = "198.18.2.1" }, { address = "2001:db8:1::1", weight = 0 }]

[[service]]
name = "all-ports"
vip = "198.18.0.10"
proto = "tcp"
mode = "dsr"

[[service.backend]]
address = "198.18.3.1"
mac = "02:00:00:00:00:01"

[[service.backend]]
address = "198.18.3.2"
"#;

fn parse(text: &str) -> Result<(Config, Vec<String>)> {
    Config::parse(text, "lb.toml")
}

fn error(text: &str) -> String {
    let e = format!("{:#}", parse(text).unwrap_err());
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn the_example_parses_to_what_it_says() {
    let (c, warnings) = parse(EXAMPLE).unwrap();
    assert_eq!(c.services.len(), 3);
    let web = &c.services[0];
    assert_eq!((web.name.as_str(), web.line, web.vip, web.proto, web.port), ("web", 2, "198.18.0.10".parse().unwrap(), Proto::Tcp, Some(80)));
    assert_eq!((web.table_size, web.hash, web.mode, web.drain), (65_537, HashFields::FiveTuple, Mode::Ipip, false));
    let b: Vec<_> = web.backends.iter().map(|b| (b.address.to_string(), b.weight, b.line)).collect();
    assert_eq!(b, [("198.18.1.1".to_owned(), 1, 8), ("198.18.1.2".to_owned(), 3, 11)]);
    let dns = c.service("dns6").unwrap();
    assert_eq!((dns.line, dns.table_size, dns.hash, dns.mode, dns.proto.number()), (15, 655_373, HashFields::ThreeTuple, Mode::Gue { port: 7000 }, 17));
    assert_eq!(dns.weights(), vec![("198.18.2.1".parse().unwrap(), 1), ("2001:db8:1::1".parse().unwrap(), 0)]);
    let all = c.service("all-ports").unwrap();
    assert_eq!((all.port, all.mode, all.backends[0].mac, all.backends[1].mac), (None, Mode::Dsr, Some([2, 0, 0, 0, 0, 1]), None));
    assert_eq!((all.selector(), web.selector()), ("198.18.0.10 tcp all ports".to_owned(), "198.18.0.10 tcp port 80".to_owned()));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(parse("").unwrap().0, Config::default());
}

/// A minimal service with `extra` lines, and one backend.
fn one(extra: &str, backend: &str) -> String {
    format!("# lb\n[[service]]\nname = \"web\"\nvip = \"198.18.0.10\"\nproto = \"tcp\"\n{extra}\n[[service.backend]]\n{backend}\n")
}

/// Errors name the file, the line of the service or backend, its name and
/// the field, in one line.
#[test]
fn bad_files_say_file_line_and_field() {
    let ok = "address = \"198.18.1.1\"";
    for (extra, backend, want) in [
        ("port = 0", ok, "lb.toml: line 2: web: port: 0 is not 1-65535 (omit port for all ports)"),
        ("table_size = 65536", ok, "lb.toml: line 2: web: table_size: 65536 is not prime (try 65537)"),
        ("table_size = 2000003", ok, "lb.toml: line 2: web: table_size: 2000003 is beyond 1000003"),
        ("table_size = -5", ok, "lb.toml: line 2: web: table_size: -5 is not a table size"),
        ("table_size = 9999999999999", ok, "lb.toml: line 2: web: table_size: 9999999999999 is beyond 1000003"),
        ("hash = \"4-tuple\"", ok, "lb.toml: line 2: web: hash: \"4-tuple\" is not 5-tuple or 3-tuple"),
        ("mode = \"nat\"", ok, "lb.toml: line 2: web: mode: \"nat\" is not ipip, gue or dsr"),
        ("mode = \"nat\"\ngue_port = 1", ok, "lb.toml: line 2: web: mode: \"nat\" is not ipip, gue or dsr"),
        ("gue_port = 6080", ok, "lb.toml: line 2: web: gue_port: only gue services have a gue_port"),
        ("mode = \"gue\"\ngue_port = 0", ok, "lb.toml: line 2: web: gue_port: 0 is not 1-65535"),
        ("", "address = \"198.18.1.1\"\nweight = 70000", "lb.toml: line 7: web/198.18.1.1: weight: 70000 is not 0-65535 (0 drains the backend)"),
        ("", "address = \"198.18.1\"", "lb.toml: line 7: web/backend 1: address: \"198.18.1\" is not an IP address (like 198.18.0.10 or 2001:db8::10)"),
        ("", "address = \"2001:db8::1\"", "lb.toml: line 7: web/2001:db8::1: address: an IPv6 backend of an IPv4 VIP: ipip carries IPv4 in IPv4 and IPv6 in IPv6 (mode = \"gue\" mixes them)"),
        ("", "address = \"127.0.0.1\"", "lb.toml: line 7: web/127.0.0.1: address: 127.0.0.1 is a loopback address"),
        ("mode = \"gue\"", "address = \"::ffff:198.18.1.1\"", "lb.toml: line 7: web/::ffff:198.18.1.1: address: ::ffff:198.18.1.1 is IPv4-mapped: write 198.18.1.1"),
        ("", "address = \"224.0.0.1\"", "lb.toml: line 7: web/224.0.0.1: address: 224.0.0.1 is not a unicast address"),
        ("", "weight = 2", "lb.toml: line 7: web/backend 1: address: missing: the backend's own address"),
        ("", "address = \"198.18.1.1\"\nmac = \"02:00:00:00:00:01\"", "lb.toml: line 7: web/198.18.1.1: mac: only dsr backends have a mac (ipip and gue reach them by address)"),
        ("mode = \"dsr\"", "address = \"198.18.1.1\"\nmac = \"02:00:00:00:01\"", "lb.toml: line 7: web/198.18.1.1: mac: \"02:00:00:00:01\" is not a MAC address (like 02:00:00:00:00:01)"),
        ("mode = \"dsr\"", "address = \"198.18.1.1\"\nmac = \"01:00:5e:00:00:01\"", "lb.toml: line 7: web/198.18.1.1: mac: 01:00:5e:00:00:01 is not a unicast MAC address"),
        ("", "address = \"198.18.1.1\"\nweight = 0", "lb.toml: line 2: web: backend: every backend has weight 0, so no new flow would find one (to drain the whole service on purpose, write drain = true)"),
        ("table_size = 3", "address = \"198.18.1.1\"\n[[service.backend]]\naddress = \"198.18.1.2\"\n[[service.backend]]\naddress = \"198.18.1.3\"\n[[service.backend]]\naddress = \"198.18.1.4\"", "lb.toml: line 2: web: table_size: 3 entries for 4 weighted backends: some would get no flow"),
        ("", "address = \"198.18.1.1\"\n[[service.backend]]\naddress = \"198.18.1.1\"\nweight = 2", "lb.toml: line 2: web: backend: 198.18.1.1 is given twice (lines 7 and 9)"),
        ("", "address = \"198.18.0.10\"", "lb.toml: line 7: web/198.18.0.10: address: is a VIP of this file; packets would loop"),
    ] {
        assert_eq!(error(&one(extra, backend)), want, "{extra:?} {backend:?}");
    }
}

#[test]
fn services_need_names_addresses_and_backends() {
    for (text, want) in [
        ("[[service]]\nvip = \"198.18.0.10\"", "lb.toml: line 1: service 1: name: missing: every service has a name (status and stats go by it)"),
        ("[[service]]\nname = \"a b\"", "lb.toml: line 1: service 1: name: \"a b\" is not a service name (1-32 letters, digits, - and _)"),
        ("[[service]]\nname = \"web\"\nproto = \"tcp\"", "lb.toml: line 1: web: vip: missing: the virtual address clients connect to"),
        ("[[service]]\nname = \"web\"\nvip = \"0.0.0.0\"", "lb.toml: line 1: web: vip: 0.0.0.0 is not a unicast address"),
        ("[[service]]\nname = \"web\"\nvip = \"127.0.0.1\"", "lb.toml: line 1: web: vip: 127.0.0.1 is a loopback address"),
        ("[[service]]\nname = \"web\"\nvip = \"::ffff:198.18.0.10\"", "lb.toml: line 1: web: vip: ::ffff:198.18.0.10 is IPv4-mapped: write 198.18.0.10"),
        ("[[service]]\nname = \"web\"\nvip = \"2001:db8::10\"", "lb.toml: line 1: web: proto: missing: tcp or udp"),
        ("[[service]]\nname = \"web\"\nvip = \"2001:db8::10\"\nproto = \"sctp\"", "lb.toml: line 1: web: proto: \"sctp\" is not tcp or udp"),
        (
            "[[service]]\nname = \"web\"\nvip = \"198.18.0.10\"\nproto = \"udp\"",
            "lb.toml: line 1: web: backend: none: a service needs at least one [[service.backend]]",
        ),
    ] {
        assert_eq!(error(text), want, "{text:?}");
    }
}

/// Syntax errors and unknown fields come from the TOML reader, with the line.
#[test]
fn the_toml_reader_names_lines_too() {
    let e = error(&one("colour = \"red\"", "address = \"198.18.1.1\""));
    assert!(e.starts_with("lb.toml: ") && e.contains("line 6") && e.contains("colour"), "{e}");
    let e = error(&one("", "address = \"198.18.1.1\"\nport = 80"));
    assert!(e.contains("line 9") && e.contains("port"), "{e}");
    let e = error("[[service]\nname = \"x\"\n");
    assert!(e.starts_with("lb.toml: ") && e.contains("line 1"), "{e}");
    let e = error("[[service]]\nname = \"web\"\ndrain = \"yes\"\n");
    assert!(e.contains("line 3") && e.contains("drain"), "{e}");
}

/// In a long file, the one bad line is the one named.
#[test]
fn one_bad_backend_in_a_long_file() {
    let mut text = EXAMPLE.to_owned();
    text.push_str("\n[[service]]\nname = \"api\"\nvip = \"198.18.0.11\"\nproto = \"tcp\"\nport = 443\n");
    for i in 1..=5 {
        let weight = if i == 4 { 70_000 } else { i };
        text.push_str(&format!("[[service.backend]]\naddress = \"198.18.4.{i}\"\nweight = {weight}\n"));
    }
    let line = text.lines().position(|l| l.contains("198.18.4.4")).unwrap(); // 0-based: the header's 1-based line
    assert_eq!(error(&text), format!("lb.toml: line {line}: api/198.18.4.4: weight: 70000 is not 0-65535 (0 drains the backend)"));
}

#[test]
fn services_do_not_collide() {
    let web = |name: &str, vip: &str, port: &str| {
        format!("[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nproto = \"tcp\"\n{port}\n[[service.backend]]\naddress = \"198.18.1.1\"\n")
    };
    let two = |a: String, b: String| format!("{a}\n{b}");
    assert_eq!(
        error(&two(web("web", "198.18.0.10", "port = 80"), web("web", "198.18.0.11", ""))),
        "lb.toml: line 9: web: name: used by the service at line 1 too"
    );
    assert_eq!(
        error(&two(web("a", "198.18.0.10", "port = 80"), web("b", "198.18.0.10", "port = 80"))),
        "lb.toml: line 9: b: vip: 198.18.0.10 tcp port 80 is service a's already"
    );
    assert_eq!(
        error(&two(web("a", "2001:db8::1", "gue_port = 1\nmode = \"gue\""), web("b", "2001:db8::1", "mode = \"dsr\""))),
        "lb.toml: line 10: b: vip: 2001:db8::1 tcp all ports is service a's already"
    );
    // A port-specific service and an all-ports one of the same VIP: the
    // port-specific one takes its port (the data plane looks it up first).
    let (c, _) = parse(&two(web("a", "198.18.0.10", "port = 80"), web("b", "198.18.0.10", ""))).unwrap();
    assert_eq!((c.services[0].port, c.services[1].port), (Some(80), None));
    // Another protocol, another service.
    assert!(parse(&two(web("a", "198.18.0.10", ""), web("b", "198.18.0.10", "").replace("tcp", "udp"))).is_ok());
}

#[test]
fn warnings_say_what_is_unwise() {
    let mut text = one("table_size = 101\ndrain = true", "address = \"198.18.1.1\"\nweight = 2");
    text.push_str("[[service.backend]]\naddress = \"198.18.1.2\"\n");
    let (c, w) = parse(&text).unwrap();
    assert_eq!(
        w,
        [
            "lb.toml: line 2: web: table_size: 101 entries for 2 backends: shares may be off by more than 1 %; table_size = 211 keeps them within",
            "lb.toml: line 2: web: drain: every backend is drained: new flows to 198.18.0.10 tcp all ports find no backend",
        ]
    );
    // Drained whole: weights kept, the table built with none.
    assert_eq!((c.services[0].backends[0].weight, c.services[0].weights()[0].1), (2, 0));
    // Drained whole needs no weight at all.
    assert!(parse(&one("drain = true", "address = \"198.18.1.1\"\nweight = 0")).is_ok());
    // One weighted backend takes every entry of any table: nothing is off.
    assert_eq!(parse(&one("table_size = 2", "address = \"198.18.1.1\"")).unwrap().1, Vec::<String>::new());
}

#[test]
fn limits() {
    let service = |i: usize| {
        format!(
            "[[service]]\nname = \"s{i}\"\nvip = \"198.18.0.{}\"\nproto = \"tcp\"\nport = {}\n[[service.backend]]\naddress = \"198.19.0.1\"\n",
            i % 200 + 1,
            i + 1
        )
    };
    let text: String = (0..=MAX_SERVICES).map(service).collect();
    assert_eq!(error(&text), "lb.toml: 257 services; at most 256");
    let big: String = (0..17).map(|i| service(i).replace("proto", "table_size = 1000003\nproto")).collect();
    assert_eq!(error(&big), "lb.toml: 17000051 table entries over all services; at most 16777216");
    let backends: String = (0..=MAX_BACKENDS).map(|i| format!("[[service.backend]]\naddress = \"10.0.{}.{}\"\n", i / 256, i % 256)).collect();
    let text = format!("[[service]]\nname = \"s\"\nvip = \"198.18.0.1\"\nproto = \"udp\"\n{backends}");
    assert_eq!(error(&text), "lb.toml: line 1: s: backend: 4097 backends; at most 4096");
}

#[test]
fn every_bad_service_and_backend_is_named_one_per_line() {
    let text = "[[service]]\nname = \"a\"\nvip = \"198.18.0.10\"\nproto = \"sctp\"\n[[service.backend]]\naddress = \"198.18.1.1\"\n\
                [[service]]\nname = \"b\"\nvip = \"198.18.0.11\"\nproto = \"tcp\"\n[[service.backend]]\naddress = \"198.18.1.1\"\nweight = 70000\n";
    let e = format!("{:#}", parse(text).unwrap_err());
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(lines[0].contains("line 1: a: proto") && lines[1].contains("b/198.18.1.1: weight"), "{e}");
}
