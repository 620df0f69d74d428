//! LCPI tables from the shipped definition files and machine constants.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use powerperf_events::alias::Resolver;
use powerperf_events::{constants, lcpi};

#[test]
fn shipped_lcpi_files_and_constants_compile() {
    for (name, _) in lcpi::FILES {
        let set = lcpi::builtin(name)
            .unwrap_or_else(|| panic!("events/lcpi/{name}.txt does not compile"));
        for (c, _) in lcpi::CATEGORIES.iter().chain(&[(lcpi::OVERALL, "")]) {
            assert!(set.get(c).is_some(), "{name} defines {c}");
        }
    }
    assert_eq!(
        constants::builtin().len(),
        constants::BUILTIN.len(),
        "every machine-constants file parses"
    );
    for (_, m) in constants::builtin() {
        for (k, c) in &m.constants {
            assert!(!c.source.is_empty(), "{k} has a source");
        }
    }
}

#[test]
fn constants_selected_by_vendor_family_model() {
    let (file, m) = constants::select("AuthenticAMD", 16, 2).expect("Opteron 8358");
    assert_eq!(file, "amd-opteron-8358.toml");
    assert_eq!(m.constants["mem_lat"].value, 540.0);
    assert_eq!(m.constants["FP_slow_lat"].value, 38.0);
    let (file, m) = constants::select("GenuineIntel", 6, 26).expect("Nehalem");
    assert_eq!(file, "perfexpert-intel-nehalem.toml");
    assert_eq!(m.constants["FP_lat"].value, 3.5);
    assert!(
        constants::select("GenuineIntel", 6, 207).is_none(),
        "no file for a Sapphire/Emerald Rapids model"
    );
    let cpuinfo = "processor : 0\nCPU implementer : 0x41\nCPU architecture: 7\nCPU variant : 0x2\nCPU part : 0xc0f\n";
    let (v, f, m) = powerperf::cli::events::cpu_identity(cpuinfo).unwrap();
    assert_eq!(
        constants::select(&v, f, m).unwrap().0,
        "arm-cortex-a15.toml"
    );
}

#[test]
fn machine_properties_and_toml_errors_have_positions() {
    let e = constants::parse_properties("version = 1.0\nL1_dlat = three\n", "m.properties")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.properties:2:11: a constant must be a number, found `three`"
    );
    let e = constants::parse_toml(
        "[processor]\nname = \"x\"\n[constants.L1]\nvalue = \"x\"\nsource = \"s\"\n",
        "c.toml",
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("c.toml:4:9:"), "{e}");
}

#[test]
fn lcpi_on_papi_presets_with_opteron_constants() {
    let (_, m) = constants::select("AuthenticAMD", 16, 2).unwrap();
    let mut r = Resolver {
        constants: m.as_map(),
        ..Default::default()
    };
    // Run column names as `collect` writes them; PAPI presets reach them through aliases.
    r.values = BTreeMap::from([
        ("instructions".into(), 1000.0),
        ("cycles".into(), 1500.0),
        ("branches".into(), 100.0),
        ("branch-misses".into(), 5.0),
    ]);
    let t = lcpi::table(&|n: &str| r.get(n));
    assert_eq!(t.source, "papi");
    assert_eq!(t.overall_cpi, Ok(1.5));
    let br = t.rows.iter().find(|x| x.category == "branches").unwrap();
    // (100·2 + 5·12) / 1000 with Moore 2012's Opteron 8358 BR_lat = 2, BR_miss_lat = 12.
    assert_eq!(br.value, Ok(0.26));
    let data = t
        .rows
        .iter()
        .find(|x| x.category == "data_accesses")
        .unwrap();
    let msg = data.value.clone().unwrap_err();
    assert!(
        msg.starts_with(
            "not computable: missing events PAPI_L1_DCA, PAPI_L2_DCA, PAPI_L2_DCM, PAPI_L3_TCM"
        ),
        "{msg}"
    );
    let shown = t.to_string();
    assert!(shown.contains("branches               0.2600"), "{shown}");
}

/// Totals of one XU3 run (a benchmark at one frequency, one run number) from the timeline.
fn xu3_totals(path: &Path, bench: &str, freq: &str, run: &str) -> BTreeMap<String, f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .trim_start_matches('#')
        .split('\t')
        .collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (b, r, f) = (
        col("Benchmark"),
        col("Run(#)"),
        col("CPU(4) Frequency(MHz)"),
    );
    let mut sums = BTreeMap::new();
    for l in lines {
        let v: Vec<&str> = l.split('\t').collect();
        if v[b] != bench || v[r] != run || v[f] != freq {
            continue;
        }
        for ev in &header[8..] {
            *sums.entry(ev.to_string()).or_insert(0.0) += v[col(ev)].parse::<f64>().unwrap();
        }
    }
    sums
}

