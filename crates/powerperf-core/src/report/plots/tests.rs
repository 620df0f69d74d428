use super::*;

fn timeline() -> Plot {
    Plot::Timeline(TimelinePlot {
        title: "Power <&> over time".into(),
        y_label: "power (W)".into(),
        log10_y: false,
        lines: vec![Line {
            name: "gpu0_power_w".into(),
            points: vec![(0.1, 50.0), (0.2, 80.0), (0.3, 75.0)],
        }],
        spans: vec![Span {
            label: "solve".into(),
            start_s: 0.12,
            end_s: 0.25,
        }],
    })
}

#[test]
fn svg_has_text_lines_and_escapes() {
    let s = timeline().svg().unwrap();
    assert!(s.starts_with("<svg"), "{}", &s[..80.min(s.len())]);
    assert!(s.contains("Power &lt;&amp;&gt; over time"));
    assert!(s.contains("gpu0_power_w"));
    assert!(s.contains("region solve"));
    assert!(s.contains("<polyline") || s.contains("<path"));
}

#[test]
fn png_renders_text_without_system_fonts() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.png");
    timeline().write(&p, ImageFormat::Png).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 5000, "{}", bytes.len());
}

#[test]
fn pareto_front_keeps_non_dominated_points() {
    let pts: Vec<(String, f64, f64)> = [(1.0, 10.0), (2.0, 8.0), (2.5, 9.0), (3.0, 7.0)]
        .iter()
        .map(|&(t, e)| (String::new(), t, e))
        .collect();
    assert_eq!(pareto_front(&pts), vec![0, 1, 3]);
}

#[test]
fn stacked_and_scatter_and_pareto_draw() {
    let st = Plot::Stacked(StackedBars {
        title: "LCPI".into(),
        y_label: "CPI".into(),
        categories: vec!["a".into(), "b".into()],
        bars: vec![
            ("whole run".into(), vec![0.5, f64::NAN]),
            ("r".into(), vec![0.2, 0.3]),
        ],
    });
    assert!(st.svg().unwrap().contains("whole run"));
    let pv = Plot::PredictedVsMeasured(PredictedVsMeasured {
        title: "pvm".into(),
        panels: vec![ScatterPanel {
            target: "time_s".into(),
            points: vec![("w".into(), 1.0, 1.1), ("w".into(), 2.0, 1.9)],
        }],
    });
    assert!(pv.svg().unwrap().contains("y = x"));
    let pa = Plot::Pareto(ParetoPlot {
        title: "p".into(),
        points: vec![("f=1".into(), 2.0, 5.0), ("f=2".into(), 1.0, 6.0)],
        chosen: Some(("f=1".into(), 2.0, 5.0)),
    });
    assert!(pa.svg().unwrap().contains("plan: f=1"));
}

/// A run with RAPL, GPU and hardware-counter columns (which this development VM lacks)
/// and region events: every timeline plot is made, regions shaded.
#[test]
fn timeline_plots_of_a_run_with_every_source() {
    let meta = crate::report::tests::sample_meta();
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = [
        "task-clock",
        "page-faults",
        "cycles",
        "instructions",
        "energy_package_0_j",
        "gpu0_power_w",
        "gpu0_sm_clock_mhz",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut t = powerperf_format::timeline::Timeline::new(&names);
    for i in 1..=20u64 {
        let f = i as f64;
        t.push(
            i * 10_000_000,
            10_000_000,
            &[
                Some(9e6),
                Some(if i % 3 == 0 { 0.0 } else { 12.0 }),
                Some(2.7e7),
                Some(4e7 + f),
                Some(0.3 + 0.01 * f),
                Some(100.0 + f),
                Some(1410.0),
            ],
        );
    }
    t.write_parquet(&dir.path().join(powerperf_format::timeline::TIMELINE))
        .unwrap();
    let ev = dir.path().join("region_events");
    std::fs::create_dir_all(&ev).unwrap();
    std::fs::write(
        ev.join("7.tsv"),
        "# powerperf-rt region events v1 pid=7\nR\t1\tsolve\nB\t50000000\t7\t1\nE\t120000000\t7\t1\n",
    )
    .unwrap();
    let plots = timeline_plots(dir.path(), &meta).unwrap();
    let names: Vec<&str> = plots.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "timeline_power",
            "timeline_clocks",
            "timeline_cpus",
            "timeline_rates"
        ]
    );
    let Plot::Timeline(power) = &plots[0].plot else {
        panic!("not a timeline")
    };
    let pkg = power
        .lines
        .iter()
        .find(|l| l.name.starts_with("package_0"))
        .unwrap();
    assert!((pkg.points[0].1 - 31.0).abs() < 1e-9, "{:?}", pkg.points[0]);
    assert_eq!(power.spans.len(), 1);
    assert!((power.spans[0].start_s - 0.05).abs() < 1e-12);
    let Plot::Timeline(clocks) = &plots[1].plot else {
        panic!("not a timeline")
    };
    let cpu = clocks
        .lines
        .iter()
        .find(|l| l.name.starts_with("CPU"))
        .unwrap();
    assert!(
        (cpu.points[0].1 - 3000.0).abs() < 1e-6,
        "{:?}",
        cpu.points[0]
    );
    let Plot::Timeline(rates) = &plots[3].plot else {
        panic!("not a timeline")
    };
    let pf = rates
        .lines
        .iter()
        .find(|l| l.name == "page-faults")
        .unwrap();
    assert!(pf.points[2].1.is_nan(), "a zero breaks the log line");
    for p in &plots {
        let svg = p.plot.svg().unwrap();
        assert!(svg.contains("region solve"), "{}", p.name);
    }
    let written = write_all(&plots, &dir.path().join("plots"), ImageFormat::Png).unwrap();
    assert_eq!(written.len(), 4);
}

#[test]
fn lcpi_bars_only_when_something_is_computable() {
    let table = |v: Result<f64, String>| lcpi::Table {
        source: "papi".into(),
        overall_cpi: Ok(1.2),
        rows: lcpi::CATEGORIES
            .iter()
            .map(|(c, l)| lcpi::Row {
                category: c.to_string(),
                label: l.to_string(),
                value: v.clone(),
            })
            .collect(),
    };
    let none = vec![("whole run".to_string(), table(Err("missing".into())))];
    assert!(lcpi_plot(&none).is_none());
    let some = vec![
        ("whole run".to_string(), table(Ok(0.25))),
        ("solve".to_string(), table(Err("missing".into()))),
    ];
    let p = lcpi_plot(&some).unwrap();
    let Plot::Stacked(b) = &p.plot else {
        panic!("not bars")
    };
    assert_eq!(b.bars[0].1, vec![0.25; 6]);
    assert!(b.bars[1].1.iter().all(|v| v.is_nan()));
    let svg = p.plot.svg().unwrap();
    assert!(svg.contains("data accesses") && svg.contains("solve"));
}

#[test]
fn image_format_from_extension() {
    assert_eq!(
        ImageFormat::from_path(Path::new("a.SVG")).unwrap(),
        ImageFormat::Svg
    );
    assert_eq!(
        ImageFormat::from_path(Path::new("a.png")).unwrap(),
        ImageFormat::Png
    );
    assert!(ImageFormat::from_path(Path::new("a.jpg")).is_err());
}
