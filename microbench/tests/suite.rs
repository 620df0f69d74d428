//! Tests of the machine-constant suite: sysfs parsing on fixture trees, step detection on a
//! synthetic curve, and sanity properties of a `--quick` run on this machine.

use std::path::{Path, PathBuf};

use powerperf_microbench::cache::{data_caches, parse_size, Cache};
use powerperf_microbench::suite::{curve_sizes, find_steps, level_sizes, CpuId, CurvePoint};
use powerperf_microbench::{run_suite, MicrobenchError, SuiteConfig};

/// A fixture tree. The crate directory is read when the test runs (`cargo test` sets
/// CARGO_MANIFEST_DIR): a test binary that cargo reuses from a checkout elsewhere (one target
/// directory shared by several clones) still finds this checkout's fixtures.
fn fixture(name: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn cache(level: u32, size_bytes: u64) -> Cache {
    Cache {
        level,
        kind: if level == 1 { "Data" } else { "Unified" }.into(),
        size_bytes,
    }
}

#[test]
fn sysfs_caches_of_the_zen4_vm_fixture() {
    let c = data_caches(&fixture("amd-epyc-zen4-vm")).unwrap();
    assert_eq!(
        c,
        vec![cache(1, 32 << 10), cache(2, 1 << 20), cache(3, 32 << 20)],
        "instruction cache left out, sorted by level"
    );
}

#[test]
fn sysfs_caches_with_megabyte_suffix() {
    let c = data_caches(&fixture("intel-sapphire-rapids-hand")).unwrap();
    assert_eq!(
        c.iter().map(|c| c.size_bytes).collect::<Vec<_>>(),
        vec![48 << 10, 2 << 20, 105 << 20]
    );
}

#[test]
fn sysfs_errors_name_the_path_and_value() {
    let e = parse_size("12Q", Path::new("/x/size")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/x/size: cache size `12Q` is not <number>[K|M|G]"
    );
    assert_eq!(parse_size("512", Path::new("s")).unwrap(), 512);
    let e = data_caches(Path::new("/nonexistent-root")).unwrap_err();
    assert!(matches!(e, MicrobenchError::Read { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("/nonexistent-root/devices/system/cpu/cpu0/cache"));
}

#[test]
fn working_set_sizes_sit_inside_each_plateau() {
    let caches = [cache(1, 32 << 10), cache(2, 1 << 20), cache(3, 32 << 20)];
    let l = level_sizes(&caches);
    let sizes: Vec<u64> = l.iter().map(|x| x.2).collect();
    assert_eq!(sizes[0], 16 << 10);
    assert!(sizes[1] > 64 << 10 && sizes[1] < 512 << 10);
    assert!(sizes[2] > 2 << 20 && sizes[2] < 16 << 20);
    assert_eq!(sizes[3], 256 << 20);
    let names: Vec<&str> = l.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(names, ["L1_dlat", "L2_lat", "L3_lat", "mem_lat"]);
    let c = curve_sizes(1 << 20, 2);
    assert_eq!(c.first(), Some(&4096));
    assert_eq!(c.last(), Some(&(1 << 20)));
    assert!(c.contains(&(32 << 10)));
}

#[test]
fn steps_found_at_the_cache_sizes_of_a_synthetic_curve() {
    let caches = [cache(1, 32 << 10), cache(2, 1 << 20)];
    // An ideal LRU hierarchy under random access: hit fraction size/ws in each level.
    let (l1, l2, mem) = (1.0, 4.0, 80.0);
    let curve: Vec<CurvePoint> = curve_sizes(64 << 20, 4)
        .into_iter()
        .map(|s| {
            let f1 = (32768.0 / s as f64).min(1.0);
            let f2 = ((1u64 << 20) as f64 / s as f64).min(1.0);
            let ns = f1 * l1 + (f2 - f1) * l2 + (1.0 - f2) * mem;
            CurvePoint {
                size_bytes: s,
                ns_per_load: ns,
                cycles_per_load: ns * 3.0,
            }
        })
        .collect();
    let steps = find_steps(&curve, &caches, &[l1, l2, mem]);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].last_flat_bytes, 32 << 10);
    assert_eq!(steps[1].last_flat_bytes, 1 << 20);
    assert!(steps.iter().all(|s| s.at_sysfs_size));
    let hw = steps[0].half_way_bytes.unwrap();
    assert!(
        (hw as f64 / 65536.0 - 1.0).abs() < 0.2,
        "half-way near 2× L1: {hw}"
    );
}

#[test]
fn cpu_identity_from_cpuinfo() {
    let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n";
    let id = CpuId::parse(x86);
    assert_eq!(
        (
            id.vendor.as_str(),
            id.family,
            id.model,
            id.model_name.as_str()
        ),
        ("AuthenticAMD", Some(25), Some(17), "AMD EPYC")
    );
    let arm = "processor : 0\nCPU implementer : 0x41\nCPU architecture: 7\nCPU part : 0xc0f\n";
    let id = CpuId::parse(arm);
    assert_eq!(
        (id.vendor.as_str(), id.family, id.model),
        ("ARM", Some(7), Some(0xc0f))
    );
}

#[test]
fn quick_run_is_sane() {
    let cfg = SuiteConfig::live(true);
    if data_caches(&cfg.sysfs_root).is_err() {
        println!("skipped: no cache sizes under /sys/devices/system/cpu/cpu0/cache");
        return;
    }
    let t = std::time::Instant::now();
    let r = run_suite(&cfg, &mut |_| {}).unwrap();
    // Timings are only meaningful optimised (`cargo test --release`).
    if !cfg!(debug_assertions) {
        assert!(
            t.elapsed().as_secs_f64() < 10.0,
            "--quick took {:?}",
            t.elapsed()
        );
    }
    let g = r.core_clock_ghz.median;
    assert!(g > 0.2 && g < 7.0, "core clock {g} GHz");
    let lat = |k: &str| {
        r.value(k)
            .unwrap_or_else(|| panic!("{k} measured"))
            .ns
            .median
    };
    assert!(lat("L1_dlat") < lat("mem_lat"), "L1 faster than DRAM");
    assert!(lat("L1_dlat") < lat("L2_lat"), "L1 faster than L2");
    assert!(lat("BR_miss_lat") > 0.0);
    assert!(lat("FP_div_lat") > lat("FP_add_lat"));
    for v in &r.values {
        let c = v.cycles.as_ref().unwrap();
        assert!((c.median - v.ns.median * g).abs() <= 1e-9 * c.median.abs().max(1.0));
    }
    for p in &r.curve {
        assert!((p.cycles_per_load - p.ns_per_load * g).abs() < 1e-9 * p.cycles_per_load);
    }
    assert_eq!(
        r.bandwidth.len() % powerperf_microbench::stream::StreamKernel::ALL.len(),
        0
    );
    assert!(r.bandwidth.iter().all(|b| b.gb_per_s.median > 0.0));
    assert!(r
        .bandwidth
        .iter()
        .all(|b| b.preempted <= b.gb_per_s.repeats && b.mean_gb_per_s > 0.0));
    // A round is timed over all threads' span, so n threads cannot report much more than
    // n times one thread's rate (the old per-thread timing reported 3.6x on 2 threads).
    for b in r.bandwidth.iter().filter(|b| b.threads > 1) {
        let one = r
            .bandwidth
            .iter()
            .find(|o| o.threads == 1 && o.kernel == b.kernel)
            .unwrap();
        assert!(
            b.gb_per_s.median <= 1.5 * b.threads as f64 * one.gb_per_s.median,
            "{b:?} against {one:?}"
        );
    }
    assert!(r.curve.len() > 10);
    assert!(r
        .curve_csv()
        .starts_with("size_bytes,ns_per_load,cycles_per_load\n4096,"));
    let toml_text = r.constants_toml().unwrap();
    let v: toml::Value = toml::from_str(&toml_text).unwrap();
    for k in [
        "L1_dlat",
        "L2_lat",
        "mem_lat",
        "BR_miss_lat",
        "FP_lat",
        "FP_slow_lat",
        "DTLB_lat",
        "CPU_freq",
    ] {
        let c = &v["constants"][k];
        assert!(c["value"].as_float().is_some(), "{k} has a value");
        assert!(
            c["source"].as_str().unwrap().starts_with("microbench "),
            "{k} source"
        );
        assert!(c
            .as_table()
            .unwrap()
            .keys()
            .all(|f| ["value", "unit", "source"].contains(&f.as_str())));
    }
    assert!(r.table().contains("core clock"));
}
