use super::*;
use std::sync::Mutex;

/// PAPI has one context per process here: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn event_lists() {
    assert_eq!(parse_list(None).unwrap().len(), DEFAULT_EVENTS.len());
    assert_eq!(
        parse_list(Some("PAPI_TOT_INS, perf::TASK-CLOCK,perf::PAGE-FAULTS")).unwrap(),
        ["PAPI_TOT_INS", "perf::TASK-CLOCK", "perf::PAGE-FAULTS"]
    );
    assert_eq!(parse_list(Some(" , ")), Err(PapiListError::Empty));
    assert!(matches!(
        parse_list(Some("{PAPI_TOT_INS,PAPI_TOT_CYC}")),
        Err(PapiListError::Group { index: 0, .. })
    ));
    assert!(matches!(
        parse_list(Some("PAPI_TOT_INS,PAPI_TOT_INS")),
        Err(PapiListError::Duplicate { index: 1, .. })
    ));
}

#[test]
fn library_initialises_with_the_built_version() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    init().unwrap();
    assert!(version().starts_with(&format!("{}.", ffi::PAPI_VER_CURRENT as u32 >> 24)));
    let comps = components();
    assert!(
        comps.iter().any(|c| c.name == "perf_event"),
        "components: {comps:?}"
    );
}

#[test]
fn error_strings_name_the_code() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    init().unwrap();
    let s = strerror(ffi::PAPI_ENOEVNT);
    assert!(
        s.contains("PAPI_ENOEVNT") && s.len() > "PAPI_ENOEVNT".len() + 3,
        "{s}"
    );
}

#[test]
fn unknown_names_and_components_are_explained() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = PapiCounters::open(
        &[
            "PAPI_NO_SUCH_EVENT".to_string(),
            "nosuchcomponent:::X".to_string(),
        ],
        PapiTarget::CallingThread,
    );
    let recs = c.records();
    assert_eq!(recs[0].status, EventStatus::NotSupported);
    let r0 = recs[0].reason.as_deref().unwrap();
    assert!(
        r0.contains("PAPI_event_name_to_code(`PAPI_NO_SUCH_EVENT`)") && r0.contains("papi_avail"),
        "{r0}"
    );
    let r1 = recs[1].reason.as_deref().unwrap();
    assert!(
        r1.contains("no component `nosuchcomponent`") && r1.contains("perf_event"),
        "{r1}"
    );
    assert!(recs.iter().all(|r| r.column.is_none() && r.total.is_none()));
}

/// Touch `mib` MiB page by page (one minor fault per 4 KiB page without huge pages) and
/// spin for `ms` ms of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
fn work(mib: usize, ms: u64) -> u64 {
    let mut v = vec![0u8; mib << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = i as u8;
    }
    let cpu_ns = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let t0 = cpu_ns();
    let mut x = 0u64;
    while cpu_ns() - t0 < ms * 1_000_000 {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    std::hint::black_box(v.iter().step_by(4096).map(|b| *b as u64).sum::<u64>() ^ x)
}

/// PAPI's perf_event component counts perf::TASK-CLOCK and perf::PAGE-FAULTS on this
/// thread like the perf backend counts task-clock and page-faults on it over the same
/// work; PAPI_TOT_CYC is counted where there is a hardware PMU and otherwise reported
/// not supported with PAPI's reason.
#[test]
fn software_events_count_like_the_perf_backend_on_this_thread() {
    use powerperf_node::event_spec::parse_list as perf_list;
    use powerperf_node::perf_event::{open_all, Opened, Target};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let names: Vec<String> = ["perf::TASK-CLOCK", "perf::PAGE-FAULTS", "PAPI_TOT_CYC"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = PapiCounters::open(&names, PapiTarget::CallingThread);
    let recs = p.records();
    if !p.columns().iter().any(|c| c == "perf::TASK-CLOCK") {
        println!(
            "skipped: PAPI's perf_event component cannot count perf::TASK-CLOCK here: {}",
            recs[0].reason.as_deref().unwrap_or("?")
        );
        return;
    }
    match hardware_pmu() {
        Err(e) => {
            let r = &recs[2];
            assert_eq!(r.status, EventStatus::NotSupported, "{r:?}");
            let why = r.reason.as_deref().unwrap();
            assert!(
                why.contains("PAPI_add_event(`PAPI_TOT_CYC`)")
                    || why.contains("PAPI_event_name_to_code(`PAPI_TOT_CYC`)"),
                "{why}"
            );
            assert!(why.contains("(PAPI_E"), "PAPI's error code is named: {why}");
            assert!(why.contains("papi_avail"), "{why}");
            println!("PAPI_TOT_CYC without a hardware PMU ({e}): {why}");
        }
        Ok(()) => assert!(p.columns().iter().any(|c| c == "PAPI_TOT_CYC")),
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    let specs = perf_list(Some("task-clock,page-faults")).unwrap();
    let mut perf: Vec<_> = open_all(&specs, &Target::Tasks(vec![me]), std::path::Path::new("/"))
        .into_iter()
        .map(|o| match o {
            Opened::Counter(c) => c,
            Opened::Failed { reason, .. } => panic!("perf backend: {reason}"),
        })
        .collect();
    p.start();
    // Baselines, read back to back; the deltas below span the same work.
    p.sample();
    perf.iter_mut().for_each(|c| {
        c.sample();
    });
    work(64, 300);
    let pv = p.sample();
    let fv: Vec<f64> = perf.iter_mut().map(|c| c.sample().unwrap()).collect();
    let (papi_clock, papi_faults) = (pv[0].unwrap(), pv[1].unwrap());
    let (perf_clock, perf_faults) = (fv[0], fv[1]);
    println!(
        "task-clock ns: PAPI {papi_clock:.0}, perf {perf_clock:.0}; page-faults: PAPI {papi_faults:.0}, perf {perf_faults:.0}"
    );
    // Both count this thread's CPU time; the two reads are microseconds apart, so the
    // counts differ by the CPU time of one read (the machine's other load is not in a
    // per-thread clock): 2 ms or 1 %.
    assert!(papi_clock >= 0.3e9, "{papi_clock}");
    assert!(
        (papi_clock - perf_clock).abs() <= (0.01 * perf_clock).max(2e6),
        "task-clock: PAPI {papi_clock} vs perf {perf_clock}"
    );
    // 64 MiB touched page by page: at least 64 MiB / 2 MiB faults (huge pages) and at
    // most 16384 + a few (4 KiB pages); the reads themselves fault a few pages at most.
    assert!(papi_faults >= 32.0, "{papi_faults}");
    assert!(
        (papi_faults - perf_faults).abs() <= 16.0,
        "page-faults: PAPI {papi_faults} vs perf {perf_faults}"
    );
    let recs = p.records();
    assert_eq!(recs[0].status, EventStatus::Counted);
    assert_eq!(recs[0].unit.as_deref(), Some("ns"));
    assert_eq!(recs[0].backend, Backend::Papi);
    assert_eq!(recs[0].column.as_deref(), Some("perf::TASK-CLOCK"));
}