#[test]
fn lcpi_on_the_xu3_timeline() {
    let d = common::datasets();
    let path = d.join("xu3-pmu-power/cbench_timeline.tsv");
    let totals = xu3_totals(&path, "automotive_bitcount", "2000", "1");
    assert!(totals["INST_RETIRED"] > 1e9);
    let (_, a15) = constants::select("ARM", 7, 0xc0f).unwrap();
    let r = Resolver {
        values: totals.clone(),
        constants: a15.as_map(),
        ..Default::default()
    };
    let t = lcpi::table(&|n: &str| r.get(n));
    println!("{t}");
    assert_eq!(t.source, "armv7");
    let ins = totals["INST_RETIRED"];
    assert_eq!(t.overall_cpi, Ok(totals["CPU_CYCLES"] / ins));
    let get = |c: &str| {
        t.rows
            .iter()
            .find(|x| x.category == c)
            .unwrap()
            .value
            .clone()
    };
    let want = (totals["L1D_CACHE_ACCESS"] * 4.0 + totals["L1D_CACHE_REFILL"] * 21.0) / ins;
    assert!((get("data_accesses").unwrap() - want).abs() < 1e-12 * want.abs().max(1.0));
    assert!((get("data_tlb").unwrap() - totals["L1D_TLB_REFILL"] * 12.0 / ins).abs() < 1e-15);
    // The 7-cpu source gives no branch latencies and the run has no VFP_SPEC: shown as such.
    assert_eq!(
        get("branches").unwrap_err(),
        "not computable: missing constants BR_lat, BR_miss_lat (give --constants FILE)"
    );
    assert_eq!(
        get("floating_point").unwrap_err(),
        "not computable: missing events VFP_SPEC; missing constants FP_lat (give --constants FILE)"
    );
    // With the missing constants supplied, the branch row is computed.
    let mut r2 = r.clone();
    r2.values.insert("BR_lat".into(), 1.0);
    r2.values.insert("BR_miss_lat".into(), 15.0);
    let t2 = lcpi::table(&|n: &str| r2.get(n));
    let br = t2
        .rows
        .iter()
        .find(|x| x.category == "branches")
        .unwrap()
        .value
        .clone()
        .unwrap();
    assert!((br - (totals["BRANCH_PRED"] + 15.0 * totals["BRANCH_MISPRED"]) / ins).abs() < 1e-12);
}

#[test]
fn lcpi_from_run_totals() {
    let totals = powerperf_format::run::RunTotals {
        values: BTreeMap::from([
            ("instructions".into(), 2000.0),
            ("cycles".into(), 3000.0),
            ("branches".into(), 400.0),
            ("branch-misses".into(), 20.0),
        ]),
        missing: BTreeMap::from([("L1-dcache-loads".into(), "not supported".into())]),
        duration_s: 1.0,
    };
    let (_, m) = constants::select("GenuineIntel", 6, 26).unwrap();
    let t = lcpi::table_for_totals(&totals, Some(&m));
    assert_eq!(t.overall_cpi, Ok(1.5));
    // Nehalem (PerfExpert): BR_lat 1, BR_miss_lat 20 → (400 + 400) / 2000.
    assert_eq!(
        t.rows
            .iter()
            .find(|r| r.category == "branches")
            .unwrap()
            .value,
        Ok(0.4)
    );
}

#[test]
fn papi_section_names_for_cpus() {
    assert_eq!(constants::papi_pmu_name("GenuineIntel", 6, 85), Some("skx"));
    assert_eq!(
        constants::papi_pmu_name("GenuineIntel", 6, 207),
        Some("emr")
    );
    assert_eq!(
        constants::papi_pmu_name("AuthenticAMD", 25, 0x11),
        Some("amd64_fam19h_zen4")
    );
    assert_eq!(constants::papi_pmu_name("ARM", 7, 0xc0f), Some("arm_ac15"));
    assert_eq!(constants::papi_pmu_name("GenuineIntel", 6, 1), None);
}

/// The LCPI table of a run written by `import --as-runs` from the XU3 timeline, through the
/// CLI (`report RUN --lcpi`), and the same definitions as derived counters of the set
/// (`import --derive`).
#[test]
fn lcpi_on_a_run_imported_from_the_xu3_timeline() {
    let d = common::datasets();
    let totals = xu3_totals(
        &d.join("xu3-pmu-power/cbench_timeline.tsv"),
        "automotive_bitcount",
        "2000",
        "1",
    );
    let out = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    let o = std::process::Command::new(&bin)
        .args(["import", "datasets/xu3-cbench.toml", "-o"])
        .arg(out.path().join("set"))
        .arg("--as-runs")
        .arg(out.path().join("runs"))
        .args(["--derive", "events/lcpi/armv7.txt", "--format", "json"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["points"], 180);
    assert_eq!(j["runs"].as_array().unwrap().len(), 180);
    let run = out.path().join("runs/automotive_bitcount-2000-1-r1");
    let o = std::process::Command::new(&bin)
        .arg("report")
        .arg(&run)
        .arg("--lcpi")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    println!("{text}");
    let ins = totals["INST_RETIRED"];
    let data = (totals["L1D_CACHE_ACCESS"] * 4.0 + totals["L1D_CACHE_REFILL"] * 21.0) / ins;
    assert!(
        text.contains("constants: machine-constants/arm-cortex-a15.toml"),
        "{text}"
    );
    assert!(text.contains("definitions: armv7"), "{text}");
    assert!(
        text.contains(&format!(
            "overall CPI            {:.4}",
            totals["CPU_CYCLES"] / ins
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("data accesses          {data:.4}")),
        "{text}"
    );
    assert!(
        text.contains(
            "branches               not computable: missing constants BR_lat, BR_miss_lat"
        ),
        "{text}"
    );
    // The derived counters of the set: overall_cpi of that point is CPU_CYCLES / INST_RETIRED.
    let set = powerperf_format::set::TrainingSet::read(&out.path().join("set")).unwrap();
    assert_eq!(
        set.meta.counters.get("overall_cpi"),
        Some(&powerperf_format::set::CounterKind::Rate)
    );
    assert!(
        !set.meta.counters.contains_key("branches"),
        "undefined everywhere: not added"
    );
    let p = set
        .points
        .iter()
        .find(|p| {
            p.workload == "automotive_bitcount"
                && p.knobs["core_freq_mhz"] == 2000.0
                && p.repeat == Some(1)
        })
        .unwrap();
    assert!((p.counters["overall_cpi"] - totals["CPU_CYCLES"] / ins).abs() < 1e-12);
    assert!((p.counters["data_accesses"] - data).abs() < 1e-12);
}
