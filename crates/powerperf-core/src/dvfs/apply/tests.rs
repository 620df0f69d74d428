use super::*;
use powerperf_node::controller::FakeController;

#[test]
fn fake_controller_is_restored_after_the_command() {
    let d = tempfile::tempdir().unwrap();
    let mut f = FakeController::new(&[1000.0, 2000.0]);
    let log = f.log.clone();
    let sig = SignalForwarder::install().unwrap();
    let req = ApplyRequest {
        core_freq_mhz: Some(1000.0),
        env: vec![("OMP_NUM_THREADS".into(), "2".into())],
        command: vec![
            "sh".into(),
            "-c".into(),
            "test \"$OMP_NUM_THREADS\" = 2 && exit 3".into(),
        ],
        restore_file: d.path().join("r.toml"),
        log_file: d.path().join("s.log"),
        sysfs_root: d.path().to_path_buf(),
        run_as: None,
    };
    let st = apply_with(&mut f, &req, &sig).unwrap();
    assert_eq!(st, 3);
    assert_eq!(
        *log.lock().unwrap(),
        vec!["set 1000".to_string(), "restore 2000".to_string()]
    );
    assert_eq!(f.current_mhz, 2000.0);
    assert!(!req.restore_file.exists());
    let text = std::fs::read_to_string(&req.log_file).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    // out of range: nothing changed, no record
    let e = apply_with(
        &mut f,
        &ApplyRequest {
            core_freq_mhz: Some(1500.0),
            ..req.clone()
        },
        &sig,
    )
    .unwrap_err();
    assert!(e.to_string().contains("1500"), "{e}");
    assert_eq!(log.lock().unwrap().len(), 2);
    // a command that cannot start: restored
    let e = apply_with(
        &mut f,
        &ApplyRequest {
            command: vec!["/nonexistent/x".into()],
            ..req.clone()
        },
        &sig,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot start"), "{e:#}");
    assert_eq!(*log.lock().unwrap().last().unwrap(), "restore 2000");
}

fn region_plan() -> RegionSettings {
    RegionSettings {
        regions: [("a", 1000.0), ("b", 1500.0), ("bad", 1234.0)]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
        default_mhz: 2000.0,
    }
}

fn region_req(d: &Path, command: Vec<String>) -> ApplyRequest {
    ApplyRequest {
        core_freq_mhz: Some(2000.0),
        env: vec![],
        command,
        restore_file: d.join("r.toml"),
        log_file: d.join("s.log"),
        sysfs_root: d.to_path_buf(),
        run_as: None,
    }
}

#[test]
fn region_switches_follow_the_stack_and_out_of_range_is_refused() {
    if std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        eprintln!("skipped: region_switches_follow_the_stack: python3 is not installed");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let acks = d.path().join("acks");
    let client = format!(
        r#"
import os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["POWERPERF_CTL_SOCKET"])
assert os.path.isdir(os.environ["POWERPERF_RUN_DIR"])
out = []
for m in ["B a", "B other", "B b", "E b", "E other", "B bad", "E bad", "E a", "B b"]:
    s.sendall((m + "\n").encode())
    out.append(s.recv(1).decode())
open("{}", "w").write("".join(out))
"#,
        acks.display()
    );
    let mut f = FakeController::new(&[1000.0, 1500.0, 2000.0]);
    let log = f.log.clone();
    let sig = SignalForwarder::install().unwrap();
    let req = region_req(d.path(), vec!["python3".into(), "-c".into(), client]);
    let st = apply_regions(&mut f, &req, &region_plan(), &sig).unwrap();
    assert_eq!(st, 0);
    assert_eq!(std::fs::read_to_string(&acks).unwrap(), "KKKKKNKKK");
    // the connection ended inside `b`: back to the default, then the restore
    assert_eq!(
        *log.lock().unwrap(),
        [
            "set 2000",
            "set 1000",
            "set 1500",
            "set 1000",
            "set 2000",
            "set 1500",
            "set 2000",
            "restore 2000"
        ]
    );
    assert!(!req.restore_file.exists());
    let text = std::fs::read_to_string(&req.log_file).unwrap();
    let actions: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            format!("{} {}", c[2], if c[2] == "set" { c[5] } else { c[3] })
        })
        .collect();
    assert_eq!(
        actions,
        [
            "set 2000",
            "region B a",
            "set 1000",
            "region B b",
            "set 1500",
            "region E b",
            "set 1000",
            "region B bad",
            "refuse B bad",
            "region E a",
            "set 2000",
            "region B b",
            "set 1500",
            "region close",
            "set 2000",
            "restore fake/freq_mhz"
        ],
        "{text}"
    );
    // the private socket directory is gone
    assert!(std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().starts_with("powerperf-ctl")));
}

