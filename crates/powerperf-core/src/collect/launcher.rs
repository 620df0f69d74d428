//! Start a command paused between `fork` and `exec`, so counters can be attached to its pid
//! with `enable_on_exec` before it runs (the way `perf stat CMD` starts its workload).

use std::ffi::CString;
use std::io;

/// A forked child waiting for [`Paused::go`] before it calls `execvp`.
pub struct Paused {
    pub pid: i32,
    go_w: i32,
    err_r: i32,
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("argument `{s}` contains a NUL byte"),
        )
    })
}

fn pipe_cloexec() -> io::Result<[i32; 2]> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds)
}

/// Fork a child that will run `argv` with the environment of this process plus `extra_env`.
/// The child gets SIGKILL when the calling thread exits (PR_SET_PDEATHSIG): call it from a
/// thread that lives as long as the command (collect calls it from the main thread).
///
/// # Errors
/// An empty command, an argument with a NUL byte, or a failed `fork`/`pipe`.
pub fn spawn_paused(argv: &[String], extra_env: &[(String, String)]) -> io::Result<Paused> {
    if argv.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no command given (usage: powerperf collect -o RUN -- CMD ARGS...)",
        ));
    }
    // Everything the child needs is allocated before fork: after fork only
    // async-signal-safe calls are made.
    let c_argv: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<io::Result<_>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|c| c.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !extra_env.iter().any(|(e, _)| e == k))
        .collect();
    env.extend(extra_env.iter().cloned());
    let c_env: Vec<CString> = env
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}")))
        .collect::<io::Result<_>>()?;
    let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    let go = pipe_cloexec()?;
    let err = pipe_cloexec()?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only calls async-signal-safe functions (close, read, write,
    // execvpe, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child: only async-signal-safe calls (prctl, getppid, close,
        // read, execvpe, write, _exit), on the pipe fds just created and on `argv_ptrs` and
        // `env_ptrs`, NUL-terminated arrays of pointers into `c_argv`/`c_env`, which were
        // built before the fork and outlive the exec; `b` and `e` are locals of the sizes
        // passed (1 and 4 bytes).
        unsafe {
            // The command dies with powerperf (issue 18): SIGKILL when the thread that forked
            // exits. That is the caller's thread, which must live as long as the command
            // (collect forks from the main thread). A powerperf that died before this call is
            // caught by the getppid check. Not inherited by the command's own children, and
            // cleared by the kernel on exec of a set-user-ID program (prctl(2)).
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != parent {
                libc::_exit(127);
            }
            libc::close(go[1]);
            libc::close(err[0]);
            let mut b = 0u8;
            let n = libc::read(go[0], &mut b as *mut u8 as *mut libc::c_void, 1);
            if n != 1 {
                libc::_exit(127);
            }
            libc::execvpe(argv_ptrs[0], argv_ptrs.as_ptr(), env_ptrs.as_ptr());
            let e: i32 = *libc::__errno_location();
            libc::write(err[1], &e as *const i32 as *const libc::c_void, 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closes the parent's copies of the child's pipe ends, fds this function owns
    // and uses no more.
    unsafe {
        libc::close(go[0]);
        libc::close(err[1]);
    }
    Ok(Paused {
        pid,
        go_w: go[1],
        err_r: err[0],
    })
}

impl Paused {
    /// Let the child call `exec`. Returns `Ok(())` once the exec succeeded, or the exec's
    /// error (the child has then exited with 127 and must still be reaped).
    ///
    /// # Errors
    /// The errno of the failed exec (e.g. `NotFound` for an unknown command).
    pub fn go(self) -> io::Result<()> {
        let b = 1u8;
        // SAFETY: `go_w` is the write end `spawn_paused` created, owned by `self` and closed
        // only here (`go` consumes `self`); the buffer is `b`, 1 byte.
        unsafe {
            libc::write(self.go_w, &b as *const u8 as *const libc::c_void, 1);
            libc::close(self.go_w);
        }
        let mut e = 0i32;
        let n = loop {
            // SAFETY: `err_r` is the read end `self` owns, still open; `e` is a 4-byte i32.
            let n = unsafe { libc::read(self.err_r, &mut e as *mut i32 as *mut libc::c_void, 4) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break n;
        };
        // SAFETY: `err_r` is owned by `self` (consumed by `go`) and closed only here.
        unsafe { libc::close(self.err_r) };
        if n == 4 {
            Err(io::Error::from_raw_os_error(e))
        } else {
            Ok(())
        }
    }
}

/// How a child ended, from `waitpid`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal { signal: i32, core_dumped: bool },
}

/// Wait for `pid`, retrying on EINTR.
///
/// # Errors
/// `waitpid` errors other than EINTR.
pub fn wait(pid: i32) -> io::Result<Exit> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes one c_int to `status`, a local of that type.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if libc::WIFSIGNALED(status) {
        Ok(Exit::Signal {
            signal: libc::WTERMSIG(status),
            core_dumped: libc::WCOREDUMP(status),
        })
    } else {
        Ok(Exit::Code(libc::WEXITSTATUS(status)))
    }
}

/// The name of a signal number (`SIGSEGV`), from `strsignal`-free tables.
pub fn signal_name(sig: i32) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("SIG{sig}"),
    };
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_reports_exit_codes_and_signals() {
        let p = spawn_paused(&["sh".into(), "-c".into(), "exit 7".into()], &[]).unwrap();
        let pid = p.pid;
        p.go().unwrap();
        assert_eq!(wait(pid).unwrap(), Exit::Code(7));
        let p = spawn_paused(&["sh".into(), "-c".into(), "kill -SEGV $$".into()], &[]).unwrap();
        let pid = p.pid;
        p.go().unwrap();
        assert!(matches!(
            wait(pid).unwrap(),
            Exit::Signal {
                signal: libc::SIGSEGV,
                ..
            }
        ));
    }

    #[test]
    fn exec_failure_is_reported() {
        let p = spawn_paused(&["/nonexistent/powerperf-test".into()], &[]).unwrap();
        let pid = p.pid;
        let err = p.go().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(wait(pid).unwrap(), Exit::Code(127));
    }

    #[test]
    fn passes_extra_environment() {
        let p = spawn_paused(
            &[
                "sh".into(),
                "-c".into(),
                "test \"$POWERPERF_TEST_X\" = yes".into(),
            ],
            &[("POWERPERF_TEST_X".into(), "yes".into())],
        )
        .unwrap();
        let pid = p.pid;
        p.go().unwrap();
        assert_eq!(wait(pid).unwrap(), Exit::Code(0));
    }
}
