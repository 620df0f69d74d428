//! Region-triggered frequency switches: with `POWERPERF_CTL_SOCKET` set (by `powerperf
//! apply` when the plan has per-region settings), every recorded region begin and end is
//! also sent to the frequency controller over a Unix stream socket, and the calling thread
//! waits for the controller's one-byte acknowledgement, so that the region's setting is in
//! place before the region's code runs.
//!
//! Protocol (one connection per thread, opened lazily at the thread's first region
//! event; the controller keeps a stack of open regions per connection):
//!
//! ```text
//! client -> controller   B <name>\n     region begin
//!                        E <name>\n     region end
//! controller -> client   one byte: K (done or nothing to change), N (refused or failed)
//! ```
//!
//! Names are escaped as in the events file (`\\`, `\t`, `\n`, `\r`). A line is at most
//! [`MAX_LINE`] bytes with its newline: the controller (running as root) closes a
//! connection that sends a longer one, so a region whose escaped name is longer is not
//! sent (one message on stderr; it is still recorded). A socket that cannot
//! be reached, or a controller that stops answering (5 s), turns switching off for the
//! rest of the process with one message on stderr; recording goes on.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Environment variable naming the controller's socket.
pub const ENV_CTL_SOCKET: &str = "POWERPERF_CTL_SOCKET";

/// How long a thread waits for an acknowledgement before switching is turned off.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The acknowledgement for a switch done (or nothing to change).
pub const ACK_OK: u8 = b'K';
/// The acknowledgement for a refused or failed switch (the program goes on).
pub const ACK_REFUSED: u8 = b'N';

/// The longest line of the protocol, newline included, in bytes. The controller closes a
/// connection that sends a longer one (and logs it as `refuse`).
pub const MAX_LINE: usize = 4096;

pub(crate) struct Ctl {
    path: PathBuf,
    off: AtomicBool,
    /// A name too long to send was seen (said once).
    long_said: AtomicBool,
}

thread_local! {
    /// This thread's connection and the pid that opened it (a child forked without exec
    /// must not talk on its parent's connection).
    static CONN: RefCell<Option<(u32, UnixStream)>> = const { RefCell::new(None) };
}

impl Ctl {
    /// `Some` when `POWERPERF_CTL_SOCKET` is set and not empty.
    pub(crate) fn from_env() -> Option<Ctl> {
        let p = std::env::var_os(ENV_CTL_SOCKET)?;
        if p.is_empty() {
            return None;
        }
        Some(Ctl {
            path: PathBuf::from(p),
            off: AtomicBool::new(false),
            long_said: AtomicBool::new(false),
        })
    }

    fn disable(&self, why: &str) {
        if !self.off.swap(true, Ordering::SeqCst) {
            eprintln!(
                "powerperf-rt: frequency controller at {}: {why}; region switching is off for this process (regions are still recorded)",
                self.path.display()
            );
        }
    }

    /// Send `B name` or `E name` and wait for the acknowledgement.
    pub(crate) fn send(&self, kind: u8, name: &str) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let mut msg = String::with_capacity(name.len() + 3);
        msg.push(kind as char);
        msg.push(' ');
        escape_into(&mut msg, name);
        msg.push('\n');
        if msg.len() > MAX_LINE {
            if !self.long_said.swap(true, Ordering::SeqCst) {
                eprintln!(
                    "powerperf-rt: frequency controller at {}: a region name is longer than the protocol's {MAX_LINE}-byte line; regions with such names do not switch (they are still recorded)",
                    self.path.display()
                );
            }
            return;
        }
        let res = CONN.try_with(|c| {
            let mut c = c.borrow_mut();
            let pid = std::process::id();
            if c.as_ref().is_none_or(|(p, _)| *p != pid) {
                let s =
                    UnixStream::connect(&self.path).map_err(|e| format!("cannot connect: {e}"))?;
                s.set_read_timeout(Some(ACK_TIMEOUT))
                    .map_err(|e| format!("cannot set a timeout: {e}"))?;
                *c = Some((pid, s));
            }
            let Some((_, s)) = c.as_mut() else {
                return Err("no connection".to_string());
            };
            let r = s
                .write_all(msg.as_bytes())
                .map_err(|e| format!("cannot send: {e}"))
                .and_then(|()| {
                    let mut ack = [0u8; 1];
                    s.read_exact(&mut ack)
                        .map_err(|e| format!("no acknowledgement: {e}"))
                });
            if r.is_err() {
                *c = None;
            }
            r
        });
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.disable(&e),
            // thread-local already destroyed (thread exit): nothing to do
            Err(_) => {}
        }
    }
}

/// Escape a region name for a v1 `R` line or the controller protocol: `\` -> `\\`, tab -> `\t`, LF -> `\n`, CR -> `\r`.
pub(crate) fn escape_into(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}
