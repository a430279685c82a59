//! MRT routing-table dumps (RFC 6396) for `--routes FILE`: the prefixes a
//! RIB dump (TABLE_DUMP_V2 or the older TABLE_DUMP) holds, or an update
//! dump (BGP4MP) announces, read with the maintained `bgpkit-parser`; a
//! gzip-compressed dump (RIPE RIS's `.gz`) is decompressed first.
//! What the lab does with the prefixes is `routes.rs`'s business.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use bgpkit_parser::models::ElemType;
use bgpkit_parser::parser::mrt::mrt_elem::Elementor;
use bgpkit_parser::{BgpkitParser, ParserError};
use ipnet::IpNet;

/// A table file opened for reading, gunzipped on the fly if it is gzip's:
/// a dump of a full table from many peers decompresses to hundreds of MB,
/// which are never held at once.
pub fn open(path: &Path, origin: &str) -> Result<Box<dyn BufRead>> {
    let file = std::fs::File::open(path).with_context(|| format!("--routes {origin}: cannot read it (give a route count or a table file)"))?;
    let mut r = BufReader::new(file);
    let gz = r.fill_buf().with_context(|| format!("--routes {origin}: cannot read it"))?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz { Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(r))) } else { Box::new(r) })
}

/// True for binary data, which a text table never is: every MRT record
/// starts with a 16-bit type whose high byte is 0 (the 5th byte).
pub fn is_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

/// Calls `f` with every prefix an MRT dump holds or announces, as often
/// as it appears (a RIB dump has one entry per peer that sent the route,
/// so repeats are the rule), and returns how many. A record that does not
/// parse fails the whole file with its number.
pub fn prefixes(reader: impl Read, origin: &str, mut f: impl FnMut(IpNet)) -> Result<usize> {
    let mut parser = BgpkitParser::from_reader(reader);
    let mut elementor = Elementor::new();
    let (mut n, mut records) = (0usize, 0usize);
    loop {
        let record = match parser.next_record() {
            Ok(r) => r,
            Err(e) if matches!(e.error, ParserError::EofExpected) => break,
            Err(e) => bail!("{origin}: MRT record {} does not parse ({}): not an MRT dump, or cut short?", records + 1, e.error),
        };
        records += 1;
        for elem in elementor.record_to_elems(record) {
            if elem.elem_type == ElemType::ANNOUNCE {
                f(elem.prefix.prefix);
                n += 1;
            }
        }
    }
    if n == 0 {
        bail!("{origin}: {records} MRT records and no announced prefix in them (a RIB dump, TABLE_DUMP_V2, holds the table)");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bgpkit_parser::encoder::MrtRibEncoder;
    use bgpkit_parser::BgpElem;

    /// A TABLE_DUMP_V2 RIB of `prefixes`, each from two peers.
    fn rib(prefixes: &[&str]) -> Vec<u8> {
        let mut enc = MrtRibEncoder::new();
        for (i, p) in prefixes.iter().enumerate() {
            for peer in ["192.0.2.1", "192.0.2.2"] {
                let e = BgpElem {
                    timestamp: 1_700_000_000.0 + i as f64,
                    peer_ip: peer.parse().unwrap(),
                    peer_asn: 64_500.into(),
                    prefix: bgpkit_parser::models::NetworkPrefix::new(p.parse().unwrap(), None),
                    next_hop: Some(peer.parse().unwrap()),
                    ..Default::default()
                };
                enc.process_elem(&e).unwrap();
            }
        }
        enc.export_bytes().unwrap().to_vec()
    }

    #[test]
    fn a_rib_dump_gives_its_prefixes_once_per_peer() {
        let bytes = rib(&["1.0.0.0/24", "8.8.8.0/24", "2a00:1450::/32"]);
        assert!(is_binary(&bytes));
        let mut got = Vec::new();
        assert_eq!(prefixes(bytes.as_slice(), "rib", |p| got.push(p)).unwrap(), 6);
        got.sort();
        let want: Vec<IpNet> =
            ["1.0.0.0/24", "1.0.0.0/24", "8.8.8.0/24", "8.8.8.0/24", "2a00:1450::/32", "2a00:1450::/32"].iter().map(|p| p.parse().unwrap()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_gzipped_dump_reads_like_the_plain_one() {
        use std::io::Write;
        let bytes = rib(&["1.0.0.0/24"]);
        let dir = std::env::temp_dir().join(format!("xnf-mrt-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        std::fs::write(dir.join("rib.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(dir.join("rib"), &bytes).unwrap();
        let read = |name: &str| {
            let mut out = Vec::new();
            open(&dir.join(name), name).unwrap().read_to_end(&mut out).unwrap();
            out
        };
        let (unzipped, plain) = (read("rib.gz"), read("rib"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(unzipped, bytes);
        assert_eq!(plain, bytes);
    }

    #[test]
    fn a_dump_file_is_installed_like_a_text_table_less_what_cannot_be() {
        use std::io::Write;
        let bytes = rib(&["1.0.0.0/24", "0.0.0.0/0", "10.0.0.0/8", "8.8.8.0/24", "2a00:1450::/32"]);
        let dir = std::env::temp_dir().join(format!("xnf-mrt-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bview.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        gz.finish().unwrap();
        let t = super::super::routes::read_table(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        let t = t.unwrap();
        let v4: Vec<IpNet> = ["1.0.0.0/24", "8.8.8.0/24"].iter().map(|p| p.parse().unwrap()).collect();
        let v6: Vec<IpNet> = vec!["2001:db8:a001:4500::/60".parse().unwrap()]; // 2a00:1450:: after its first four bits
                                                                               // Two peers each: every prefix repeated once; the default route
                                                                               // and the private /8 (twice each) left out.
        assert_eq!((t.v4, t.v6, t.duplicates, t.skipped), (v4, v6, 3, 4));
    }

    /// A gzipped table cut short fails naming the file and why, not as
    /// "neither text nor MRT".
    #[test]
    fn a_cut_gzip_file_fails_saying_so() {
        use std::io::Write;
        let text: String = (0..2000).map(|i| format!("{}.{}.0.0/16\n", 10 + i / 256, i % 256)).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let path = std::env::temp_dir().join(format!("xnf-cut-{}.txt.gz", std::process::id()));
        std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
        let err = super::super::routes::read_table(&path).map(|_| ()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        let err = format!("{err:#}");
        assert!(err.contains("xnf-cut-") && err.contains("cut short or corrupt"), "{err}");
    }

    #[test]
    fn a_cut_or_foreign_file_fails_with_its_name() {
        let bytes = rib(&["1.0.0.0/24", "8.8.8.0/24"]);
        let err = prefixes(&bytes[..bytes.len() - 5], "rib.mrt", |_| ()).unwrap_err().to_string();
        assert!(err.contains("rib.mrt: MRT record"), "{err}");
        let err = prefixes(&[0u8; 7][..], "zeros", |_| ()).unwrap_err().to_string();
        assert!(err.contains("zeros"), "{err}");
        assert!(!is_binary(b"1.0.0.0/24\n# comment\n"));
    }
}
