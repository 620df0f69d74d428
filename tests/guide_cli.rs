//! Runs every command of the user guide (`docs/guide.md`), in order, with the built binary.
//!
//! Rules (also at the end of the guide):
//! - the lines of every ```sh block are taken in order; blank lines and `#` comments are
//!   skipped; a block whose first line is `# needs: datasets` uses the bundled datasets
//!   (`datasets/`, beside the specs; always there in a checkout), `# needs: rt-lib` runs only when
//!   `libpowerperf_rt.so` sits next to the tested binary and `python3` exists (else
//!   `skipped: <reason>` is printed for each of the block's commands);
//! - `powerperf ...` lines run the binary under test with the arguments split on whitespace
//!   (the line may contain no quotes, `$`, globs, pipes or other shell syntax; one final
//!   `> FILE` redirects stdout into FILE) and must exit 0;
//! - `mkdir -p DIR...`, `cp -r SRC DST` and `export POWERPERF_DATA_DIR=...` are the only
//!   other lines allowed: the first two are done by the test, the last is ignored (the
//!   commands run without `POWERPERF_DATA_DIR`, on the bundled data);
//! - the working directory is a temporary directory holding copies of the repository paths
//!   the commands read ([`COPIED`]), so `guide-out/` is never written into the checkout;
//!   `powerperf` inside a command (after `--`) is the tested binary, found through `PATH`.

mod common;
use common::copy_tree;

use std::path::{Path, PathBuf};

/// Repository paths the guide's commands read, copied into the working directory.
const COPIED: &[&str] = &[
    "src",
    "datasets",
    "examples",
    "tests/fixtures/sysfs",
    "rt/python",
    "rt/examples/python",
];

/// Characters that would need a shell: a guide command containing one could not be run as
/// the test splits it.
const SHELL_SYNTAX: &[char] = &[
    '\'', '"', '`', '$', '|', '&', ';', '<', '>', '(', ')', '*', '?', '[', ']', '{', '}', '\\', '~',
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One line of a ```sh block, with the requirement of its block.
#[derive(Debug)]
struct Line {
    number: usize,
    needs: Option<String>,
    text: String,
}

/// The command lines of the ```sh blocks of `guide`, comments and blank lines removed.
fn sh_lines(guide: &str) -> Vec<Line> {
    let mut out = Vec::new();
    // None outside a fenced block; Some(true) inside a ```sh block, Some(false) in another.
    let mut fence: Option<bool> = None;
    let mut first = false;
    let mut needs: Option<String> = None;
    for (i, raw) in guide.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(line == "```sh"),
            };
            first = true;
            needs = None;
            continue;
        }
        if fence != Some(true) {
            continue;
        }
        if first {
            first = false;
            if let Some(n) = line.strip_prefix("# needs:") {
                needs = Some(n.trim().to_string());
                continue;
            }
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !line.contains(" #"),
            "docs/guide.md:{}: no trailing comments in sh blocks: {line}",
            i + 1
        );
        out.push(Line {
            number: i + 1,
            needs: needs.clone(),
            text: line.to_string(),
        });
    }
    out
}

/// Why a block with this requirement cannot run here, or None when it can.
fn unmet(needs: &str, data: &Path, bin: &Path) -> Option<String> {
    match needs {
        "datasets" => {
            let f = data.join("titanx-dvfs/micro_140.csv");
            (!f.is_file()).then(|| format!("{} is missing from the checkout", f.display()))
        }
        "rt-lib" => {
            let lib = common::rt_lib_dir()
                .unwrap_or_else(|| bin.parent().unwrap().to_path_buf())
                .join("libpowerperf_rt.so");
            if !lib.is_file() {
                Some(format!(
                    "{} not built (cargo test --workspace builds it)",
                    lib.display()
                ))
            } else if !std::process::Command::new("python3")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                Some("python3 is not installed".to_string())
            } else {
                None
            }
        }
        other => panic!("docs/guide.md: unknown `# needs: {other}`"),
    }
}

#[test]
fn sh_lines_are_parsed_with_their_needs() {
    let g = "text\n```sh\n# needs: datasets\n\npowerperf a b\n# comment\n```\n```text\npowerperf no\n```\n```sh\nmkdir -p x\n# needs: nothing (not first)\n```\n";
    let l = sh_lines(g);
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(l[0].text, "powerperf a b");
    assert_eq!(l[0].needs.as_deref(), Some("datasets"));
    assert_eq!(l[0].number, 5);
    assert_eq!(l[1].text, "mkdir -p x");
    assert_eq!(l[1].needs, None);
}

