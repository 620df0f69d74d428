//! MPI ranks: the rank variables of MPI launchers, and `%r`/`%h` in output paths.

/// The node-local rank under MPI launchers (`OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`,
/// `MPI_LOCALRANKID`, `PMI_LOCAL_RANK`), if any.
pub fn local_rank() -> Option<u32> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "SLURM_LOCALID",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()))
}

/// The global rank (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID`), if any.
pub fn global_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()))
}

/// Expand `%r` (rank, 0 without MPI) and `%h` (host name) in an output path.
pub fn expand_output(path: &str, rank: Option<u32>, host: &str) -> String {
    path.replace("%r", &rank.unwrap_or(0).to_string())
        .replace("%h", host)
}
