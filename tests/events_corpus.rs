//! The real definition files of PAPI, Linux perf, LIKWID and PerfExpert (in
//! `../shared/corpora/`, never copied into the repository) must compile.

mod common;
use common::shared_corpora as corpora;

use powerperf_events::{load_file, load_str, LoadOptions, Syntax};

#[test]
fn every_papi_events_csv_line_compiles() {
    let Some(c) = corpora() else { return };
    let path = c.join("papi/papi_events.csv");
    let set = load_file(&path, None, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.syntax, Syntax::PapiCsv);
    // Count the preset lines of the file independently and compare: every one is compiled
    // (redefinitions inside one section replace the earlier line and are noted).
    let text = std::fs::read_to_string(&path).unwrap();
    let preset_lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with("PRESET,"))
        .count();
    let derived_lines = text
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("PRESET,")
                && l.contains("DERIVED_")
                && !l.contains(",NOT_DERIVED")
        })
        .count();
    assert!(
        derived_lines > 450,
        "expected the real file, found {derived_lines} derived lines"
    );
    let redefined = set.notes.iter().filter(|n| n.contains("redefined")).count();
    assert_eq!(
        set.definitions.len() + redefined,
        preset_lines,
        "every PRESET line is a definition or a noted redefinition"
    );
    // A known postfix definition compiles to the RPN the file gives.
    let i = set
        .definitions
        .iter()
        .position(|d| d.name == "AMD64 (K7)/PAPI_L1_TCH")
        .expect("AMD K7 L1_TCH");
    assert_eq!(set.rpn(i), "DATA_CACHE_ACCESSES|INSTRUCTION_CACHE_FETCHES|+|DATA_CACHE_MISSES|-|INSTRUCTION_CACHE_MISSES|-");
}

#[test]
fn papi_events_csv_section_by_cpu() {
    let Some(c) = corpora() else { return };
    let path = c.join("papi/papi_events.csv");
    let set = load_file(
        &path,
        None,
        &LoadOptions {
            cpu: Some("amd64_k7".into()),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let d = set
        .get("PAPI_L1_DCH")
        .expect("PAPI_L1_DCH in the K7 section");
    assert_eq!(d.vars, vec!["DATA_CACHE_ACCESSES", "DATA_CACHE_MISSES"]);
    let v = set.evaluate(&|n: &str| match n {
        "DATA_CACHE_ACCESSES" => Some(100.0),
        "DATA_CACHE_MISSES" => Some(7.0),
        _ => None,
    });
    let dch = v.iter().find(|x| x.name == "PAPI_L1_DCH").unwrap();
    assert_eq!(dch.value, Some(93.0));
    let err = load_file(
        &path,
        None,
        &LoadOptions {
            cpu: Some("no_such_pmu".into()),
        },
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("no `CPU,no_such_pmu` section"),
        "{err}"
    );
}

#[test]
fn every_likwid_group_compiles() {
    let Some(c) = corpora() else { return };
    let mut n_files = 0;
    let mut n_metrics = 0;
    for entry in glob::glob(&format!("{}/likwid-groups/*/*.txt", c.display())).unwrap() {
        let p = entry.unwrap();
        let set = load_file(&p, None, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.syntax, Syntax::Likwid, "{}", p.display());
        assert!(!set.definitions.is_empty(), "{} has metrics", p.display());
        n_files += 1;
        n_metrics += set.definitions.len();
    }
    println!("LIKWID: {n_files} groups, {n_metrics} metrics compiled");
    assert!(n_files >= 80, "found {n_files} LIKWID groups");
}

#[test]
fn likwid_metric_key_and_registers() {
    let Some(c) = corpora() else { return };
    let set = load_file(
        &c.join("likwid-groups/zen3/DATA.txt"),
        None,
        &LoadOptions::default(),
    )
    .unwrap();
    let d = set.get("Load to store ratio").expect("key without unit");
    assert_eq!(
        d.vars,
        vec![
            "LS_DISPATCH_LOADS",
            "LS_DISPATCH_LOAD_OP_STORES",
            "LS_DISPATCH_STORES"
        ]
    );
    let clock = set.get("Clock").expect("`Clock [MHz]` is keyed `Clock`");
    assert_eq!(clock.unit.as_deref(), Some("MHz"));
}

#[test]
fn every_perfexpert_file_compiles() {
    let Some(c) = corpora() else { return };
    let mut n = 0;
    for entry in glob::glob(&format!("{}/perfexpert/*.properties", c.display())).unwrap() {
        let p = entry.unwrap();
        let set = load_file(&p, None, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.syntax, Syntax::PerfExpert);
        n += 1;
        // machine.properties also load as constants.
        if p.to_string_lossy().contains("machine") {
            let m = powerperf_events::constants::load(&p).unwrap();
            assert!(m.constants.contains_key("L1_dlat"));
        }
    }
    assert_eq!(n, 4);
}

#[test]
fn perfexpert_lcpi_with_its_machine_file() {
    let Some(c) = corpora() else { return };
    let set = load_file(
        &c.join("perfexpert/amd-barcelona.lcpi.properties"),
        None,
        &LoadOptions::default(),
    )
    .unwrap();
    let m =
        powerperf_events::constants::load(&c.join("perfexpert/amd-barcelona.machine.properties"))
            .unwrap();
    let lookup = |n: &str| {
        m.constants.get(n).map(|c| c.value).or(match n {
            "PAPI_BR_INS" => Some(200.0),
            "PAPI_BR_MSP" => Some(10.0),
            "PAPI_TOT_INS" => Some(1000.0),
            _ => None,
        })
    };
    let v = set.evaluate(&lookup);
    let b = v
        .iter()
        .find(|x| x.name == "branch_instructions.overall")
        .unwrap();
    // (200*2 + 10*10) / 1000 with BR_lat = 2, BR_miss_lat = 10 from the machine file.
    assert_eq!(b.value, Some(0.5));
}

#[test]
fn perf_metrics_at_least_99_percent_compile() {
    let Some(c) = corpora() else { return };
    let mut total = 0usize;
    let mut failures: Vec<String> = Vec::new();
    for entry in glob::glob(&format!("{}/perf-metrics/*.json", c.display())).unwrap() {
        let p = entry.unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let items: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        // Compile each metric alone (one bad metric must not hide the others), then the file.
        for m in &items {
            let Some(expr) = m.get("MetricExpr").and_then(|e| e.as_str()) else {
                continue;
            };
            total += 1;
            let name = m
                .get("MetricName")
                .or_else(|| m.get("ArchStdEvent"))
                .cloned()
                .unwrap_or_default();
            let one = serde_json::json!([{ "MetricName": name, "MetricExpr": expr }]).to_string();
            if let Err(e) = load_str(
                &one,
                &p.display().to_string(),
                Some(Syntax::PerfJson),
                &LoadOptions::default(),
            ) {
                failures.push(format!("{}: {e}", m["MetricName"]));
            }
        }
        if let Err(e) = load_file(&p, None, &LoadOptions::default()) {
            failures.push(format!("whole file {}: {e}", p.display()));
        }
    }
    let ok = total - failures.len();
    println!("perf metrics: {ok}/{total} compile");
    for f in &failures {
        println!("  failed: {f}");
    }
    assert!(
        total >= 900,
        "expected the 943 corpus metrics, found {total}"
    );
    assert!(
        ok as f64 >= 0.99 * total as f64,
        "{} of {total} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
