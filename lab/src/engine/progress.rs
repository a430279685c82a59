//! The live view of a long lab run: a progress bar on stderr with what is
//! being measured (variant, point, rate step) and the time left. Without a
//! terminal (CI, a pipe) it prints one line per step instead.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    /// Planned seconds done so far (the bar's position, in tenths).
    done: f64,
    prefix: String,
}

impl Progress {
    /// A bar over `planned_secs` of measuring.
    pub fn new(planned_secs: f64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::with_draw_target(Some((planned_secs * 10.0) as u64), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} ~{eta} left\n  {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { bar, done: 0.0, prefix: String::new() }
    }

    /// What is being measured now (shown before every message).
    pub fn set_prefix(&mut self, prefix: String) {
        self.prefix = prefix;
    }

    /// A status line.
    pub fn message(&self, msg: &str) {
        let line = if self.prefix.is_empty() { msg.to_string() } else { format!("{} — {msg}", self.prefix) };
        match &self.bar {
            Some(b) => b.set_message(line),
            None => eprintln!("xnf lab: {line}"),
        }
    }

    /// A line that stays (printed above the bar).
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(format!("xnf lab: {msg}")),
            None => eprintln!("xnf lab: {msg}"),
        }
    }

    /// Marks `secs` of the plan as done.
    pub fn advance(&mut self, secs: f64) {
        self.done += secs;
        if let Some(b) = &self.bar {
            b.set_position((self.done * 10.0) as u64);
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
