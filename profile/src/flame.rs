//! A flame graph of sampled stacks as one self-contained SVG (no script):
//! the command at the bottom, each frame above its caller, widths in
//! proportion to samples; kernel frames in warm colours, user frames in
//! cool ones; hovering a frame shows its name, samples and share.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::sample::Stacks;

const WIDTH: f64 = 1200.0;
const ROW: f64 = 16.0;
const TOP: f64 = 32.0;
/// Frames narrower than this share of all samples are left out.
const MIN_SHARE: f64 = 0.001;
/// Approximate width of one character of the 11 px label font.
const CHAR: f64 = 6.6;

/// One merged frame: its children by (name, kernel).
#[derive(Default)]
struct Node {
    count: u64,
    children: BTreeMap<(String, bool), Node>,
}

fn tree(stacks: &Stacks) -> Node {
    let mut root = Node::default();
    for s in &stacks.stacks {
        root.count += s.count;
        let mut n = &mut root;
        for (i, f) in s.frames.iter().enumerate() {
            n = n.children.entry((f.clone(), i >= s.kernel_from)).or_default();
            n.count += s.count;
        }
    }
    root
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A stable colour per name: warm (kernel) or cool (user), the root grey.
fn colour(name: &str, kernel: bool, depth: usize) -> String {
    let h = name.bytes().fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let v = h % 55;
    if depth == 0 {
        format!("rgb({},{},{})", 160 + v / 2, 160 + v / 2, 160 + v / 2)
    } else if kernel {
        format!("rgb({},{},{})", 200 + v, 90 + v * 2, 40 + v / 2)
    } else {
        format!("rgb({},{},{})", 60 + v, 140 + v, 200 + v)
    }
}

struct Layout<'a> {
    out: &'a mut String,
    total: f64,
    height: f64,
    rects: usize,
}

impl Layout<'_> {
    fn frame(&mut self, name: &str, kernel: bool, n: &Node, x: f64, depth: usize) {
        let w = WIDTH * n.count as f64 / self.total;
        let y = self.height - (depth as f64 + 1.0) * ROW;
        let pct = 100.0 * n.count as f64 / self.total;
        let _ = write!(
            self.out,
            "<g><title>{} ({} samples, {pct:.2} %)</title><rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\" rx=\"2\"/>",
            escape(name),
            n.count,
            ROW - 1.0,
            colour(name, kernel, depth)
        );
        let fits = ((w - 6.0) / CHAR).floor() as usize;
        if fits >= 3 {
            let label: String = if name.chars().count() <= fits { name.to_string() } else { name.chars().take(fits - 2).chain("..".chars()).collect() };
            let _ = write!(self.out, "<text x=\"{:.2}\" y=\"{:.1}\">{}</text>", x + 3.0, y + ROW - 4.5, escape(&label));
        }
        self.out.push_str("</g>\n");
        self.rects += 1;
        let mut cx = x;
        for ((child, k), c) in &n.children {
            if (c.count as f64) / self.total >= MIN_SHARE {
                self.frame(child, *k, c, cx, depth + 1);
            }
            cx += WIDTH * c.count as f64 / self.total;
        }
    }
}

fn depth(n: &Node, total: f64) -> usize {
    n.children.values().filter(|c| c.count as f64 / total >= MIN_SHARE).map(|c| 1 + depth(c, total)).max().unwrap_or(0)
}

