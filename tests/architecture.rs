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

const WORKSPACE: [&str; 10] = [
    "spank-powerperf",
    "powerperfd",
    "powerperf-node",
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
    let allowed: [(&str, &[&str]); 8] = [
        ("crates/powerperf-events/Cargo.toml", &[]),
        ("crates/powerperf-node/Cargo.toml", &["powerperf-rt"]),
        ("rt/Cargo.toml", &[]),
        ("microbench/Cargo.toml", &[]),
        (
            "crates/powerperf-format/Cargo.toml",
            &["powerperf-events", "powerperf-rt", "powerperf-node"],
        ),
        (
            "crates/powerperf-core/Cargo.toml",
            &[
                "powerperf-events",
                "powerperf-format",
                "powerperf-rt",
                "powerperf-node",
            ],
        ),
        ("crates/powerperfd/Cargo.toml", &["powerperf-node"]),
        ("crates/spank-powerperf/Cargo.toml", &["powerperf-node"]),
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
        // powerperfd's package builds its binary's command line too (crates/powerperfd/src/main.rs);
        // powerperf-core and powerperf-node may carry clap only as an optional dependency behind a `clap`
        // feature (`#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]` on the enums
        // the CLI takes as values, issue 42 item 3), which only the CLI enables.
        let clap_ok = manifest == "crates/powerperfd/Cargo.toml"
            || ([
                "crates/powerperf-core/Cargo.toml",
                "crates/powerperf-node/Cargo.toml",
            ]
            .contains(&manifest)
                && clap_is_an_optional_feature(manifest));
        assert!(
            clap_ok || !d.iter().any(|n| n.starts_with("clap")),
            "{manifest}: clap belongs to the command lines (powerperf, powerperfd) only"
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
        ("store", &["events_dsl"][..]),
        ("collect", &["store", "events_dsl"][..]),
        ("models", &["store", "events_dsl"][..]),
        ("dvfs", &["models", "store", "events_dsl", "collect"][..]),
        ("output", &["models", "dvfs", "store"][..]),
        (
            "report",
            &["store", "events_dsl", "models", "dvfs", "output"][..],
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
                if name == *module {
                    continue;
                }
                // `dvfs` may reach `collect` only to run a collection (dvfs::sweep).
                let sweep_only = *module == "dvfs" && name == "collect";
                let allowed_file = f.file_name().is_some_and(|n| n == "sweep.rs");
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

/// Every `.rs` file of the repository but third_party/ (vendored code) and build outputs
/// (`target` directories, hidden directories).
fn own_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if name.starts_with('.') || name == "target" || p == repo().join("third_party") {
                continue;
            }
            own_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Issue 42's rule: no source file over 1,100 lines outside third_party/ (clippy's
/// `too_many_lines`, at clippy.toml's 200, holds the functions; `.ci/run` runs clippy).
#[test]
fn no_source_file_is_over_1100_lines() {
    const MAX_LINES: usize = 1_100;
    let mut files = Vec::new();
    own_sources(&repo(), &mut files);
    let mut over = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let n = text.lines().count();
        if n > MAX_LINES {
            over.push(format!(
                "{} ({n} lines)",
                f.strip_prefix(repo()).unwrap().display()
            ));
        }
    }
    assert!(files.len() > 200, "only {} files found", files.len());
    assert!(
        over.is_empty(),
        "over {MAX_LINES} lines: {}; fix: move the inline `mod tests` into a tests.rs next to \
         the module (as models/analytic/ and models/scaling/ do), or split the module",
        over.join(", ")
    );
}

/// Every workspace member takes the workspace's lints (`[lints] workspace = true`), so that
/// `cargo clippy --workspace -- -D warnings` in `.ci/run` holds them all; a new crate
/// without the line fails here.
#[test]
fn every_workspace_member_takes_the_workspace_lints() {
    let root: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let lints = &root["workspace"]["lints"]["clippy"];
    for lint in ["too_many_lines", "undocumented_unsafe_blocks"] {
        assert_eq!(
            lints.get(lint).and_then(toml::Value::as_str),
            Some("warn"),
            "Cargo.toml's [workspace.lints.clippy] does not switch on {lint}"
        );
    }
    let members = root["workspace"]["members"].as_array().unwrap();
    assert!(members.len() >= 10, "{members:?}");
    for m in members {
        let manifest = repo().join(m.as_str().unwrap()).join("Cargo.toml");
        let doc: toml::Table =
            toml::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        let inherits = doc
            .get("lints")
            .and_then(|l| l.get("workspace"))
            .and_then(toml::Value::as_bool);
        assert_eq!(
            inherits,
            Some(true),
            "{} has no `[lints] workspace = true`; fix: add it after its [package] table",
            manifest.display()
        );
    }
}

/// The crate families the node crate's rule keeps out (docs/architecture.md, "The node
/// crate"): polars (with its Parquet decoders), arrow, linfa, ndarray and plotters.
const HEAVY: [&str; 5] = ["polars", "arrow", "linfa", "ndarray", "plotters"];

/// Whether package `name` belongs to `family`: one of its `-`/`_`-separated words is the
/// family's name (`polars-core`, `polars-arrow`, `arrow-array`, `linfa-linear`, `plotters-svg`).
fn in_family(name: &str, family: &str) -> bool {
    name.split(['-', '_']).any(|w| w == family)
}

/// The packages of `Cargo.lock` that `root` depends on, itself included, by name: every
/// `dependencies` entry (`name`, `name version` or `name version (source)`) followed. The
/// lock file lists each package's dependencies over all targets and features (and a
/// workspace member's dev-dependencies), so this is a superset of what a build links.
fn lock_closure(lock: &toml::Table, root: &str) -> BTreeSet<String> {
    let packages = lock["package"]
        .as_array()
        .expect("Cargo.lock has [[package]]");
    // (name, version) -> dependency strings
    let mut by_key: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_string();
        let version = p["version"].as_str().unwrap().to_string();
        let deps = p
            .get("dependencies")
            .and_then(toml::Value::as_array)
            .map(|a| a.iter().map(|d| d.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        by_key.insert((name, version), deps);
    }
    let resolve = |dep: &str| -> (String, String) {
        let mut w = dep.split_whitespace();
        let name = w.next().unwrap().to_string();
        let version = match w.next() {
            Some(v) => v.to_string(),
            None => {
                let mut vs = by_key.keys().filter(|(n, _)| *n == name);
                let (_, v) = vs
                    .next()
                    .unwrap_or_else(|| panic!("{name} is not in Cargo.lock"));
                assert!(vs.next().is_none(), "{name}: several versions, none named");
                v.clone()
            }
        };
        (name, version)
    };
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut todo = vec![resolve(root)];
    while let Some(k) = todo.pop() {
        if !seen.insert(k.clone()) {
            continue;
        }
        for d in by_key.get(&k).into_iter().flatten() {
            todo.push(resolve(d));
        }
    }
    seen.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn the_node_crate_powerperfd_and_the_plugin_link_none_of_the_analysis_crates() {
    let text = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let lock: toml::Table = toml::from_str(&text).unwrap();
    let heavy_in = |set: &BTreeSet<String>| -> Vec<String> {
        set.iter()
            .filter(|n| HEAVY.iter().any(|h| in_family(n, h)))
            .cloned()
            .collect()
    };
    // The check sees the families where they are: powerperf-core links all five.
    let core = lock_closure(&lock, "powerperf-core");
    for h in HEAVY {
        assert!(
            core.iter().any(|n| in_family(n, h)),
            "powerperf-core's closure has no {h}*: is Cargo.lock read right?"
        );
    }
    for root in ["powerperf-node", "powerperfd", "spank-powerperf"] {
        let c = lock_closure(&lock, root);
        assert!(
            c.contains("powerperf-node"),
            "{root} does not reach powerperf-node"
        );
        let bad = heavy_in(&c);
        assert!(
            bad.is_empty(),
            "{root} depends (through Cargo.lock) on {bad:?}; docs/architecture.md, \"The node crate\", keeps polars, arrow, linfa, ndarray and plotters out of it"
        );
        assert!(
            !c.contains("powerperf-core") && !c.contains("powerperf-format"),
            "{root} depends on powerperf-core or powerperf-format (polars); use powerperf-node"
        );
    }
}

#[test]
fn no_source_of_the_node_crate_uses_polars_linfa_or_plotters() {
    let mut files = Vec::new();
    sources(&repo().join("crates/powerperf-node/src"), &mut files);
    assert!(files.len() > 15, "only {} files", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for h in ["polars", "linfa", "plotters", "ndarray"] {
                assert!(
                    !code.contains(&format!("{h}::")) && !code.contains(&format!("{h}_")),
                    "{}:{}: `{}` uses {h}, which the node crate may not (docs/architecture.md)",
                    f.display(),
                    i + 1,
                    code
                );
            }
        }
    }
}
