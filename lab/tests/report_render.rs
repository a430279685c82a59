//! `xnf lab report` renders in a real browser: a results file with a size
//! sweep of three variants, fixed-load and zero-loss-search samples is
//! turned into HTML, headless Chromium screenshots it, and the pixels must
//! show every variant's colour in quantity; profiled intervals (`--profile`)
//! add the stages' bars, in the stage palette's colours. `xnf lab latency`
//! files, of the driver's form and of the form before it, are drawn too.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Each variant's 64 B rate (Mpps) and how many pixels of its colour the
/// screenshot must hold. kernel and xnf are drawn in three charts (size
/// sweep, CPU, loss), xdp-drop in one; their legend entries and table
/// swatches alone give about a third of these numbers (about 800, 900, 50).
const VARIANTS: [(&str, f64, usize); 3] = [("kernel", 1.1, 1800), ("xnf", 2.9, 1800), ("xdp-drop", 6.0, 400)];
const SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1518, 0];
/// The first stage's colour (driver) in the report's stage palette, and
/// how many pixels of it the screenshot must hold: the two driver
/// segments give about 3,000, the legend and the table's swatch 270.
const DRIVER: (&str, usize) = ("#440154", 1500);
const HEIGHT: u32 = 4800;

fn point(size: u32) -> Value {
    json!({"size": size, "flows": 4, "ipv6": false, "routes": 0, "queues": 1, "netfilter": false})
}

/// Forwarded Mpps of a variant at a size: its 64 B rate, falling with size.
fn rate(cap: f64, size: u32) -> f64 {
    let bytes = if size == 0 { 353.0 } else { f64::from(size) };
    cap * (64.0 / bytes).powf(0.35)
}

fn sample(variant: &str, size: u32, run: u32, kind: Value, offered_mpps: f64, mpps: f64) -> Value {
    let busy = 40.0 + 55.0 * mpps / 3.0;
    let mut s = json!({
        "variant": variant, "point": point(size), "run": run,
        "seconds": 2.0, "sent": (offered_mpps * 2e6) as u64, "received": (mpps * 2e6) as u64,
        "sent_mpps": offered_mpps, "mpps": mpps,
        "loss_pct": ((offered_mpps - mpps) / offered_mpps * 100.0).max(0.0),
        "loss": {"gen_to_dut": 0, "in_dut": ((offered_mpps - mpps) * 2e6) as i64, "dut_to_sink": 0},
        "cpus": [
            {"cpu": 0, "user_pct": 2.0, "system_pct": 6.0, "softirq_pct": busy * 0.8, "busy_pct": busy},
            {"cpu": 1, "user_pct": 1.0, "system_pct": 2.0, "softirq_pct": busy * 0.3, "busy_pct": busy * 0.35}
        ],
        "ns_per_packet": 1000.0 / mpps,
    });
    let obj = s.as_object_mut().unwrap();
    for (k, v) in kind.as_object().unwrap() {
        obj.insert(k.clone(), v.clone());
    }
    s
}

/// A profiled interval at 64 B, run 1: stages (ns per packet, then the
/// softirq total) unless counting only.
fn profiled(variant: &str, offered_pps: Option<f64>, stages: &[(&str, f64)], counts_only: bool) -> Value {
    let drops = vec![xnf_profile::model::Drop { reason: "NETFILTER_DROP".into(), location: "nf_hook_slow".into(), count: 4321 }];
    let profile = xnf_profile::Profile { counts_only, drops, ..Default::default() };
    json!({
        "variant": variant, "point": point(64), "run": 0, "offered_pps": offered_pps,
        "mpps": 1.0, "profiled_mpps": 0.93, "ns_per_packet": 900.0, "profiled_ns_per_packet": 960.0,
        "packets": 2_000_000u64, "stages": stages, "xdp_ns_per_packet": 35.0,
        "top": [["fib_table_lookup", 8.2], ["ip_forward", 5.1], ["__dev_queue_xmit", 4.4]],
        "flame": "/nonexistent/flame.svg", "profile": profile,
    })
}

