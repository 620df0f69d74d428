//! dvfs
