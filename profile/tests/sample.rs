//! Sampled stacks on a known workload: a thread pinned to CPU 0 alternates
//! a compute loop in a function of its own and a cheap system call; the
//! samples of CPU 0 must show the kernel's syscall path in kernel frames
//! and the function by name in user frames. A CPU that does not exist is
//! refused with its number.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xnf_profile::sample::{SampleOptions, Sampler};

#[inline(never)]
fn xnf_profile_test_spin(stop: &AtomicBool) {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..20_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        // SAFETY: no arguments, no memory.
        unsafe { libc::getppid() };
    }
}

#[test]
fn a_pinned_busy_thread_is_found_in_kernel_and_user_frames() {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        let mut set = nix::sched::CpuSet::new();
        set.set(0).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        xnf_profile_test_spin(&s);
    });
    let sampler = Sampler::start(&SampleOptions { cpus: vec![0], frequency: 999 }).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let st = sampler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert!(st.samples > 200, "about 1,200 samples expected at 999 Hz for 1.2 s: {}", st.samples);
    assert!(st.stacks.iter().all(|s| s.cpu == 0), "only CPU 0 was sampled");
    // Without frame pointers the user stack is the leaf and little more:
    // the leaf is often a helper the loop calls, so the function itself is
    // asked to appear, and the leaves to be named, not addresses.
    let count = |f: &dyn Fn(&xnf_profile::sample::Stack) -> bool| st.stacks.iter().filter(|s| f(s)).map(|s| s.count).sum::<u64>();
    let ours = count(&|s| s.frames.iter().any(|f| f.contains("xnf_profile_test_spin")));
    assert!(ours > 0, "the busy thread's function by name:\n{}", st.folded());
    let named = count(&|s| s.kernel_from > 1 && s.frames[s.kernel_from - 1].chars().any(char::is_alphabetic) && !s.frames[s.kernel_from - 1].contains("+0x"));
    assert!(named * 2 > st.samples, "user leaves named in most samples: {named} of {}\n{}", st.samples, st.folded());
    assert!(
        st.stacks.iter().any(|s| s.frames[s.kernel_from..].iter().any(|f| f.contains("getppid") || f.contains("syscall"))),
        "the system call in kernel frames:\n{}",
        st.folded()
    );
    let top = st.top(5);
    assert!(!top.is_empty() && top[0].self_pct > 0.0);
}

#[test]
fn a_cpu_that_does_not_exist_is_named() {
    let e = Sampler::start(&SampleOptions { cpus: vec![4095], frequency: 99 }).err().expect("refused");
    assert!(e.to_string().contains("CPU 4095"), "{e:#}");
}
