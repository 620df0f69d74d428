//! Several processes as MPI ranks: each `collect -o JOB/rank%r` writes its own shard, only
//! the first rank of the node samples node-wide sources, and `report JOB` gives min, mean,
//! max and imbalance over ranks (issue 4, item 7).

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
        let meta = powerperf::store::run::RunMeta::read(&job.join(format!("rank{r}"))).unwrap();
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
    let o = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["report", "--format", "json"])
        .arg(&job)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
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
