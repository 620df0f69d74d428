use super::*;

#[test]
fn quantities_with_units() {
    assert_eq!(
        parse_quantity("2.20GHz", Dimension::Frequency, "MHz").unwrap(),
        2200.0
    );
    assert_eq!(
        parse_quantity("945", Dimension::Frequency, "MHz").unwrap(),
        945.0
    );
    assert_eq!(
        parse_quantity("1.5", Dimension::Frequency, "GHz").unwrap(),
        1500.0
    );
    assert_eq!(parse_quantity("450ms", Dimension::Time, "s").unwrap(), 0.45);
    assert_eq!(
        parse_quantity("2", Dimension::Energy, "Wh").unwrap(),
        7200.0
    );
    assert_eq!(
        parse_quantity("3kWh", Dimension::Energy, "J").unwrap(),
        1.08e7
    );
    assert_eq!(
        parse_quantity("250mW", Dimension::Power, "W").unwrap(),
        0.25
    );
    assert!(parse_quantity("fast", Dimension::Frequency, "MHz")
        .unwrap_err()
        .contains("GHz"));
    assert!(Dimension::Time
        .factor("fortnight")
        .unwrap_err()
        .contains("`ms`"));
}

#[test]
fn workload_from_file_name() {
    assert_eq!(
        workload_from_name(Path::new("/x/data-bt.csv"), "data-{workload}.csv").unwrap(),
        "bt"
    );
    assert!(workload_from_name(Path::new("/x/other.csv"), "data-{workload}.csv").is_err());
}

fn spec_from(text: &str, dir: &Path) -> Result<ImportSpec> {
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    ImportSpec::load(&p)
}

#[test]
fn rows_layout_with_units_and_derivation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.csv"),
        "#app;Cores;Freq;Time[ms];Power;x;\na;1;2.20GHz;1500;10;7;\na;2;1.1GHz;500;20;;\n",
    )
    .unwrap();
    let spec = spec_from(
        r##"
name = "t"
file = "m.csv"
separator = ";"
header_prefix = "#"
workload = "app"
[[knob]]
name = "threads"
column = "Cores"
[[knob]]
name = "core_freq_mhz"
column = "Freq"
[time]
column = "Time[ms]"
unit = "ms"
[power]
column = "Power"
unit = "W"
[energy]
derive = "power*time"
[[counter]]
column = "x"
name = "x_count"
kind = "count"
[constant_knobs]
mem_freq_mhz = 800
[[unreliable]]
targets = ["time_s"]
workloads = ["*"]
reason = "test"
"##,
        dir.path(),
    )
    .unwrap();
    let imp = import(&spec, Some(&dir.path().join("m.csv"))).unwrap();
    let s = imp.set;
    assert_eq!(s.points.len(), 2);
    let p = &s.points[0];
    assert_eq!(p.workload, "a");
    assert_eq!(p.knobs["core_freq_mhz"], 2200.0);
    assert_eq!(p.knobs["threads"], 1.0);
    assert_eq!(p.knobs["mem_freq_mhz"], 800.0);
    assert_eq!(p.time_s, Some(1.5));
    assert_eq!(p.energy_j, Some(15.0));
    assert_eq!(p.counters["x_count"], 7.0);
    assert!(s.points[1].counters.is_empty());
    assert_eq!(s.points[1].knobs["core_freq_mhz"], 1100.0);
    assert_eq!(
        s.meta.knobs,
        vec!["threads", "core_freq_mhz", "mem_freq_mhz"]
    );
    assert_eq!(s.meta.source, "import:t");
    assert!(!s.meta.is_reliable("time_s", "a"));
    assert!(s.meta.is_reliable("power_w", "a"));
}

#[test]
fn timeline_layout_sums_intervals() {
    let dir = tempfile::tempdir().unwrap();
    // Two samples 1 s apart for run 1 (period 1 s), one sample for run 2.
    std::fs::write(
        dir.path().join("t.tsv"),
        "#Timestamp\tBench\tRun\tF\tP\tC\n1000000000\tb\t1\t1000\t2\t5\n2000000000\tb\t1\t1000\t4\t6\n9000000000\tb\t2\t1000\t3\t1\n",
    )
    .unwrap();
    let spec = spec_from(
        r##"
name = "tl"
file = "t.tsv"
separator = "\t"
header_prefix = "#"
layout = "timeline"
workload = "Bench"
repeat = "Run"
[[knob]]
name = "core_freq_mhz"
column = "F"
[timeline]
timestamp = "Timestamp"
power = "P"
[[counter]]
column = "C"
kind = "count"
"##,
        dir.path(),
    )
    .unwrap();
    let s = import(&spec, Some(&dir.path().join("t.tsv"))).unwrap().set;
    assert_eq!(s.points.len(), 2);
    let p = &s.points[0];
    assert_eq!(p.repeat, Some(1));
    assert_eq!(p.time_s, Some(2.0)); // 1 s span + 1 s period
    assert_eq!(p.energy_j, Some(6.0)); // 2 W × 1 s + 4 W × 1 s
    assert_eq!(p.power_w, Some(3.0));
    assert_eq!(p.counters["C"], 11.0);
    assert_eq!(s.points[1].time_s, Some(1.0));
    assert_eq!(s.points[1].energy_j, Some(3.0));
}

#[test]
fn missing_column_names_column_file_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.csv"), "app,f,t\na,1,2\n").unwrap();
    let spec = spec_from(
        "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"sm_clock\"\n",
        dir.path(),
    )
    .unwrap();
    let err = import(&spec, Some(&dir.path().join("m.csv"))).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("`sm_clock`") && msg.contains("m.csv") && msg.contains("`app`, `f`, `t`"),
        "{msg}"
    );
}

