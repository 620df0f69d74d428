//! Several processes as MPI ranks: each `collect -o JOB/rank%r` writes its own shard, only
//! the first rank of the node samples node-wide sources, and `report JOB` gives min, mean,
//! max and imbalance over ranks (issue 4, item 7).

mod common;

use assert_cmd::Command;

#[test]
fn ranks_write_shards_and_report_aggregates_them() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let out = format!("{}/rank%r", job.display());
    // Three ranks at once, with unequal work (rank r loops (r + 1) times as long).
    let children: Vec<_> = (0..3)
        .map(|r| {
            let n = 20000 * (r + 1);
            std::process::Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
                .args([
                    "collect",
                    "-q",
                    "--nvml",
                    "off",
                    "--interval",
                    "5ms",
                    "-o",
                    &out,
                    "--",
                ])
                .args([
                    "sh",
                    "-c",
                    &format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done"),
                ])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for r in 0..3 {
        let meta = powerperf_format::run::RunMeta::read(&job.join(format!("rank{r}"))).unwrap();
        assert_eq!(meta.run.rank, Some(r));
        // Node-wide sources are the first local rank's: the others say so.
        if r > 0 {
            assert!(
                meta.notes
                    .iter()
                    .any(|n| n.contains("first rank on each node")),
                "{:?}",
                meta.notes
            );
        }
    }
    let (o, v) = common::report_json(&job);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(v["shards"].as_array().unwrap().len(), 3);
    let tc = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "task-clock")
        .expect("task-clock over ranks");
    assert_eq!(tc["ranks"], 3);
    let (min, mean, max) = (
        tc["min"].as_f64().unwrap(),
        tc["mean"].as_f64().unwrap(),
        tc["max"].as_f64().unwrap(),
    );
    assert!(min < mean && mean < max, "{tc}");
    let imb = tc["imbalance"].as_f64().unwrap();
    assert!(
        (imb - (max - mean) / max).abs() < 1e-12 && imb > 0.0,
        "{tc}"
    );
    let text = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("report")
        .arg(&job)
        .output()
        .unwrap();
    let t = String::from_utf8(text.stdout).unwrap();
    assert!(t.contains("over 3 ranks") && t.contains("imbalance"), "{t}");
}

/// A job on two nodes (shards of different `run.host`), three ranks each, plus a shard whose
/// run.toml is broken: `report JOB` takes each node's energy from the shard that sampled it
/// (local rank 0), lists the node lines and their sum, and names the broken shard while
/// reporting the others (exit status 1). The shards are derived from one real collect over
/// the powercap fixture, re-labelled as ranks of two hosts.
#[test]
fn report_sums_node_energy_per_node_and_names_a_broken_shard() {
    use powerperf_format::run::{Backend, NODE_SOURCES_LEFT, NODE_SOURCES_SAMPLED};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sysfs");
    common::copy_tree(
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs/rapl-wrap"),
        &root,
    );
    let pkg = root.join("sys/class/powercap/intel-rapl:0/energy_uj");
    let template = dir.path().join("template");
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["collect", "-q", "--nvml", "off", "--sysfs-root"])
        .arg(&root)
        .arg("-o")
        .arg(&template)
        .args([
            "--",
            "sh",
            "-c",
            &format!("echo 1000000 > {}", pkg.display()),
        ])
        .env_remove("OMPI_COMM_WORLD_LOCAL_RANK")
        .env_remove("SLURM_LOCALID")
        .assert()
        .success();
    let t = powerperf_format::run::RunMeta::read(&template).unwrap();
    assert_eq!(t.run.node_sources.as_deref(), Some(NODE_SOURCES_SAMPLED));
    let pkg_j = t
        .events
        .iter()
        .find(|e| e.name == "energy-package-0")
        .and_then(|e| e.total)
        .expect("package energy from the fixture");
    let job = dir.path().join("job");
    for r in 0..6u32 {
        let mut m = t.clone();
        let local = r % 3;
        m.run.rank = Some(r);
        m.run.local_rank = Some(local);
        m.run.host = format!("node{}", r / 3);
        if local > 0 {
            m.run.node_sources = Some(NODE_SOURCES_LEFT.into());
            m.events.retain(|e| e.backend != Backend::Rapl);
        }
        let d = job.join(format!("rank{r}"));
        std::fs::create_dir_all(&d).unwrap();
        m.write(&d).unwrap();
    }
    let broken = job.join("rank6");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("run.toml"), "[run\nid = ").unwrap();
    // a rank whose collect never started (no run.toml): named in a note, not a shard
    std::fs::create_dir_all(job.join("rank7")).unwrap();

    let (o, v) = common::report_json(&job);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rank6"), "{err}");
    assert_eq!(v["shards"].as_array().unwrap().len(), 6);
    let bad = v["unreadable"].as_array().unwrap();
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0]["shard"].as_str().unwrap().ends_with("rank6"),
        "{bad:?}"
    );
    assert!(
        bad[0]["error"].as_str().unwrap().contains("run.toml"),
        "{bad:?}"
    );
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("1 directory under")
            && notes.contains("no run.toml")
            && notes.contains("rank7"),
        "{notes}"
    );
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for (k, n) in nodes.iter().enumerate() {
        assert_eq!(n["host"], format!("node{k}"));
        assert_eq!(n["shards"].as_array().unwrap().len(), 3);
        assert_eq!(
            n["sampled_by"],
            serde_json::json!([format!("rank{}", 3 * k)])
        );
        assert_eq!(n["energy_j"]["energy-package-0"].as_f64(), Some(pkg_j));
    }
    assert_eq!(
        v["energy_j"]["energy-package-0"].as_f64(),
        Some(2.0 * pkg_j)
    );

    let o = Command::cargo_bin("powerperf")
        .unwrap()
        .arg("report")
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("over 6 ranks on 2 nodes"), "{text}");
    let j = format!("{pkg_j:.2} Joules energy-package-0");
    let after = |head: &str| {
        let i = text
            .find(head)
            .unwrap_or_else(|| panic!("no {head:?}: {text}"));
        text[i..].lines().nth(1).unwrap().trim().to_string()
    };
    assert_eq!(after("node0: 3 ranks, sampled by rank0"), j);
    assert_eq!(after("node1: 3 ranks, sampled by rank3"), j);
    assert_eq!(
        after("all 2 nodes:"),
        format!("{:.2} Joules energy-package-0", 2.0 * pkg_j)
    );
    assert!(text.contains("1 shard could not be read"), "{text}");
}
