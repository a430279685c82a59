//! The flame graph renders in a real browser: the SVG of a short sampling
//! of this machine is screenshotted by headless Chromium and the picture
//! must hold both colour families (kernel warm, user cool) in quantity.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xnf_profile::sample::{SampleOptions, Sampler};

const CHROMIUM: &str = "/usr/bin/chromium";

#[test]
fn the_flame_graph_renders_with_kernel_and_user_frames() {
    // Something busy in user space and in the kernel meanwhile: short
    // rounds of compute between system calls, so that both take a good
    // share of the width (with ten thousand rounds per call the kernel
    // frames were a sliver, sometimes under the pixels asked for below).
    let busy = std::thread::spawn(|| {
        let t0 = Instant::now();
        let mut x = 1u64;
        while t0.elapsed() < Duration::from_millis(800) {
            for _ in 0..200 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            let _ = std::fs::metadata("/proc/self/stat");
        }
    });
    let s = Sampler::start(&SampleOptions { cpus: (0..std::thread::available_parallelism().unwrap().get()).collect(), frequency: 999 }).unwrap();
    busy.join().unwrap();
    let stacks = s.stop().unwrap();
    assert!(stacks.samples > 100, "{}", stacks.samples);
    let dir = std::env::temp_dir().join(format!("xnf-flame-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("flame.svg");
    let text = xnf_profile::flame::svg(&stacks, "render test");
    std::fs::write(&svg, &text).unwrap();
    // The graph is as tall as the deepest stack (a JIT's 127 frames make
    // it 2,000 px): the window must hold it all, or the wide frames at the
    // bottom are out of the picture.
    let height: u32 = text.split("height=\"").nth(1).and_then(|h| h.split('"').next()).and_then(|h| h.parse::<f64>().ok()).expect("the svg's height") as u32;
    // At most the command, 127 user and 127 kernel frames: 4,120 px.
    assert!((100..=4_200).contains(&height), "svg height {height}");
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} not found: install chromium (make deps does)");
    let png = dir.join("shot.png");
    let mut child = Command::new(CHROMIUM)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromium");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(90) {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium failed: {status}");
    let mut decoder = png::Decoder::new(std::fs::File::open(&png).expect("no screenshot"));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, height));
    let ch = info.color_type.samples();
    assert!(ch >= 3, "screenshot is not in colour: {:?}", info.color_type);
    let px: Vec<[u8; 3]> = buf[..info.buffer_size()].chunks_exact(ch).map(|p| [p[0], p[1], p[2]]).collect();
    // Kernel frames: red well above blue; user frames: blue well above red.
    let warm = px.iter().filter(|p| p[0] >= 200 && p[2] <= 110).count();
    let cool = px.iter().filter(|p| p[2] >= 200 && p[0] <= 120).count();
    assert!(warm > 2000, "kernel frames drawn: {warm} warm pixels");
    assert!(cool > 500, "user frames drawn: {cool} cool pixels");
    // Frames in colours of their own (by name), not one flat fill.
    let mut colours: Vec<[u8; 3]> = px.iter().filter(|p| (p[0] >= 200 && p[2] <= 110) || (p[2] >= 200 && p[0] <= 120)).copied().collect();
    colours.sort();
    colours.dedup();
    assert!(colours.len() >= 6, "{} distinct frame colours: {colours:?}", colours.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
