//! Every shipped example job file parses and validates, and the `after`
//! references between them resolve.

use std::path::{Path, PathBuf};

use ax_shared::jobfile::{DagFile, ValidateOptions, check_after, is_ignored_name, load_file};

fn job_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            job_files(&path, out);
        } else if !is_ignored_name(path.file_name().unwrap().to_str().unwrap()) {
            out.push(path);
        }
    }
}

#[test]
fn every_example_job_file_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/jobs.d");
    let mut files = Vec::new();
    job_files(&dir, &mut files);
    assert!(files.len() >= 4, "{files:?}");
    let opts = ValidateOptions {
        pools: Some(vec!["default".into(), "io".into()]),
    };
    let parsed: Vec<DagFile> = files
        .iter()
        .map(|f| {
            load_file(f, Some(&dir), &opts).unwrap_or_else(|e| panic!("{}: {e:?}", f.display()))
        })
        .collect();
    let refs: Vec<&DagFile> = parsed.iter().collect();
    assert!(check_after(&refs).is_empty(), "{:?}", check_after(&refs));
    let names: Vec<&str> = parsed.iter().map(|d| d.spec.name.as_str()).collect();
    for want in [
        "weekly-report",
        "etl-nightly",
        "disk-usage",
        "team-a/cleanup",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    let weekly = parsed
        .iter()
        .find(|d| d.spec.name == "weekly-report")
        .unwrap();
    let calc = weekly.spec.job("calc_report").unwrap();
    assert_eq!(calc.deps.len(), 3, "three parallel fetches feed the report");
    let cleanup = parsed
        .iter()
        .find(|d| d.spec.name == "team-a/cleanup")
        .unwrap();
    assert_eq!(cleanup.spec.jobs[0].id, "cleanup", "shorthand");
}
