//! The clap side of the library enums that cannot derive `clap::ValueEnum` yet. The
//! library enums whose values are command-line values derive it themselves, behind
//! powerperf-core's `clap` feature (`#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]`:
//! `OutputFormat`, `export::Format`, `ModelKind`, `ImageFormat`, `NvmlMode`,
//! `TimelineSampler`, `CounterBackend`, `PcTarget`), so each has one definition and its doc
//! comments are its `--help` text.
//!
//! Left here: `plan --objective`'s and `plan --device`'s enums, which live in the node crate
//! (`powerperf_node::plan_file`), built without clap; each keeps a clap-facing twin (same
//! values, same help), `From` both ways (every variant matched, so a variant added to the
//! library enum does not compile until its twin has it too) and a `parser()` for
//! `#[arg(value_parser = …)]`.

/// A clap-facing twin of a library enum: the same variants (with their doc comments, which
/// are the help of each value, and `#[value(…)]` names and aliases), `From` both ways, and
/// `parser()`.
macro_rules! clap_twin {
    (
        $(#[$meta:meta])*
        $twin:ident => $lib:path {
            $( $(#[$vmeta:meta])* $variant:ident ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
        pub enum $twin {
            $( $(#[$vmeta])* $variant ),*
        }

        impl From<$twin> for $lib {
            fn from(v: $twin) -> Self {
                match v {
                    $( $twin::$variant => Self::$variant ),*
                }
            }
        }

        impl From<$lib> for $twin {
            fn from(v: $lib) -> Self {
                type Lib = $lib;
                match v {
                    $( Lib::$variant => Self::$variant ),*
                }
            }
        }

        impl $twin {
            /// Parses this twin's values into the library type.
            pub fn parser() -> impl clap::builder::TypedValueParser<Value = $lib> {
                use clap::builder::TypedValueParser;
                clap::builder::EnumValueParser::<$twin>::new().map(<$lib>::from)
            }
        }
    };
}

clap_twin! {
    /// `plan --objective`: [`powerperf_node::plan_file::Objective`].
    Objective => powerperf_node::plan_file::Objective {
        /// Energy, J.
        Energy,
        /// Energy × delay, J·s (Gonzalez & Horowitz, IEEE JSSC 31(9), 1996).
        Edp,
        /// Energy × delay², J·s² (Martin, Nyström, Pénzes, "ET²", PACS 2001).
        Ed2p,
        /// Time, s (with `--power-cap`: the fastest setting under the cap).
        Time,
    }
}

clap_twin! {
    /// `plan --device`: [`powerperf_node::plan_file::DeviceKind`].
    DeviceKind => powerperf_node::plan_file::DeviceKind {
        /// CPU cores: `core_freq_mhz` through cpufreq.
        Cpu,
        /// GPU: `core_freq_mhz` is the SM clock, `mem_freq_mhz` the memory clock (NVML).
        Gpu,
    }
}

#[cfg(test)]
mod tests {
    use crate::output::OutputFormat;
    use clap::ValueEnum;

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
    fn device_kind_twin_round_trips() {
        use powerperf_node::plan_file::DeviceKind as Lib;
        for d in [Lib::Cpu, Lib::Gpu] {
            assert_eq!(Lib::from(super::DeviceKind::from(d)), d);
        }
    }
}
