//! A real Attention for tests outside `cleanup.rs` (the dashboard's Release): the same
//! unprivileged set-up as the cleanup test of an unreadable suspect, which it repeats because
//! a test binary's private helpers cannot be shared. The daemon runs as the `homebased-test`
//! account (root reads every environment, so it never sees a suspect); a run leaves behind a
//! same-user process whose environment cannot be read (an exec of an unreadable copy of
//! `sleep`), its cleanup ends in `unreadable_suspects`, and its lane is held until a person
//! releases that exact Attention. [`Held`]'s drop kills the suspect (the home's drop stops
//! the daemon).
//!
//! Included with `#[path = "common/attention.rs"] mod attention;` beside `mod common;`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::account::Account;
use crate::common::jobs::{sh_spec, wait_phase_on};
use crate::common::procs::Proc;
use crate::common::{run_bounded, wait_until, Probe, TestHome};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const TEST_USER: &str = "homebased-test";
/// Set to `1` to skip the tests that need root, `useradd` and `setpriv` (as cleanup.rs).
const SKIP_UNPRIVILEGED: &str = "HOMEBASED_TEST_SKIP_UNPRIVILEGED";

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    found
}

fn lookup_user() -> Option<nix::unistd::User> {
    nix::unistd::User::from_name(TEST_USER).ok().flatten()
}

/// The `homebased-test` account (created if missing), or `None` when the caller asked to
/// skip. Without root, `setpriv` or `useradd` the test fails: CI provides all three.
pub fn unprivileged_account() -> Option<Account> {
    if std::env::var_os(SKIP_UNPRIVILEGED).is_some_and(|v| v == "1") {
        eprintln!("skipped: {SKIP_UNPRIVILEGED}=1");
        return None;
    }
    let how = format!("(CI runs as root; set {SKIP_UNPRIVILEGED}=1 to skip this test elsewhere)");
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test must run as root: it runs the daemon as {TEST_USER} {how}"
    );
    let setpriv = find_program("setpriv")
        .unwrap_or_else(|| panic!("setpriv is not installed (package util-linux) {how}"));
    let user = match lookup_user() {
        Some(user) => user,
        None => {
            let useradd = find_program("useradd")
                .unwrap_or_else(|| panic!("useradd is not installed (package passwd) {how}"));
            let mut cmd = Command::new(useradd);
            cmd.args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                TEST_USER,
            ]);
            let out = run_bounded(cmd, None);
            // Another test process may have created it meanwhile: look it up again.
            lookup_user().unwrap_or_else(|| {
                panic!("useradd could not create {TEST_USER}: {} {how}", out.stderr)
            })
        }
    };
    Some(Account {
        name: TEST_USER.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        setpriv,
    })
}

/// Starts `$1`'s process in a new session, waits until it runs the unreadable `xsleep`, and
/// records its stat line (as cleanup.rs's `escape_script` with an unreadable environment).
const LEAVE_A_SUSPECT: &str = r#"setsid sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec "$2" 1000' sh "$1" "$2" &
i=0
while [ $i -lt 600 ]; do
  if [ -s "$1" ]; then
    p=$(cat "$1")
    if [ "$(cat /proc/$p/comm 2>/dev/null)" = "xsleep" ] && ! cat /proc/$p/environ >/dev/null 2>&1; then
      exit 0
    fi
  fi
  sleep 0.1
  i=$((i+1))
done
echo "the suspect never became unreadable" >&2
exit 1
"#;

/// A daemon (as the unprivileged account, with `config`) whose lane `gpu0` is in Attention.
pub struct Held {
    pub h: TestHome,
    pub job: String,
    pub attention: String,
    /// `resource list`'s entry for gpu0 while held.
    pub resource: Value,
    suspect: Proc,
}

impl Held {
    /// `None` when the unprivileged tests are skipped.
    pub fn new(config: &str) -> Option<Held> {
        let account = unprivileged_account()?;
        let mut h = TestHome::new(Probe::Gpus(2));
        h.use_config(&format!(
            "[resource.cleanup]\nbound = \"3s\"\nterm_grace = \"1s\"\nkill_grace = \"1s\"\n{config}"
        ));
        h.run_as(account);
        // Executable, not readable: exec of it makes the process non-dumpable, so its
        // /proc/<pid>/environ is closed to its own (non-root) user.
        let xsleep = h.tmp().join("bin/xsleep");
        std::fs::copy(std::fs::canonicalize("/bin/sleep").unwrap(), &xsleep).unwrap();
        std::fs::set_permissions(&xsleep, std::fs::Permissions::from_mode(0o111)).unwrap();
        h.spawn_serve();
        let pidfile = h.tmp().join("suspect.pid");
        let spec = sh_spec(
            &h,
            "leaves-an-unreadable-process",
            LEAVE_A_SUSPECT,
            &[&pidfile, &xsleep],
        )
        .set("resource", json!("gpu0"));
        let job = h.submit(&spec);
        // No CLI call while the cleanup sweeps (each one is briefly an unreadable process
        // of the same user): wait for the cleanup record on disk.
        let tasks = h.home().join("tasks");
        wait_until("the run's cleanup.json", || {
            std::fs::read_dir(&tasks).is_ok_and(|dir| {
                dir.flatten()
                    .any(|e| e.path().join("cleanup.json").exists())
            })
        });
        let resource = wait_phase_on(&h, "gpu0", &job, "attention");
        let attention = resource["run"]["phase"]["id"].as_str().unwrap().to_string();
        let suspect = Proc::written(&pidfile);
        Some(Held {
            h,
            job,
            attention,
            resource,
            suspect,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.suspect.kill();
    }
}
