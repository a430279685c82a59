//! The swept parameters of an experiment: a [`Point`] is a map from
//! parameter name to [`Value`], and a [`Param`] describes one parameter —
//! its title, how its values read and how a chart spaces them — so that the
//! report and the tables need no knowledge of any experiment: a parameter
//! with two values or more in a results file is an axis.
//!
//! A point serializes as a flat JSON object in the experiment's order of
//! parameters, e.g. the router's
//! `{"size":64,"flows":4,"ipv6":false,"routes":0,"queues":1,"netfilter":false}`.

use std::fmt;

use anyhow::{Context, Result};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One parameter's value at a point. Ordered (booleans, then integers,
/// then text) so that sweeps sort.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Text(String),
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v as i64)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.into())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Text(s) => f.write_str(s),
        }
    }
}

impl Value {
    /// The number on a chart's axis (false = 0, true = 1; text has none).
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            Value::Int(n) => Some(*n as f64),
            Value::Text(_) => None,
        }
    }
}

/// The parameters of one sample: what was the same for every variant, by
/// name, in the experiment's order of parameters. Two points are equal when
/// they hold the same values, in whatever order.
#[derive(Clone, Debug, Default)]
pub struct Point(Vec<(String, Value)>);

impl PartialEq for Point {
    fn eq(&self, o: &Point) -> bool {
        self.0.len() == o.0.len() && self.0.iter().all(|(n, v)| o.get(n) == Some(v))
    }
}

impl Eq for Point {}

impl Point {
    /// `self` with `name` set to `v` (replaced if present, else appended).
    pub fn with(mut self, name: &str, v: impl Into<Value>) -> Point {
        self.set(name, v.into());
        self
    }

    pub fn set(&mut self, name: &str, v: Value) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = v,
            None => self.0.push((name.into(), v)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// `self` without `name`: the same for every point of a sweep of `name`.
    pub fn without(&self, name: &str) -> Point {
        Point(self.0.iter().filter(|(n, _)| n != name).cloned().collect())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// An integer parameter; an error names it when the point lacks it.
    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name) {
            Some(Value::Int(n)) => Ok(*n),
            v => Err(anyhow::anyhow!("the point has no integer `{name}` (it has {v:?})")),
        }
    }

    /// A non-negative integer parameter that fits a u32.
    pub fn u32(&self, name: &str) -> Result<u32> {
        u32::try_from(self.int(name)?).with_context(|| format!("`{name}` out of range"))
    }

    /// An on/off parameter.
    pub fn flag(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            Some(Value::Bool(b)) => Ok(*b),
            v => Err(anyhow::anyhow!("the point has no on/off `{name}` (it has {v:?})")),
        }
    }
}

impl Serialize for Point {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Point, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Point;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of parameter values")
            }
            // The file's order is kept: it is the experiment's order.
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Point, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry::<String, Value>()? {
                    v.push(e);
                }
                Ok(Point(v))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// How a chart spaces a parameter's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// Evenly spaced, in order, joined by lines (sizes: IMIX has no place on a number line).
    Categories,
    /// Logarithmic, joined by lines (flows, routes).
    Log,
    /// Linear with whole-number ticks, joined by lines (queues, chain length).
    Linear,
    /// Side-by-side bars per value (on/off, IPv4/IPv6).
    Bars,
}

/// What an experiment says about one of its parameters: enough for the
/// report and the tables to label, order and draw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// Its key in every point.
    pub name: String,
    /// What it is, for charts ("Throughput vs {title}") and tables.
    pub title: String,
    /// The label of an axis of it.
    pub axis: String,
    pub scale: Axis,
    /// A number's unit in labels, singular and plural ("flow", "flows");
    /// empty: `name number`.
    #[serde(default)]
    pub unit: (String, String),
    /// Values with names of their own: size 0 = "IMIX", ipv6 false = "IPv4".
    #[serde(default)]
    pub names: Vec<(Value, String)>,
    /// Values a point's label leaves out (the usual ones: 0 routes, 1 queue).
    #[serde(default)]
    pub quiet: Vec<Value>,
    /// Values that are no place on the scale (IMIX): after the others, set
    /// apart, not joined to them by lines.
    #[serde(default)]
    pub apart: Vec<Value>,
}

impl Param {
    fn new(name: &str, title: &str, axis: &str, scale: Axis) -> Param {
        Param {
            name: name.into(),
            title: title.into(),
            axis: axis.into(),
            scale,
            unit: Default::default(),
            names: Vec::new(),
            quiet: Vec::new(),
            apart: Vec::new(),
        }
    }

    /// A parameter no experiment described: its name for every title,
    /// drawn after the kind of its values.
    pub fn plain(name: &str, sample: &Value) -> Param {
        let scale = match sample {
            Value::Bool(_) => Axis::Bars,
            Value::Int(_) => Axis::Linear,
            Value::Text(_) => Axis::Categories,
        };
        Param::new(name, name, name, scale)
    }

