//! Thin main: parse, run, print errors with their causes, exit with the right status.

fn main() {
    match powerperf::cli::run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    }
}
