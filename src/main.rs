//! Thin main: parse, run, print errors with their causes, exit with the right status.

fn main() {
    match powerperf::cli::run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A reader that went away (`| head`): exit 1 without a message, as other CLIs do.
            let closed_pipe = e.chain().any(|c| {
                c.downcast_ref::<powerperf::cli::StdoutError>()
                    .is_some_and(|s| s.0.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if !closed_pipe {
                eprintln!("Error: {e:#}");
            }
            std::process::exit(1);
        }
    }
}
