//! Man pages and shell completions, generated from the clap definitions.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use xnf_testrun::cli::TempFiles;

fn xnf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xnf"))
}

/// The display names (`xnf-router-attach`) of every command that is not
/// hidden, at every depth, and the depth of the deepest.
fn commands() -> (BTreeSet<String>, usize) {
    fn walk(cmd: &clap::Command, depth: usize, names: &mut BTreeSet<String>) -> usize {
        names.insert(cmd.get_display_name().unwrap_or(cmd.get_name()).to_string());
        cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| walk(s, depth + 1, names)).max().unwrap_or(depth)
    }
    let mut cmd = xnf::cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut names = BTreeSet::new();
    let depth = walk(&cmd, 1, &mut names);
    (names, depth)
}

/// The commands `xnf ARGS --help` lists.
fn listed(args: &[&str]) -> Vec<String> {
    let out = xnf().args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "xnf {args:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let list = text.split("Commands:\n").nth(1).unwrap_or_else(|| panic!("xnf {args:?} --help lists no commands:\n{text}"));
    list.lines().take_while(|l| l.starts_with("  ")).filter_map(|l| l.split_whitespace().next()).filter(|c| *c != "help").map(String::from).collect()
}

/// Checks that `page` is the man page of `name`: before its first section,
/// only string definitions and a `.TH` line whose title is `name`.
fn check_page(dir: &Path, name: &str) {
    let path = dir.join(format!("{name}.1"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let head: Vec<&str> = text.lines().take_while(|l| !l.starts_with(".SH")).collect();
    let th: Vec<&&str> = head.iter().filter(|l| l.starts_with(".TH ")).collect();
    assert_eq!(th.len(), 1, "{name}.1 has no .TH line before its sections:\n{}", head.join("\n"));
    assert_eq!(th[0].split_whitespace().nth(1), Some(name), "{name}.1: {}", th[0]);
    assert!(head.iter().all(|l| l.starts_with(".TH ") || l.starts_with(".ie ") || l.starts_with(".el ")), "{name}.1 begins with text:\n{}", head.join("\n"));
    let after = text.split(".SH NAME\n").nth(1).unwrap_or_else(|| panic!("{name}.1 has no NAME section"));
    assert!(after.starts_with(&name.replace('-', "\\-")), "{name}.1's NAME section names something else: {}", after.lines().next().unwrap_or(""));
}

#[test]
fn man_writes_a_page_for_every_command_at_every_depth() {
    let dir = TempFiles::new("man");
    let out = xnf().arg("man").arg("--out").arg(dir.dir()).output().unwrap();
    assert!(out.status.success(), "xnf man: {}", String::from_utf8_lossy(&out.stderr));
    let (names, depth) = commands();
    assert!(depth >= 4, "the deepest command is {depth} levels down (xnf lb decap attach is 4)");
    for name in &names {
        check_page(dir.dir(), name);
    }
    // The walk agrees with what --help shows, at the top and one level
    // down (`xnf lab --help` is xnf-lab's, whose pages xnf-lab writes).
    for top in listed(&[]) {
        assert!(names.contains(&format!("xnf-{top}")), "xnf --help lists {top}, which has no page");
        let out = xnf().arg(&top).arg("--help").output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("Commands:") {
            for sub in listed(&[&top]) {
                check_page(dir.dir(), &format!("xnf-{top}-{sub}"));
            }
        }
    }
    for name in ["xnf", "xnf-router", "xnf-router-attach", "xnf-lb-decap-attach", "xnf-completions", "xnf-lab"] {
        assert!(names.contains(name), "{name} is not among the commands: {names:?}");
    }
    // Hidden commands have none; the lab's come from xnf-lab, beside xnf.
    assert!(!dir.dir().join("xnf-man.1").exists(), "the hidden `man` command has a page");
    for name in ["xnf-lab", "xnf-lab-router", "xnf-lab-fib-change", "xnf-lab-report"] {
        check_page(dir.dir(), name);
    }
    let lab = std::fs::read_to_string(dir.dir().join("xnf-lab-router.1")).unwrap();
    assert!(lab.contains("\\fBxnf lab router\\fR"), "the lab's synopsis says `xnf lab router`");
    assert!(lab.contains("\\-\\-seconds"), "the lab's page has the experiment's options");
    // Nothing else: every page is a command's.
    for e in std::fs::read_dir(dir.dir()).unwrap() {
        let file = e.unwrap().file_name().into_string().unwrap();
        let name = file.strip_suffix(".1").unwrap_or_else(|| panic!("{file} is not a section-1 page"));
        assert!(names.contains(name) || name.starts_with("xnf-lab-"), "{file} is no command's page");
    }
}

#[test]
fn man_needs_a_folder() {
    let out = xnf().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--out"), "{err}");
}

#[test]
fn man_is_hidden_and_completions_documented() {
    let top = listed(&[]);
    assert!(!top.iter().any(|c| c == "man"), "xnf --help lists man: {top:?}");
    assert!(top.iter().any(|c| c == "completions"), "xnf --help does not list completions: {top:?}");
    assert!(top.iter().any(|c| c == "lab"), "xnf --help does not list lab: {top:?}");
}

fn completions(shell: &str) -> String {
    let out = xnf().args(["completions", shell]).output().unwrap();
    assert!(out.status.success(), "xnf completions {shell}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn bash_completions_parse_and_know_the_subcommands() {
    let script = completions("bash");
    assert!(script.contains("router") && script.contains("attach"), "{script}");
    let dir = TempFiles::new("bash");
    let file = dir.dir().join("xnf.bash");
    std::fs::write(&file, &script).unwrap();
    let out = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
    // Sourced, it completes `xnf router at` to `attach`.
    let probe = format!(
        "source {}; COMP_WORDS=(xnf router at); COMP_CWORD=2; COMP_LINE='xnf router at'; COMP_POINT=13; _xnf xnf at router; echo \"${{COMPREPLY[@]}}\"",
        file.display()
    );
    let out = Command::new("bash").arg("-c").arg(probe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "attach", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn zsh_and_fish_completions_are_written_and_other_shells_refused() {
    for shell in ["zsh", "fish"] {
        let script = completions(shell);
        assert!(script.contains("router") && script.contains("attach"), "{shell}: {script}");
    }
    let out = xnf().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash, zsh, fish"));
}
