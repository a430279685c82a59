//! What an apply changes in the maps: a service the file does not change
//! keeps its live table (a swap costs two RCU grace periods), one it
//! changes gets a new table in its idle slot, and the live table is read
//! back from the kernel rather than trusted, so a table that differs from
//! the file is replaced even when the service record looks right.
//! (That every frame then takes the backend the file says: the fuzzer.)

use crate::program::{LbMaps, LbProgram, RawService};
use crate::tables::{allocate, converge, file_sources, service_key, Ids};
use crate::{Config, Table};

fn file(web_weight: u16) -> String {
    let mut t = String::from("[encap]\nsource_v4 = \"198.18.200.0/24\"\nsource_v6 = \"2001:db8:200::/64\"\n");
    for (name, vip, backends) in [
        ("web", "198.18.100.1", [("198.18.0.11", web_weight), ("198.18.0.12", 1)]),
        ("dns", "198.18.100.2", [("198.18.0.21", 1), ("198.18.0.22", 1)]),
        ("six", "2001:db8:100::1", [("2001:db8::31", 1), ("2001:db8::32", 3)]),
    ] {
        t += &format!("\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nproto = \"tcp\"\nport = 80\ntable_size = 251\nmode = \"ipip\"\n");
        for (a, w) in backends {
            t += &format!("\n[[service.backend]]\naddress = \"{a}\"\nweight = {w}\n");
        }
    }
    t
}

struct Lb {
    _prog: LbProgram,
    maps: LbMaps,
    ids: Ids,
}

impl Lb {
    /// Applies `text`; returns each service's record (by name) afterwards.
    fn apply(&mut self, text: &str) -> Vec<(String, RawService)> {
        let (config, _) = Config::parse(text, "t.toml").unwrap();
        let tables: Vec<Table> = config.services.iter().map(|s| Table::of(s).unwrap()).collect();
        self.ids = allocate(&self.ids, &config).unwrap();
        converge(&self.maps, &config, &tables, &self.ids, &file_sources(&config.encap)).unwrap();
        config.services.iter().map(|s| (s.name.clone(), self.maps.service(&service_key(s)).unwrap().expect("a service record"))).collect()
    }

    fn table(&self, slot: u32) -> Option<Vec<u32>> {
        self.maps.table(slot).unwrap()
    }
}

#[test]
fn an_apply_swaps_the_tables_of_the_services_it_changes_and_only_those() {
    let prog = LbProgram::load(None, None).expect("loading the lb (run as root)");
    let maps = prog.maps().unwrap();
    let mut lb = Lb { _prog: prog, maps, ids: Ids::default() };
    let first = lb.apply(&file(1));
    let tables: Vec<Vec<u32>> = first.iter().map(|(n, r)| lb.table(r.slot).unwrap_or_else(|| panic!("{n}: no live table"))).collect();
    for (n, r) in &first {
        assert_eq!(lb.table(r.slot ^ 1), None, "{n}: the idle slot holds a table after the first apply");
    }

    // The same file again: nothing moves.
    let again = lb.apply(&file(1));
    for ((n, a), (_, b)) in first.iter().zip(&again) {
        assert_eq!(a.slot, b.slot, "{n}: an unchanged service's table was swapped");
    }

    // One backend's weight: web's table changes, the others' do not.
    let changed = lb.apply(&file(3));
    for (((n, a), (_, b)), t) in first.iter().zip(&changed).zip(&tables) {
        if n == "web" {
            assert_eq!(b.slot, a.slot ^ 1, "web's new table is not in its idle slot");
            assert_ne!(lb.table(b.slot).as_ref(), Some(t), "web's table did not change with its weights");
        } else {
            assert_eq!(a.slot, b.slot, "{n}: a service the file did not change had its table swapped");
            assert_eq!(lb.table(b.slot).as_ref(), Some(t), "{n}: its table changed");
        }
        assert_eq!(lb.table(b.slot ^ 1), None, "{n}: the idle slot still holds a table");
    }

    // dns's live table overwritten behind the apply's back: the next apply
    // of the same file must put the right one back (it reads the table, not
    // only the record).
    let (_, dns) = changed.iter().find(|(n, _)| n == "dns").unwrap();
    let right = lb.table(dns.slot).unwrap();
    lb.maps.set_table(dns.slot, &vec![right[0]; right.len()]).unwrap();
    let mended = lb.apply(&file(3));
    let (_, dns2) = mended.iter().find(|(n, _)| n == "dns").unwrap();
    assert_eq!(dns2.slot, dns.slot ^ 1, "a live table unlike the file's was kept");
    assert_eq!(lb.table(dns2.slot), Some(right), "dns's table is not the file's again");
}
