//! What the box tests share: a box on the line topology (gen -> dut ->
//! sink) removed when the test ends, and every pinned map read whole.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use xnf_netns::Netns;
use xnf_testrun::cli::{xnf, xnf_ok, RoutedLine, TempFiles};

/// Everything the box runs is removed when the test ends, pass or fail.
pub struct Boxed {
    pub r: RoutedLine,
    pub files: TempFiles,
}

impl Boxed {
    pub fn new() -> Boxed {
        Boxed { r: RoutedLine::new(&[]), files: TempFiles::new("config") }
    }

    pub fn dut(&self) -> &Netns {
        self.r.dut()
    }

    /// A box file: the router on both of dut's ends, the filter on its
    /// ingress dropping UDP to `drop_port`, the lb with one service on
    /// `vip`, decap on the egress.
    pub fn file(&self, name: &str, drop_port: u16, vip: &str, extra_router: &str) -> String {
        let (g, s) = (&self.r.line.dut_gen_if, &self.r.line.dut_sink_if);
        let text = format!(
            "# the box\n[router]\ninterfaces = [\"{g}\", \"{s}\"{extra_router}]\nfib = \"full\"\n\n\
             [filter]\ninterfaces = [\"{g}\"]\n[filter.rules]\ndefault = \"pass\"\n[[filter.rules.rule]]\nname = \"no-{drop_port}\"\n\
             proto = \"udp\"\ndport = {drop_port}\naction = \"drop\"\n\n\
             [lb]\ninterfaces = [\"{g}\"]\n[lb.services.encap]\nsource_v4 = \"198.18.200.0/24\"\n[[lb.services.service]]\nname = \"web\"\n\
             vip = \"{vip}\"\nproto = \"tcp\"\nport = 80\n[[lb.services.service.backend]]\naddress = \"198.18.0.11\"\n\
             [[lb.services.service.backend]]\naddress = \"198.18.0.12\"\n\n\
             [decap]\ninterfaces = [\"{s}\"]\ngue_port = 7000\n"
        );
        self.files.write(name, &text)
    }

    pub fn show(&self) -> String {
        xnf_ok(self.dut(), &["show"])
    }
}

impl Drop for Boxed {
    fn drop(&mut self) {
        let _ = xnf(self.dut(), &["rollback"]);
        let empty = self.files.write("empty.toml", "");
        let _ = xnf(self.dut(), &["apply", &empty]);
    }
}

/// Every map pinned under `dir` but the counters, read whole: key -> value
/// bytes; a map of maps by its inner maps' contents (their ids change with
/// every swap).
/// Pinned map (path under the namespace's folder) -> its (key, value) pairs.
pub type Pins = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

pub fn dump(dir: &Path) -> Pins {
    use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
    fn read(m: &MapHandle) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for k in m.keys() {
            let v = match m.map_type() {
                MapType::PercpuArray | MapType::PercpuHash | MapType::LruPercpuHash => {
                    m.lookup_percpu(&k, MapFlags::ANY).ok().flatten().map(|v| v.concat()).unwrap_or_default()
                }
                MapType::ArrayOfMaps | MapType::HashOfMaps => {
                    let id = m.lookup(&k, MapFlags::ANY).ok().flatten().map(|v| u32::from_ne_bytes(v[..4].try_into().unwrap()));
                    id.and_then(|id| MapHandle::from_map_id(id).ok())
                        .map(|inner| read(&inner).into_iter().flat_map(|(a, b)| [a, b].concat()).collect())
                        .unwrap_or_default()
                }
                _ => m.lookup(&k, MapFlags::ANY).ok().flatten().unwrap_or_default(),
            };
            if m.map_type() != MapType::ProgArray {
                out.push((k, v));
            }
        }
        out
    }
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(m) = MapHandle::from_pinned_path(&p) {
                // Counters (every per-CPU map) move with any frame, the
                // namespace's own IPv6 neighbour discovery included: what
                // the box is, is in the others.
                let counters = matches!(m.map_type(), MapType::PercpuArray | MapType::PercpuHash | MapType::LruPercpuHash);
                if m.map_type() != MapType::RingBuf && !counters {
                    out.insert(p.strip_prefix(dir).unwrap().display().to_string(), read(&m));
                }
            }
        }
    }
    out
}

pub fn pins(ns: &Netns) -> Pins {
    ns.run(|| {
        use std::os::unix::fs::MetadataExt;
        let key = format!("net-{}", std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino());
        dump(&Path::new("/sys/fs/bpf/xnf").join(key))
    })
    .unwrap()
}
