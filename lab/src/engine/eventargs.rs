//! The command line of an experiment that measures events under a steady
//! stream rather than intervals of traffic (`fib-change`, `disrupt`), or
//! no traffic at all (`cost`, programs by test run): the
//! driver's common options with `--runs` under the experiment's own name,
//! and those it cannot honour hidden from its help and refused, naming the
//! flag, when typed. clap tells a typed option from its default here (the
//! common options' defaults are plain values once parsed).

use anyhow::{bail, ensure, Result};
use clap::{ArgMatches, Args, Command, FromArgMatches};

use super::driver::Common;

/// Common options no event experiment honours, refused by its plan when
/// given (`--zero-loss`, the load curve, profiling): hidden from its help.
const HIDDEN: [&str; 10] = ["seconds", "warmup", "trial_seconds", "cpu", "zero_loss", "load_curve", "load_rates", "profile", "flame", "prog_stats"];

/// What an event experiment says of its command line.
pub trait EventOptions: Args + FromArgMatches {
    /// `--runs` as it is named here: its long name, value name, default,
    /// most allowed and help.
    const RUNS: (&'static str, &'static str, &'static str, u32, &'static str);
    /// Common options it cannot honour that have a default (so that only
    /// clap knows whether they were typed): clap id, flag, why.
    const UNUSED: &'static [(&'static str, &'static str, &'static str)];
    /// Help of `--json` and `--csv` (None: `--csv` is hidden and refused
    /// through [`UNUSED`](Self::UNUSED)).
    const OUTPUTS: (&'static str, Option<&'static str>);
    /// Common options of [`HIDDEN`] it does honour, shown with its own
    /// help: clap id, help.
    const SHOWN: &'static [(&'static str, &'static str)] = &[];
}

/// An event experiment's command line: the common options, its own.
pub struct EventArgs<E> {
    pub common: Common,
    pub experiment: E,
    /// Common options given that it has no use for: flag, why.
    unused: Vec<(&'static str, &'static str)>,
}

impl<E: EventOptions> EventArgs<E> {
    /// Refuses what was typed that it cannot honour, and a number of runs
    /// out of range, naming the flag.
    pub fn refuse(&self) -> Result<()> {
        if let Some((flag, why)) = self.unused.first() {
            bail!("{flag}: {why}");
        }
        let (long, .., most, _) = E::RUNS;
        let n = self.common.runs;
        ensure!((1..=most).contains(&n), "--{long} {n}: 1 to {most}");
        Ok(())
    }

    fn adjust(cmd: Command) -> Command {
        let (long, value, default, _, help) = E::RUNS;
        let hidden = HIDDEN.iter().filter(|id| !E::SHOWN.iter().any(|(s, _)| s == *id)).chain(if E::OUTPUTS.1.is_none() { &["csv"][..] } else { &[] });
        let cmd = hidden.fold(cmd, |c, id| c.mut_arg(*id, |a| a.hide(true)));
        let cmd = E::SHOWN.iter().fold(cmd, |c, (id, help)| c.mut_arg(*id, |a| a.help(*help)));
        let cmd = cmd.mut_arg("runs", |a| {
            let a = a.long(long).value_name(value).default_value(default).help(help);
            // Under another name, `--runs` still works.
            if long == "runs" {
                a
            } else {
                a.visible_alias("runs")
            }
        });
        let cmd = cmd.mut_arg("json", |a| a.help(E::OUTPUTS.0));
        match E::OUTPUTS.1 {
            Some(csv) => cmd.mut_arg("csv", |a| a.help(csv)),
            None => cmd,
        }
    }
}

impl<E: EventOptions> FromArgMatches for EventArgs<E> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let (common, experiment) = (Common::from_arg_matches(m)?, E::from_arg_matches(m)?);
        let given = |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        let unused = E::UNUSED.iter().filter(|(id, ..)| given(id)).map(|(_, flag, why)| (*flag, *why)).collect();
        Ok(EventArgs { common, experiment, unused })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<E: EventOptions> Args for EventArgs<E> {
    fn augment_args(cmd: Command) -> Command {
        Self::adjust(E::augment_args(Common::augment_args(cmd)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::adjust(E::augment_args_for_update(Common::augment_args_for_update(cmd)))
    }
}
