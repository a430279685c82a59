//! Sections of the box file as texts that each network function's own
//! parser reads, with the line numbers kept: every line outside the
//! section becomes empty and the section's headers lose its prefix, so an
//! error the filter's or the lb's checker reports names the box file's own
//! line. And back: a network function's file nested under a prefix, for
//! `xnf show`.

/// The table a header line opens and whether it is an array of tables:
/// `[a.b]` is `("a.b", false)`, `[[a.b]]` is `("a.b", true)`.
fn header(line: &str) -> Option<(String, bool)> {
    let t = line.trim_start();
    let (inner, array) = if let Some(r) = t.strip_prefix("[[") {
        (r.split("]]").next()?, true)
    } else if let Some(r) = t.strip_prefix('[') {
        (r.split(']').next()?, false)
    } else {
        return None;
    };
    let path: Vec<&str> = inner.split('.').map(str::trim).collect();
    path.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')).then(|| (path.join("."), array))
}

/// The lines of `text` in the tables `keep` maps to a new name (`""`: the
/// root), the others empty; `None` when no line is kept. Lines before the
/// first header are in the root table, `""`.
pub fn extract(text: &str, keep: impl Fn(&str) -> Option<String>) -> Option<String> {
    let mut out = Vec::new();
    let mut current = keep("");
    let mut any = false;
    for line in text.lines() {
        if let Some((path, array)) = header(line) {
            current = keep(&path);
            out.push(match &current {
                Some(p) if p.is_empty() => String::new(),
                Some(p) if array => format!("[[{p}]]"),
                Some(p) => format!("[{p}]"),
                None => String::new(),
            });
            any |= current.is_some();
            continue;
        }
        let kept = current.is_some() && !line.trim().is_empty() && !line.trim_start().starts_with('#');
        any |= kept;
        out.push(if current.is_some() { line.to_string() } else { String::new() });
    }
    any.then(|| out.join("\n") + "\n")
}

/// The tables under `prefix` (`filter.rules`), as a file of their own.
pub fn nested(text: &str, prefix: &str) -> Option<String> {
    extract(text, |t| if t == prefix { Some(String::new()) } else { t.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')).map(String::from) })
}

/// Only table `name` itself (`router`), as it stands in the file.
pub fn table(text: &str, name: &str) -> Option<String> {
    extract(text, |t| (t == name).then(|| t.to_string()))
}

/// A file of its own nested under `prefix`, for a box file: its root keys
/// under `[prefix]`, every header prefixed; runs of empty lines shortened.
pub fn nest(text: &str, prefix: &str) -> String {
    let mut out = vec![format!("[{prefix}]")];
    for line in text.lines() {
        let l = match header(line) {
            Some((path, true)) => format!("[[{prefix}.{path}]]"),
            Some((path, false)) => format!("[{prefix}.{path}]"),
            None => line.trim_end().to_string(),
        };
        if !(l.is_empty() && out.last().is_some_and(String::is_empty)) {
            out.push(l);
        }
    }
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out.join("\n") + "\n"
}

/// A TOML error of `text` as one line naming `origin` and the line.
pub fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> String {
    xnf_core::files::toml_error(origin, text, e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOX: &str = "# a box\n[router]\ninterfaces = [\"eth0\"]\n\n[filter]\ninterfaces = [\"eth0\"]\n[filter.rules]\ndefault = \"drop\"\n[[filter.rules.rule]]\nname = \"ssh\"\ndport = 22\n[filter.rules.lists]\nbad = \"bad.txt\"\n\n[[nf]]\nname = \"fw\"\n";

    #[test]
    fn a_nested_file_keeps_its_lines_and_loses_its_prefix() {
        let rules = nested(BOX, "filter.rules").unwrap();
        let lines: Vec<&str> = rules.lines().collect();
        assert_eq!(lines.len(), BOX.lines().count());
        assert_eq!(lines[7], "default = \"drop\"", "line 8 of the box file is line 8 of the rules");
        assert_eq!(lines[8], "[[rule]]");
        assert_eq!(lines[11], "[lists]");
        assert!(lines[..6].iter().all(|l| l.is_empty()) && lines[14..].iter().all(|l| l.is_empty()), "{rules}");
        let t: toml::Table = rules.parse().unwrap();
        assert_eq!(t["rule"][0]["dport"].as_integer(), Some(22));
        assert_eq!(nested(BOX, "lb.services"), None);
    }

    #[test]
    fn a_table_alone_and_the_root_tables() {
        let r = table(BOX, "router").unwrap();
        let t: toml::Table = r.parse().unwrap();
        assert_eq!(t.keys().collect::<Vec<_>>(), ["router"]);
        let chains = extract(BOX, |t| matches!(t.split('.').next(), Some("nf" | "chain")).then(|| t.to_string())).unwrap();
        let t: toml::Table = chains.parse().unwrap();
        assert_eq!(t["nf"][0]["name"].as_str(), Some("fw"));
        assert_eq!(table("# only a comment\n", ""), None, "a comment is no content");
    }

    #[test]
    fn nesting_and_extracting_again_is_the_same_file() {
        let file = "default = \"drop\"\n\n\n[[rule]]\nname = \"a\"\n[lists]\nx = \"y\"\n";
        let boxed = nest(file, "filter.rules");
        assert!(boxed.starts_with("[filter.rules]\ndefault = \"drop\"\n\n[[filter.rules.rule]]\n"), "{boxed}");
        let back: toml::Table = nested(&boxed, "filter.rules").unwrap().parse().unwrap();
        assert_eq!(back, file.parse::<toml::Table>().unwrap());
    }
}
