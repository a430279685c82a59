//! Build-script helper of every crate that carries BPF programs: compiles
//! `<crate>/<name>.bpf.c` with clang against the shared headers in
//! `bpf/include` (as `#include "xnf/..."`) and the crate's own folder, and
//! writes the libbpf-rs skeleton `<name>.skel.rs` into OUT_DIR.
//!
//! In a build script:
//! ```no_run
//! xnf_build::skeletons(&["router"]);
//! ```
//! and in the crate: `include!(concat!(env!("OUT_DIR"), "/router.skel.rs"))`.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// Compiles each `<name>.bpf.c` of the calling crate's folder (or of its
/// `bpf/` subfolder when it is there) into a skeleton.
pub fn skeletons(names: &[&str]) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("run from a build script"));
    let include = workspace_include(&manifest);
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("run from a build script"));
    let multiarch = multiarch();
    println!("cargo:rerun-if-changed={}", include.display());
    for name in names {
        let file = format!("{name}.bpf.c");
        let src = [manifest.join(&file), manifest.join("bpf").join(&file)]
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{file} is neither in {} nor in its bpf/ folder", manifest.display()));
        let dir = src.parent().expect("a source file has a folder").to_path_buf();
        println!("cargo:rerun-if-changed={}", dir.display());
        build(&src, &out.join(format!("{name}.skel.rs")), &[&include, &dir], multiarch);
    }
}

/// `bpf/include` at the workspace root: the first ancestor that has it.
fn workspace_include(manifest: &Path) -> PathBuf {
    manifest
        .ancestors()
        .map(|a| a.join("bpf/include"))
        .find(|p| p.join("xnf").is_dir())
        .unwrap_or_else(|| panic!("no bpf/include/xnf above {}", manifest.display()))
}

/// `<asm/types.h>` lives under the multiarch include folder on Debian.
fn multiarch() -> &'static str {
    match env::var("CARGO_CFG_TARGET_ARCH").expect("run from a build script").as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    }
}

fn build(src: &Path, skel: &Path, includes: &[&Path], multiarch: &str) {
    println!("cargo:rerun-if-changed={}", src.display());
    let mut args: Vec<String> = includes.iter().map(|i| format!("-I{}", i.display())).collect();
    args.extend([format!("-I/usr/include/{multiarch}"), "-Wall".into(), "-Werror".into()]);
    // The test build of an upgrade (feature `layout-bump` of the crate):
    // the same source with one more field in some map values.
    if env::var_os("CARGO_FEATURE_LAYOUT_BUMP").is_some() {
        args.push("-DXNF_LAYOUT_BUMP".into());
    }
    // Extra clang flags for measuring where a program's time goes (a
    // `-D` that cuts a path short); never set by the build itself.
    if let Ok(extra) = env::var("XNF_BPF_CFLAGS_EXPERIMENT") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    println!("cargo:rerun-if-env-changed=XNF_BPF_CFLAGS_EXPERIMENT");
    SkeletonBuilder::new().source(src).clang_args(args).build_and_generate(skel).unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    append_build_id(skel);
}

/// Appends `BUILD`, a hash of the skeleton (which embeds the object): an
/// upgrade tells a program of another build from its own by it.
fn append_build_id(skel: &Path) {
    let text = std::fs::read_to_string(skel).unwrap_or_else(|e| panic!("reading {}: {e}", skel.display()));
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    let line = format!("\n/// A hash of this skeleton: which build of the program it is.\npub const BUILD: &str = \"{h:016x}\";\n");
    std::fs::write(skel, text + &line).unwrap_or_else(|e| panic!("writing {}: {e}", skel.display()));
}
