//! The reference model of the AF_XDP selector (`afxdp.bpf.c`): what it
//! must do with a frame, from its documented contract (README "The
//! selector", `AfxdpProgram::set_rules`, `classify.h`) and the kernel's
//! reading of the frame (`xnf_testrun::kernel`), not from the C.
//!
//! - Without classes every frame goes to the socket of its queue.
//! - With classes, a frame goes to the socket when it is in one of them.
//!   Stacked tags (QinQ), headers the kernel would drop (malformed) and
//!   non-IP frames are the kernel's, each with its reason.
//! - A frame that may be in a class but hides what the class needs (its
//!   protocol or ports: a later fragment, an L4 header cut by the end of
//!   the IP packet, an IPv6 extension chain too long or cut short) is
//!   never the kernel's behind the NF's back: it goes to user space
//!   ("l4-unknown-to-user"), or is dropped with `unsure_drop`. A frame
//!   that is surely in some class is simply in it: every class leads to
//!   the same socket, so an earlier "may be" changes nothing for it.
//! - Whatever goes to user space on a queue without a socket is the
//!   kernel's ("no-socket": bpf_redirect_map's fallback, XDP_PASS).
//! - The selector never changes a frame.
//!
//! In BPF_PROG_TEST_RUN a redirect to an XSKMAP slot that holds a socket
//! returns XDP_REDIRECT (the redirect itself is not carried out).

use xnf_afxdp::selector::Reason;
use xnf_core::class::Class;
use xnf_testrun::kernel::{class_match, view, ClassMatch, L2, L3};
use xnf_testrun::Verdict;

/// One selector's configuration: its classes (none: everything) and what
/// becomes of frames that may be in a class.
#[derive(Clone, Debug)]
pub struct Selector {
    pub name: String,
    pub classes: Vec<Class>,
    pub unsure_drop: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub verdict: Verdict,
    pub reason: Reason,
}

fn pass(reason: Reason) -> Expect {
    Expect { verdict: Verdict::Pass, reason }
}

/// Where the classes send a frame: to user space (with the reason), or
/// to the kernel (with why).
fn classify(sel: &Selector, frame: &[u8]) -> Reason {
    if sel.classes.is_empty() {
        return Reason::ToUser;
    }
    let v = view(frame);
    match (&v.l2, &v.l3) {
        (L2::Stacked, _) => return Reason::QinQ,
        (L2::Truncated, _) | (_, L3::Malformed) => return Reason::Malformed,
        (_, L3::NonIp(_)) => return Reason::NonIp,
        _ => {}
    }
    let matches: Vec<ClassMatch> = sel.classes.iter().map(|c| class_match(c, &v)).collect();
    if matches.contains(&ClassMatch::Yes) {
        Reason::ToUser
    } else if matches.contains(&ClassMatch::Unsure) {
        if sel.unsure_drop {
            Reason::UnsureDropped
        } else {
            Reason::UnsureToUser
        }
    } else {
        Reason::NoMatch
    }
}

/// What the selector `sel` must do with `frame` arriving on a queue with
/// (`socket`) or without a socket.
pub fn decide(sel: &Selector, frame: &[u8], socket: bool) -> Expect {
    match classify(sel, frame) {
        Reason::UnsureDropped => Expect { verdict: Verdict::Drop, reason: Reason::UnsureDropped },
        r @ (Reason::ToUser | Reason::UnsureToUser) if socket => Expect { verdict: Verdict::Redirect, reason: r },
        Reason::ToUser | Reason::UnsureToUser => pass(Reason::NoSocket),
        r => pass(r),
    }
}
