//! Documentation generated from the clap definitions: shell completions
//! (`xnf completions SHELL`) and man pages (`xnf man --out DIR`, hidden;
//! `make man`).

use std::path::Path;

use anyhow::{ensure, Context, Result};

/// The shells `xnf completions` writes scripts for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes `shell`'s completion script for xnf to `out`.
pub fn completions(shell: Shell, out: &mut dyn std::io::Write) -> Result<()> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut crate::cli::command(), "xnf", out);
    Ok(())
}

/// Writes one man page per command into `dir`, named as `man xnf-router`
/// finds it: xnf.1, xnf-router.1, xnf-router-attach.1, ... (hidden
/// commands have none). The lab's come from `xnf-lab man` when it is
/// installed (xnf-lab.1, xnf-lab-router.1, ..., replacing the short page of
/// `xnf lab` written here); without it, a note says they are missing.
pub fn man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_pages(crate::cli::command(), dir).with_context(|| format!("writing man pages into {}", dir.display()))?;
    let Some(lab) = crate::lab::find() else {
        eprintln!("xnf: note: {}; its pages are not written", crate::lab::NOT_INSTALLED);
        return Ok(());
    };
    let st = std::process::Command::new(&lab).arg("man").arg("--out").arg(dir).status().with_context(|| format!("running {}", lab.display()))?;
    ensure!(st.success(), "{} man --out {} failed ({st})", lab.display(), dir.display());
    Ok(())
}

/// Writes the pages of `cmd` and of its subcommands at every depth, each
/// named by its display name (`xnf-router-attach`), with `xnf VERSION` as
/// the source in the page's footer.
fn write_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    fn write(cmd: &clap::Command, dir: &Path, source: &str) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub, dir, source)?;
        }
        clap_mangen::Man::new(cmd.clone()).source(source).generate_to(dir).map(drop)
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    write(&cmd, dir, &format!("xnf {}", env!("CARGO_PKG_VERSION")))
}
