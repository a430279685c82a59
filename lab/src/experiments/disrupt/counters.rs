//! What xnf's own counters say it left to the kernel during an event,
//! read from the metrics page of the daemon that runs in dut.

use std::collections::BTreeMap;

/// xnf's counters of frames left to the kernel (or dropped) by reason,
/// from its metrics page: the router's reasons but `forwarded`, summed
/// over interfaces, and the lb's `pass` (a service's frame handed to the
/// kernel). The filter's `pass` is not one: its frames continue to the
/// next stage.
pub fn to_kernel(page: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else { continue };
        let Some((name, labels)) = key.split_once('{') else { continue };
        let label = |l: &str| labels.split(',').find_map(|kv| kv.strip_prefix(&format!("{l}=\""))?.split('"').next().map(str::to_string));
        let entry = match name {
            "xnf_router_reason_packets_total" => label("reason").filter(|r| r != "forwarded").map(|r| format!("router/{r}")),
            "xnf_lb_packets_total" => label("counter").filter(|c| c == "pass").map(|c| format!("lb/{c}")),
            _ => None,
        };
        if let (Some(k), Ok(v)) = (entry, value.parse::<f64>()) {
            *out.entry(k).or_insert(0) += v as u64;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_xnf_left_to_the_kernel_is_read_from_its_metrics_by_reason() {
        let page = "# HELP x\nxnf_router_reason_packets_total{interface=\"a\",reason=\"forwarded\"} 100\n\
            xnf_router_reason_packets_total{interface=\"a\",reason=\"no-neigh\"} 3\n\
            xnf_router_reason_packets_total{interface=\"b\",reason=\"no-neigh\"} 2\n\
            xnf_filter_packets_total{counter=\"pass\"} 50\nxnf_lb_packets_total{counter=\"pass\"} 1\n\
            xnf_lb_packets_total{counter=\"continue\"} 9\n";
        let m = to_kernel(page);
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [("lb/pass".to_string(), 1), ("router/no-neigh".to_string(), 5)]);
    }
}