#[test]
fn every_guide_command_runs() {
    let guide = std::fs::read_to_string(root().join("docs/guide.md")).unwrap();
    let lines = sh_lines(&guide);
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    assert!(bin.is_file(), "{} is not built", bin.display());
    let data = common::datasets();

    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    for p in COPIED {
        copy_tree(&root().join(p), &work.join(p));
    }
    let path = std::env::join_paths(std::iter::once(bin.parent().unwrap().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();

    let mut ran = 0;
    let mut dataset_commands = 0;
    for line in &lines {
        let at = format!("docs/guide.md:{}", line.number);
        let words: Vec<&str> = line.text.split_whitespace().collect();
        if line.needs.as_deref() == Some("datasets") && words[0] == "powerperf" {
            dataset_commands += 1;
        }
        if let Some(why) = line.needs.as_deref().and_then(|n| unmet(n, &data, &bin)) {
            println!("skipped: {at}: {}: {why}", line.text);
            continue;
        }
        match words[0] {
            "mkdir" => {
                assert_eq!(words.get(1), Some(&"-p"), "{at}: only `mkdir -p DIR...`");
                assert!(words.len() > 2, "{at}: mkdir -p needs a directory");
                for d in &words[2..] {
                    std::fs::create_dir_all(work.join(d)).unwrap();
                }
            }
            "cp" => {
                assert!(
                    words.len() == 4 && words[1] == "-r",
                    "{at}: only `cp -r SRC DST`"
                );
                copy_tree(&work.join(words[2]), &work.join(words[3]));
            }
            "export" => {
                assert!(
                    words.len() == 2 && words[1].starts_with("POWERPERF_DATA_DIR="),
                    "{at}: only `export POWERPERF_DATA_DIR=...` (ignored: the commands read the bundled data)"
                );
            }
            "powerperf" => {
                let (args, stdout_to) = match words.iter().position(|w| *w == ">") {
                    Some(i) => {
                        assert_eq!(i + 2, words.len(), "{at}: `> FILE` must end the line");
                        (&words[1..i], Some(work.join(words[i + 1])))
                    }
                    None => (&words[1..], None),
                };
                for w in args {
                    assert!(
                        !w.contains(SHELL_SYNTAX),
                        "{at}: `{w}` needs a shell; guide commands must split on whitespace"
                    );
                }
                let mut cmd = std::process::Command::new(&bin);
                cmd.args(args)
                    .current_dir(work)
                    .env("PATH", &path)
                    .env_remove("POWERPERF_DATA_DIR");
                let start = std::time::Instant::now();
                let o = cmd.output().unwrap();
                println!(
                    "ran {at} in {:.1} s: {}",
                    start.elapsed().as_secs_f64(),
                    line.text
                );
                assert!(
                    o.status.success(),
                    "{at}: `{}` exited with {}\nstdout:\n{}\nstderr:\n{}",
                    line.text,
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                if let Some(f) = stdout_to {
                    std::fs::write(&f, &o.stdout).unwrap();
                }
                ran += 1;
            }
            other => panic!(
                "{at}: `{other}` lines cannot be run by tests/guide_cli.rs (allowed: powerperf, mkdir -p, cp -r, export POWERPERF_DATA_DIR=)"
            ),
        }
    }
    assert!(ran >= 8, "only {ran} guide commands ran");
    assert!(
        dataset_commands >= 8,
        "the dataset section has {dataset_commands} commands"
    );

    // The outputs the guide promises exist.
    let out = work.join("guide-out");
    for f in ["run1/run.toml", "mixed/run.toml", "mixed.html", "sysfs"] {
        assert!(out.join(f).exists(), "guide-out/{f} is missing");
    }
    for f in [
        "titanx/set.toml",
        "titanx.json",
        "holdout.csv",
        "dp-pred.json",
        "plan.toml",
    ] {
        assert!(out.join(f).exists(), "guide-out/{f} is missing");
    }
    // The dry runs changed nothing in the fixture copy.
    let gov = std::fs::read_to_string(
        out.join("sysfs/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    )
    .unwrap();
    assert_eq!(gov.trim(), "schedutil");
}
