//! Summaries of samples and the suite's report.

use serde_json::{Value, json};

/// The rows printed so far and the JSON written at the end.
#[derive(Default)]
pub(crate) struct Report {
    pub json: Vec<Value>,
}

impl Report {
    /// Prints a row and keeps its data for the JSON.
    pub(crate) fn add(&mut self, name: &str, value: String, note: String, raw: Value) {
        println!("{name:<58} {value:<34} {note}");
        self.json.push(json!({"name": name, "data": raw}));
    }
}

/// (median, min, max).
pub(crate) fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub(crate) fn fmt3(v: (f64, f64, f64), unit: &str) -> String {
    format!("{:.0}{unit} ({:.0}–{:.0})", v.0, v.1, v.2)
}

pub(crate) fn fmt3f(v: (f64, f64, f64), unit: &str) -> String {
    format!("{:.2}{unit} ({:.2}–{:.2})", v.0, v.1, v.2)
}

pub(crate) fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// (p50, p99).
pub(crate) fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    (percentile(&mut v, 0.5), percentile(&mut v, 0.99))
}
