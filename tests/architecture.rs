//! docs/architecture.md's layers, checked against the sources and the manifests: which
//! workspace crates each crate depends on, that only the CLI crate uses clap, that the DSL
//! builds without polars, and which modules of powerperf-core import which (test code
//! aside). A new arrow fails here until the page (and this table) allows it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of a manifest's `[dependencies]` (and target-specific dependencies), not dev- or
/// build-dependencies.
fn deps(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join(manifest)).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let mut out = BTreeSet::new();
    // A renamed dependency (`powerperf = { package = "powerperf-core", … }`) counts by its
    // package name.
    let mut add = |t: Option<&toml::Value>| {
        if let Some(t) = t.and_then(toml::Value::as_table) {
            for (k, v) in t {
                let package = v.get("package").and_then(toml::Value::as_str);
                out.insert(package.unwrap_or(k).to_string());
            }
        }
    };
    add(doc.get("dependencies"));
    if let Some(targets) = doc.get("target").and_then(toml::Value::as_table) {
        for t in targets.values() {
            add(t.get("dependencies"));
        }
    }
    out
}

/// Whether `manifest` declares clap as optional and only enables it through a feature named
/// `clap` (`clap = ["dep:clap"]`).
fn clap_is_an_optional_feature(manifest: &str) -> bool {
    let text = std::fs::read_to_string(repo().join(manifest)).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let optional = doc
        .get("dependencies")
        .and_then(|d| d.get("clap"))
        .and_then(|c| c.get("optional"))
        .and_then(toml::Value::as_bool)
        == Some(true);
    let feature = doc
        .get("features")
        .and_then(|f| f.get("clap"))
        .and_then(toml::Value::as_array)
        .is_some_and(|a| a.len() == 1 && a[0].as_str() == Some("dep:clap"));
    optional && feature
}

const WORKSPACE: [&str; 8] = [
    "spank-powerperf",
    "powerperf-events",
    "powerperf-rt",
    "powerperf-microbench",
    "microbench",
    "powerperf-format",
    "powerperf-core",
    "powerperf",
];

#[test]
fn crates_depend_only_on_the_layers_below() {
    let allowed: [(&str, &[&str]); 7] = [
        ("crates/powerperf-events/Cargo.toml", &[]),
        ("rt/Cargo.toml", &[]),
        ("microbench/Cargo.toml", &[]),
        (
            "crates/powerperf-format/Cargo.toml",
            &["powerperf-events", "powerperf-rt"],
        ),
        (
            "crates/powerperf-core/Cargo.toml",
            &[
                "powerperf-events",
                "powerperf-format",
                "powerperf-rt",
                "powerperf-microbench",
            ],
        ),
        ("crates/powerperfd/Cargo.toml", &["powerperf-core"]),
        ("crates/spank-powerperf/Cargo.toml", &["powerperf-core"]),
    ];
    for (manifest, ok) in allowed {
        let d = deps(manifest);
        let internal: Vec<&String> = d
            .iter()
            .filter(|n| WORKSPACE.contains(&n.as_str()))
            .collect();
        for n in &internal {
            assert!(
                ok.contains(&n.as_str()),
                "{manifest} depends on {n}, which docs/architecture.md does not allow"
            );
        }
        // powerperf-core may carry clap only as an optional dependency behind its `clap`
        // feature (`#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]` on the enums
        // the CLI takes as values, issue 42 item 3); the CLI enables it, nothing else does.
        let clap_ok =
            manifest == "crates/powerperf-core/Cargo.toml" && clap_is_an_optional_feature(manifest);
        assert!(
            clap_ok || !d.iter().any(|n| n.starts_with("clap")),
            "{manifest}: clap belongs to the CLI crate only"
        );
    }
    for manifest in [
        "crates/powerperfd/Cargo.toml",
        "crates/spank-powerperf/Cargo.toml",
    ] {
        let text = std::fs::read_to_string(repo().join(manifest)).unwrap();
        assert!(
            !text.contains("\"clap\""),
            "{manifest} enables powerperf-core's clap feature, which belongs to the CLI"
        );
    }
    let events = deps("crates/powerperf-events/Cargo.toml");
    assert_eq!(
        events,
        ["serde", "serde_json", "thiserror", "toml"]
            .into_iter()
            .map(String::from)
            .collect(),
        "the DSL crate builds without polars"
    );
    assert!(deps("Cargo.toml").contains("powerperf-core"));
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `crate::MODULE` paths a file's non-test code names (comments and `#[cfg(test)]`
/// modules left out; a file named tests.rs is test code).
fn imports(file: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return out;
    }
    let text = std::fs::read_to_string(file).unwrap();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

#[test]
fn core_modules_import_only_downwards() {
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("units", &[][..]),
        ("store", &["units", "events_dsl"][..]),
        ("daemon", &["units"][..]),
        ("collect", &["store", "units", "events_dsl", "daemon"][..]),
        ("models", &["store", "units", "events_dsl"][..]),
        (
            "dvfs",
            &[
                "models",
                "store",
                "units",
                "events_dsl",
                "daemon",
                "collect",
            ][..],
        ),
        ("output", &["models", "dvfs", "store"][..]),
        (
            "report",
            &["store", "units", "events_dsl", "models", "dvfs", "output"][..],
        ),
        ("export", &["store", "report"][..]),
    ]);
    let src = repo().join("crates/powerperf-core/src");
    let mut checked = 0;
    for (module, ok) in &allowed {
        let mut files = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            sources(&dir, &mut files);
        } else {
            files.push(src.join(format!("{module}.rs")));
        }
        for f in files {
            for name in imports(&f) {
                if name == *module || (*module == "daemon" && name == "daemon") {
                    continue;
                }
                // `dvfs` may reach `collect` only to run a collection (dvfs::sweep) and for
                // the GPU reading seam the fake GPUs answer (dvfs::gpu_control).
                let sweep_only = *module == "dvfs" && name == "collect";
                let allowed_file = f.file_name().is_some_and(|n| n == "sweep.rs")
                    || f.ends_with("dvfs/gpu_control/mod.rs");
                assert!(
                    ok.contains(&name.as_str()) && (!sweep_only || allowed_file),
                    "{} imports crate::{name}, which docs/architecture.md does not allow for `{module}`",
                    f.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} files checked");
}

#[test]
fn nothing_in_the_fuzz_crates_includes_sources_by_path() {
    let mut files = Vec::new();
    sources(&repo().join("fuzz"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains("#[path"), "{} uses #[path]", f.display());
    }
}
