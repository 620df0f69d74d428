//! Who a client is: its uid (from `SO_PEERCRED`), its user name and its groups, from the
//! system's user database (getpwuid_r, getgrouplist, getgrnam_r through libc).

use std::ffi::{CStr, CString};

/// The identity the policy is applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    /// The user name, when the user database has one.
    pub name: Option<String>,
    /// The primary gid and every supplementary group of the user.
    pub gids: Vec<u32>,
}

impl Identity {
    /// The identity of `uid`: its name and groups from the user database, plus `gid` (the
    /// peer's gid from `SO_PEERCRED`, when known).
    pub fn of_uid(uid: u32, gid: Option<u32>) -> Self {
        let (name, primary) = match passwd_of(uid) {
            Some((n, g)) => (Some(n), Some(g)),
            None => (None, None),
        };
        let mut gids: Vec<u32> = gid.into_iter().chain(primary).collect();
        if let (Some(n), Some(g)) = (&name, primary) {
            gids.extend(group_list(n, g));
        }
        gids.sort_unstable();
        gids.dedup();
        Identity { uid, name, gids }
    }

    /// `uid 1000 (alice)`.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("uid {} ({n})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }
}

/// Name and primary gid of `uid`.
fn passwd_of(uid: u32) -> Option<(String, u32)> {
    let mut buf = vec![0u8; 16384];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers we own, with their lengths.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r set pw_name to a NUL-terminated string inside buf.
    let name = unsafe { CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned();
    Some((name, pw.pw_gid))
}

/// The groups of user `name` (primary `gid` included), at most 4096.
fn group_list(name: &str, gid: u32) -> Vec<u32> {
    let Ok(c) = CString::new(name) else {
        return vec![];
    };
    let mut n: libc::c_int = 64;
    for _ in 0..8 {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut got = n;
        // SAFETY: `groups` has room for `got` entries; getgrouplist sets `got`.
        let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut got) };
        if rc >= 0 {
            groups.truncate(got.max(0) as usize);
            return groups;
        }
        if got <= n || got > 4096 {
            return vec![];
        }
        n = got;
    }
    vec![]
}

/// The gid of a group named `name` (or written as a number).
pub fn gid_of(name: &str) -> Option<u32> {
    if let Ok(g) = name.parse::<u32>() {
        return Some(g);
    }
    let c = CString::new(name).ok()?;
    let mut buf = vec![0u8; 65536];
    // SAFETY: an all-zero group is a valid value for getgrnam_r to fill.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: buffers we own, with their lengths.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    (rc == 0 && !out.is_null()).then_some(gr.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_with_its_group() {
        let r = Identity::of_uid(0, Some(0));
        assert_eq!(r.name.as_deref(), Some("root"));
        assert!(r.gids.contains(&0));
        assert_eq!(gid_of("root"), Some(0));
        assert_eq!(gid_of("123"), Some(123));
        assert_eq!(gid_of("no-such-group-powerperf"), None);
        let unknown = Identity::of_uid(4_000_000_000, None);
        assert_eq!(unknown.name, None);
        assert_eq!(unknown.describe(), "uid 4000000000");
    }
}
