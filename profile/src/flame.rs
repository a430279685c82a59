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

    #[test]
    fn one_rect_per_merged_frame_and_widths_add_up() {
        let s = svg(&stacks(), "t");
        // gen, main, a<b>&c, other, idle, cpu_idle (+ the background).
        assert_eq!(s.matches("<rect").count(), 6 + 1, "{s}");
        let widths: Vec<f64> = s.lines().filter(|l| l.contains("<title>gen ") || l.contains("<title>idle ")).map(|l| l.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap()).collect();
        assert!((widths.iter().sum::<f64>() - WIDTH).abs() < 0.1, "{widths:?}");
    }

    #[test]
    fn names_are_escaped() {
        let s = svg(&stacks(), "x & y");
        assert!(s.contains("a&lt;b&gt;&amp;c") && s.contains("x &amp; y"));
        assert!(!s.contains("a<b>"), "{s}");
    }

    #[test]
    fn tiny_frames_are_left_out() {
        let mut st = stacks();
        st.stacks.push(Stack { cpu: 0, frames: vec!["rare".into()], kernel_from: 1, count: 0 });
        assert!(!svg(&st, "t").contains("rare"));
    }
}