fn profiles() -> Vec<Value> {
    let kernel = [("driver", 130.0), ("gro", 40.0), ("ip-rcv", 90.0), ("route", 45.0), ("local", 0.0), ("forward", 85.0), ("xmit", 70.0), ("softirq", 460.0)];
    let xnf = [("driver", 110.0), ("gro", 0.0), ("ip-rcv", 0.0), ("route", 0.0), ("local", 0.0), ("forward", 0.0), ("xmit", 25.0), ("softirq", 135.0)];
    vec![
        profiled("kernel", None, &kernel, false),
        profiled("xnf", None, &xnf, false),
        profiled("kernel", Some(1e6), &kernel, false),
        profiled("xdp-drop", None, &[("softirq", 20.0)], true),
    ]
}

fn results() -> Value {
    let (mut samples, mut summary, mut ratios) = (vec![], vec![], vec![]);
    for size in SIZES {
        for (variant, cap, _) in VARIANTS {
            let r = rate(cap, size);
            for run in 0..3 {
                let m = r * (0.96 + 0.04 * f64::from(run));
                samples.push(sample(variant, size, run, json!({"kind": "max"}), m, m));
            }
            summary.push(json!({
                "variant": variant, "point": point(size), "runs": 3,
                "median_mpps": r, "min_mpps": r * 0.96, "max_mpps": r * 1.04,
                "median_ns_per_packet": 1000.0 / r,
                "zero_loss_mpps": if variant == "xnf" { Some(r * 0.8) } else { None },
            }));
        }
        ratios.push(json!({"point": point(size), "numerator": "xnf", "denominator": "kernel", "ratio": rate(2.9, size) / rate(1.1, size)}));
    }
    for (variant, cap, _) in &VARIANTS[..2] {
        for step in 1..=12 {
            let offered = f64::from(step) * 0.25;
            let kind = json!({"kind": "load", "offered_pps": offered * 1e6});
            samples.push(sample(variant, 64, 0, kind, offered, offered.min(*cap)));
        }
    }
    for (offered, got) in [(2.9, 2.6), (1.45, 1.45), (2.2, 2.2), (2.55, 2.4), (2.37, 2.32), (2.29, 2.29)] {
        let kind = json!({"kind": "search", "offered_pps": offered * 1e6});
        samples.push(sample("xnf", 64, 0, kind, offered, got));
    }
    json!({
        "experiment": "router",
        "machine": {"kernel": "6.1.0-test", "cpu_model": "Test CPU <8 cores> @ 3 GHz", "cores": 8, "xnf_version": "0.1.0"},
        "started_unix": 1_700_000_000u64,
        "options": {"runs": 3, "seconds": 2.0, "sizes": "64,128,256,512,1024,1518,imix", "zero_loss": 0.0},
        "notes": ["veth: all of the chain runs on the generator's CPU", "rates < 10 Mpps & \"limited\" by the generator"],
        "samples": samples, "summary": summary, "ratios": ratios, "profiles": profiles(),
    })
}

/// Runs `cmd`, killing it after `limit`; returns its stdout.
fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Vec<u8> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("starting chromium");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut { stdout }, &mut out).ok();
        out
    });
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

fn chromium(dir: &Path, args: &[&str]) -> Vec<u8> {
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} not found: install chromium (make deps does)");
    let profile = dir.join(format!("profile-{}", args.len()));
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--no-first-run",
        "--hide-scrollbars",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display())).args(args);
    run_with_timeout(&mut cmd, Duration::from_secs(90))
}

/// The decoded screenshot as 8-bit RGB pixels.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

fn decode(path: &Path) -> Image {
    let mut decoder = png::Decoder::new(std::fs::File::open(path).expect("screenshot missing"));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("not a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG does not decode");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "screenshot is not in colour: {:?}", info.color_type);
    let rgb = buf[..info.buffer_size()].chunks_exact(channels).map(|p| [p[0], p[1], p[2]]).collect();
    Image { width: info.width, height: info.height, rgb }
}

fn hex(colour: &str) -> [u8; 3] {
    let c = colour.trim_start_matches('#');
    let byte = |i: usize| u8::from_str_radix(&c[i..i + 2], 16).unwrap();
    [byte(0), byte(2), byte(4)]
}

