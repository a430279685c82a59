//! xnf-config: one configuration file says what a box runs — router,
//! filter, lb, decap, NFs and chains — checked whole before anything
//! changes (every error, with file, line and field), applied all or
//! nothing across network functions, confirmed or rolled back, and shown
//! back as a file that applies as a no-op.
//!
//! - `text`: a network function's own file inside the box file, with its
//!   lines kept, so its own checker's errors name the box file's lines;
//! - [`file`]: the box file and its checks;
//! - [`afxdp`]: the `[[afxdp]]` applications, and what `xnf daemon`
//!   records of those it runs;
//! - `stage`: where a stage network function runs, through the one
//!   lifecycle, compared and converged;
//! - `boxstate`: what runs now, as a file (`show`) and against one (`diff`);
//! - `undo`, `apply`: all or nothing, confirm and roll back;
//! - [`upgrade`]: the state and programs of another build moved to this one's;
//! - [`cli`]: the commands.

pub mod afxdp;
mod apply;
mod boxstate;
pub mod cli;
pub mod file;
mod stage;
mod text;
mod undo;
pub mod upgrade;

pub use apply::{apply, confirm, diff, interfaces, pending_seconds, rollback, show, ApplyOptions};
pub use file::{load, parse, BoxConfig, Content, DaemonSettings, Deploy};
