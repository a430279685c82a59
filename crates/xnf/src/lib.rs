//! `xnf`: eXpress Network Functions. This crate only composes the commands
//! of each network function, reports errors in one line, and runs the lab
//! (the `xnf-lab` binary) for `xnf lab`; everything the commands do lives
//! in their own crates (see the README's layout).
//!
//! - [`cli`]: the clap definitions of `xnf` and what each command runs;
//! - [`docs`]: man pages and shell completions generated from them;
//! - [`lab`]: `xnf lab ARGS...`, which execs `xnf-lab ARGS...`.

pub mod cli;
pub mod docs;
pub mod lab;
