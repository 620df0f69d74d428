//! powerperf's file formats, in one place: every file of a run directory (`powerperf
//! collect -o RUN`) and of a training set (`powerperf import -o SET`): the file names, the
//! schemas (column names), the readers and the writers. `collect` writes through this crate;
//! `report`, `store`, `models` and `dvfs` read through it. docs/run-format.md and
//! docs/set-format.md describe the files.
//!
//! - [`run`]: `RUN/run.toml` ([`run::RunMeta`]) and the list of a run's outputs;
//! - [`timeline`]: `RUN/timeline.parquet` and its crash journal `RUN/timeline.journal.csv`,
//!   and the column helpers every Parquet reader here uses;
//! - [`regions`]: `RUN/regions.parquet` (the region-event files `RUN/region_events/` are
//!   powerperf-rt's format);
//! - [`gpu_activity`], [`gpu_pcsamp`]: the CUPTI tables of `collect --gpu` and
//!   `--pc-sampling gpu`;
//! - [`pc_samples`]: `RUN/pc_samples.parquet` (`--pc-sampling cpu`);
//! - [`set`]: `SET/set.toml` and `SET/points.parquet` ([`set::TrainingSet`]); [`set_regions`]:
//!   a set from the regions of collected runs;
//! - [`device`]: the device names of `knob_devices` (`cpu`, `gpu<i>`);
//! - [`quantity`]: the dimensions, units and value ranges of a set's columns;
//!
//! Every file here is created through [`powerperf_node::safe_file`] (no link followed).

pub mod device;
pub mod gpu_activity;
pub mod gpu_pcsamp;
pub mod parquet_check;
pub mod pc_samples;
pub mod quantity;
pub mod regions;
pub mod run;
pub mod set;
pub mod set_regions;
pub mod timeline;