#[test]
fn bad_value_names_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.csv"), "app,f\na,1GHz\nb,fast\n").unwrap();
    let spec = spec_from(
        "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"f\"\n",
        dir.path(),
    )
    .unwrap();
    let msg = format!(
        "{:#}",
        import(&spec, Some(&dir.path().join("m.csv"))).unwrap_err()
    );
    assert!(msg.contains("line 3") && msg.contains("`fast`"), "{msg}");
}

#[test]
fn inconsistent_specs_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let e = spec_from("name = \"t\"\nfile = \"m.csv\"\n", dir.path()).unwrap_err();
    assert!(format!("{e:#}").contains("workload"));
    let e = spec_from(
        "name = \"t\"\nfile = \"m.csv\"\nworkload = \"a\"\n[energy]\nderive = \"power*time\"\n",
        dir.path(),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("needs [power]"), "{e:#}");
    let e = spec_from(
        "name = \"t\"\nfile = \"m.csv\"\nworkload = \"a\"\nsepartor = \";\"\n",
        dir.path(),
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("line 4: unknown key `separtor`"),
        "{e:#}"
    );
}

/// Issue 20, item 4: `[[knob]] device` goes to the set's `knob_devices` (`gpu` as `gpu0`);
/// a knob without it is on an unknown device; a bad name is refused with the spec and knob.
#[test]
fn knob_devices_come_from_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.csv"),
        "app,f,m,t\na,1000,800,2\na,2000,800,1\n",
    )
    .unwrap();
    let spec = |dev: &str| {
        format!(
            "name = \"t\"\nfile = \"m.csv\"\nworkload = \"app\"\n[[knob]]\nname = \"core_freq_mhz\"\ncolumn = \"f\"\n{dev}\n[[knob]]\nname = \"mem_freq_mhz\"\ncolumn = \"m\"\n[time]\ncolumn = \"t\"\n"
        )
    };
    let s = spec_from(&spec("device = \"gpu\""), dir.path()).unwrap();
    let imp = import(&s, Some(&dir.path().join("m.csv"))).unwrap();
    assert_eq!(imp.set.meta.knob_devices["core_freq_mhz"], "gpu0");
    assert!(!imp.set.meta.knob_devices.contains_key("mem_freq_mhz"));
    let s = spec_from(&spec(""), dir.path()).unwrap();
    let imp = import(&s, Some(&dir.path().join("m.csv"))).unwrap();
    assert!(imp.set.meta.knob_devices.is_empty());
    let s = spec_from(&spec("device = \"tpu\""), dir.path()).unwrap();
    let e = format!(
        "{:#}",
        import(&s, Some(&dir.path().join("m.csv"))).unwrap_err()
    );
    assert!(
        e.contains("`core_freq_mhz`") && e.contains("`tpu` is not `cpu`"),
        "{e}"
    );
}

#[test]
fn per_kernel_rows_get_one_workload_per_application_and_kernel() {
    // nvprof's per-kernel layout: an application has several kernels, each measured at every
    // setting; `workload_columns` keeps them apart (without it they would be one workload
    // measured twice per setting).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("k.csv"),
        ",appName,coreF,memF,kernel,time/ms,inst_executed,power/W\n\
         0,backprop,607,715,bpnn_adjust_weights_cuda,0.4244,16515100,81.2\n\
         1,backprop,607,715,bpnn_layerforward_CUDA,1.684,74645504,51.9\n\
         2,backprop,1328,715,bpnn_adjust_weights_cuda,0.3315,16515100,129.3\n\
         3,backprop,1328,715,bpnn_layerforward_CUDA,0.78118,74645504,101.9\n",
    )
    .unwrap();
    let text = |extra: &str| {
        format!(
            r##"
name = "k"
file = "k.csv"
workload = "appName"
{extra}
[[knob]]
name = "core_freq_mhz"
column = "coreF"
[[knob]]
name = "mem_freq_mhz"
column = "memF"
[time]
column = "time/ms"
unit = "ms"
[power]
column = "power/W"
[energy]
derive = "power*time"
[[counter]]
column = "inst_executed"
kind = "count"
"##
        )
    };
    let spec = spec_from(&text(r#"workload_columns = ["kernel"]"#), dir.path()).unwrap();
    let s = import(&spec, Some(&dir.path().join("k.csv"))).unwrap().set;
    let mut w = s.workloads();
    w.sort();
    assert_eq!(
        w,
        [
            "backprop:bpnn_adjust_weights_cuda",
            "backprop:bpnn_layerforward_CUDA"
        ]
    );
    let p = s
        .points
        .iter()
        .find(|p| p.workload.ends_with("CUDA") && p.knobs["core_freq_mhz"] == 1328.0)
        .unwrap();
    assert!((p.time_s.unwrap() - 0.78118e-3).abs() < 1e-12);
    assert_eq!(p.counters["inst_executed"], 74645504.0);
    // An empty column name is refused at load, naming the key; a missing column at import.
    let e = spec_from(&text(r#"workload_columns = [""]"#), dir.path()).unwrap_err();
    assert!(format!("{e:#}").contains("workload_columns"), "{e:#}");
    let spec = spec_from(&text(r#"workload_columns = ["kernal"]"#), dir.path()).unwrap();
    let e = import(&spec, Some(&dir.path().join("k.csv"))).unwrap_err();
    assert!(format!("{e:#}").contains("kernal"), "{e:#}");
}
