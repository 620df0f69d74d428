//! The clap side of the library's enums: `--format` ([`OutputFormat`]) and every other
//! option whose values are a library enum. The library types do not derive
//! `clap::ValueEnum`; each has a clap-facing twin here (same values, same help) and a
//! `parser()` that parses into the library type, for `#[arg(value_parser = …)]`.
//!
//! The `From` conversions match every variant both ways, so a variant added to a library
//! enum does not compile until its twin has it too.

// The twins carry the library enums' doc comments (their `--help` text) verbatim, links
// included.
#![allow(rustdoc::broken_intra_doc_links)]

use crate::output::OutputFormat;

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
    /// `--format` of every command that prints a summary.
    Format => crate::output::OutputFormat {
        #[value(alias = "text")]
        Table,
        Json,
        Csv,
        Markdown,
    }
}

/// Parses `--format` (`table|json|csv|markdown`; `text` is an old name of `table`).
pub fn format() -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
    Format::parser()
}

clap_twin! {
    /// `export --format`: [`crate::export::Format`].
    TraceFormat => crate::export::Format {
        /// OTF2 archive (Vampir, Score-P tools, otf2-print): -o DIR, anchor DIR/traces.otf2.
        Otf2,
        /// Perfetto protobuf trace (ui.perfetto.dev, trace_processor): -o FILE.pftrace.
        Perfetto,
        /// Chrome JSON trace (chrome://tracing, ui.perfetto.dev): -o FILE.json (.json.gz:
        /// gzip-compressed).
        Chrome,
    }
}

clap_twin! {
    /// `--model` / `--kind`: [`crate::models::ModelKind`].
    ModelKind => crate::models::ModelKind {
        /// Analytical DVFS time/power model ([`analytic`]).
        Analytic,
        /// Analytical time model with the memory part from counters ([`analytic_counters`]).
        AnalyticCounters,
        /// Analytical model with an explicit memory-clock term ([`memclock`]).
        AnalyticMem,
        /// Multivariate linear regression on counter rates ([`regression`]).
        Linear,
        /// Supervised PCA regression ([`regression`]).
        Spca,
        /// Thread-count model ([`threads`]).
        Threads,
        /// Thread-count model with a bandwidth floor from traffic counters ([`threads_bw`]).
        ThreadsBw,
        /// Counter-informed scaling from a baseline point ([`scaling`]).
        Scaling,
        /// Several knobs at once from a covering training subgrid ([`joint`]).
        Joint,
        /// The K nearest training workloads' response ratios (`scaling`'s local transfer).
        Neighbors,
        /// Per target, analytic-counters' physical form (bound and bottleneck on DCGM
        /// fractions, base CPI on an instructions count, over both clocks with DRAM
        /// transaction counts on a core × memory grid), the neighbours, their mean or the
        /// training workloads' common response, by inner cross-validation over the training
        /// workloads.
        Stack,
        /// The best kind for the set and protocol (see [`ModelKind::resolve`]).
        Auto,
    }
}

clap_twin! {
    /// `plan --objective`: [`crate::dvfs::planner::Objective`].
    Objective => crate::dvfs::planner::Objective {
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

clap_twin! {
    /// `--plot-format`: [`crate::report::plots::ImageFormat`].
    ImageFormat => crate::report::plots::ImageFormat {
        Svg,
        Png,
    }
}

clap_twin! {
    /// `collect --nvml`: [`crate::collect::NvmlMode`].
    NvmlMode => crate::collect::NvmlMode {
        /// Sample every GPU NVML sees; without NVML, a note in the run.
        Auto,
        /// Sample, and record NVML as not supported (with the reason) where it is missing.
        On,
        /// Do not load NVML.
        Off,
    }
}

clap_twin! {
    /// `collect --sampler`: [`crate::collect::TimelineSampler`].
    TimelineSampler => crate::collect::TimelineSampler {
        /// `kernel` for a command whose only timeline sources are perf_event counters; `thread`
        /// otherwise (RAPL, NVML and PAPI are read by a thread).
        Auto,
        /// Leader sampling, perf's `{cpu-clock,…}:S`: the kernel reads each counter group
        /// every interval of the command's CPU time and powerperf drains the buffers 4 times a
        /// second (a command only; Linux 6.12 or later; falls back to `thread` with a note).
        Kernel,
        /// A powerperf thread wakes every interval and reads every source.
        Thread,
    }
}

clap_twin! {
    /// `collect --backend`: [`crate::collect::CounterBackend`].
    CounterBackend => crate::collect::CounterBackend {
        /// perf_event_open(2) directly, with perf stat's event names (`cycles`, `pmu/event/`).
        #[value(name = "perf", alias = "perf_event")]
        Perf,
        /// PAPI (feature `papi`): preset (`PAPI_TOT_INS`) and native (`perf::TASK-CLOCK`) names.
        Papi,
    }
}

clap_twin! {
    /// `collect --pc-sampling`: [`crate::collect::PcTarget`].
    PcTarget => crate::collect::PcTarget {
        /// CPU PCs of the command, perf record's way (docs/pc-sampling.md).
        Cpu,
        /// GPU PCs with stall reasons through CUPTI's PC Sampling API (docs/gpu.md).
        Gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn format_names_and_the_old_name() {
        for f in OutputFormat::ALL {
            let v = Format::from(f).to_possible_value().unwrap();
            assert_eq!(v.get_name(), f.name());
        }
        assert_eq!(Format::from_str("text", false), Ok(Format::Table));
    }
}
