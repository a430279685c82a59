//! The Debian packages (scripts/deb.sh, `make deb`) install, work and purge
//! cleanly: built from this build's binaries, then installed, run and
//! purged in a throwaway root — an overlay of `/` whose writes go to a tmpfs,
//! in a private mount namespace that vanishes with the script — so the
//! machine running the test is left exactly as it was, which the test
//! checks too.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use xnf_testrun::cli::TempFiles;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Fails with what to install when `tool` is not on PATH.
fn need(tool: &str, package: &str) {
    let found = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    assert!(found, "{tool} is missing: apt-get install {package} (scripts/deps.sh test installs it)");
}

/// The files and folders of a .deb, as absolute paths.
fn contents(deb: &Path) -> Vec<String> {
    let out = Command::new("dpkg-deb").arg("--fsys-tarfile").arg(deb).output().unwrap();
    assert!(out.status.success(), "dpkg-deb --fsys-tarfile {}: {}", deb.display(), text(&out.stderr));
    let mut tar = Command::new("tar").arg("-t").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    tar.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let listed = tar.wait_with_output().unwrap();
    assert!(listed.status.success());
    text(&listed.stdout).lines().map(|l| format!("/{}", l.trim_start_matches("./").trim_end_matches('/'))).filter(|p| p != "/").collect()
}

/// What the real root has at `paths`: (size, mtime, inode) of each that exists.
fn snapshot(paths: &[String]) -> BTreeMap<String, Option<(u64, i64, u64)>> {
    paths.iter().map(|p| (p.clone(), std::fs::symlink_metadata(p).ok().map(|m| (m.len(), m.mtime(), m.ino())))).collect()
}

/// What the real dpkg knows of the two packages.
fn dpkg_status() -> String {
    let out = Command::new("dpkg-query").args(["-W", "-f", "${Package} ${Version} ${Status}\n", "xnf", "xnf-lab"]).output().unwrap();
    text(&out.stdout) + &text(&out.stderr)
}

/// Runs in a private mount namespace (unshare): an overlay of / with a
/// tmpfs upper layer at $T/root, /proc /dev /sys bound into it, the
/// packages installed, used and purged there by chroot. Every check fails
/// with a line starting `FAIL:`. Whatever happens, the namespace and its
/// mounts end with this script.
const IN_THROWAWAY_ROOT: &str = r#"
set -eu
T=$1 DEBS=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
mount -t tmpfs xnf-deb-test "$T"
mkdir "$T/upper" "$T/work" "$T/root"
mount -t overlay xnf-deb-test -o "lowerdir=/,upperdir=$T/upper,workdir=$T/work" "$T/root"
for d in proc dev sys; do mount --bind "/$d" "$T/root/$d"; done
R=$T/root
# A bpffs of its own (a new, empty instance): xnf finds bpffs where it
# looks and stays in this namespace, rather than joining the mount
# namespace of an ancestor (this test's, the real root) as it does under
# `ip netns exec`; and the host's pins are out of reach.
mount -t bpf xnf-deb-test "$R/sys/fs/bpf"
mkdir "$R/xnf-debs"
cp "$DEBS"/*.deb "$R/xnf-debs/"
: > "$R/xnf-overlay-marker"
exec chroot "$R" /bin/sh -eu -c '
fail() { echo "FAIL: $*" >&2; exit 1; }
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C DEBIAN_FRONTEND=noninteractive
cd /xnf-debs
paths=$(for d in *.deb; do dpkg-deb --fsys-tarfile "$d" | tar -t; done | sed "s|^\./|/|; s|/$||" | grep -v "^/$" | sort -u)
new=$(for p in $paths; do [ -e "$p" ] || echo "$p"; done)
# The trigger of man-db would re-index every page of the system (most of
# the time of this test, minutes under emulation); man finds pages without.
# (No single quotes in here: this script is one, for chroot.)
rm -f /var/lib/man-db/auto-update
dpkg -i xnf_*.deb xnf-lab_*.deb > dpkg-i.log 2>&1 || { cat dpkg-i.log; fail "dpkg -i"; }
echo "version: $(xnf --version)"
echo "lab version: $(xnf-lab --version)"
xnf check /etc/xnf/xnf.toml || fail "the installed /etc/xnf/xnf.toml does not check"
dpkg-query -W -f="conffiles:\${Conffiles}\n" xnf
# An upgrade (the same packages again: postinst configure with the old
# version) with xnf state present: postinst runs xnf upgrade.
mkdir -p /sys/fs/bpf/xnf
dpkg -i xnf_*.deb > dpkg-u.log 2>&1 || { cat dpkg-u.log; fail "dpkg -i over the installed package (an upgrade)"; }
grep -q "nothing to upgrade" dpkg-u.log || fail "the package upgrade did not run xnf upgrade: $(cat dpkg-u.log)"
echo "upgrade: $(grep "nothing to upgrade" dpkg-u.log)"
MANWIDTH=80 man -P cat xnf-router > man.txt 2> man.err || { cat man.err; fail "man xnf-router"; }
grep -q "^NAME" man.txt || fail "man xnf-router prints no NAME section: $(head -c 300 man.txt)"
echo "man: $(sed -n "/^NAME/{n;p;q}" man.txt | sed "s/^ *//")"
MANWIDTH=80 man -P cat xnf-lab-router > man.txt 2>&1 || fail "man xnf-lab-router: $(cat man.txt)"
echo "man lab: $(sed -n "/^NAME/{n;p;q}" man.txt | sed "s/^ *//")"
for f in /usr/bin/xnf /usr/bin/xnf-cni /usr/bin/xnf-lab /usr/lib/systemd/system/xnf.service /etc/xnf/xnf.toml; do
	[ -f "$f" ] || fail "$f is not installed"