#[test]
fn a_connection_from_outside_the_command_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut f = FakeController::new(&[1000.0, 1500.0, 2000.0]);
    let log = f.log.clone();
    let sig = SignalForwarder::install().unwrap();
    let req = region_req(d.path(), vec!["sleep".into(), "1".into()]);
    let sock = d
        .path()
        .join(format!("powerperf-ctl-{}-0/ctl.sock", std::process::id()));
    let intruder = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for _ in 0..200 {
            if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) {
                // The controller may close a refused connection before this write lands
                // (EPIPE) or after it: either way no acknowledgement comes back.
                let _ = s.write_all(b"B a\n");
                let mut buf = Vec::new();
                // refused: closed without an acknowledgement
                let _ = s.read_to_end(&mut buf);
                return Some(buf);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        None
    });
    assert_eq!(
        apply_regions(&mut f, &req, &region_plan(), &sig).unwrap(),
        0
    );
    assert_eq!(intruder.join().unwrap(), Some(vec![]));
    assert_eq!(*log.lock().unwrap(), ["set 2000", "restore 2000"]);
    let text = std::fs::read_to_string(&req.log_file).unwrap();
    assert!(
        text.contains(&format!("\tdeny\tpid {} uid", std::process::id())),
        "{text}"
    );
}

/// Item 5: a record is created exclusively: writing over an existing record (another
/// apply's, or a file planted at its path) fails and leaves it as it was.
#[test]
fn record_write_never_replaces_an_existing_record() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("powerperf-restore.toml");
    let rec: RestoreRecord = toml::from_str(
        "pid = 1\ncreated_unix_ns = 0\nsysfs_root = \"/\"\ncontroller = \"c\"\ncommand = []\n",
    )
    .unwrap();
    rec.write(&path).unwrap();
    let first = std::fs::read_to_string(&path).unwrap();
    let other = RestoreRecord {
        pid: 2,
        ..rec.clone()
    };
    let e = other.write(&path).unwrap_err();
    assert!(format!("{e:#}").contains("already"), "{e:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
    // no temporary file is left next to it
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

/// Item 11: a control line is read with a bound: never more than `max + 1` bytes are
/// held, and a longer line is an error (the connection is then closed).
#[test]
fn control_lines_are_read_with_a_bound() {
    let mut buf = Vec::new();
    let data = b"B a\nE a\nB last".to_vec();
    let mut r = std::io::BufReader::new(&data[..]);
    assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
    assert_eq!(buf, b"B a");
    assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
    assert_eq!(buf, b"E a");
    // the last line without a newline is still a line
    assert!(read_bounded_line(&mut r, &mut buf, 8).unwrap());
    assert_eq!(buf, b"B last");
    assert!(!read_bounded_line(&mut r, &mut buf, 8).unwrap());
    // exactly the limit with its newline: accepted; one byte more: refused
    let data = b"B 123456\nB 1234567\n".to_vec();
    let mut r = std::io::BufReader::new(&data[..]);
    assert!(read_bounded_line(&mut r, &mut buf, 9).unwrap());
    assert_eq!(buf, b"B 123456");
    let e = read_bounded_line(&mut r, &mut buf, 9).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    // a long line without a newline: at most max + 1 bytes were taken
    let long = vec![b'x'; 1 << 20];
    let mut r = std::io::BufReader::new(&long[..]);
    let e = read_bounded_line(&mut r, &mut buf, MAX_CTL_LINE).unwrap_err();
    assert!(e.to_string().contains("longer than 4096 bytes"), "{e}");
    assert!(buf.len() <= MAX_CTL_LINE + 1);
}

#[test]
fn descendants_are_found_through_proc() {
    let me = std::process::id() as i32;
    let mut c = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let pid = c.id() as i32;
    assert_eq!(parent_pid(pid), Some(me));
    assert!(is_descendant(pid, me));
    assert!(!is_descendant(me, pid));
    c.kill().unwrap();
    c.wait().unwrap();
    assert_eq!(unescape("a\\tb\\\\c\\n"), "a\tb\\c\n");
}