/// The flame graph of `stacks` under `title`.
pub fn svg(stacks: &Stacks, title: &str) -> String {
    let root = tree(stacks);
    let total = root.count.max(1) as f64;
    let height = TOP + depth(&root, total).max(1) as f64 * ROW + 8.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"monospace\" font-size=\"11\">"
    );
    let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"#fdfdf6\"/>");
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">{} — {} samples at {} Hz (kernel warm, user cool)</text>",
        WIDTH / 2.0,
        escape(title),
        root.count,
        stacks.frequency
    );
    let mut l = Layout { out: &mut out, total, height: height - 8.0, rects: 0 };
    let mut x = 0.0;
    for ((name, k), n) in &root.children {
        if n.count as f64 / total >= MIN_SHARE {
            l.frame(name, *k, n, x, 0);
        }
        x += WIDTH * n.count as f64 / total;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{Stack, Stacks};

    fn stacks() -> Stacks {
        let st = |f: &[&str], k, count| Stack { cpu: 0, frames: f.iter().map(|s| s.to_string()).collect(), kernel_from: k, count };
        Stacks {
            frequency: 99,
            samples: 10,
            stacks: vec![st(&["gen", "main", "a<b>&c"], 2, 6), st(&["gen", "main", "other"], 2, 3), st(&["idle", "cpu_idle"], 1, 1)],
            ..Default::default()
        }
    }

    /// Checks `svg` is well-formed XML, strictly enough for the names it
    /// holds: every `<` opens a tag that is closed in order, every `&` is
    /// one of the five predefined entities, attribute values are quoted
    /// without `<`, `&` or `"` raw. Returns the element names in order.
    fn well_formed(svg: &str) -> Vec<String> {
        let entity = |t: &str, at: usize| ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].iter().any(|e| t[at..].starts_with(e));
        let mut open: Vec<String> = Vec::new();
        let mut elements = Vec::new();
        let mut rest = svg;
        while let Some(lt) = rest.find('<') {
            let text = &rest[..lt];
            for (i, _) in text.match_indices('&') {
                assert!(entity(text, i), "raw & in text {text:?}");
            }
            assert!(!text.contains('>'), "raw > in text {text:?}");
            let gt = rest[lt..].find('>').expect("unclosed tag") + lt;
            let tag = &rest[lt + 1..gt];
            assert!(!tag.contains('<'), "< inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing {name} out of order");
            } else {
                let self_closing = tag.ends_with('/');
                let tag = tag.trim_end_matches('/');
                let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
                assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()), "element name {name:?}");
                while let Some(eq) = attrs.find("=\"") {
                    let value_end = attrs[eq + 2..].find('"').expect("unquoted attribute") + eq + 2;
                    let value = &attrs[eq + 2..value_end];
                    for (i, _) in value.match_indices('&') {
                        assert!(entity(value, i), "raw & in attribute {value:?}");
                    }
                    attrs = &attrs[value_end + 1..];
                }
                assert!(!attrs.contains('='), "unquoted attribute in {tag}");
                elements.push(name.to_string());
                if !self_closing {
                    open.push(name.to_string());
                }
            }
            rest = &rest[gt + 1..];
        }
        assert!(rest.trim().is_empty() && open.is_empty(), "unclosed: {open:?}");
        elements
    }

    /// (name, x, y, width, fill) of each frame's rect, from its title.
    fn frames(svg: &str) -> Vec<(String, f64, f64, f64, String)> {
        let attr = |l: &str, a: &str| l.split(&format!(" {a}=\"")).nth(1).unwrap().split('"').next().unwrap().to_string();
        svg.lines()
            .filter(|l| l.starts_with("<g><title>"))
            .map(|l| {
                let name = l["<g><title>".len()..].split(" (").next().unwrap().to_string();
                (name, attr(l, "x").parse().unwrap(), attr(l, "y").parse().unwrap(), attr(l, "width").parse().unwrap(), attr(l, "fill"))
            })
            .collect()
    }

    #[test]
    fn one_rect_per_merged_frame_and_widths_add_up() {
        let s = svg(&stacks(), "t");
        well_formed(&s);
        let f = frames(&s);
        // gen, main, a<b>&c, other, idle, cpu_idle: "gen;main" merged.
        let names: Vec<&str> = f.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["gen", "main", "a&lt;b&gt;&amp;c", "other", "idle", "cpu_idle"]);
        assert_eq!(s.matches("<rect").count(), f.len() + 1, "one rect per frame and the background");
        // The roots fill the width; children fit in their parent, side by side.
        assert!((f[0].3 + f[4].3 - WIDTH).abs() < 0.05, "{f:?}");
        assert!((f[0].3 - WIDTH * 0.9).abs() < 0.01 && (f[2].3 - WIDTH * 0.6).abs() < 0.01 && (f[3].3 - WIDTH * 0.3).abs() < 0.01, "{f:?}");
        assert!((f[2].3 + f[3].3 - f[1].3).abs() < 0.05 && (f[3].1 - (f[2].1 + f[2].3)).abs() < 0.05, "{f:?}");
        // Root at the bottom, 16 px per level.
        assert!(f[0].2 > f[1].2 && (f[0].2 - f[1].2 - ROW).abs() < 0.01 && f[0].2 == f[4].2, "{f:?}");
        // Titles carry samples and shares.
        assert!(s.contains("<title>main (9 samples, 90.00 %)</title>"), "{s}");
    }

    #[test]
    fn kernel_and_user_frames_are_in_two_colour_families() {
        let f = frames(&svg(&stacks(), "t"));
        let rgb = |fill: &str| -> Vec<u32> { fill.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|v| v.parse().unwrap()).collect() };
        for (name, _, _, _, fill) in &f {
            let c = rgb(fill);
            match name.as_str() {
                "gen" | "idle" => assert!(c[0] == c[1] && c[1] == c[2], "the command is grey: {name} {fill}"),
                "main" => assert!(c[2] > c[0] + 60, "user frames are cool: {name} {fill}"),
                _ => assert!(c[0] > c[2] + 60, "kernel frames are warm: {name} {fill}"),
            }
        }
    }

    #[test]
    fn names_are_escaped() {
        let s = svg(&stacks(), "x & y <z>");
        let elements = well_formed(&s);
        assert_eq!(elements.iter().filter(|e| *e == "title").count(), 6);
        assert!(s.contains("a&lt;b&gt;&amp;c") && s.contains("x &amp; y &lt;z&gt;"));
        assert!(!s.contains("a<b>"), "{s}");
    }

    #[test]
    fn labels_are_cut_to_fit_their_frame() {
        let mut st = stacks();
        st.stacks[1].frames[2] = "a_function_name_much_too_long_for_a_third_of_the_width_of_the_graph_to_hold_it_whole".into();
        st.stacks[0].count = 594;
        st.stacks[1].count = 300;
        st.stacks[2].count = 5;
        let s = svg(&st, "t");
        well_formed(&s);
        let line = s.lines().find(|l| l.contains("<title>a_function_name_much")).unwrap();
        let label = line.split("<text").nth(1).unwrap().split('>').nth(1).unwrap().split('<').next().unwrap();
        assert!(label.ends_with("..") && label.len() < 60 && label.starts_with("a_function_name"), "{label}");
        assert!((label.len() as f64) * CHAR <= WIDTH * 300.0 / 899.0, "{label}");
        // A frame too narrow for three characters has no label at all.
        let idle = s.lines().find(|l| l.contains("<title>cpu_idle")).unwrap();
        assert!(!idle.contains("<text"), "{idle}");
    }

    #[test]
    fn tiny_frames_are_left_out() {
        let mut st = stacks();
        st.stacks[0].count = 99_900;
        st.stacks.push(Stack { cpu: 0, frames: vec!["rare".into(), "deeper".into()], kernel_from: 1, count: 99 });
        st.stacks.push(Stack { cpu: 0, frames: vec!["gen".into(), "main".into(), "rare2".into()], kernel_from: 2, count: 99 });
        st.stacks.push(Stack { cpu: 0, frames: vec!["kept".into()], kernel_from: 1, count: 101 });
        let s = svg(&st, "t");
        assert!(!s.contains("rare") && !s.contains("deeper"), "under 0.1 % of the samples: left out");
        assert!(s.contains("<title>kept "), "0.1 % and over: drawn");
    }

    #[test]
    fn output_is_deterministic() {
        let mut st = stacks();
        let a = svg(&st, "t");
        st.stacks.reverse();
        assert_eq!(a, svg(&st, "t"), "the order stacks come in does not matter");
    }
}