    fn unit(mut self, one: &str, many: &str) -> Param {
        self.unit = (one.into(), many.into());
        self
    }

    fn named(mut self, v: impl Into<Value>, name: &str) -> Param {
        self.names.push((v.into(), name.into()));
        self
    }

    fn quiet(mut self, v: impl Into<Value>) -> Param {
        self.quiet.push(v.into());
        self
    }

    fn name_of(&self, v: &Value) -> Option<&str> {
        self.names.iter().find(|(w, _)| w == v).map(|(_, n)| n.as_str())
    }

    /// A value on an axis or in a column: "64", "IMIX", "IPv6", "on".
    pub fn label(&self, v: &Value) -> String {
        match (self.name_of(v), v) {
            (Some(n), _) => n.into(),
            (None, Value::Bool(b)) => if *b { "on" } else { "off" }.into(),
            (None, v) => v.to_string(),
        }
    }

    /// A value within a point's label ("64 B", "4 flows", "netfilter"),
    /// None for a quiet one.
    pub fn in_point(&self, v: &Value) -> Option<String> {
        if self.quiet.contains(v) {
            return None;
        }
        Some(match (self.name_of(v), v) {
            (Some(n), _) => n.into(),
            (None, Value::Bool(true)) => self.name.clone(),
            (None, Value::Bool(false)) => format!("no {}", self.name),
            (None, Value::Int(n)) if !self.unit.0.is_empty() => format!("{n} {}", if *n == 1 { &self.unit.0 } else { &self.unit.1 }),
            (None, v) => format!("{} {v}", self.name),
        })
    }

    /// Sort key of a value on an axis: the values set apart last; named
    /// values in the order they were named (VLAN patterns: untagged, in,
    /// out, both), after the others.
    pub fn order(&self, v: &Value) -> (bool, Option<usize>, Value) {
        (self.apart.contains(v), self.names.iter().position(|(w, _)| w == v), v.clone())
    }
}

/// A point's label in the order of `params`, e.g. "64 B, 4 flows, IPv4";
/// parameters no descriptor names follow, as `name value`.
pub fn label(params: &[Param], p: &Point) -> String {
    let described = params.iter().filter_map(|d| p.get(&d.name).and_then(|v| d.in_point(v)));
    let others = p.iter().filter(|(n, _)| !params.iter().any(|d| d.name == *n)).map(|(n, v)| format!("{n} {v}"));
    described.chain(others).collect::<Vec<_>>().join(", ")
}

/// Every combination of the swept values: the first list changes slowest.
/// Each point lists its parameters in the order of `params` (the order of
/// labels and of the JSON), whatever the order of the sweep.
pub fn product(params: &[Param], sweep: &[(&str, Vec<Value>)]) -> Vec<Point> {
    let mut points = vec![Point::default()];
    for (name, values) in sweep {
        points = points.into_iter().flat_map(|p| values.iter().map(move |v| p.clone().with(name, v.clone()))).collect();
    }
    let rank = |n: &str| params.iter().position(|d| d.name == n).unwrap_or(params.len());
    for p in &mut points {
        p.0.sort_by_key(|(n, _)| rank(n));
    }
    points
}

/// A list of values of one parameter.
pub fn values<T: Into<Value> + Clone>(v: &[T]) -> Vec<Value> {
    v.iter().cloned().map(Into::into).collect()
}

// ---- the parameters experiments share ----

pub fn size() -> Param {
    let mut p = Param::new("size", "packet size", "frame size on the wire (bytes, FCS included)", Axis::Categories).unit("B", "B").named(0u32, "IMIX");
    p.apart.push(0u32.into());
    p
}

pub fn flows() -> Param {
    Param::new("flows", "flows", "flows (log scale)", Axis::Log).unit("flow", "flows")
}

pub fn ipv6() -> Param {
    Param::new("ipv6", "IP version", "IP version", Axis::Bars).named(false, "IPv4").named(true, "IPv6")
}

pub fn routes() -> Param {
    Param::new("routes", "route-table size", "routes in the table (log scale)", Axis::Log).unit("route", "routes").quiet(0u32)
}

pub fn queues() -> Param {
    Param::new("queues", "cores", "queues = generator CPUs", Axis::Linear).unit("queue", "queues").quiet(1u32)
}

pub fn netfilter() -> Param {
    Param::new("netfilter", "netfilter ruleset", "netfilter ruleset", Axis::Bars).quiet(false)
}

/// 802.1Q tags on dut's sides (`xnf lab router --vlan`): none is quiet.
pub fn vlan() -> Param {
    Param::new("vlan", "VLAN tags", "802.1Q tags (dut's ingress / egress)", Axis::Categories)
        .named("none", "untagged")
        .named("in", "tagged in")
        .named("out", "tagged out")
        .named("both", "tagged in and out")
        .quiet("none")
}

