//! `STATS` chunks: the `stats` property of elements such as srtsink, srtsrc
//! and rtpjitterbuffer, read periodically by the writer thread as JSON.

use gst::glib;
use gst::prelude::*;
use serde_json::{Map, Number, Value};

use lltrace::clock::monotonic_ns;

/// Elements with a readable `stats` structure property, held weakly.
#[derive(Default)]
pub struct StatsElements {
    elements: Vec<glib::WeakRef<gst::Element>>,
}

/// One reading of an element's `stats`.
pub struct StatsReading {
    /// CLOCK_MONOTONIC just before the property was read.
    pub t_ns: u64,
    pub element: String,
    pub factory: String,
    pub json: String,
}

/// Whether `element` has a readable `stats` property holding a `GstStructure`.
pub fn has_stats(element: &gst::Element) -> bool {
    element.find_property("stats").is_some_and(|p| {
        p.flags().contains(glib::ParamFlags::READABLE)
            && p.value_type() == gst::Structure::static_type()
    })
}

impl StatsElements {
    /// Remembers `element` if it has `stats` and is not known yet.
    pub fn add(&mut self, element: &gst::Element) {
        if !has_stats(element) {
            return;
        }
        self.elements.retain(|w| w.upgrade().is_some());
        if self
            .elements
            .iter()
            .any(|w| w.upgrade().as_ref() == Some(element))
        {
            return;
        }
        self.elements.push(element.downgrade());
    }

    /// Reads the stats of every live element that is not in the NULL state
    /// (destroyed ones are forgotten).
    pub fn read(&mut self) -> Vec<StatsReading> {
        self.elements.retain(|w| w.upgrade().is_some());
        self.elements
            .iter()
            .filter_map(|w| w.upgrade())
            .filter(|e| e.current_state() > gst::State::Null)
            .filter_map(|e| {
                let t_ns = monotonic_ns();
                let stats = e.property::<Option<gst::Structure>>("stats")?;
                Some(StatsReading {
                    t_ns,
                    element: e.name().to_string(),
                    factory: e
                        .factory()
                        .map(|f| f.name().to_string())
                        .unwrap_or_default(),
                    json: structure_json(&stats).to_string(),
                })
            })
            .collect()
    }
}

/// The fields of `s` as a JSON object (the structure's name is not included).
pub fn structure_json(s: &gst::StructureRef) -> Value {
    let map: Map<String, Value> = s
        .iter()
        .map(|(name, value)| (name.to_string(), value_json(value)))
        .collect();
    Value::Object(map)
}

/// A GValue as JSON: numbers, booleans and strings as such, structures as
/// objects, arrays and lists as arrays, anything else as its serialisation.
pub fn value_json(v: &glib::Value) -> Value {
    if let Some(n) = number_json(v) {
        return n;
    }
    if let Ok(b) = v.get::<bool>() {
        return Value::Bool(b);
    }
    if let Ok(s) = v.get::<Option<String>>() {
        return s.map_or(Value::Null, Value::String);
    }
    if let Ok(s) = v.get::<Option<gst::Structure>>() {
        return s.map_or(Value::Null, |s| structure_json(&s));
    }
    if let Ok(a) = v.get::<glib::ValueArray>() {
        return Value::Array(a.iter().map(value_json).collect());
    }
    if let Ok(a) = v.get::<gst::Array>() {
        return Value::Array(a.iter().map(|x| value_json(x)).collect());
    }
    if let Ok(l) = v.get::<gst::List>() {
        return Value::Array(l.iter().map(|x| value_json(x)).collect());
    }
    v.serialize()
        .map_or(Value::Null, |s| Value::String(s.to_string()))
}

/// Integer and floating-point GValues (a non-finite double is `null`).
fn number_json(v: &glib::Value) -> Option<Value> {
    let n = if let Ok(x) = v.get::<i32>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<u32>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<i64>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<u64>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<i8>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<u8>() {
        Number::from(x)
    } else if let Ok(x) = v.get::<f64>() {
        return Some(Number::from_f64(x).map_or(Value::Null, Value::Number));
    } else if let Ok(x) = v.get::<f32>() {
        return Some(Number::from_f64(f64::from(x)).map_or(Value::Null, Value::Number));
    } else {
        return None;
    };
    Some(Value::Number(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_numbers_strings_and_nesting() {
        gst::init().unwrap();
        let inner = gst::Structure::builder("caller")
            .field("rtt-ms", 1.5f64)
            .field("packets-sent", 42i64)
            .build();
        let callers = glib::ValueArray::new([inner.to_value(), inner.to_value()]);
        let s = gst::Structure::builder("application/x-srt-statistics")
            .field("bytes-sent-total", u64::MAX)
            .field("negotiated-latency-ms", -3i32)
            .field("n", 7u32)
            .field("ok", true)
            .field("name", "a \"quoted\"\nname")
            .field("nan", f64::NAN)
            .field("inner", inner.clone())
            .field("list", gst::List::new([1i32, 2]))
            .field("fraction", gst::Fraction::new(30, 1))
            .build();
        // A GValueArray (as srtsink's `callers`) is not Send: set it through the C API.
        let callers = callers.to_value();
        // SAFETY: valid structure and value; the structure copies the value.
        unsafe {
            gst::ffi::gst_structure_set_value(
                s.as_mut_ptr(),
                c"callers".as_ptr(),
                glib::translate::ToGlibPtr::to_glib_none(&callers).0,
            );
        }
        let json = structure_json(&s).to_string();
        let back: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["bytes-sent-total"], Value::from(u64::MAX));
        assert_eq!(back["negotiated-latency-ms"], Value::from(-3));
        assert_eq!(back["n"], Value::from(7));
        assert_eq!(back["ok"], Value::Bool(true));
        assert_eq!(back["name"], Value::from("a \"quoted\"\nname"));
        assert_eq!(back["nan"], Value::Null);
        assert_eq!(back["inner"]["rtt-ms"], Value::from(1.5));
        assert_eq!(back["callers"][1]["packets-sent"], Value::from(42));
        assert_eq!(back["list"], serde_json::json!([1, 2]));
        assert_eq!(back["fraction"], Value::from("30/1"));
    }

    #[test]
    fn finds_and_reads_stats_properties() {
        gst::init().unwrap();
        let identity = gst::ElementFactory::make("identity").build().unwrap();
        let src = gst::ElementFactory::make("videotestsrc").build().unwrap();
        assert!(has_stats(&identity));
        assert!(!has_stats(&src));
        let mut known = StatsElements::default();
        known.add(&identity);
        known.add(&identity);
        known.add(&src);
        assert_eq!(known.elements.len(), 1);
        assert!(known.read().is_empty(), "an element in NULL is not read");
        identity.set_state(gst::State::Ready).unwrap();
        let readings = known.read();
        assert_eq!(readings.len(), 1);
        assert_eq!(readings[0].factory, "identity");
        let json: Value = serde_json::from_str(&readings[0].json).unwrap();
        assert!(json["num-bytes"].is_u64(), "{json}");
        identity.set_state(gst::State::Null).unwrap();
        drop(identity);
        assert!(known.read().is_empty());
        assert!(
            known.elements.is_empty(),
            "a destroyed element is forgotten"
        );
    }
}
