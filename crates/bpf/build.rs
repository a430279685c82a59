//! Compiles every `bpf/*.bpf.c` into a libbpf-rs skeleton in OUT_DIR.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let bpf_dir = manifest.join("../../bpf").canonicalize().expect("bpf/ folder");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    // <asm/types.h> lives under the multiarch include dir on Debian.
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    };

    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    for prog in ["router", "pass", "gen", "sink", "actions", "chain", "reflect", "afxdp"] {
        let src = bpf_dir.join(format!("{prog}.bpf.c"));
        build(&src, &out.join(format!("{prog}.skel.rs")), &bpf_dir, multiarch);
    }
}

fn build(src: &Path, skel: &Path, bpf_dir: &Path, multiarch: &str) {
    println!("cargo:rerun-if-changed={}", src.display());
    SkeletonBuilder::new()
        .source(src)
        .clang_args([
            format!("-I{}", bpf_dir.join("include").display()),
            format!("-I/usr/include/{multiarch}"),
            "-Wall".to_string(),
            "-Werror".to_string(),
        ])
        .build_and_generate(skel)
        .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
}