/// The XDP mode of dut's programs (the container-NF thesis Fig. 7: native
/// in the driver, or generic after the kernel made an skb).
pub fn xdp_mode() -> Param {
    Param::new("xdp-mode", "XDP mode", "XDP mode of dut's programs", Axis::Categories).named("native", "native XDP").named("skb", "generic XDP").quiet("native")
}

/// NFs in a chain.
pub fn nfs() -> Param {
    Param::new("nfs", "chain length", "NFs in the chain", Axis::Linear).unit("NF", "NFs")
}

/// The parameters of results written before files carried them: the
/// router's sweep, which every experiment filled then.
pub fn legacy() -> Vec<Param> {
    vec![size(), flows(), ipv6(), routes(), queues(), netfilter()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router_point() -> Point {
        Point::default().with("size", 64u32).with("flows", 4u32).with("ipv6", false).with("routes", 0u64).with("queues", 1u32).with("netfilter", false)
    }

    #[test]
    fn a_point_is_a_flat_object_in_the_experiments_order() {
        let text = serde_json::to_string(&router_point()).unwrap();
        assert_eq!(text, r#"{"size":64,"flows":4,"ipv6":false,"routes":0,"queues":1,"netfilter":false}"#);
        let back: Point = serde_json::from_str(&text).unwrap();
        assert_eq!(back, router_point());
        let text: Point = serde_json::from_str(r#"{"pattern":"qinq","nfs":2}"#).unwrap();
        assert_eq!((text.get("pattern"), text.int("nfs").unwrap()), (Some(&Value::Text("qinq".into())), 2));
        assert!(text.flag("nfs").is_err() && text.int("size").is_err());
        assert_eq!(Point::default().with("a", 1u32).with("b", true), Point::default().with("b", true).with("a", 1u32), "order does not matter");
        assert_ne!(Point::default().with("a", 1u32), Point::default().with("a", 1u32).with("b", true));
    }

    #[test]
    fn labels_read_like_the_router_always_wrote_them() {
        let ps = legacy();
        assert_eq!(label(&ps, &router_point()), "64 B, 4 flows, IPv4");
        let p = router_point().with("size", 0u32).with("flows", 1u32).with("routes", 1000u64).with("queues", 2u32).with("netfilter", true).with("ipv6", true);
        assert_eq!(label(&ps, &p), "IMIX, 1 flow, IPv6, 1000 routes, 2 queues, netfilter");
        assert_eq!(label(&ps, &Point::default().with("vlan", "qinq")), "vlan qinq");
        let with_vlan = [legacy(), vec![vlan()]].concat();
        assert_eq!(label(&with_vlan, &router_point().with("vlan", "both")), "64 B, 4 flows, IPv4, tagged in and out");
        assert_eq!(label(&with_vlan, &router_point().with("vlan", "none")), "64 B, 4 flows, IPv4");
        assert_eq!(vlan().label(&"none".into()), "untagged");
        assert_eq!((ps[0].label(&0u32.into()), ps[0].label(&64u32.into())), ("IMIX".into(), "64".into()));
        assert_eq!((ps[5].label(&true.into()), ps[2].label(&true.into())), ("on".into(), "IPv6".into()));
    }

    #[test]
    fn values_set_apart_sort_last() {
        let s = size();
        let mut v = values(&[0u32, 1518, 64]);
        v.sort_by_key(|x| s.order(x));
        assert_eq!(v, values(&[64u32, 1518, 0]));
        let mut v = values(&["both", "out", "none", "in"]);
        v.sort_by_key(|x| vlan().order(x));
        assert_eq!(v, values(&["none", "in", "out", "both"]), "in the order named, not alphabetical");
    }

    #[test]
    fn points_are_the_product_with_the_first_sweep_slowest() {
        let ps = vec![size(), flows(), queues()];
        let p = product(&ps, &[("queues", values(&[1u32, 2])), ("size", values(&[64u32, 1518])), ("flows", values(&[1u32]))]);
        assert_eq!(p.len(), 4);
        let q: Vec<(i64, i64)> = p.iter().map(|p| (p.int("queues").unwrap(), p.int("size").unwrap())).collect();
        assert_eq!(q, [(1, 64), (1, 1518), (2, 64), (2, 1518)]);
        let keys: Vec<&str> = p[0].iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["size", "flows", "queues"], "in the order of the parameters, not of the sweep");
        assert!(product(&ps, &[("size", vec![])]).is_empty());
    }

    #[test]
    fn descriptors_round_trip() {
        let text = serde_json::to_string(&legacy()).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Param>>(&text).unwrap(), legacy());
    }
}
