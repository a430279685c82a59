//! The layout rules that the compiler does not check: inside a network
//! function's crate, modules import each other in one direction only (the
//! program and its model at the bottom, the lifecycle above them, apply,
//! follow and reports above that, the CLI on top). A cycle means state
//! without a home, the way `attach` ↔ `apply` ↔ `follow` once were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules a file names through `crate::` (comments left out).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            out.extend(top_items(group).iter().filter_map(|item| ident(item.trim())));
        } else {
            out.extend(ident(rest));
        }
    }
    out
}

/// The items of a `{...}` group up to its closing brace, split at the
/// commas outside nested groups.
fn top_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

fn ident(s: &str) -> Option<String> {
    let id: String = s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    (!id.is_empty() && id.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')).then_some(id)
}

/// Module → modules it imports, for the crate whose sources are in `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let refs = crate_refs(&std::fs::read_to_string(f).unwrap());
        g.entry(top.clone()).or_default().extend(refs.into_iter().filter(|r| *r != top));
    }
    let names: BTreeSet<String> = g.keys().cloned().collect();
    g.values_mut().for_each(|refs| refs.retain(|r| names.contains(r)));
    g
}

/// A cycle through `start`, if there is one (depth-first).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(g: &BTreeMap<String, BTreeSet<String>>, start: &str, at: &str, path: &mut Vec<String>, seen: &mut BTreeSet<String>) -> bool {
        for next in &g[at] {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(g, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(g, start, start, &mut path, &mut BTreeSet::new()).then(|| {
        path.push(start.to_string());
        path
    })
}

#[test]
fn the_checker_finds_a_cycle_and_reads_grouped_imports() {
    let refs = crate_refs("use crate::{attach::{lock, run_dir}, program};\nlet x = crate::tables::sync(); // crate::cli");
    assert_eq!(refs, BTreeSet::from(["attach".to_string(), "program".to_string(), "tables".to_string()]));
    let g: BTreeMap<String, BTreeSet<String>> = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
    assert_eq!(cycle(&g, "a"), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(cycle(&g, "d"), None);
}

#[test]
fn no_network_function_crate_has_an_import_cycle() {
    let nf = workspace().join("nf");
    let mut found = Vec::new();
    let mut crates = 0;
    for e in std::fs::read_dir(&nf).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let g = graph(&src);
        for m in g.keys() {
            if let Some(c) = cycle(&g, m) {
                found.push(format!("{}: {}", e.file_name().to_string_lossy(), c.join(" -> ")));
                break;
            }
        }
    }
    assert!(crates >= 6, "found {crates} network function crates under {}", nf.display());
    assert!(found.is_empty(), "modules importing each other (give the shared state one home below both):\n{}", found.join("\n"));
}
