//! Drop reasons by name, read from the running kernel's BTF (`enum
//! skb_drop_reason`): the numbers change between kernel versions (6.1 and
//! 6.18 number NO_SOCKET differently), so a table compiled into xnf would
//! name the wrong reason on some kernel.

use std::collections::HashMap;

use anyhow::{Context, Result};
use libbpf_rs::btf::types::Enum;
use libbpf_rs::btf::Btf;

/// The running kernel's drop reasons.
#[derive(Clone, Debug, Default)]
pub struct Reasons {
    names: HashMap<u32, String>,
}

impl Reasons {
    /// From /sys/kernel/btf/vmlinux.
    pub fn load() -> Result<Self> {
        let btf = Btf::from_vmlinux().context("reading the kernel's BTF (/sys/kernel/btf/vmlinux) for the drop reasons' names")?;
        let e = btf.type_by_name::<Enum>("skb_drop_reason").context("the kernel's BTF has no enum skb_drop_reason (drop reasons came in Linux 5.17)")?;
        let names = e
            .iter()
            .filter_map(|m| Some((m.value as u32, m.name?.to_string_lossy().into_owned())))
            .map(|(v, n)| (v, n.strip_prefix("SKB_DROP_REASON_").map(str::to_string).unwrap_or(n)))
            .collect();
        Ok(Self { names })
    }

    /// The reason's name without the SKB_DROP_REASON_ prefix, or its number.
    pub fn name(&self, reason: u32) -> String {
        self.names.get(&reason).cloned().unwrap_or_else(|| format!("reason {reason}"))
    }

    /// The value of a reason by name (`NO_SOCKET`, `SKB_CONSUMED`).
    pub fn value(&self, name: &str) -> Option<u32> {
        self.names.iter().find(|(_, n)| *n == name).map(|(v, _)| *v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_kernel_names_its_reasons() {
        let r = Reasons::load().unwrap();
        let no_socket = r.value("NO_SOCKET").expect("every kernel with drop reasons has NO_SOCKET");
        assert_eq!(r.name(no_socket), "NO_SOCKET");
        assert!(r.value("SKB_CONSUMED").is_some() || r.value("NOT_SPECIFIED").is_some());
        assert_eq!(r.name(0xfff_fff0), format!("reason {}", 0xfff_fff0u32));
    }
}
