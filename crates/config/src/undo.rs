//! What an apply has done so far, as the steps that take it back: run in
//! reverse order when a later step fails, so the box is as it was.

use anyhow::Result;

/// Steps that undo an apply's changes, last first.
#[derive(Default)]
pub struct Undo(Vec<Box<dyn FnOnce() -> Result<()>>>);

impl Undo {
    pub fn push(&mut self, step: Box<dyn FnOnce() -> Result<()>>) {
        self.0.push(step);
    }

    /// Runs every step, last first; the ones that failed, as messages.
    pub fn run(self) -> Vec<String> {
        self.0.into_iter().rev().filter_map(|step| step().err().map(|e| format!("{e:#}"))).collect()
    }
}
