//! What every file xnf reads shares: one way to say where it is wrong.

/// The 1-based line of byte offset `at` in `text`.
pub fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// A TOML error in `text` as one line: `ORIGIN: line N: what`, the way
/// every checker of xnf names a fault (toml's own message spans lines,
/// with a drawing of the spot).
pub fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let msg = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else { return anyhow::anyhow!("{origin}: {msg}") };
    let line = line_of(text, span.start);
    // The line itself names the field (toml's message does not).
    let src: String = text.lines().nth(line - 1).unwrap_or("").trim().chars().take(80).collect();
    if src.is_empty() {
        anyhow::anyhow!("{origin}: line {line}: {msg}")
    } else {
        anyhow::anyhow!("{origin}: line {line}: {msg} (at `{src}`)")
    }
}

/// Every fault of a file as one error, one fault per line (a checker that
/// found several names them all, not only the first); `Ok` without any.
pub fn all_faults(faults: Vec<anyhow::Error>) -> anyhow::Result<()> {
    if faults.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = faults.iter().map(|e| format!("{e:#}")).collect();
    Err(anyhow::anyhow!("{}", lines.join("\n")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_toml_error_is_one_line_with_its_line() {
        let text = "a = 1\n[t]\nb = \"x\"\nc = 5x\nd = 1\n";
        let e = text.parse::<toml::Table>().unwrap_err();
        let msg = super::toml_error("f.toml", text, &e).to_string();
        assert!(msg.starts_with("f.toml: line 4: ") && msg.ends_with("(at `c = 5x`)") && !msg.contains('\n'), "{msg}");
    }
}
