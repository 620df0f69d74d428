//! Run the machine-constant suite without the `powerperf` binary:
//! `cargo run --release -p powerperf-microbench --example suite -- [--quick] [--json]
//! [--no-realtime] [-o FILE.toml] [--curve FILE.csv]` (`--json`: the report as
//! `powerperf microbench run --format json` prints it).

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(PathBuf::from)
    };
    let json = args.iter().any(|a| a == "--json");
    let mut cfg = microbench_cfg(quick);
    cfg.realtime = !args.iter().any(|a| a == "--no-realtime");
    match powerperf_microbench::run_suite(&cfg, &mut |s| eprintln!("… {s}")) {
        Ok(r) => {
            if json {
                match serde_json::to_string_pretty(&r) {
                    Ok(j) => println!("{j}"),
                    Err(e) => eprintln!("Error: {e}"),
                }
            } else {
                print!("{}", r.table());
            }
            if let Some(p) = after("--curve") {
                if let Err(e) = powerperf_microbench::suite::write_out(&p, &r.curve_csv()) {
                    eprintln!("Error: {e}");
                }
            }
            if let Some(p) = after("-o") {
                let t = r
                    .constants_toml()
                    .map(|t| powerperf_microbench::suite::write_out(&p, &t));
                if let Err(e) = t.and_then(|x| x) {
                    eprintln!("Error: {e}");
                }
            }
        }
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("Error: {msg}");
            std::process::exit(1);
        }
    }
}

fn microbench_cfg(quick: bool) -> powerperf_microbench::SuiteConfig {
    powerperf_microbench::SuiteConfig::live(quick)
}