fn count_near(img: &Image, want: [u8; 3]) -> usize {
    img.rgb.iter().filter(|p| p.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 8)).count()
}

/// The colour the report's legends give each variant (`data-colour`).
fn legend_colour(html: &str, variant: &str) -> String {
    let key = format!(r#"data-variant="{variant}" data-colour=""#);
    let at = html.find(&key).unwrap_or_else(|| panic!("no legend entry for {variant}")) + key.len();
    html[at..at + 7].to_string()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xnf-report-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn report_renders_every_chart_in_chromium() {
    let dir = temp_dir();
    let input = dir.join("results.json");
    std::fs::write(&input, serde_json::to_string_pretty(&results()).unwrap()).unwrap();
    let html_path = dir.join("report.html");
    let out = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "report"]).arg(&input).arg("-o").arg(&html_path).output().unwrap();
    assert!(out.status.success(), "xnf lab report failed: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();

    // Self-contained: nothing to fetch, nothing to run.
    for banned in ["<script", "<link", "src=", "url(", "@import"] {
        assert!(!html.contains(banned), "the report contains {banned}");
    }
    assert!(html.contains("Test CPU &lt;8 cores&gt;"), "machine escaped");

    // The browser's DOM keeps every chart as SVG with its series.
    let url = format!("file://{}", html_path.display());
    let dom = String::from_utf8(chromium(&dir, &["--dump-dom", &url])).unwrap();
    let charts = dom.matches("<svg class=\"chart\"").count();
    assert_eq!(charts, 6, "size sweep, runs, CPU busy, CPU by kind x2, loss: {charts} charts in the DOM");
    assert_eq!(dom.matches("<g class=\"box\"").count(), 21, "a box per variant and size, 3 runs each");
    assert!(dom.contains("Throughput vs packet size") && dom.contains("IMIX"));
    assert!(dom.contains("Loss vs offered rate") && dom.contains("xnf (search trials)"));
    assert_eq!(dom.matches("<polyline").count(), html.matches("<polyline").count(), "polylines lost in parsing");
    assert!(dom.contains("Where the time went (xnf profile)") && dom.contains("NETFILTER_DROP"));
    assert_eq!(dom.matches("<svg class=\"chart hbars\"").count(), 1, "the stages' bars");
    assert_eq!(dom.matches("<g class=\"bar\"").count(), 2, "a bar per full-speed interval with stages");

    let png_path = dir.join("report.png");
    chromium(&dir, &[&format!("--screenshot={}", png_path.display()), &format!("--window-size=1280,{HEIGHT}"), &url]);
    let img = decode(&png_path);
    assert_eq!((img.width, img.height), (1280, HEIGHT));
    // Near the page's grey or white (a pixel such as #fafbfc is near both).
    let near = |p: &[u8; 3], want: [u8; 3]| p.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 8);
    let background = img.rgb.iter().filter(|p| near(p, [0xf6, 0xf7, 0xf9]) || near(p, [0xff, 0xff, 0xff])).count();
    let ink = img.rgb.len() - background;
    assert!(ink > img.rgb.len() / 50, "the page looks blank: {ink} of {} pixels drawn", img.rgb.len());
    let mut colours = Vec::new();
    for (variant, _, want) in VARIANTS {
        let colour = legend_colour(&html, variant);
        let n = count_near(&img, hex(&colour));
        assert!(n >= want, "{variant} ({colour}): {n} pixels of its colour in the screenshot, want {want}: its series are not drawn");
        colours.push(colour);
    }
    colours.sort();
    colours.dedup();
    assert_eq!(colours.len(), VARIANTS.len(), "variants share a colour: {colours:?}");
    let (driver, want) = DRIVER;
    assert!(html.contains(&format!(r#"data-stage="driver" data-colour="{driver}""#)), "the stage palette changed: update DRIVER");
    assert!(!colours.contains(&driver.to_string()), "a stage shares a variant's colour");
    let n = count_near(&img, hex(driver));
    assert!(n >= want, "driver stage ({driver}): {n} pixels of its colour in the screenshot, want {want}: the stages' bars are not drawn");
    std::fs::remove_dir_all(&dir).ok();
}

/// `xnf lab lb`'s disruption part alone (no samples): its `details.disruption` with real TCP connections.
fn lb_disruption_file() -> Value {
    let outcome = |removed: u64, kept: u64, collateral: u64| {
        json!({"moved": removed + collateral, "removed_flows": removed, "removed_moved": removed, "kept_flows": kept, "collateral": collateral,
               "per_backend": [0, 3000, 3000, 3000], "max_over_mean": 1.02, "model_agrees": 10000, "ct_hit": 0, "ct_miss": 0, "ct_syn": 0, "ct_stale": 0})
    };
    let tcp = |collateral: u64| {
        json!({"connections": 1000, "removed_connections": 250, "removed_broken": 250, "kept_connections": 750, "collateral": collateral,
               "survived": 750 - collateral, "reset": 250 + collateral, "per_backend": [250, 250, 250, 250]})
    };
    json!({
        "experiment": "lb",
        "machine": {"kernel": "6.1.0-test", "cpu_model": "Test CPU", "cores": 2, "xnf_version": "0.1.0"},
        "started_unix": 1_700_000_000u64,
        "options": {"runs": 2, "part": "disruption"},
        "samples": [], "summary": [], "ratios": [],
        "details": {"disruption": {
            "flows": 10000, "backends": 4, "table_size": 11, "removed": "198.19.128.1", "runs": 2,
            "before": outcome(2500, 7500, 0), "with_table": outcome(2500, 7500, 0), "without_table": outcome(2500, 7500, 900),
            "plan": {"moved": 0.36, "removed": 0.25, "collateral_of_kept": 0.125, "balance_max": 1.09},
            "tcp": {"connections": 500, "backends": 4, "removed": "198.19.128.1", "runs": 2, "with_table": tcp(0), "without_table": tcp(105)},
        }},
    })
}

/// The disruption is drawn: the share of flows moved per variant, the removed backend's under the collateral, by
/// test run, by real connections and as planned; and the collateral of the kept flows alone.
#[test]
fn lb_disruption_is_drawn_as_two_charts_with_its_numbers() {
    let dir = std::env::temp_dir().join(format!("xnf-report-lb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("lb.json");
    std::fs::write(&input, serde_json::to_string(&lb_disruption_file()).unwrap()).unwrap();
    let html_path = dir.join("lb.html");
    let out = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "report"]).arg(&input).arg("-o").arg(&html_path).output().unwrap();
    assert!(out.status.success(), "xnf lab report failed: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("<h2>Disruption: one backend removed</h2>"), "{html}");
    let chart = |title: &str| {
        let at = html.find(&format!(">{title}</text>")).unwrap_or_else(|| panic!("no chart {title}: {html}"));
        let start = html[..at].rfind("<svg").unwrap();
        html[start..start + html[start..].find("</svg>").unwrap()].to_string()
    };
    let moved = chart("Flows moved when one backend is removed");
    for source in ["test-run", "tcp", "plan"] {
        assert_eq!(moved.matches(&format!(r#"<g class="bars" data-variant="{source}">"#)).count(), 1, "{source}: {moved}");
    }
    assert!(moved.contains("real TCP connections (500 × 2 runs)") && moved.contains("test run (10000 flows)"), "{moved}");
    // Moved of all flows with the table and without: test run 25 % and 34 % (9 % collateral), connections 25 % and
    // 35.5 % (105 of 1,000), the plan 25 % and 36 %.
    let totals: Vec<&str> = moved.split(r#"<text class="value""#).skip(1).map(|t| t.split('>').nth(1).unwrap().trim_end_matches("</text")).collect();
    assert_eq!(totals, ["25.0", "34.0", "25.0", "35.5", "25.0", "36.0"], "{moved}");
    assert_eq!(moved.matches(r#"data-part="% collateral""#).count(), 6, "a collateral part on every bar");
    let coll = chart("Collateral: flows moved whose backend stays");
    let values: Vec<&str> = coll.split(r#"<text class="value""#).skip(1).map(|t| t.split('>').nth(1).unwrap().trim_end_matches("</text")).collect();
    // Of the kept flows: 900 of 7,500, 105 of 750, the plan's 12.5 %; none with the table.
    assert_eq!(values, ["0.00", "12.0", "0.00", "14.0", "0.00", "12.5"], "{coll}");

    // The browser keeps both charts and every stacked bar.
    let url = format!("file://{}", html_path.display());
    let dom = String::from_utf8(chromium(&dir, &["--dump-dom", &url])).unwrap();
    assert_eq!(dom.matches("<svg class=\"chart\"").count(), 2, "{dom}");
    assert_eq!(dom.matches("<g class=\"stack\"").count(), 6);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn report_of_a_missing_file_fails_with_its_name() {
    let out = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "report", "/nonexistent/results.json"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/results.json"));
}

/// A run of `xnf lab latency` as files written before it ran on the lab's
/// driver hold it: its fields at the top level, `repeats` among the options.
fn old_latency_file() -> Value {
    let run = |method: &str, poll: bool, base: f64| {
        let rtts: Vec<u64> = (0..100u64).map(|i| (base * 1000.0) as u64 + i * 50).collect();
        let us: Vec<f64> = rtts.iter().map(|&n| n as f64 / 1000.0).collect();
        let q = |f: f64| us[((us.len() - 1) as f64 * f) as usize];
        let label = format!("{method} fwd:{p} recv:{p}", p = if poll { "sleep" } else { "spin" });
        json!({
            "config": {"method": method, "zero_copy": false, "busy_poll": false, "need_wakeup": false, "poll_fwd": poll, "poll_recv": poll, "batch": 1},
            "label": label, "rate_pps": 5000, "repeat": 0, "sent": 100, "lost": 0,
            "summary": {"n": 100, "mean": q(0.5), "median": q(0.5), "std": 1.4, "q1": q(0.25), "q3": q(0.75), "p99": q(0.99), "p999": q(1.0), "min": q(0.0), "max": q(1.0)},
            "rtts_ns": rtts, "cluster": null,
        })
    };
    json!({
        "experiment": "latency",
        "machine": {"kernel": "6.1.0-test", "cpu_model": "Test CPU", "cores": 2, "xnf_version": "0.1.0"},
        "started_unix": 1_700_000_000u64,
        "options": {"rate": 5000, "count": 100, "repeats": 1, "batches": [1], "max_k": 8, "saturation_rates": [], "ping_cpu": 1, "fwd_cpu": 0, "seed": 1},
        "overhead": {"clock_read_ns": 31.0, "loop_rtt_ns": 42.0},
        "runs": [run("udp", false, 8.0), run("udp", true, 21.0), run("af-packet", false, 5.5), run("af-packet", true, 19.7)],
        "clustering": null, "saturation": [], "notes": ["written before the driver"],
    })
}

#[test]
fn latency_files_of_either_form_are_drawn() {
    // A folder of its own: the chart test removes its own when done.
    let dir = std::env::temp_dir().join(format!("xnf-report-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("latency-old.json");
    std::fs::write(&old, serde_json::to_string(&old_latency_file()).unwrap()).unwrap();
    // The old form converted to the driver's by clustering it again.
    let new = dir.join("latency-new.json");
    let lab = |args: &[&str]| Command::new(xnf_testrun::cli::xnf_bin()).arg("lab").args(args).output().unwrap();
    let out = lab(&["latency", "--from", old.to_str().unwrap(), "--json", new.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("af-packet fwd:spin recv:spin"));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&new).unwrap()).unwrap();
    assert_eq!((r["experiment"].as_str(), r["details"]["runs"].as_array().map(Vec::len)), (Some("latency"), Some(4)));
    for input in [&old, &new] {
        let html = input.with_extension("html");
        let out = lab(&["report", input.to_str().unwrap(), "-o", html.to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", input.display(), String::from_utf8_lossy(&out.stderr));
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains("Every configuration (repeats pooled, µs)") && page.contains("udp fwd:sleep recv:sleep"), "{}", input.display());
        assert!(page.contains("written before the driver"), "the notes");
    }
    std::fs::remove_dir_all(&dir).ok();
}