done
listed=$(dpkg -L xnf xnf-lab | sort -u)
echo "$listed" | sed "s/^/listed: /"
dpkg -P xnf-lab xnf > dpkg-p.log 2>&1 || { cat dpkg-p.log; fail "dpkg -P"; }
status=$(dpkg-query -W -f="\${Status}" xnf 2>/dev/null || true)
case $status in "" | "unknown ok not-installed") ;; *) fail "after the purge dpkg still knows xnf: $status" ;; esac
for p in $listed; do
	if echo "$new" | grep -qxF "$p" && [ -e "$p" ]; then echo "left: $p"; fi
done
[ ! -e /etc/xnf ] || fail "/etc/xnf is still there after the purge: $(ls -la /etc/xnf)"
echo "purged"
'
"#;

#[test]
fn the_packages_install_work_and_purge_cleanly_in_a_throwaway_root() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root: the test mounts an overlay of / in a mount namespace of its own");
    for (tool, package) in [
        ("dpkg-deb", "dpkg"),
        ("strip", "binutils"),
        ("readelf", "binutils"),
        ("unshare", "util-linux"),
        ("chroot", "coreutils"),
        ("tar", "tar"),
        ("man", "man-db"),
    ] {
        need(tool, package);
    }
    let overlay = std::fs::read_to_string("/proc/filesystems").unwrap_or_default().lines().any(|l| l.ends_with("\toverlay"));
    let overlay = overlay || Command::new("modprobe").arg("overlay").status().is_ok_and(|s| s.success());
    assert!(overlay, "the kernel has no overlayfs (CONFIG_OVERLAY_FS), which the throwaway root is made of");

    // The packages, from this build's binaries (stripped, gzip: seconds).
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_xnf")).parent().unwrap().to_path_buf();
    assert!(bin_dir.join("xnf-lab").exists(), "{} is missing: build the workspace first (cargo build --workspace)", bin_dir.join("xnf-lab").display());
    let debs = TempFiles::new("deb");
    let out = Command::new(repo().join("scripts/deb.sh"))
        .arg("--bin")
        .arg(&bin_dir)
        .arg("--out")
        .arg(debs.dir())
        .args(["--compress", "gzip"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/deb.sh failed:\n{}{}", text(&out.stdout), text(&out.stderr));
    let version = env!("CARGO_PKG_VERSION");
    let arch = text(&Command::new("dpkg").arg("--print-architecture").output().unwrap().stdout).trim().to_string();
    let xnf_deb = debs.dir().join(format!("xnf_{version}_{arch}.deb"));
    let lab_deb = debs.dir().join(format!("xnf-lab_{version}_{arch}.deb"));
    for deb in [&xnf_deb, &lab_deb] {
        assert!(deb.exists(), "scripts/deb.sh made no {}: {}", deb.display(), text(&out.stdout));
    }

    // What the packages hold.
    let xnf_files = contents(&xnf_deb);
    let lab_files = contents(&lab_deb);
    for f in [
        "/usr/bin/xnf",
        "/usr/bin/xnf-cni",
        "/usr/lib/systemd/system/xnf.service",
        "/usr/share/man/man1/xnf.1.gz",
        "/usr/share/man/man1/xnf-router.1.gz",
        "/usr/share/man/man1/xnf-daemon.1.gz",
        "/usr/share/bash-completion/completions/xnf",
        "/usr/share/zsh/vendor-completions/_xnf",
        "/usr/share/fish/vendor_completions.d/xnf.fish",
        "/etc/xnf/xnf.toml",
        "/usr/share/doc/xnf/copyright",
    ] {
        assert!(xnf_files.iter().any(|p| p == f), "the xnf package has no {f}:\n{}", xnf_files.join("\n"));
    }
    for f in ["/usr/bin/xnf-lab", "/usr/share/man/man1/xnf-lab.1.gz", "/usr/share/man/man1/xnf-lab-router.1.gz", "/usr/share/doc/xnf-lab/copyright"] {
        assert!(lab_files.iter().any(|p| p == f), "the xnf-lab package has no {f}:\n{}", lab_files.join("\n"));
    }
    let lab_in_xnf: Vec<&String> = xnf_files.iter().filter(|p| p.contains("xnf-lab")).collect();
    assert!(lab_in_xnf.is_empty(), "the xnf package holds the lab's files: {lab_in_xnf:?}");
    let field = |deb: &Path, name: &str| text(&Command::new("dpkg-deb").arg("-f").arg(deb).arg(name).output().unwrap().stdout).trim().to_string();
    assert_eq!(field(&lab_deb, "Depends").split(", ").next(), Some(format!("xnf (= {version})").as_str()), "xnf-lab depends on xnf of its version");
    let depends = field(&xnf_deb, "Depends");
    for lib in ["libc6", "libelf1", "zlib1g"] {
        assert!(depends.contains(lib), "xnf's Depends lacks {lib}: {depends}");
    }
    assert!(!depends.contains("libbpf"), "libbpf is linked in, not a dependency: {depends}");
    let conffiles = Command::new("sh").arg("-c").arg(format!("dpkg-deb --ctrl-tarfile {} | tar -xOf - ./conffiles", xnf_deb.display())).output().unwrap();
    assert_eq!(text(&conffiles.stdout), "/etc/xnf/xnf.toml\n", "conffiles");

    // The real root before: the packages' paths, and dpkg's view of them.
    let mut paths: Vec<String> = xnf_files.iter().chain(&lab_files).cloned().collect();
    paths.push("/xnf-overlay-marker".into());
    paths.push("/xnf-debs".into());
    let (before, status_before) = (snapshot(&paths), dpkg_status());

    let root = TempFiles::new("deb-root");
    let run = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", IN_THROWAWAY_ROOT, "sh"])
        .arg(root.dir())
        .arg(debs.dir())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));

    // The real root after: untouched, whatever happened in there.
    assert_eq!(snapshot(&paths), before, "the real root changed: the packages' paths differ after the test");
    assert_eq!(dpkg_status(), status_before, "the real dpkg's view of xnf changed");
    assert!(!Path::new("/xnf-overlay-marker").exists(), "a file written in the throwaway root is on the real one");
    assert_eq!(std::fs::read_dir(root.dir()).map(|d| d.count()).unwrap_or(0), 0, "the overlay's folder on the real root is not empty: its mounts leaked");

    assert!(run.status.success(), "in the throwaway root:\n{stdout}\n{stderr}");
    let line =
        |prefix: &str| stdout.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no `{prefix}` line:\n{stdout}\n{stderr}")).to_string();
    assert_eq!(line("version: "), format!("xnf {version}"));
    assert!(line("lab version: ").contains(version), "{stdout}");
    assert_eq!(line("conffiles:").split_whitespace().next(), Some("/etc/xnf/xnf.toml"), "dpkg knows the conffile");
    assert!(line("man: ").starts_with("xnf-router"), "man xnf-router shows another page: {}", line("man: "));
    assert!(line("man lab: ").starts_with("xnf-lab-router"), "{stdout}");
    let listed: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("listed: ")).collect();
    for f in ["/usr/bin/xnf", "/usr/bin/xnf-lab", "/etc/xnf/xnf.toml", "/usr/share/man/man1/xnf-router.1.gz"] {
        assert!(listed.contains(&f), "dpkg -L does not list {f}");
    }
    let left: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("left: ")).collect();
    assert!(left.is_empty(), "the purge left these behind: {left:?}");
    assert!(stdout.lines().any(|l| l == "purged"), "{stdout}\n{stderr}");
}
