//! A real Attention for tests outside `cleanup.rs` (the dashboard's Release): the same
//! unprivileged set-up as the cleanup test of an unreadable suspect (the account from
//! `common::account`). The daemon runs as the `homebased-test`
//! account (root reads every environment, so it never sees a suspect); a run leaves behind a
//! same-user process whose environment cannot be read (an exec of an unreadable copy of
//! `sleep`), its cleanup ends in `unreadable_suspects`, and its lane is held until a person
//! releases that exact Attention. [`Held`]'s drop kills the suspect (the home's drop stops
//! the daemon). A test that uses it belongs in the `unprivileged` test group
//! (`.config/nextest.toml`): two such daemons at once see each other's suspects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::account::unprivileged_account;
use crate::common::jobs::{sh_spec, wait_phase_on};
use crate::common::procs::Proc;
use crate::common::{wait_until, Probe, TestHome};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

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
        Held::with_fields(config, json!({"resource": "gpu0"}))
    }

    /// As [`Held::new`] for a job with the spec `fields` (`{"gpus": 2}`: the run holds both
    /// lanes, gpu0 and gpu1).
    pub fn new_on_lanes(fields: Value) -> Option<Held> {
        Held::with_fields("", fields)
    }

    fn with_fields(config: &str, fields: Value) -> Option<Held> {
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
        let mut spec = sh_spec(
            &h,
            "leaves-an-unreadable-process",
            LEAVE_A_SUSPECT,
            &[&pidfile, &xsleep],
        );
        for (key, value) in fields.as_object().expect("spec fields") {
            spec = spec.set(key, value.clone());
        }
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
