//! The clap side of the library enums. Each enum whose values are command-line values has
//! one definition, in the library, and derives `clap::ValueEnum` itself behind its crate's
//! `clap` feature (`#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]`), which only this
//! package enables: powerperf-core's `OutputFormat`, `export::Format`, `ModelKind`,
//! `ImageFormat`, `NvmlMode`, `TimelineSampler`, `CounterBackend`, `PcTarget`, and
//! powerperf-node's `plan_file::{Objective, DeviceKind}`. Their doc comments are their
//! `--help` text. What is left here checks that the names clap gives them are the names
//! their files use.

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use powerperf_core::output::OutputFormat;

    #[test]
    fn format_names_and_the_old_name() {
        for f in OutputFormat::ALL {
            let v = f.to_possible_value().unwrap();
            assert_eq!(v.get_name(), f.name());
            assert_eq!(v.get_help(), None, "--help lists the format names only");
        }
        assert_eq!(
            OutputFormat::from_str("text", false),
            Ok(OutputFormat::Table)
        );
    }

    #[test]
    fn plan_enums_take_their_plan_file_names_on_the_command_line() {
        use powerperf_node::plan_file::{DeviceKind, Objective};
        for o in Objective::value_variants() {
            let name = o.to_possible_value().unwrap().get_name().to_string();
            let serde = serde_json::to_value(o).unwrap();
            assert_eq!(
                serde.as_str(),
                Some(name.as_str()),
                "plan --objective {name}"
            );
        }
        for d in DeviceKind::value_variants() {
            let name = d.to_possible_value().unwrap().get_name().to_string();
            let serde = serde_json::to_value(d).unwrap();
            assert_eq!(serde.as_str(), Some(name.as_str()), "plan --device {name}");
        }
        assert_eq!(Objective::from_str("ed2p", false), Ok(Objective::Ed2p));
        assert_eq!(DeviceKind::from_str("gpu", false), Ok(DeviceKind::Gpu));
    }
}
