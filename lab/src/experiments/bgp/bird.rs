//! The two BIRD configurations of `xnf lab bgp`: the peer that churns the
//! table and the probes, and dut's, that puts BGP routes into the kernel.

use ipnet::IpNet;

use super::Plan;

/// The peer's BIRD: the fixed part of the table (included), the churn
/// groups and probes as pairs of static protocols, the next hop chosen by
/// protocol on export.
pub(super) fn peer_config(plan: &Plan, dir: &std::path::Path, groups: &[Vec<IpNet>]) -> String {
    let af = plan.af();
    let mut c = format!(
        "router id 198.18.2.2;\nlog \"{}\" all;\nprotocol device {{}}\nprotocol static tbl {{ {af};\ninclude \"{}\";\n}}\n",
        crate::engine::bird::Bird::log_path(dir, "peer").display(),
        dir.join("table.conf").display()
    );
    let pair = |c: &mut String, name: &str, nets: &[String]| {
        let routes: String = nets.iter().map(|n| format!(" route {n} blackhole;")).collect();
        c.push_str(&format!(
            "protocol static {name}p {{ {af} {{ preference 200; }};{routes} }}\nprotocol static {name}a {{ {af} {{ preference 100; }};{routes} }}\n"
        ));
    };
    for (g, nets) in groups.iter().enumerate() {
        pair(&mut c, &format!("g{g}_"), &nets.iter().map(ToString::to_string).collect::<Vec<_>>());
    }
    for (i, a) in plan.probes.iter().enumerate() {
        pair(&mut c, &format!("p{i}_"), &[format!("{a}/{}", plan.host())]);
    }
    c.push_str(&format!(
        "filter nh {{\n if proto ~ \"p*_p\" then bgp_next_hop = {};\n else if proto ~ \"p*_a\" then bgp_next_hop = {};\n else if proto ~ \"g*_a\" then bgp_next_hop = {};\n else bgp_next_hop = {};\n accept;\n}}\n",
        plan.peer, plan.gen, plan.sink2, plan.sink
    ));
    c.push_str(&format!(
        "protocol bgp dut {{ local {} as 64512; neighbor {} as 64512; connect retry time 1; {af} {{ import none; export filter nh; }}; }}\n",
        plan.peer, plan.dut
    ));
    c
}

/// dut's BIRD: BGP routes into the kernel (next hops resolved through
/// the connected networks), left there when it is killed.
pub(super) fn dut_config(plan: &Plan, dir: &std::path::Path) -> String {
    let af = plan.af();
    format!(
        "router id 198.18.2.1;\nlog \"{}\" all;\nprotocol device {{}}\nprotocol direct {{ {af}; }}\nprotocol kernel {{ persist; scan time 3600; {af} {{ import none; export where source = RTS_BGP; }}; }}\nprotocol bgp peer {{ local {} as 64512; neighbor {} as 64512; connect retry time 1; {af} {{ import all; export none; }}; }}\n",
        crate::engine::bird::Bird::log_path(dir, "dut").display(),
        plan.dut,
        plan.peer
    )
}
