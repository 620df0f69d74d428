//! The CLI stays thin (issue 42, item 3; docs/architecture.md): each subcommand's
//! `pub fn run` in `src/cli/*.rs` parses its arguments, calls the library and prints, in at
//! most [`MAX_RUN_LINES`] lines; what to compute lives in powerperf-core.

use std::path::{Path, PathBuf};

/// The most lines a `pub fn run` body may have (the lines between the line that opens it
/// and its closing `}`, blank lines and comments included).
const MAX_RUN_LINES: usize = 100;

fn cli_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli")
}

/// Each `pub fn run` of `text` (rustfmt's layout: the signature at column 0, the body
/// closed by a `}` at column 0): its line number (1-based) and its body's line count.
/// `Err` names a `pub fn run` whose end cannot be found.
fn run_lengths(text: &str) -> Result<Vec<(usize, usize)>, usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !(l.starts_with("pub fn run(") || l.starts_with("pub fn run<")) {
            continue;
        }
        let open = (i..lines.len())
            .find(|&j| lines[j].trim_end().ends_with('{'))
            .ok_or(i + 1)?;
        let close = (open + 1..lines.len())
            .find(|&j| lines[j] == "}")
            .ok_or(i + 1)?;
        out.push((i + 1, close - open - 1));
    }
    Ok(out)
}

#[test]
fn the_line_counter_counts_a_body() {
    let text = "fn a() {}\n\npub fn run(args: A) -> Result<i32> {\n    let x = 1;\n\n    // c\n    Ok(x)\n}\n\npub fn run<T>(\n    t: T,\n) -> i32 {\n    0\n}\n";
    assert_eq!(run_lengths(text), Ok(vec![(3, 4), (10, 1)]));
    assert_eq!(run_lengths("pub fn run() {\n    0\n"), Err(1));
}

#[test]
fn every_cli_run_is_at_most_100_lines() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cli_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut runs = 0;
    let mut over = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(f);
        let lens = run_lengths(&text).unwrap_or_else(|line| {
            panic!(
                "{}:{line}: `pub fn run` has no closing `}}` at column 0 (run cargo fmt)",
                name.display()
            )
        });
        for (line, n) in lens {
            runs += 1;
            if n > MAX_RUN_LINES {
                over.push(format!("{}:{line}: {n} lines", name.display()));
            }
        }
    }
    // plan, fit, evaluate, predict, import, collect, report, ... each have one.
    assert!(runs >= 10, "found only {runs} `pub fn run` in src/cli");
    assert!(
        over.is_empty(),
        "a `pub fn run` in src/cli is over {MAX_RUN_LINES} lines (fix: keep parsing and printing in the CLI, move what to compute into a powerperf-core function):\n{}",
        over.join("\n")
    );
}
