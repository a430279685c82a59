//! The AF_XDP selector (`afxdp.bpf.c`): hands the selected traffic to
//! the AF_XDP socket of its RX queue, leaves the rest to the kernel.

use std::os::fd::{AsFd, AsRawFd};
use xnf_core::features::{explain, Feature};

use anyhow::{ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, ProgramMut};

use xnf_core::class::Class;
use xnf_core::maps::{as_bytes, from_bytes, object_storage, sum_percpu, swap};

use crate::skel::afxdp::{types, AfxdpSkel, AfxdpSkelBuilder};

/// Queues a program can have sockets on.
pub const MAX_QUEUES: u32 = types::xnf_afxdp_limits::XNF_AFXDP_MAX_QUEUES.0;
/// Classes of traffic a program hands to user space.
pub const MAX_RULES: usize = types::xnf_afxdp_limits::XNF_AFXDP_MAX_RULES.0 as usize;

xnf_core::c_enum! {
    /// What happened to frames (`enum xnf_afxdp_reason`).
    pub enum Reason: types::xnf_afxdp_reason, max XNF_AX_MAX {
        ToUser = XNF_AX_TO_USER => "to-user",
        NoSocket = XNF_AX_NO_SOCKET => "no-socket",
        NoMatch = XNF_AX_NO_MATCH => "no-match",
        NonIp = XNF_AX_NON_IP => "non-ip",
        Malformed = XNF_AX_MALFORMED => "malformed",
        QinQ = XNF_AX_QINQ => "qinq",
        UnsureToUser = XNF_AX_UNSURE_USER => "l4-unknown-to-user",
        UnsureDropped = XNF_AX_UNSURE_DROP => "l4-unknown-dropped",
    }
}

/// Frames per reason, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats(pub [u64; Reason::ALL.len()]);

impl Stats {
    pub fn get(&self, r: Reason) -> u64 {
        self.0[r as usize]
    }

    /// Everything left to the kernel.
    pub fn to_kernel(&self) -> u64 {
        use Reason::*;
        [NoSocket, NoMatch, NonIp, Malformed, QinQ].iter().map(|r| self.get(*r)).sum()
    }

    /// Everything sent to user space.
    pub fn to_user(&self) -> u64 {
        self.get(Reason::ToUser) + self.get(Reason::UnsureToUser)
    }
}

/// The loaded selector. Dropping it takes every socket it was given out of
/// the XSKMAP first: a map entry holds its socket, the map itself is freed
/// only later, and until then the socket's queue stays bound — a new socket
/// on that queue would find it busy. So drop the program before the sockets.
pub struct AfxdpProgram {
    skel: AfxdpSkel<'static>,
    queues: std::cell::RefCell<Vec<u32>>,
}

impl Drop for AfxdpProgram {
    fn drop(&mut self) {
        for q in self.queues.take() {
            let _ = self.del_socket(q);
        }
    }
}

impl AfxdpProgram {
    pub fn load() -> Result<Self> {
        let open = AfxdpSkelBuilder::default().open(object_storage()).context("opening the afxdp BPF object")?;
        let skel = open.load().context("loading the afxdp program").map_err(|e| explain(e, &[Feature::Xskmap]))?;
        Ok(Self { skel, queues: Default::default() })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_afxdp
    }

    /// Sets the classes (first match wins); none: every frame on a queue
    /// with a socket goes to user space.
    ///
    /// A frame that may be in a class but whose L4 header cannot be read
    /// (a later fragment, a truncated L4 header, too many IPv6 extension
    /// headers) goes to user space too, or with `unsure_drop` is dropped:
    /// never to the kernel behind the NF's back. A frame that some class
    /// surely holds is in it, whatever an earlier class may hold: every
    /// class leads to the same socket. The classes are swapped in
    /// as one table (see [`xnf_core::maps::swap`]).
    pub fn set_rules(&self, rules: &[Class], unsure_drop: bool) -> Result<()> {
        ensure!(rules.len() <= MAX_RULES, "{} classes: at most {MAX_RULES}", rules.len());
        if rules.is_empty() {
            return swap::clear(&self.skel.maps.classes);
        }
        let flags = if unsure_drop { types::xnf_afxdp_class_flag::XNF_AX_CLASS_UNSURE_DROP.0 } else { 0 };
        let table = rules
            .iter()
            .map(|r| {
                // The same C struct (xnf/classify.h) in this skeleton's types.
                let m: types::xnf_match = from_bytes(as_bytes(&r.to_raw()?));
                Ok(as_bytes(&types::xnf_afxdp_class { used: 1, flags, m }).to_vec())
            })
            .collect::<Result<Vec<_>>>()?;
        swap::replace(&self.skel.maps.classes, std::mem::size_of::<types::xnf_afxdp_class>() as u32, MAX_RULES as u32, &table)
    }

    /// Puts the AF_XDP socket `fd` in the slot of `queue`.
    pub fn add_socket(&self, queue: u32, fd: impl AsFd) -> Result<()> {
        ensure!(queue < MAX_QUEUES, "queue {queue}: at most {MAX_QUEUES} queues");
        let v = fd.as_fd().as_raw_fd() as u32;
        self.skel
            .maps
            .xsks
            .update(&queue.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("putting the socket of queue {queue} in the XSKMAP"))?;
        self.queues.borrow_mut().push(queue);
        Ok(())
    }

    pub fn del_socket(&self, queue: u32) -> Result<()> {
        self.skel.maps.xsks.delete(&queue.to_ne_bytes()).with_context(|| format!("removing the socket of queue {queue}"))
    }

    pub fn stats(&self) -> Result<Stats> {
        Ok(Stats(sum_percpu::<{ Reason::ALL.len() }>(&self.skel.maps.stats, 0)?))
    }
}
